# SPDX-License-Identifier: MIT
"""POSIX behaviour of a kvfs mount: truncate, fallocate, open flags, rmdir,
rename (incl. renameat2 flags), attributes, refused node types, name length,
the reserved .kvfs directory, xattrs, readdir, ownership and permissions."""

import errno
import json
import os
import shutil
import stat
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
from kvfstest import as_user, errno_of, pattern, read_file, write_file  # noqa: E402

MEM = "512M"
NOBODY = kvfstest.NOBODY


def pread_all(fd, size, off=0):
    out = bytearray()
    while len(out) < size:
        b = os.pread(fd, size - len(out), off + len(out))
        if not b:
            break
        out += b
    return bytes(out)


class FileSizeTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=" + MEM,)

    def test_truncate_up_and_down(self):
        p = self.m.path("t")
        data = pattern("t", 100)
        write_file(p, data)
        os.truncate(p, 10000)
        self.assertEqual(os.stat(p).st_size, 10000)
        self.assertEqual(read_file(p), data + b"\0" * 9900)
        os.truncate(p, 50)
        self.assertEqual(os.stat(p).st_size, 50)
        self.assertEqual(read_file(p), data[:50])
        os.truncate(p, 0)
        self.assertEqual(read_file(p), b"")
        os.truncate(p, 3 << 20)  # larger than one pool block
        got = read_file(p)
        self.assertEqual(len(got), 3 << 20)
        self.assertEqual(got.count(0), 3 << 20)

    def test_shrink_then_grow_reads_zeros(self):
        """Bytes cut off by a truncate never come back."""
        p = self.m.path("sg")
        size = 3 << 20
        write_file(p, b"A" * size)
        cut = (1 << 20) + 5
        os.truncate(p, cut)
        os.truncate(p, size)
        got = read_file(p)
        self.assertEqual(got[:cut], b"A" * cut)
        self.assertEqual(got[cut:].count(0), size - cut, "stale bytes after shrink + grow")
        # shrink, then write past EOF: the hole reads as zeros
        fd = os.open(p, os.O_RDWR)
        try:
            os.ftruncate(fd, 100)
            os.pwrite(fd, b"Z", 2 << 20)
            got = pread_all(fd, size)
        finally:
            os.close(fd)
        self.assertEqual(len(got), (2 << 20) + 1)
        self.assertEqual(got[:100], b"A" * 100)
        self.assertEqual(got[100:2 << 20].count(0), (2 << 20) - 100)
        self.assertEqual(got[-1:], b"Z")
        # fallocate after a shrink: zeros too
        write_file(p, b"B" * 10000)
        os.truncate(p, 10)
        fd = os.open(p, os.O_RDWR)
        try:
            kvfstest.fallocate(fd, 0, 0, 10000)
        finally:
            os.close(fd)
        self.assertEqual(read_file(p), b"B" * 10 + b"\0" * 9990)

    def test_ftruncate(self):
        p = self.m.path("ft")
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            data = pattern("ft", 1000)
            self.assertEqual(os.write(fd, data), 1000)
            os.ftruncate(fd, 300)
            self.assertEqual(os.fstat(fd).st_size, 300)
            self.assertEqual(pread_all(fd, 2000), data[:300])
            os.ftruncate(fd, 5000)
            self.assertEqual(os.fstat(fd).st_size, 5000)
            self.assertEqual(pread_all(fd, 6000), data[:300] + b"\0" * 4700)
            os.pwrite(fd, b"END", 5000)
            self.assertEqual(os.fstat(fd).st_size, 5003)
        finally:
            os.close(fd)
        self.assertEqual(read_file(p), data[:300] + b"\0" * 4700 + b"END")
        self.assertEqual(os.stat(p).st_size, 5003)

    def test_write_past_eof_leaves_zeros(self):
        p = self.m.path("sparse")
        fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
        os.pwrite(fd, b"tail", (1 << 20) + 7)
        os.pwrite(fd, b"head", 0)
        os.close(fd)
        want = b"head" + b"\0" * ((1 << 20) + 3) + b"tail"
        self.assertEqual(read_file(p), want)

    def test_fallocate_mode0(self):
        m = self.m
        p = m.path("fa")
        write_file(p, b"0123456789")
        before = m.stats()
        fd = os.open(p, os.O_RDWR)
        try:
            kvfstest.fallocate(fd, 0, 4096, 8192)  # the daemon's own fallocate
            self.assertEqual(os.fstat(fd).st_size, 12288)
            kvfstest.fallocate(fd, 0, 0, 5)  # inside the file: no change
            self.assertEqual(os.fstat(fd).st_size, 12288)
            after = m.stats()
            self.assertGreaterEqual(kvfstest.op(after, "fallocate") - kvfstest.op(before, "fallocate"), 2)
            self.assertEqual(kvfstest.op(after, "fallocate", "errors"),
                             kvfstest.op(before, "fallocate", "errors"))
            os.posix_fallocate(fd, 0, 1 << 20)
            st = os.fstat(fd)
            self.assertEqual(st.st_size, 1 << 20)
            self.assertGreaterEqual(st.st_blocks * 512, 1 << 20)
        finally:
            os.close(fd)
        self.assertEqual(read_file(p), b"0123456789" + b"\0" * ((1 << 20) - 10))

    def test_fallocate_keep_size(self):
        p = self.m.path("fk")
        write_file(p, b"0123456789")
        fd = os.open(p, os.O_RDWR)
        try:
            kvfstest.fallocate(fd, kvfstest.FALLOC_FL_KEEP_SIZE, 0, 1 << 20)
            st = os.fstat(fd)
            self.assertEqual(st.st_size, 10)
            # unwritten (README "Extents"): no space until written
            self.assertLess(st.st_blocks * 512, 1 << 20, "KEEP_SIZE took space")
            self.assertEqual(pread_all(fd, 100), b"0123456789")
            os.pwrite(fd, b"x", 500000)  # inside the preallocated range
            self.assertEqual(os.fstat(fd).st_size, 500001)
        finally:
            os.close(fd)
        self.assertEqual(read_file(p), b"0123456789" + b"\0" * (500000 - 10) + b"x")
        self.assertEqual(os.stat(p).st_size, 500001)

    def test_fallocate_unsupported_mode(self):
        p = self.m.path("fu")
        write_file(p, b"z" * 8192)
        fd = os.open(p, os.O_RDWR)
        try:
            for mode in (kvfstest.FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE):
                e = errno_of(kvfstest.fallocate, fd, mode, 0, 4096)
                self.assertEqual(e, errno.EOPNOTSUPP, mode)
        finally:
            os.close(fd)
        self.assertEqual(read_file(p), b"z" * 8192)


