# SPDX-License-Identifier: MIT
"""MNT/.kvfs/stats: its shape (core/stats.h) and counters that move exactly
as the operations the test performs; MNT/.kvfs/config."""

import errno
import mmap
import os
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
from kvfstest import OP_NAMES, errcount, op, pattern, write_file  # noqa: E402

MEM = 256 << 20


class StatsTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=256M",)

    def test_shape(self):
        st = self.m.stats()
        self.assertIsInstance(st["uptime_s"], (int, float))
        self.assertGreaterEqual(st["uptime_s"], 0)
        self.assertEqual(set(st["ops"]), set(OP_NAMES))
        for name, o in st["ops"].items():
            for f in ("calls", "errors", "bytes"):
                self.assertIsInstance(o[f], int, "%s.%s" % (name, f))
                self.assertGreaterEqual(o[f], 0)
            self.assertLessEqual(o["errors"], o["calls"], name)
            lat = o["lat_ns"]
            self.assertLessEqual(lat["p50"], lat["p90"], name)
            self.assertLessEqual(lat["p90"], lat["p99"], name)
            if o["calls"] == 0:
                self.assertEqual(lat["p99"], 0, name)
        self.assertIsInstance(st["errors"], dict)
        for k, v in st["errors"].items():
            self.assertRegex(k, r"^E[A-Z0-9]+$")
            self.assertGreater(v, 0, k)  # only kinds seen are listed
        pool = st["pool"]
        self.assertEqual(pool["used"] + pool["free"], pool["size"])
        self.assertLessEqual(abs(pool["size"] - MEM), 2 << 20)
        ns = st["namespace"]
        for k in ("keys", "dirs", "open_handles", "bytes", "last_seq"):
            self.assertIsInstance(ns[k], int, k)
        self.assertEqual(ns["keys"], 0)
        self.assertEqual(ns["bytes"], 0)
        self.assertGreaterEqual(ns["dirs"], 1)  # the root
        # the document ends with a newline and is one object
        self.assertTrue(self.m.stats_text().endswith("\n"))

    def test_latency_recorded(self):
        m = self.m
        write_file(m.path("f"), b"x" * 100000)
        kvfstest.read_file(m.path("f"))
        st = m.stats()
        for name in ("write", "create", "lookup"):
            self.assertGreater(op(st, name), 0, name)
            self.assertGreater(op(st, name, "lat_ns")["p50"], 0, name)
            self.assertGreater(op(st, name, "lat_ns")["p99"], 0, name)

    def test_mkdir_calls(self):
        m = self.m
        a = m.stats()
        for i in range(5):
            os.mkdir(m.path("d%d" % i))
        b = m.stats()
        self.assertEqual(op(b, "mkdir") - op(a, "mkdir"), 5)
        self.assertEqual(op(b, "mkdir", "errors"), op(a, "mkdir", "errors"))
        self.assertEqual(b["namespace"]["dirs"] - a["namespace"]["dirs"], 5)
        # a name only the daemon can refuse (the kernel answers EEXIST and
        # ENOTDIR itself); it fails at the lookup before any mkdir request
        self.assertErrno(errno.ENAMETOOLONG, os.mkdir, m.path("n" * 256))
        c = m.stats()
        self.assertEqual(b["namespace"]["dirs"], c["namespace"]["dirs"])
        self.assertGreaterEqual(errcount(c, "ENAMETOOLONG") - errcount(b, "ENAMETOOLONG"), 1)
        for i in range(5):
            os.rmdir(m.path("d%d" % i))
        d = m.stats()
        self.assertEqual(op(d, "rmdir") - op(c, "rmdir"), 5)
        self.assertEqual(d["namespace"]["dirs"], a["namespace"]["dirs"])

    def test_write_bytes_exact(self):
        m = self.m
        n = 1_000_003
        data = pattern("wb", n)
        a = m.stats()
        write_file(m.path("f"), data, chunk=65536)
        b = m.stats()
        self.assertEqual(op(b, "write", "bytes") - op(a, "write", "bytes"), n)
        self.assertGreaterEqual(op(b, "write") - op(a, "write"), 1)
        self.assertEqual(op(b, "write", "errors"), op(a, "write", "errors"))
        self.assertEqual(op(b, "create") - op(a, "create"), 1)
        # overwrite 10 bytes in place: exactly 10 more
        fd = os.open(m.path("f"), os.O_WRONLY)
        os.pwrite(fd, b"0123456789", 5000)
        os.close(fd)
        c = m.stats()
        # 10 through the write path (a page if the kernel caches writes back)
        self.assertGreaterEqual(op(c, "write", "bytes") - op(b, "write", "bytes"), 10)
        self.assertLessEqual(op(c, "write", "bytes") - op(b, "write", "bytes"), 8192)

    def test_read_bytes(self):
        m = self.m
        n = 1_000_003
        data = pattern("rb", n)
        write_file(m.path("f"), data)
        buf = mmap.mmap(-1, 2 << 20)
        a_text = m.stats_text()
        a = kvfstest.json.loads(a_text)
        # O_DIRECT: every byte is a read request, none served from page cache
        fd = os.open(m.path("f"), os.O_RDONLY | os.O_DIRECT)
        try:
            got = os.preadv(fd, [buf], 0)
        finally:
            os.close(fd)
        b_text = m.stats_text()
        b = kvfstest.json.loads(b_text)
        self.assertEqual(got, n)
        self.assertEqual(bytes(buf[:n]), data)
        buf.close()
        delta = op(b, "read", "bytes") - op(a, "read", "bytes")
        # reading the first stats document itself may be counted as a read
        self.assertGreaterEqual(delta, n)
        self.assertLessEqual(delta, n + len(a_text) + len(b_text))
        self.assertEqual(op(b, "write", "bytes"), op(a, "write", "bytes"))

    def test_unlink_and_keys(self):
        m = self.m
        a = m.stats()
        os.mkdir(m.path("k"))
        sizes = [0, 1, 4096, 4097, 1 << 20, 7, 123456]
        for i, s in enumerate(sizes):
            write_file(m.path("k", "f%d" % i), b"z" * s)
        # let the asynchronous releases of those closes land first (an open
        # unlinked file is covered by test_bytes_count_named_keys_only)
        kvfstest.wait_until(lambda: m.stats()["namespace"]["open_handles"]
                            <= a["namespace"]["open_handles"], what="handles released")
        b = m.stats()
        self.assertEqual(b["namespace"]["keys"] - a["namespace"]["keys"], len(sizes))
        self.assertEqual(b["namespace"]["dirs"] - a["namespace"]["dirs"], 1)
        self.assertEqual(b["namespace"]["bytes"] - a["namespace"]["bytes"], sum(sizes))
        for i in range(3):
            os.unlink(m.path("k", "f%d" % i))
        c = m.stats()
        self.assertEqual(op(c, "unlink") - op(b, "unlink"), 3)
        self.assertEqual(c["namespace"]["keys"] - a["namespace"]["keys"], len(sizes) - 3)
        # (that the bytes go at once is test_bytes_count_named_keys_only's)
        c = kvfstest.wait_until(
            lambda: (lambda s: s if s["namespace"]["bytes"] - a["namespace"]["bytes"]
                     == sum(sizes[3:]) else None)(m.stats()),
            what="namespace.bytes to drop by the unlinked sizes")
        # truncate changes the logical bytes
        os.truncate(m.path("k", "f4"), 10)
        d = m.stats()
        self.assertEqual(d["namespace"]["bytes"] - c["namespace"]["bytes"], 10 - (1 << 20))

    def test_bytes_count_named_keys_only(self):
        """namespace.bytes is the sum of the sizes of the keys (files with a
        name): unlinking a file that is still open removes its bytes at once,
        as it removes it from namespace.keys."""
        m = self.m
        a = m.stats()["namespace"]
        fd = os.open(m.path("held"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"x" * 4096)
            b = m.stats()["namespace"]
            self.assertEqual(b["keys"] - a["keys"], 1)
            self.assertEqual(b["bytes"] - a["bytes"], 4096)
            os.unlink(m.path("held"))
            c = m.stats()["namespace"]
            self.assertEqual(c["keys"], a["keys"])
            self.assertEqual(c["bytes"], a["bytes"], "an unlinked open file still counted")
        finally:
            os.close(fd)

    def test_rmdir_enotempty_counted(self):
        m = self.m
        os.mkdir(m.path("full"))
        write_file(m.path("full", "f"), b"x")
        a = m.stats()
        self.assertErrno(errno.ENOTEMPTY, os.rmdir, m.path("full"))
        b = m.stats()
        self.assertEqual(op(b, "rmdir") - op(a, "rmdir"), 1)
        self.assertEqual(op(b, "rmdir", "errors") - op(a, "rmdir", "errors"), 1)
        self.assertEqual(errcount(b, "ENOTEMPTY") - errcount(a, "ENOTEMPTY"), 1)
        self.assertIn("ENOTEMPTY", b["errors"])

    def test_refused_ops_counted_as_other(self):
        m = self.m
        write_file(m.path("f"), b"x")
        a = m.stats()
        self.assertErrno(errno.EPERM, os.link, m.path("f"), m.path("hard"))
        b = m.stats()
        self.assertEqual(op(b, "other") - op(a, "other"), 1)
        self.assertEqual(op(b, "other", "errors") - op(a, "other", "errors"), 1)
        self.assertEqual(errcount(b, "EPERM") - errcount(a, "EPERM"), 1)

    def test_symlink_mknod_readlink_counted(self):
        """Each new node kind has its op, and the namespace counts each kind on its own."""
        m = self.m
        write_file(m.path("f"), b"x")
        a = m.stats()
        os.symlink("f", m.path("link"))
        self.assertEqual(os.readlink(m.path("link")), "f")
        os.mkfifo(m.path("fifo"))
        os.mknod(m.path("sock"), stat.S_IFSOCK | 0o600)
        self.assertErrno(errno.EPERM, os.mknod, m.path("chr"), stat.S_IFCHR | 0o600,
                         os.makedev(1, 3))
        b = m.stats()
        self.assertEqual(op(b, "symlink") - op(a, "symlink"), 1)
        self.assertGreaterEqual(op(b, "readlink") - op(a, "readlink"), 1)
        self.assertEqual(op(b, "mknod") - op(a, "mknod"), 3)
        self.assertEqual(op(b, "mknod", "errors") - op(a, "mknod", "errors"), 1)
        ns_a, ns_b = a["namespace"], b["namespace"]
        self.assertEqual(ns_b["keys"], ns_a["keys"])
        self.assertEqual(ns_b["symlinks"] - ns_a["symlinks"], 1)
        self.assertEqual(ns_b["fifos_sockets"] - ns_a["fifos_sockets"], 2)
        self.assertEqual(ns_b["bytes"], ns_a["bytes"])
        for name in ("link", "fifo", "sock"):
            os.unlink(m.path(name))
        c = m.stats()["namespace"]
        self.assertEqual((c["symlinks"], c["fifos_sockets"]),
                         (ns_a["symlinks"], ns_a["fifos_sockets"]))

    def test_setxattr_counted(self):
        m = self.m
        write_file(m.path("f"), b"x")
        a = m.stats()
        self.assertErrno(errno.ENOTSUP, os.setxattr, m.path("f"), "user.x", b"1")
        b = m.stats()
        self.assertEqual(op(b, "setxattr") - op(a, "setxattr"), 1)
        self.assertEqual(op(b, "setxattr", "errors") - op(a, "setxattr", "errors"), 1)
        self.assertEqual(errcount(b, "EOPNOTSUPP") + errcount(b, "ENOTSUP")
                         - errcount(a, "EOPNOTSUPP") - errcount(a, "ENOTSUP"), 1)

    def settled_handles(self):
        """open_handles once three reads in a row agree (the handles of
        earlier reads of the stats file itself are released asynchronously)."""
        vals = []

        def settled():
            vals.append(self.m.stats()["namespace"]["open_handles"])
            return len(vals) >= 3 and vals[-1] == vals[-2] == vals[-3]

        kvfstest.wait_until(settled, what="open_handles to settle")
        return vals[-1]

    def test_open_handles(self):
        m = self.m
        write_file(m.path("f"), b"x")
        base = self.settled_handles()
        fds = [os.open(m.path("f"), os.O_RDONLY) for _ in range(3)]
        fds.append(os.open(m.path("f"), os.O_WRONLY))
        try:
            self.assertEqual(self.settled_handles() - base, 4)
        finally:
            for fd in fds:
                os.close(fd)
        # release is asynchronous: wait for it
        kvfstest.wait_until(lambda: m.stats()["namespace"]["open_handles"] == base,
                            what="open_handles back to %d" % base)

    def test_pool_used_grows(self):
        m = self.m
        a = m.stats()
        for i in range(4):
            write_file(m.path("p%d" % i), pattern("p%d" % i, (1 << 20) + 1))
        b = m.stats()
        grew = b["pool"]["used"] - a["pool"]["used"]
        self.assertGreaterEqual(grew, 4 * ((1 << 20) + 1))
        self.assertLessEqual(grew, 4 * ((1 << 20) + 4096) + (1 << 20))
        self.assertEqual(b["pool"]["free"], b["pool"]["size"] - b["pool"]["used"])
        if not kvfstest.has_ssd_tier() or int(m.config().get("ssd_size", "0")) == 0:
            sv = os.statvfs(m.mnt)
            self.assertLessEqual(
                abs((sv.f_blocks - sv.f_bfree) * sv.f_frsize - b["pool"]["used"]), 2 << 20)

    def test_last_seq_and_statfs(self):
        m = self.m
        a = m.stats()
        write_file(m.path("s"), b"s")

        def sealed_seq():
            try:
                return int(os.getxattr(m.path("s"), "user.kvfs.seq"))
            except OSError:
                return None

        seq = kvfstest.wait_until(sealed_seq, what="user.kvfs.seq once sealed")
        b = m.stats()
        self.assertGreater(seq, a["namespace"]["last_seq"])
        self.assertEqual(seq, b["namespace"]["last_seq"])
        os.statvfs(m.mnt)
        os.statvfs(m.mnt)
        c = m.stats()
        self.assertGreaterEqual(op(c, "statfs") - op(b, "statfs"), 2)

    def test_config(self):
        cfg = self.m.config()
        self.assertEqual(int(cfg["mem_size"]), MEM)
        for k, v in cfg.items():
            self.assertRegex(k, r"^[a-z][a-z0-9_]*$")


if __name__ == "__main__":
    kvfstest.main()
