# SPDX-License-Identifier: MIT
"""The object model seen through file descriptors: unlink and rename-over
keep old bytes for open fds, in-place overwrites are seen by every fd, the
write-temp-then-rename publish is atomic, and every version gets a higher
sequence number."""

import errno
import hashlib
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
from kvfstest import pattern, read_file, write_file  # noqa: E402

MEM = "512M"


def pread_all(fd, size, off=0):
    out = bytearray()
    while len(out) < size:
        b = os.pread(fd, size - len(out), off + len(out))
        if not b:
            break
        out += b
    return bytes(out)


def direct_read_all(fd, size):
    """O_DIRECT read of a whole file through an aligned buffer."""
    import mmap
    n = (size + 4096 + 4095) // 4096 * 4096
    buf = mmap.mmap(-1, n)
    try:
        got = os.preadv(fd, [buf], 0)
        return bytes(buf[:got])
    finally:
        buf.close()


class SemanticsTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=" + MEM,)

    def used(self):
        return self.m.stats()["pool"]["used"]

    def test_fd_survives_unlink(self):
        m = self.m
        p = m.path("k")
        old = pattern("old", 3 << 20)
        write_file(p, old)
        base_keys = m.stats()["namespace"]["keys"]
        fd = os.open(p, os.O_RDONLY)
        try:
            os.unlink(p)
            self.assertErrno(errno.ENOENT, os.stat, p)
            self.assertNotIn("k", os.listdir(m.mnt))
            self.assertEqual(m.stats()["namespace"]["keys"], base_keys - 1)
            self.assertEqual(os.fstat(fd).st_size, len(old))
            self.assertEqual(pread_all(fd, len(old) + 1), old)
            # a new key of the same name is another object
            new = pattern("new", 5000)
            write_file(p, new)
            self.assertEqual(read_file(p), new)
            self.assertEqual(pread_all(fd, len(old) + 1), old)
            used_open = self.used()
        finally:
            os.close(fd)
        # the old value's memory goes back once the last handle is released
        kvfstest.wait_until(lambda: self.used() <= used_open - (3 << 20), timeout=10,
                            what="pool.used to drop after the last close")
        self.assertEqual(read_file(p), new)

    def test_fd_survives_rename_over(self):
        m = self.m
        key = m.path("key")
        old = pattern("old", (1 << 20) + 17)
        new = pattern("new", 70000)
        write_file(key, old)
        fd = os.open(key, os.O_RDONLY)
        try:
            self.assertEqual(os.read(fd, 10), old[:10])
            write_file(m.path("tmp"), new)
            os.rename(m.path("tmp"), key)
            self.assertFalse(os.path.exists(m.path("tmp")))
            # the held fd: old bytes, whole
            self.assertEqual(os.fstat(fd).st_size, len(old))
            self.assertEqual(pread_all(fd, len(old) + 100), old)
            # new opens: new bytes
            self.assertEqual(read_file(key), new)
            self.assertEqual(os.stat(key).st_size, len(new))
            # an O_DIRECT fd opened on the old version before would too
        finally:
            os.close(fd)
        self.assertEqual(read_file(key), new)

    def test_fd_survives_rename_over_direct(self):
        m = self.m
        key = m.path("key")
        old = pattern("old", 20000)
        write_file(key, old)
        fd = os.open(key, os.O_RDONLY | os.O_DIRECT)
        try:
            write_file(m.path("tmp"), pattern("new", 30000))
            os.rename(m.path("tmp"), key)
            self.assertEqual(direct_read_all(fd, len(old)), old)
        finally:
            os.close(fd)

    def test_fd_sees_in_place_overwrite(self):
        m = self.m
        p = m.path("k")
        a = pattern("a", 100000)
        b = pattern("b", 100000)
        write_file(p, a)  # sealed
        reader = os.open(p, os.O_RDONLY)
        dreader = os.open(p, os.O_RDONLY | os.O_DIRECT)
        try:
            self.assertEqual(pread_all(reader, 200000), a)
            self.assertEqual(direct_read_all(dreader, 100000), a)
            w = os.open(p, os.O_WRONLY)
            os.pwrite(w, b, 0)
            # visible at once, before the writer closes
            self.assertEqual(pread_all(reader, 200000), b)
            self.assertEqual(direct_read_all(dreader, 100000), b)
            os.close(w)
            self.assertEqual(pread_all(reader, 200000), b)
            self.assertEqual(direct_read_all(dreader, 100000), b)
            # a truncate through another fd is seen too
            w = os.open(p, os.O_WRONLY)
            os.ftruncate(w, 1000)
            self.assertEqual(os.fstat(reader).st_size, 1000)
            self.assertEqual(pread_all(reader, 200000), b[:1000])
            self.assertEqual(direct_read_all(dreader, 100000), b[:1000])
            os.close(w)
            # O_TRUNC through a third open
            w = os.open(p, os.O_WRONLY | os.O_TRUNC)
            os.write(w, b"short")
            os.close(w)
            self.assertEqual(pread_all(reader, 200000), b"short")
            self.assertEqual(direct_read_all(dreader, 100000), b"short")
        finally:
            os.close(reader)
            os.close(dreader)
        self.assertEqual(read_file(p), b"short")

    def test_read_your_writes_same_fd(self):
        p = self.m.path("rw")
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            data = pattern("rw", 300000)
            os.write(fd, data)
            self.assertEqual(pread_all(fd, 400000), data)
            os.pwrite(fd, b"XYZ", 123456)
            want = data[:123456] + b"XYZ" + data[123459:]
            self.assertEqual(pread_all(fd, 400000), want)
        finally:
            os.close(fd)
        self.assertEqual(read_file(p), want)

    def test_writer_fd_after_rename_over(self):
        """A writer still holding the old object must not clobber the key
        that replaced it when it finally closes."""
        m = self.m
        key = m.path("key")
        w = os.open(key, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.write(w, b"A" * 10000)
            write_file(m.path("tmp"), b"B" * 3000)
            os.rename(m.path("tmp"), key)
            os.write(w, b"C" * 10000)  # still writes to the replaced object
            self.assertEqual(read_file(key), b"B" * 3000)
        finally:
            os.close(w)
        kvfstest.wait_until(lambda: m.stats()["namespace"]["open_handles"] <= 1,
                            what="the writer's handle to be released")
        self.assertEqual(read_file(key), b"B" * 3000)
        self.assertEqual(sorted(set(os.listdir(m.mnt)) - {".kvfs"}), ["key"])

    def test_writer_fd_after_unlink(self):
        """Closing a writer whose name was unlinked does not bring it back,
        nor touch a new key of the same name."""
        m = self.m
        key = m.path("gone")
        w = os.open(key, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.write(w, b"old" * 1000)
            os.unlink(key)
            os.write(w, b"more")
            self.assertEqual(os.pread(w, 3, 0), b"old")
            self.assertEqual(os.fstat(w).st_size, 3004)
        finally:
            os.close(w)
        kvfstest.wait_until(lambda: m.stats()["namespace"]["open_handles"] <= 1,
                            what="the writer's handle to be released")
        self.assertFalse(os.path.exists(key))
        self.assertEqual(m.stats()["namespace"]["keys"], 0)
        # and with a new key under the name
        w = os.open(key, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.write(w, b"first")
            os.unlink(key)
            write_file(key, b"second")
            os.write(w, b"-more")
        finally:
            os.close(w)
        kvfstest.wait_until(lambda: m.stats()["namespace"]["open_handles"] <= 1,
                            what="the writer's handle to be released")
        self.assertEqual(read_file(key), b"second")

    def test_rename_while_open_for_writing(self):
        """Writes through an fd follow the file to its new name (and to a
        renamed parent directory)."""
        m = self.m
        os.mkdir(m.path("dir"))
        w = os.open(m.path("dir", "a"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.write(w, b"1" * 5000)
            os.rename(m.path("dir", "a"), m.path("dir", "b"))
            os.write(w, b"2" * 5000)
            os.rename(m.path("dir"), m.path("dir2"))
            os.write(w, b"3" * 5000)
        finally:
            os.close(w)
        want = b"1" * 5000 + b"2" * 5000 + b"3" * 5000
        self.assertEqual(read_file(m.path("dir2", "b")), want)
        self.assertEqual(os.listdir(m.path("dir2")), ["b"])
        self.assertFalse(os.path.exists(m.path("dir")))

    def test_versions_are_freed(self):
        """Rewriting a sealed key in place many times (copy-on-write) keeps
        one version's worth of memory, not one per version."""
        m = self.m
        p = m.path("cow")
        size = 4 << 20
        write_file(p, pattern("cow", size))
        kvfstest.wait_until(lambda: m.stats()["namespace"]["open_handles"] <= 1,
                            what="handles released")
        used0 = m.stats()["pool"]["used"]
        for i in range(25):
            fd = os.open(p, os.O_WRONLY)
            os.pwrite(fd, b"%08d" % i, (i * 65536) % size)
            os.close(fd)
        os.truncate(p, size // 2)
        os.truncate(p, size)
        kvfstest.wait_until(lambda: m.stats()["namespace"]["open_handles"] <= 1,
                            what="handles released")
        kvfstest.wait_until(lambda: m.stats()["pool"]["used"] <= used0 + (1 << 20),
                            what="pool.used back to about one version (%d)" % used0)
        got = read_file(p)
        self.assertEqual(len(got), size)
        self.assertEqual(got[size // 2:], b"\0" * (size // 2))
        self.assertEqual(got[65536:65544], b"00000001")

    def test_rename_exchange_with_open_fds(self):
        m = self.m
        write_file(m.path("a"), b"A" * 7000)
        write_file(m.path("b"), b"B" * 9000)
        fa = os.open(m.path("a"), os.O_RDONLY)
        try:
            kvfstest.renameat2(m.path("a"), m.path("b"), kvfstest.RENAME_EXCHANGE)
            self.assertEqual(pread_all(fa, 20000), b"A" * 7000)  # the same file, now "b"
            self.assertEqual(read_file(m.path("a")), b"B" * 9000)
            self.assertEqual(read_file(m.path("b")), b"A" * 7000)
        finally:
            os.close(fa)

    def test_sealed_at_last_close(self):
        """A version is sealed (gets its seq) when the last fd closes, not
        the first."""
        m = self.m
        p = m.path("k")

        def seq():
            try:
                return int(os.getxattr(p, "user.kvfs.seq"))
            except OSError:
                return None

        def handles():
            return m.stats()["namespace"]["open_handles"]

        write_file(p, b"v1")
        s1 = kvfstest.wait_until(seq, what="the first version to be sealed")
        kvfstest.wait_until(lambda: handles() == 0, what="handles released")
        f1 = os.open(p, os.O_WRONLY)
        f2 = os.open(p, os.O_WRONLY)
        try:
            os.pwrite(f1, b"V2", 0)
            os.close(f1)
            f1 = None
            kvfstest.wait_until(lambda: handles() == 1, what="the first close to be released")
            s = seq()
            self.assertTrue(s is None or s == s1,
                            "sealed (seq %s) while another fd is still open" % s)
        finally:
            if f1 is not None:
                os.close(f1)
            os.close(f2)
        s2 = kvfstest.wait_until(lambda: (seq() or 0) > s1 and seq(),
                                 what="the new version to be sealed at the last close")
        self.assertGreater(s2, s1)
        self.assertEqual(read_file(p), b"V2")

    def test_publish_by_rename_is_atomic(self):
        """A writer publishes versions by write-tmp + rename; readers must see
        one whole version each time, never a partial or missing key."""
        m = self.m
        key = m.path("model", "block")
        os.mkdir(m.path("model"))
        size = 256 * 1024

        def version(i):
            body = pattern("v%d" % i, size - 40)
            return b"%08d" % i + hashlib.sha256(body).digest() + body

        write_file(key, version(0))
        stop = threading.Event()
        problems = []
        reads = [0]

        def reader():
            try:
                while not stop.is_set():
                    data = read_file(key)
                    i = int(data[:8])
                    if len(data) != size or hashlib.sha256(data[40:]).digest() != data[8:40]:
                        problems.append("torn read of version %d (%d bytes)" % (i, len(data)))
                        return
                    reads[0] += 1
            except Exception as e:  # ENOENT would mean the name was missing
                problems.append("reader: %r" % (e,))

        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            for i in range(1, 150):
                tmp = m.path("model", ".tmp-%d" % i)
                write_file(tmp, version(i))
                os.rename(tmp, key)
                if problems:
                    break
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        self.assertEqual(problems, [])
        self.assertGreater(reads[0], 0)
        self.assertEqual(read_file(key), version(149))
        self.assertEqual(os.listdir(m.path("model")), ["block"])
        # the replaced versions were freed
        kvfstest.wait_until(lambda: m.stats()["pool"]["used"] <= 4 * size,
                            what="pool.used to drop to about one version")

    def test_seq_per_version(self):
        m = self.m
        p = m.path("k")

        def seq(path):
            try:
                return int(os.getxattr(path, "user.kvfs.seq"))
            except OSError:
                return None

        def wait_above(path, prev):
            return kvfstest.wait_until(lambda: (seq(path) or 0) > prev and seq(path),
                                       timeout=10, what="a new seq on %s" % path)

        seen = []
        last = 0
        for i in range(5):
            write_file(p, pattern("v", 1000 + i))
            last = wait_above(p, last)
            seen.append(last)
        self.assertEqual(seen, sorted(set(seen)), "seqs not strictly increasing")
        # rename-publish: the key shows the seq of the version put under tmp
        write_file(m.path("tmp"), b"published")
        s_tmp = wait_above(m.path("tmp"), last)
        os.rename(m.path("tmp"), p)
        self.assertGreaterEqual(seq(p), s_tmp)
        self.assertGreaterEqual(m.stats()["namespace"]["last_seq"], seq(p))
        # other keys draw from the same counter
        write_file(m.path("other"), b"o")
        self.assertGreater(wait_above(m.path("other"), seq(p)), seen[-1])


if __name__ == "__main__":
    kvfstest.main()