FALLOC_FL_ZERO_RANGE = 0x10  # linux/falloc.h


class OpenFlagsTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=" + MEM,)

    def test_o_trunc(self):
        p = self.m.path("f")
        write_file(p, pattern("f", 50000))
        fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
        self.assertEqual(os.fstat(fd).st_size, 0)
        os.write(fd, b"new")
        os.close(fd)
        self.assertEqual(read_file(p), b"new")
        fd = os.open(p, os.O_RDWR | os.O_TRUNC)
        self.assertEqual(os.fstat(fd).st_size, 0)
        os.close(fd)
        self.assertEqual(read_file(p), b"")

    def test_o_trunc_rdonly(self):
        """Linux truncates on O_RDONLY|O_TRUNC too (POSIX leaves it open;
        ext4, tmpfs and xfs all do)."""
        p = self.m.path("f")
        write_file(p, b"abc")
        fd = os.open(p, os.O_RDONLY | os.O_TRUNC)
        os.close(fd)
        self.assertEqual(os.stat(p).st_size, 0)
        self.assertEqual(read_file(p), b"")

    def test_o_append(self):
        p = self.m.path("log")
        write_file(p, b"start:")
        a = os.open(p, os.O_WRONLY | os.O_APPEND)
        b = os.open(p, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(a, b"a" * 100)
            os.write(b, b"b" * 50)
            os.write(a, b"c" * 10)
            os.lseek(b, 0, os.SEEK_SET)  # O_APPEND ignores the position
            os.write(b, b"d")
        finally:
            os.close(a)
            os.close(b)
        self.assertEqual(read_file(p), b"start:" + b"a" * 100 + b"b" * 50 + b"c" * 10 + b"d")

    def test_o_excl(self):
        p = self.m.path("x")
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"first")
        os.close(fd)
        self.assertErrno(errno.EEXIST, os.open, p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self.assertEqual(read_file(p), b"first")
        os.mkdir(self.m.path("dir"))
        self.assertErrno(errno.EEXIST, os.open, self.m.path("dir"),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)

    def test_open_missing_and_dir_errors(self):
        m = self.m
        self.assertErrno(errno.ENOENT, os.open, m.path("nope"), os.O_RDONLY)
        self.assertErrno(errno.ENOENT, os.open, m.path("nodir/f"), os.O_WRONLY | os.O_CREAT)
        os.mkdir(m.path("d"))
        self.assertErrno(errno.EISDIR, os.open, m.path("d"), os.O_WRONLY)
        write_file(m.path("f"), b"1")
        self.assertErrno(errno.ENOTDIR, os.open, m.path("f/x"), os.O_WRONLY | os.O_CREAT)
        self.assertErrno(errno.ENOTDIR, os.mkdir, m.path("f/x"))


class DirTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=" + MEM,)

    def test_rmdir(self):
        m = self.m
        os.makedirs(m.path("a/b"))
        write_file(m.path("a/b/f"), b"x")
        self.assertErrno(errno.ENOTEMPTY, os.rmdir, m.path("a"))
        self.assertErrno(errno.ENOTEMPTY, os.rmdir, m.path("a/b"))
        self.assertErrno(errno.ENOTDIR, os.rmdir, m.path("a/b/f"))
        self.assertErrno(errno.EISDIR, os.unlink, m.path("a/b"))
        self.assertErrno(errno.ENOENT, os.rmdir, m.path("a/nothing"))
        os.unlink(m.path("a/b/f"))
        self.assertErrno(errno.ENOTEMPTY, os.rmdir, m.path("a"))
        os.rmdir(m.path("a/b"))
        os.rmdir(m.path("a"))
        self.assertFalse(os.path.exists(m.path("a")))
        os.mkdir(m.path("a"))  # the name is free again
        self.assertErrno(errno.EEXIST, os.mkdir, m.path("a"))

    def test_readdir_exact(self):
        m = self.m
        os.mkdir(m.path("d"))
        files = {"f1", "f 2", "ünïcode", "." + "h" * 10, "x" * 255}
        dirs = {"s1", "s2"}
        for f in files:
            write_file(m.path("d", f), f.encode())
        for d in dirs:
            os.mkdir(m.path("d", d))
        listing = sorted(os.listdir(m.path("d")))
        self.assertEqual(listing, sorted(files | dirs))
        kinds = {e.name: e.is_dir() for e in os.scandir(m.path("d"))}
        self.assertEqual(kinds, {**{f: False for f in files}, **{d: True for d in dirs}})
        self.assertEqual(os.listdir(m.path("d", "s1")), [])
        # the root holds what we created (and may show .kvfs)
        root = set(os.listdir(m.mnt))
        self.assertIn("d", root)
        self.assertLessEqual(root - {"d"}, {".kvfs"})

    def test_odd_names_and_deep_paths(self):
        m = self.m
        root = os.fsencode(m.path("odd"))
        os.mkdir(root)
        names = [b"new\nline", b"back\\slash", b"\xff\xfe-not-utf8", b" space ", b"-dash",
                 b"*", b"..dots..", b"tab\tname", "ünïcødé-名前".encode()]
        for n in names:
            write_file(os.path.join(root, n), n)
        self.assertEqual(sorted(os.listdir(root)), sorted(names))
        for n in names:
            self.assertEqual(read_file(os.path.join(root, n)), n)
        # 100 levels of directories, a key at the bottom (path ~ 400 bytes)
        d = m.path("deep")
        for _ in range(100):
            d = os.path.join(d, "lvl")
        os.makedirs(d)
        write_file(os.path.join(d, "leaf"), b"bottom")
        self.assertEqual(read_file(os.path.join(d, "leaf")), b"bottom")
        os.rename(m.path("deep"), m.path("moved"))
        self.assertEqual(read_file(os.path.join(d.replace("/deep/", "/moved/", 1), "leaf")),
                         b"bottom")
        import shutil
        shutil.rmtree(m.path("moved"))
        self.assertFalse(os.path.exists(m.path("moved")))

    def test_readdir_while_deleting(self):
        """Entries that stay are returned exactly once while others are
        deleted during the listing (what rm -rf relies on)."""
        m = self.m
        d = m.path("it")
        os.mkdir(d)
        for i in range(2000):
            fd = os.open(os.path.join(d, "e%04d" % i), os.O_WRONLY | os.O_CREAT, 0o644)
            os.close(fd)
        seen = []
        with os.scandir(d) as it:
            for e in it:
                seen.append(e.name)
                if int(e.name[1:]) % 2 == 0:
                    os.unlink(e.path)
        kept = {"e%04d" % i for i in range(2000) if i % 2}
        self.assertEqual(len(seen), len(set(seen)), "an entry was returned twice")
        self.assertEqual(kept - set(seen), set(), "entries skipped")
        self.assertEqual(sorted(os.listdir(d)), sorted(kept))

    def test_readdir_3000_entries(self):
        m = self.m
        d = m.path("big")
        os.mkdir(d)
        names = ["key-%05d-%s" % (i, "v" * (i % 40)) for i in range(3000)]
        for i, n in enumerate(names):
            fd = os.open(os.path.join(d, n), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            if i % 7 == 0:
                os.write(fd, n.encode())
            os.close(fd)
        got = os.listdir(d)
        self.assertEqual(len(got), 3000, "duplicates or missing entries")
        self.assertEqual(sorted(got), sorted(names))
        for i, n in enumerate(names):
            if i % 3 == 0:
                os.unlink(os.path.join(d, n))
        left = sorted(n for i, n in enumerate(names) if i % 3)
        self.assertEqual(sorted(os.listdir(d)), left)
        # reading the directory in small pieces through one stream
        with os.scandir(d) as it:
            seen = [e.name for e in it]
        self.assertEqual(sorted(seen), left)
        self.assertEqual(read_file(os.path.join(d, names[7])), names[7].encode())


class RenameTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=" + MEM,)

    def test_rename_file(self):
        m = self.m
        write_file(m.path("a"), b"A" * 5000)
        os.rename(m.path("a"), m.path("b"))
        self.assertFalse(os.path.exists(m.path("a")))
        self.assertEqual(read_file(m.path("b")), b"A" * 5000)
        os.mkdir(m.path("d"))
        os.rename(m.path("b"), m.path("d/c"))
        self.assertEqual(read_file(m.path("d/c")), b"A" * 5000)
        self.assertEqual(os.listdir(m.path("d")), ["c"])
        os.rename(m.path("d/c"), m.path("d/c"))  # onto itself: no-op
        self.assertEqual(read_file(m.path("d/c")), b"A" * 5000)

    def test_rename_over_existing_file(self):
        m = self.m
        write_file(m.path("src"), b"new contents")
        write_file(m.path("dst"), b"old contents, longer" * 100)
        keys = m.stats()["namespace"]["keys"]
        os.rename(m.path("src"), m.path("dst"))
        self.assertFalse(os.path.exists(m.path("src")))
        self.assertEqual(read_file(m.path("dst")), b"new contents")
        self.assertEqual(os.stat(m.path("dst")).st_size, 12)
        self.assertEqual(m.stats()["namespace"]["keys"], keys - 1)

    def test_rename_directories(self):
        m = self.m
        os.makedirs(m.path("t/u/v"))
        write_file(m.path("t/u/v/f"), b"deep")
        write_file(m.path("t/g"), b"shallow")
        os.rename(m.path("t"), m.path("T"))
        self.assertFalse(os.path.exists(m.path("t")))
        self.assertEqual(read_file(m.path("T/u/v/f")), b"deep")
        self.assertEqual(read_file(m.path("T/g")), b"shallow")
        os.mkdir(m.path("other"))
        os.rename(m.path("T/u"), m.path("other/u2"))
        self.assertEqual(read_file(m.path("other/u2/v/f")), b"deep")
        self.assertEqual(sorted(os.listdir(m.path("T"))), ["g"])
        # a new file under the moved directory is reachable by the new path only
        write_file(m.path("other/u2/v/new"), b"n")
        self.assertEqual(sorted(os.listdir(m.path("other/u2/v"))), ["f", "new"])
        # over an empty directory: allowed; over a non-empty one: refused
        os.mkdir(m.path("empty"))
        os.rename(m.path("other/u2"), m.path("empty"))
        self.assertEqual(read_file(m.path("empty/v/f")), b"deep")
        os.mkdir(m.path("full"))
        write_file(m.path("full/x"), b"x")
        self.assertErrno((errno.ENOTEMPTY, errno.EEXIST), os.rename, m.path("empty"),
                         m.path("full"))
        self.assertEqual(read_file(m.path("full/x")), b"x")
        # type mismatches and moving a directory under itself
        self.assertErrno(errno.EISDIR, os.rename, m.path("T/g"), m.path("full"))
        self.assertErrno(errno.ENOTDIR, os.rename, m.path("full"), m.path("T/g"))
        self.assertErrno(errno.EINVAL, os.rename, m.path("empty"), m.path("empty/v/inside"))
        self.assertErrno(errno.ENOENT, os.rename, m.path("missing"), m.path("x"))

    def test_rename_noreplace(self):
        m = self.m
        write_file(m.path("a"), b"aaa")
        write_file(m.path("b"), b"bbb")
        self.assertErrno(errno.EEXIST, kvfstest.renameat2, m.path("a"), m.path("b"),
                         kvfstest.RENAME_NOREPLACE)
        self.assertEqual(read_file(m.path("a")), b"aaa")
        self.assertEqual(read_file(m.path("b")), b"bbb")
        kvfstest.renameat2(m.path("a"), m.path("c"), kvfstest.RENAME_NOREPLACE)
        self.assertFalse(os.path.exists(m.path("a")))
        self.assertEqual(read_file(m.path("c")), b"aaa")

    def test_rename_exchange(self):
        m = self.m
        write_file(m.path("a"), b"A" * 10)
        write_file(m.path("b"), b"B" * 20000)
        kvfstest.renameat2(m.path("a"), m.path("b"), kvfstest.RENAME_EXCHANGE)
        self.assertEqual(read_file(m.path("a")), b"B" * 20000)
        self.assertEqual(read_file(m.path("b")), b"A" * 10)
        # directories, across parents
        os.makedirs(m.path("p/x"))
        os.makedirs(m.path("q/y"))
        write_file(m.path("p/x/in-x"), b"1")
        write_file(m.path("q/y/in-y"), b"2")
        kvfstest.renameat2(m.path("p/x"), m.path("q/y"), kvfstest.RENAME_EXCHANGE)
        self.assertEqual(os.listdir(m.path("p/x")), ["in-y"])
        self.assertEqual(os.listdir(m.path("q/y")), ["in-x"])
        # a file with a directory
        kvfstest.renameat2(m.path("a"), m.path("p/x"), kvfstest.RENAME_EXCHANGE)
        self.assertTrue(os.path.isdir(m.path("a")))
        self.assertEqual(os.listdir(m.path("a")), ["in-y"])
        self.assertEqual(read_file(m.path("p/x")), b"B" * 20000)
        self.assertErrno(errno.ENOENT, kvfstest.renameat2, m.path("b"), m.path("nothing"),
                         kvfstest.RENAME_EXCHANGE)


class AttrTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=" + MEM,)

    def test_chmod(self):
        p = self.m.path("f")
        write_file(p, b"x")
        for mode in (0o600, 0o751, 0o444, 0o000, 0o644):
            os.chmod(p, mode)
            self.assertEqual(stat.S_IMODE(os.stat(p).st_mode), mode)
            self.assertTrue(stat.S_ISREG(os.stat(p).st_mode))
        os.mkdir(self.m.path("d"))
        os.chmod(self.m.path("d"), 0o700)
        st = os.stat(self.m.path("d"))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o700)
        self.assertTrue(stat.S_ISDIR(st.st_mode))
        fd = os.open(p, os.O_RDONLY)
        os.fchmod(fd, 0o640)
        os.close(fd)
        self.assertEqual(stat.S_IMODE(os.stat(p).st_mode), 0o640)

    def test_chown(self):
        p = self.m.path("f")
        write_file(p, b"x")
        os.chown(p, 1234, 5678)
        st = os.stat(p)
        self.assertEqual((st.st_uid, st.st_gid), (1234, 5678))
        os.chown(p, -1, 42)
        st = os.stat(p)
        self.assertEqual((st.st_uid, st.st_gid), (1234, 42))
        os.mkdir(self.m.path("d"))
        os.chown(self.m.path("d"), 7, 8)
        st = os.stat(self.m.path("d"))
        self.assertEqual((st.st_uid, st.st_gid), (7, 8))
        self.assertEqual(read_file(p), b"x")

    def test_utimens(self):
        p = self.m.path("f")
        write_file(p, b"x")
        os.utime(p, ns=(1_000_000_123, 2_000_000_456))
        st = os.stat(p)
        self.assertEqual(st.st_atime_ns, 1_000_000_123)
        self.assertEqual(st.st_mtime_ns, 2_000_000_456)
        now = time.time()
        os.utime(p)  # both to now
        st = os.stat(p)
        self.assertLess(abs(st.st_mtime - now), 5)
        self.assertLess(abs(st.st_atime - now), 5)
        os.mkdir(self.m.path("d"))
        os.utime(self.m.path("d"), ns=(5_000_000_000, 6_000_000_000))
        self.assertEqual(os.stat(self.m.path("d")).st_mtime_ns, 6_000_000_000)
        # a write moves mtime forward again
        os.utime(p, ns=(1_000_000_000, 1_000_000_000))
        fd = os.open(p, os.O_WRONLY)
        os.write(fd, b"y")
        os.close(fd)
        self.assertLess(abs(os.stat(p).st_mtime - time.time()), 5)

    def test_new_file_mode_and_owner(self):
        old = os.umask(0o027)
        try:
            fd = os.open(self.m.path("f"), os.O_WRONLY | os.O_CREAT, 0o666)
            os.close(fd)
            os.mkdir(self.m.path("d"), 0o777)
        finally:
            os.umask(old)
        st = os.stat(self.m.path("f"))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o640)
        self.assertEqual((st.st_uid, st.st_gid), (os.getuid(), os.getgid()))
        st = os.stat(self.m.path("d"))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o750)

    def test_node_types(self):
        """Symlinks, FIFOs and sockets are made (test_ftypes.py has the rest);
        hard links and device nodes are refused: a key has one name."""
        m = self.m
        write_file(m.path("f"), b"x")
        os.symlink("f", m.path("sl"))
        os.mkfifo(m.path("fifo"))
        os.mknod(m.path("sock"), stat.S_IFSOCK | 0o600)
        self.assertTrue(stat.S_ISLNK(os.lstat(m.path("sl")).st_mode))
        self.assertTrue(stat.S_ISFIFO(os.lstat(m.path("fifo")).st_mode))
        self.assertTrue(stat.S_ISSOCK(os.lstat(m.path("sock")).st_mode))
        self.assertErrno(errno.EPERM, os.link, m.path("f"), m.path("hl"))
        self.assertErrno(errno.EPERM, os.mknod, m.path("chr"), stat.S_IFCHR | 0o600,
                         os.makedev(1, 3))
        self.assertErrno(errno.EPERM, os.mknod, m.path("blk"), stat.S_IFBLK | 0o600,
                         os.makedev(7, 0))
        for n in ("hl", "chr", "blk"):
            self.assertFalse(os.path.lexists(m.path(n)), n)
        self.assertEqual(os.stat(m.path("f")).st_nlink, 1)
        self.assertEqual(read_file(m.path("f")), b"x")

    def test_name_length(self):
        m = self.m
        n255 = "n" * 255
        n256 = "n" * 256
        self.assertEqual(os.statvfs(m.mnt).f_namemax, 255)
        write_file(m.path(n255), b"255")
        self.assertEqual(read_file(m.path(n255)), b"255")
        self.assertIn(n255, os.listdir(m.mnt))
        os.mkdir(m.path("d" * 255))
        self.assertErrno(errno.ENAMETOOLONG, os.open, m.path(n256), os.O_WRONLY | os.O_CREAT,
                         0o644)
        self.assertErrno(errno.ENAMETOOLONG, os.mkdir, m.path("d" * 256))
        self.assertErrno(errno.ENAMETOOLONG, os.stat, m.path(n256))
        self.assertErrno(errno.ENAMETOOLONG, os.rename, m.path(n255), m.path(n256))
        self.assertErrno(errno.ENAMETOOLONG, os.open, m.path("d" * 255, n256),
                         os.O_WRONLY | os.O_CREAT, 0o644)
        # 255 *bytes*, not characters
        u255 = "é" * 127 + "x"
        u256 = "é" * 128
        self.assertEqual(len(u255.encode()), 255)
        write_file(m.path(u255), b"u")
        self.assertErrno(errno.ENAMETOOLONG, os.open, m.path(u256), os.O_WRONLY | os.O_CREAT,
                         0o644)
        os.rename(m.path(n255), m.path("m" * 255))
        self.assertEqual(read_file(m.path("m" * 255)), b"255")
        self.assertEqual(sorted(set(os.listdir(m.mnt)) - {".kvfs"}),
                         sorted(["d" * 255, "m" * 255, u255]))


class ReservedTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=" + MEM,)

    def test_kvfs_dir(self):
        m = self.m
        kv = m.path(".kvfs")
        st = os.stat(kv)
        self.assertTrue(stat.S_ISDIR(st.st_mode))
        self.assertTrue(stat.S_ISREG(os.stat(m.path(".kvfs/stats")).st_mode))
        self.assertTrue(stat.S_ISREG(os.stat(m.path(".kvfs/config")).st_mode))
        json.loads(read_file(m.path(".kvfs/stats")))
        self.assertIn("mem_size", m.config())

    def test_kvfs_is_reserved(self):
        m = self.m
        kv = m.path(".kvfs")
        write_file(m.path("f"), b"f")
        os.mkdir(m.path("d"))
        EPERM = errno.EPERM
        refused = (errno.EPERM, errno.EACCES, errno.EROFS)
        cases = [
            ("mkdir .kvfs", errno.EEXIST, os.mkdir, kv),
            ("create .kvfs/new", EPERM, os.open, m.path(".kvfs/new"),
             os.O_WRONLY | os.O_CREAT, 0o644),
            ("mkdir .kvfs/newdir", EPERM, os.mkdir, m.path(".kvfs/newdir")),
            ("unlink .kvfs/stats", EPERM, os.unlink, m.path(".kvfs/stats")),
            ("unlink .kvfs/config", EPERM, os.unlink, m.path(".kvfs/config")),
            ("rmdir .kvfs", EPERM, os.rmdir, kv),
            ("rename .kvfs away", EPERM, os.rename, kv, m.path("renamed")),
            ("rename .kvfs/stats out", EPERM, os.rename, m.path(".kvfs/stats"), m.path("stolen")),
            ("rename a file over .kvfs/stats", EPERM, os.rename, m.path("f"),
             m.path(".kvfs/stats")),
            ("rename a file into .kvfs", EPERM, os.rename, m.path("f"), m.path(".kvfs/f")),
            # the kernel itself answers EISDIR for a file over a directory
            ("rename a file to .kvfs", (EPERM, errno.EISDIR), os.rename, m.path("f"), kv),
            ("rename a dir over .kvfs", (EPERM, errno.ENOTEMPTY), os.rename, m.path("d"), kv),
            ("open .kvfs/stats for writing", refused, os.open, m.path(".kvfs/stats"),
             os.O_WRONLY),
            ("open .kvfs/config O_RDWR|O_TRUNC", refused, os.open, m.path(".kvfs/config"),
             os.O_RDWR | os.O_TRUNC),
            ("truncate .kvfs/stats", refused, os.truncate, m.path(".kvfs/stats"), 0),
        ]
        for what, want, fn, *args in cases:
            with self.subTest(what):
                self.assertErrno(want, fn, *args)
        # everything is still there and works
        self.assertEqual(read_file(m.path("f")), b"f")
        self.assertTrue(os.path.isdir(m.path("d")))
        self.assertTrue(os.path.isdir(kv))
        self.assertLessEqual({"stats", "config"}, set(os.listdir(kv)))
        self.assertFalse(os.path.exists(m.path("renamed")))
        self.assertFalse(os.path.exists(m.path("stolen")))
        m.stats()


class XattrTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=" + MEM,)

    def seq(self, p):
        v = os.getxattr(p, "user.kvfs.seq")
        self.assertRegex(v, rb"^[0-9]+$")
        return int(v)

    def wait_seq(self, p, above):
        """The seq once the file is sealed (release is asynchronous)."""
        def newer():
            try:
                s = self.seq(p)
            except OSError:
                return None
            return s if s > above else None
        return kvfstest.wait_until(newer, timeout=10, what="user.kvfs.seq of %s above %d"
                                   % (p, above))

    def test_seq_increases_on_rewrite(self):
        p = self.m.path("k")
        write_file(p, b"v1")
        s1 = self.wait_seq(p, 0)
        write_file(p, b"v2 is longer")
        s2 = self.wait_seq(p, s1)
        fd = os.open(p, os.O_WRONLY)
        os.pwrite(fd, b"V", 0)
        os.close(fd)
        s3 = self.wait_seq(p, s2)
        os.truncate(p, 3)
        s4 = self.wait_seq(p, s3)
        self.assertLess(s1, s2)
        self.assertLess(s3, s4)
        self.assertEqual(read_file(p), b"V2 ")
        # reading does not make a version
        read_file(p)
        fd = os.open(p, os.O_RDONLY)
        os.close(fd)
        self.assertEqual(self.seq(p), s4)
        self.assertLessEqual(s4, self.m.stats()["namespace"]["last_seq"])
        # a later key gets a higher number than every earlier one (global)
        write_file(self.m.path("later"), b"l")
        self.wait_seq(self.m.path("later"), s4)
        self.assertIn("user.kvfs.seq", os.listxattr(p))

    def test_setxattr_refused(self):
        p = self.m.path("k")
        write_file(p, b"v")
        self.assertErrno(errno.ENOTSUP, os.setxattr, p, "user.foo", b"bar")
        self.assertErrno((errno.ENOTSUP, errno.EPERM), os.setxattr, p, "user.kvfs.seq", b"1")
        self.assertErrno(errno.ENODATA, os.getxattr, p, "user.nothing")
        self.assertEqual(read_file(p), b"v")


