# SPDX-License-Identifier: MIT
"""A full pool: writes fail with ENOSPC, nothing stored is touched, deleting
frees memory and writes succeed again; df and stats follow."""

import errno
import hashlib
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
from kvfstest import pattern  # noqa: E402

MEM = 64 << 20
FILE = 1 << 20


def fill(m, prefix, limit=4 * MEM // FILE):
    """Writes FILE-byte files until one fails with ENOSPC.

    Returns (complete, partial): complete maps name -> sha256 of the files
    written and closed in full; partial is (name, bytes acknowledged, data)
    of the file that hit ENOSPC, or None if `limit` files fit."""
    complete = {}
    for i in range(limit):
        name = "%s-%04d" % (prefix, i)
        data = pattern(name, FILE)
        fd = os.open(m.path(name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        acked = 0
        err = None
        try:
            while acked < len(data):
                acked += os.write(fd, data[acked:acked + 256 * 1024])
        except OSError as e:
            err = e
        try:
            os.close(fd)
        except OSError as e:
            err = err or e
        if err is not None:
            if err.errno != errno.ENOSPC:
                raise err
            return complete, (name, acked, data)
        complete[name] = hashlib.sha256(data).hexdigest()
    return complete, None


class EnospcTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=%d" % MEM,)
    DRAM_ONLY = True  # the pool is all there is: full pool = ENOSPC

    def check_intact(self, files):
        for name, digest in files.items():
            got = kvfstest.read_file(self.m.path(name))
            self.assertEqual(len(got), FILE, name)
            self.assertEqual(hashlib.sha256(got).hexdigest(), digest, name)

    def df_used(self):
        sv = os.statvfs(self.m.mnt)
        return (sv.f_blocks - sv.f_bfree) * sv.f_frsize

    def test_fill_delete_refill(self):
        m = self.m
        s0 = m.stats()
        complete, partial = fill(m, "a")
        self.assertIsNotNone(partial, "%d MiB fit in a %d MiB pool" % (len(complete), MEM >> 20))
        stored = len(complete) * FILE + partial[1]
        self.assertGreaterEqual(stored, MEM // 2, "only %d bytes fit" % stored)
        self.assertLessEqual(stored, MEM)

        # the file that hit ENOSPC holds exactly what was acknowledged
        name, acked, data = partial
        self.assertEqual(os.stat(m.path(name)).st_size, acked)
        self.assertEqual(kvfstest.read_file(m.path(name)), data[:acked])
        # everything written before is intact
        self.check_intact(complete)

        s1 = m.stats()
        self.assertGreaterEqual(kvfstest.errcount(s1, "ENOSPC") - kvfstest.errcount(s0, "ENOSPC"), 1)
        failed_ops = sum(kvfstest.op(s1, o, "errors") - kvfstest.op(s0, o, "errors")
                         for o in ("write", "flush", "release", "fsync", "create"))
        self.assertGreaterEqual(failed_ops, 1)
        self.assertGreaterEqual(s1["pool"]["used"], stored)
        self.assertEqual(s1["pool"]["used"] + s1["pool"]["free"], s1["pool"]["size"])
        self.assertGreaterEqual(self.df_used(), stored)

        # another write still fails while full
        fd = os.open(m.path("more"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            more = 0

            def write_more():
                nonlocal more
                while more < (8 << 20):
                    more += os.write(fd, b"y" * (1 << 20))

            self.assertErrno(errno.ENOSPC, write_more)
            self.assertLess(more, 2 << 20, "a full pool took %d more bytes" % more)
        finally:
            try:
                os.close(fd)
            except OSError:
                pass
        os.unlink(m.path("more"))

        # delete half of the files and the partial one: memory comes back
        names = sorted(complete)
        gone = names[::2]
        used_before = m.stats()["pool"]["used"]
        df_before = self.df_used()
        for n in gone:
            os.unlink(m.path(n))
            del complete[n]
        os.unlink(m.path(name))
        freed = len(gone) * FILE + acked
        kvfstest.wait_until(lambda: m.stats()["pool"]["used"] <= used_before - freed + (1 << 20),
                            what="pool.used to drop by %d" % freed)
        self.assertLessEqual(self.df_used(), df_before - freed + (1 << 20))

        # and writes succeed again, without touching the survivors
        new, partial2 = fill(m, "b", limit=len(gone) * 3 // 4)
        self.assertIsNone(partial2, "ENOSPC after freeing %d bytes" % freed)
        self.assertEqual(len(new), len(gone) * 3 // 4)
        self.check_intact(complete)
        self.check_intact(new)

    def test_fallocate_beyond_pool(self):
        m = self.m
        used0 = m.stats()["pool"]["used"]
        p = m.path("huge")
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"head")
            self.assertErrno(errno.ENOSPC, kvfstest.fallocate, fd, 0, 0, 2 * MEM)
            self.assertEqual(os.fstat(fd).st_size, 4)
            self.assertEqual(os.pread(fd, 10, 0), b"head")
        finally:
            os.close(fd)
        self.assertEqual(kvfstest.read_file(p), b"head")
        os.unlink(p)
        kvfstest.wait_until(lambda: m.stats()["pool"]["used"] <= used0,
                            what="pool.used back to %d (a failed fallocate leaked)" % used0)
        # the pool is usable in full afterwards
        complete, partial = fill(m, "c", limit=MEM // FILE // 2)
        self.assertIsNone(partial)

    def test_concurrent_fill(self):
        """Eight threads fill the pool at once: each stops at its first
        ENOSPC, everything completed reads back, and emptying the pool gives
        all the memory back."""
        m = self.m
        used0 = m.stats()["pool"]["used"]
        results = {}

        def worker(t):
            done = {}
            for i in range(4 * MEM // FILE):
                name = "t%d-%03d" % (t, i)
                data = pattern(name, FILE // 2 + 4096 * t + 1)
                try:
                    kvfstest.write_file(m.path(name), data, chunk=128 * 1024)
                except OSError as e:
                    results[t] = (done, e.errno, name)
                    return
                done[name] = hashlib.sha256(data).hexdigest()
            results[t] = (done, None, None)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        self.assertEqual(len(results), 8)
        total = 0
        for t, (done, err, name) in sorted(results.items()):
            self.assertEqual(err, errno.ENOSPC, "thread %d ended with %s" % (t, err))
            for n, digest in done.items():
                got = kvfstest.read_file(m.path(n))
                self.assertEqual(hashlib.sha256(got).hexdigest(), digest, n)
                total += len(got)
        self.assertGreaterEqual(total, MEM // 2)
        for n in os.listdir(m.mnt):
            if n.startswith("t"):
                os.unlink(m.path(n))
        kvfstest.wait_until(lambda: m.stats()["pool"]["used"] <= used0,
                            what="pool.used back to %d after emptying" % used0)
        self.assertEqual(m.stats()["namespace"]["keys"], 0)

    def test_enospc_repeatedly(self):
        """Filling and emptying the pool several times leaks nothing."""
        m = self.m
        used0 = m.stats()["pool"]["used"]
        counts = []
        for rnd in range(3):
            complete, partial = fill(m, "r%d" % rnd)
            self.assertIsNotNone(partial)
            counts.append(len(complete))
            for n in complete:
                os.unlink(m.path(n))
            os.unlink(m.path(partial[0]))
            kvfstest.wait_until(lambda: m.stats()["pool"]["used"] <= used0,
                                what="pool.used back to %d after round %d" % (used0, rnd))
        self.assertLessEqual(max(counts) - min(counts), 1,
                             "capacity changed between rounds: %s" % counts)


if __name__ == "__main__":
    kvfstest.main()