def _create(path, data=b"child"):
    def fn():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        os.write(fd, data)
        os.close(fd)
        return len(data)
    return fn


class OwnershipTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=" + MEM, "-o", "allow_other")

    def test_other_user_creates_and_is_checked(self):
        m = self.m
        os.chmod(m.mnt, 0o755)
        d = m.path("shared")
        os.mkdir(d)
        os.chmod(d, 0o777)
        # a file created by another user takes its ids and its umask
        self.assertEqual(as_user(NOBODY, NOBODY, _create(os.path.join(d, "theirs"))), ["ok", 5])
        st = os.stat(os.path.join(d, "theirs"))
        self.assertEqual((st.st_uid, st.st_gid), (NOBODY, NOBODY))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o644)
        self.assertEqual(read_file(os.path.join(d, "theirs")), b"child")
        self.assertEqual(as_user(NOBODY, NOBODY, lambda: os.mkdir(os.path.join(d, "sub"), 0o777)),
                         ["ok", None])
        st = os.stat(os.path.join(d, "sub"))
        self.assertEqual((st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)), (NOBODY, NOBODY, 0o755))

        # root's 0644 file: readable, not writable, by the other user
        mine = os.path.join(d, "mine")
        write_file(mine, b"root data")
        os.chmod(mine, 0o644)
        os.chown(mine, 0, 0)

        def read_mine():
            with open(mine, "rb") as f:
                return f.read().decode()

        self.assertEqual(as_user(NOBODY, NOBODY, read_mine), ["ok", "root data"])
        self.assertEqual(as_user(NOBODY, NOBODY, lambda: os.open(mine, os.O_WRONLY)),
                         ["err", errno.EACCES])
        self.assertEqual(as_user(NOBODY, NOBODY, lambda: os.truncate(mine, 0)),
                         ["err", errno.EACCES])
        os.chmod(mine, 0o600)
        self.assertEqual(as_user(NOBODY, NOBODY, read_mine), ["err", errno.EACCES])
        # nor may it create in root's 0755 directories, nor chown
        self.assertEqual(as_user(NOBODY, NOBODY, _create(m.path("in-root"))),
                         ["err", errno.EACCES])
        self.assertEqual(as_user(NOBODY, NOBODY,
                                 lambda: os.chown(os.path.join(d, "theirs"), 0, 0)),
                         ["err", errno.EPERM])
        self.assertEqual(as_user(NOBODY, NOBODY, lambda: os.chmod(mine, 0o666)),
                         ["err", errno.EPERM])
        self.assertEqual(read_file(mine), b"root data")
        self.assertFalse(os.path.exists(m.path("in-root")))
        # the owner may chmod its own file; root may chown it
        theirs = os.path.join(d, "theirs")
        self.assertEqual(as_user(NOBODY, NOBODY, lambda: os.chmod(theirs, 0o600)), ["ok", None])
        self.assertEqual(stat.S_IMODE(os.stat(theirs).st_mode), 0o600)
        os.chown(theirs, 0, 0)
        self.assertEqual(as_user(NOBODY, NOBODY, lambda: open(theirs, "rb").read().decode()),
                         ["err", errno.EACCES])


def mount_options(mnt):
    """The options /proc/mounts lists for the mount at mnt."""
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[1] == os.path.realpath(mnt):
                return fields[3].split(",")
    raise AssertionError("%s is not mounted" % mnt)


class NoAllowOtherTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=" + MEM,)

    def test_other_users_locked_out(self):
        m = self.m
        os.chmod(m.mnt, 0o755)
        write_file(m.path("f"), b"x")
        os.chmod(m.path("f"), 0o644)
        self.assertEqual(as_user(NOBODY, NOBODY, lambda: os.stat(m.path("f")).st_size),
                         ["err", errno.EACCES])

    def test_who_checks_permissions(self):
        # A mount only its owner may use: the daemon checks (fs/fs.h, "permissions").
        self.assertNotIn("default_permissions", mount_options(self.m.mnt))
        m = self.mount(opts=["--mem-size=64M", "-o", "allow_other"], name="allow_other")
        self.assertIn("default_permissions", mount_options(m.mnt))


class UserMount(kvfstest.Mount):
    """A kvfs daemon run by `nobody`: a mount only nobody may use."""

    def command(self):
        return (["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"]
                + super().command())

    def wait_ready(self, timeout=kvfstest.READY_TIMEOUT):
        # root may not look inside: the mount is up when /proc/mounts lists it
        kvfstest.wait_until(lambda: self.proc.poll() is not None or kvfstest.is_mounted(self.mnt),
                            timeout, what="the user mount")
        if self.proc.poll() is not None:
            raise AssertionError("kvfs exited with status %d\n%s"
                                 % (self.proc.returncode, self.log_text()))


class OwnPermissionsTest(kvfstest.KvfsTestCase):
    """The daemon's own permission checks (no default_permissions), as the
    kernel's generic checks would decide: nobody mounts a store that holds
    root's files and nobody's, and is refused what ext4 would refuse it."""

    def setUp(self):
        if shutil.which("setpriv") is None:
            self.skipTest("setpriv (util-linux) is not installed")
        # A user mount opens /dev/fuse itself; Debian creates it 0666, some images 0600.
        mode = stat.S_IMODE(os.stat("/dev/fuse").st_mode)
        if mode & 0o006 != 0o006:
            os.chmod("/dev/fuse", mode | 0o006)
            self.addCleanup(os.chmod, "/dev/fuse", mode)
        # Root fills the store first: a mount by root, then the same data by nobody.
        keep = tempfile.mkdtemp(prefix="kvfs-it-perm-", dir="/tmp")
        self.addCleanup(shutil.rmtree, keep, True)
        os.chmod(keep, 0o755)
        first = self.mount(opts=["--mem-size=64M"], name="root-first",
                           data=os.path.join(keep, "data"))
        d = first.path
        for name, mode, uid, gid in (("root644", 0o644, 0, 0), ("root600", 0o600, 0, 0),
                                     ("root666", 0o666, 0, 0), ("grp604", 0o604, 0, NOBODY),
                                     ("grp640", 0o640, 0, 0)):
            write_file(d(name), name.encode())
            os.chown(d(name), uid, gid if name != "grp640" else NOBODY)
            os.chmod(d(name), mode)
        os.mkdir(d("sticky"))
        os.chmod(d("sticky"), 0o1777)
        write_file(d("sticky", "roots"), b"r")
        os.mkdir(d("rootdir"))
        os.chmod(d("rootdir"), 0o755)
        os.chmod(first.mnt, 0o777)
        self.data = first.data
        first.stop()
        os.chown(self.data, NOBODY, NOBODY)
        for top, dirs, files in os.walk(self.data):
            for n in dirs + files:
                os.chown(os.path.join(top, n), NOBODY, NOBODY)
        m = UserMount(["--mem-size=64M"], name="nobody", data=self.data)
        os.chown(m.root, NOBODY, NOBODY)
        os.chown(m.mnt, NOBODY, NOBODY)
        self.addCleanup(m.cleanup)
        m.start()
        self.m = m
        self.assertNotIn("default_permissions", mount_options(m.mnt))

    def nobody(self, fn):
        return as_user(NOBODY, NOBODY, fn)

    def err(self, fn):
        r = self.nobody(fn)
        return r[1] if r[0] == "err" else None

    def test_files(self):
        p = self.m.path
        # others' bits for root's files; the group's for a member, even where others' allow more
        self.assertEqual(self.nobody(lambda: read_file(p("root644")).decode()), ["ok", "root644"])
        self.assertEqual(self.err(lambda: os.open(p("root644"), os.O_WRONLY)), errno.EACCES)
        self.assertEqual(self.err(lambda: os.open(p("root644"), os.O_RDONLY | os.O_TRUNC)),
                         errno.EACCES)
        self.assertEqual(self.err(lambda: os.truncate(p("root644"), 0)), errno.EACCES)
        self.assertEqual(self.err(lambda: read_file(p("root600"))), errno.EACCES)
        self.assertEqual(self.err(lambda: read_file(p("grp604"))), errno.EACCES)
        self.assertEqual(self.nobody(lambda: read_file(p("grp640")).decode()), ["ok", "grp640"])
        self.assertEqual(self.nobody(lambda: [os.access(p("root644"), m)
                                              for m in (os.R_OK, os.W_OK, os.X_OK, os.F_OK)]),
                         ["ok", [True, False, False, True]])
        # the owner's attributes: chmod, chown, explicit times are the owner's (or root's)
        self.assertEqual(self.err(lambda: os.chmod(p("root644"), 0o666)), errno.EPERM)
        self.assertEqual(self.err(lambda: os.chown(p("root644"), NOBODY, -1)), errno.EPERM)
        self.assertEqual(self.err(lambda: os.utime(p("root666"), (1, 1))), errno.EPERM)
        self.assertEqual(self.nobody(lambda: os.utime(p("root666"))), ["ok", None])  # "now"
        self.assertEqual(self.err(lambda: os.utime(p("root644"))), errno.EACCES)
        # nobody's own file: its bits bind nobody too, and chmod lifts them
        f = p("mine")
        self.assertEqual(self.nobody(lambda: write_file(f, b"mine")), ["ok", None])
        self.assertEqual(self.nobody(lambda: os.chmod(f, 0o444)), ["ok", None])
        self.assertEqual(self.err(lambda: os.open(f, os.O_RDWR)), errno.EACCES)
        self.assertEqual(self.err(lambda: write_file(f, b"lost")), errno.EACCES)
        self.assertEqual(self.nobody(lambda: os.utime(f, (7, 7))), ["ok", None])
        self.assertEqual(self.err(lambda: os.chown(f, 0, -1)), errno.EPERM)
        self.assertEqual(self.nobody(lambda: os.chmod(f, 0o644)), ["ok", None])
        self.assertEqual(self.nobody(lambda: write_file(f, b"new")), ["ok", None])
        self.assertEqual(self.nobody(lambda: read_file(f).decode()), ["ok", "new"])
        self.assertEqual(self.err(lambda: os.execv(p("mine"), ["mine"])), errno.EACCES)

    def test_directories(self):
        p = self.m.path
        # root's 0755 directory: nothing made, removed or renamed in it by nobody
        self.assertEqual(self.err(lambda: write_file(p("rootdir", "x"), b"x")), errno.EACCES)
        self.assertEqual(self.err(lambda: os.mkdir(p("rootdir", "x"))), errno.EACCES)
        self.assertEqual(self.err(lambda: os.symlink("t", p("rootdir", "x"))), errno.EACCES)
        self.assertEqual(self.err(lambda: os.rename(p("root644"), p("rootdir", "x"))),
                         errno.EACCES)
        # the sticky directory: nobody removes and renames its own names, not root's
        s = p("sticky")
        self.assertEqual(self.nobody(lambda: write_file(os.path.join(s, "own"), b"o")),
                         ["ok", None])
        self.assertEqual(self.err(lambda: os.unlink(os.path.join(s, "roots"))), errno.EPERM)
        self.assertEqual(self.err(lambda: os.rename(os.path.join(s, "roots"),
                                                    os.path.join(s, "moved"))), errno.EPERM)
        self.assertEqual(self.err(lambda: os.rename(os.path.join(s, "own"),
                                                    os.path.join(s, "roots"))), errno.EPERM)
        self.assertEqual(self.nobody(lambda: os.rename(os.path.join(s, "own"),
                                                       os.path.join(s, "own2"))), ["ok", None])
        self.assertEqual(self.nobody(lambda: os.unlink(os.path.join(s, "own2"))), ["ok", None])
        self.assertEqual(self.nobody(lambda: read_file(os.path.join(s, "roots")).decode()),
                         ["ok", "r"])
        # nobody's own directory, made read-only, then closed
        d = p("ro")

        def fill():
            os.mkdir(d)
            write_file(os.path.join(d, "k"), b"k")
            os.mkdir(os.path.join(d, "sub"))
            os.chmod(os.path.join(d, "sub"), 0o755)
            os.chmod(d, 0o555)

        self.assertEqual(self.nobody(fill), ["ok", None])
        self.assertEqual(self.err(lambda: os.unlink(os.path.join(d, "k"))), errno.EACCES)
        self.assertEqual(self.err(lambda: os.rmdir(os.path.join(d, "sub"))), errno.EACCES)
        self.assertEqual(self.err(lambda: write_file(os.path.join(d, "new"), b"n")),
                         errno.EACCES)
        self.assertEqual(self.err(lambda: os.rename(os.path.join(d, "k"), p("out"))),
                         errno.EACCES)
        # a directory moving to another parent needs write on itself (its "..")
        self.assertEqual(self.err(lambda: os.rename(os.path.join(d, "sub"), p("sub"))),
                         errno.EACCES)
        self.assertEqual(self.nobody(lambda: sorted(os.listdir(d))), ["ok", ["k", "sub"]])
        self.assertEqual(self.nobody(lambda: os.chmod(d, 0)), ["ok", None])
        self.assertEqual(self.err(lambda: os.listdir(d)), errno.EACCES)
        self.assertEqual(self.err(lambda: os.chdir(d)), errno.EACCES)
        # a name never looked up: the search permission is checked before ENOENT
        self.assertEqual(self.err(lambda: os.stat(os.path.join(d, "never"))), errno.EACCES)
        self.assertEqual(self.nobody(lambda: os.chmod(d, 0o755)), ["ok", None])
        self.assertEqual(self.nobody(lambda: read_file(os.path.join(d, "k")).decode()),
                         ["ok", "k"])
        self.assertEqual(self.nobody(lambda: os.rename(os.path.join(d, "k"), p("out"))),
                         ["ok", None])
        self.assertEqual(self.nobody(lambda: sorted(os.listdir(d))), ["ok", ["sub"]])


if __name__ == "__main__":
    kvfstest.main()
