# SPDX-License-Identifier: MIT
"""Symlinks, FIFOs and Unix sockets (core/store.h: metadata-only nodes;
README.md "Semantics"):

- symlink, readlink, lstat (S_IFLNK, size = the target's length), the kernel
  following them in lookups, ELOOP on loops and on O_NOFOLLOW, a target of
  PATH_MAX - 1 bytes (and ENAMETOOLONG past it), d_type in readdir;
- mkfifo and mknod S_IFIFO / S_IFSOCK: types and modes, a FIFO carrying
  bytes between a writer and a reader, a Unix socket bound and connected
  on kvfs;
- rename (over each other, RENAME_NOREPLACE, RENAME_EXCHANGE) and unlink
  of each kind, rm -rf of a directory holding them (never following a
  symlink out of the tree);
- device nodes and hard links refused with EPERM;
- the batch ioctls (libkvfs): a node is a name, not a key;
- tar c of a tree on tmpfs (/dev/shm), tar x into kvfs, and back: diff -r
  and a walk comparing every node; cp -a and rsync -a both ways (rsync
  skipped, loudly, when missing);
- with the SSD tier: every kind survives a clean restart, kill -9 after an
  fsync of its directory (creates, renames and unlinks alike), checkpoints,
  compaction; --fsck counts them and calls them clean; --salvage, which
  rebuilds from bucket records alone, brings back the keys but not them
  (README.md says so); cache-mode eviction never takes them."""

import errno
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
from kvfstest import pattern, read_file, renameat2, write_file  # noqa: E402
from test_ssd import SsdTestCase, fsync_path, main, put, run_kvfs  # noqa: E402

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
LONG_TARGET = "/".join(["t" * 255] * 16)[:4095]  # PATH_MAX - 1 bytes, the most Linux takes


def snapshot(top):
    """{relative path: (type, mode, size, link target or content, mtime_ns)}
    of everything under top, .kvfs excluded, without following symlinks."""
    out = {}
    for root, dirs, files in os.walk(top):
        if root == top and ".kvfs" in dirs:
            dirs.remove(".kvfs")
        for n in dirs + files:
            p = os.path.join(root, n)
            st = os.lstat(p)
            kind = stat.S_IFMT(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                body = os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                body = read_file(p)
            else:
                body = None
            # A directory's mtime moves with its entries; a symlink's is set by tar/cp -a.
            mtime = None if stat.S_ISDIR(st.st_mode) else st.st_mtime_ns
            size = st.st_size if kind in (stat.S_IFREG, stat.S_IFLNK) else None
            out[os.path.relpath(p, top)] = (kind, stat.S_IMODE(st.st_mode), size, body, mtime)
    return out


def make_tree(top):
    """A tree of files, directories, symlinks (relative, absolute, dangling,
    to a directory, long), FIFOs and a socket node under top."""
    os.makedirs(os.path.join(top, "models", "v2"))
    os.makedirs(os.path.join(top, "models", "v3", "tp0"))
    for i in range(5):
        write_file(os.path.join(top, "models", "v3", "tp0", "b%d" % i),
                   pattern("b%d" % i, 1000 * i + 7), mode=0o640)
    write_file(os.path.join(top, "models", "v2", "old"), b"old", mode=0o600)
    os.symlink("v3", os.path.join(top, "models", "current"))
    os.symlink("/nonexistent/absolute/target", os.path.join(top, "models", "abs"))
    os.symlink("missing", os.path.join(top, "models", "dangling"))
    os.symlink("../v3/tp0/b1", os.path.join(top, "models", "v2", "rel"))
    os.symlink(LONG_TARGET, os.path.join(top, "long"))
    os.mkfifo(os.path.join(top, "fifo"), 0o640)
    os.mkfifo(os.path.join(top, "models", "v2", "pipe"), 0o600)
    os.mknod(os.path.join(top, "sock"), stat.S_IFSOCK | 0o644)
    # Times apart by more than a second (rsync compares whole seconds), with nanoseconds.
    for root, dirs, files in os.walk(top):
        if root == top and ".kvfs" in dirs:
            dirs.remove(".kvfs")
        # os.walk lists a symlink to a directory among the directories
        nodes = [n for n in dirs + files
                 if not stat.S_ISDIR(os.lstat(os.path.join(root, n)).st_mode)]
        for i, n in enumerate(sorted(nodes)):
            os.utime(os.path.join(root, n), follow_symlinks=False,
                     ns=(1_500_000_000_000_000_000, 1_600_000_000_123_456_789 + i * 10**10))


def fifo_round_trip(test, path, data):
    """Writes data into the FIFO at path from a thread and reads it back here."""
    err = []

    def writer():
        try:
            with open(path, "wb") as f:
                f.write(data)
        except OSError as e:
            err.append(e)

    t = threading.Thread(target=writer)
    t.start()
    with open(path, "rb") as f:
        got = f.read()
    t.join(30)
    test.assertFalse(t.is_alive(), "FIFO writer stuck")
    test.assertEqual(err, [])
    test.assertEqual(got, data)


class SymlinkTest(kvfstest.KvfsTestCase):
    def test_symlink_lstat_readlink_follow(self):
        m = self.m
        os.mkdir(m.path("d"))
        write_file(m.path("d", "f"), b"hello")
        os.symlink("d/f", m.path("l"))
        st = os.lstat(m.path("l"))
        self.assertTrue(stat.S_ISLNK(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o777)
        self.assertEqual(st.st_size, len("d/f"))
        self.assertEqual(st.st_nlink, 1)
        self.assertEqual((st.st_uid, st.st_gid), (os.getuid(), os.getgid()))
        self.assertEqual(os.readlink(m.path("l")), "d/f")
        # Followed by the kernel: stat, open, and a symlink to a directory as a path component.
        self.assertTrue(stat.S_ISREG(os.stat(m.path("l")).st_mode))
        self.assertEqual(read_file(m.path("l")), b"hello")
        os.symlink("d", m.path("dl"))
        self.assertEqual(read_file(m.path("dl", "f")), b"hello")
        self.assertEqual(sorted(os.listdir(m.path("dl"))), ["f"])
        # Writing through a symlink writes the target.
        write_file(m.path("l"), b"through")
        self.assertEqual(read_file(m.path("d", "f")), b"through")
        # An absolute target and a dangling one.
        os.symlink(m.path("d", "f"), m.path("abs"))
        self.assertEqual(read_file(m.path("abs")), b"through")
        os.symlink("nowhere", m.path("dangling"))
        self.assertErrno(errno.ENOENT, os.stat, m.path("dangling"))
        self.assertTrue(os.path.islink(m.path("dangling")))
        # readlink on something else
        self.assertErrno(errno.EINVAL, os.readlink, m.path("d", "f"))
        self.assertErrno(errno.EINVAL, os.readlink, m.path("d"))
        # the symlink itself holds no key: the namespace counts it apart
        ns = m.stats()["namespace"]
        self.assertEqual((ns["keys"], ns["symlinks"]), (1, 4))
        # d_type in readdir
        kinds = {e.name: (e.is_symlink(), e.is_dir(follow_symlinks=False),
                          e.is_file(follow_symlinks=False)) for e in os.scandir(m.path())}
        self.assertEqual(kinds["l"], (True, False, False))
        self.assertEqual(kinds["dl"], (True, False, False))
        self.assertEqual(kinds["d"], (False, True, False))
        out = subprocess.run(["ls", "-l", m.path()], stdout=subprocess.PIPE, check=True).stdout
        self.assertIn(b"l -> d/f", out)

    def test_target_lengths(self):
        m = self.m
        os.symlink(LONG_TARGET, m.path("long"))
        self.assertEqual(os.readlink(m.path("long")), LONG_TARGET)
        self.assertEqual(os.lstat(m.path("long")).st_size, 4095)
        self.assertErrno(errno.ENAMETOOLONG, os.symlink, LONG_TARGET + "x", m.path("toolong"))
        self.assertFalse(os.path.lexists(m.path("toolong")))
        self.assertErrno(errno.ENOENT, os.symlink, "", m.path("empty"))
        odd = "a b\n\tc\\d\xe9\u4e2d/../x"
        os.symlink(odd, m.path("odd"))
        self.assertEqual(os.readlink(m.path("odd")), odd)
        self.assertErrno(errno.EEXIST, os.symlink, "x", m.path("odd"))
        self.assertErrno((errno.EPERM, errno.EEXIST), os.symlink, "x", m.path(".kvfs"))
        self.assertErrno(errno.EPERM, os.symlink, "x", m.path(".kvfs", "l"))
        self.assertErrno(errno.EPERM, os.mkfifo, m.path(".kvfs", "p"))
        self.assertErrno(errno.EEXIST, os.mkfifo, m.path(".kvfs"))

    def test_eloop(self):
        m = self.m
        os.symlink("b", m.path("a"))
        os.symlink("a", m.path("b"))
        os.symlink("self", m.path("self"))
        for p in ("a", "b", "self"):
            self.assertErrno(errno.ELOOP, os.stat, m.path(p))
            self.assertErrno(errno.ELOOP, os.open, m.path(p), os.O_RDONLY)
            self.assertErrno(errno.ELOOP, os.open, m.path(p, "x"), os.O_RDONLY)
        # Linux follows 40 links in a path: a chain of 30 resolves, 50 does not.
        write_file(m.path("end"), b"end")
        prev = "end"
        for i in range(50):
            os.symlink(prev, m.path("c%d" % i))
            prev = "c%d" % i
        self.assertEqual(read_file(m.path("c29")), b"end")
        self.assertErrno(errno.ELOOP, os.stat, m.path("c49"))
        # O_NOFOLLOW on a symlink
        self.assertErrno(errno.ELOOP, os.open, m.path("c0"), os.O_RDONLY | os.O_NOFOLLOW)
        self.assertTrue(stat.S_ISLNK(os.lstat(m.path("a")).st_mode))

    def test_rename_and_unlink(self):
        m = self.m
        write_file(m.path("f"), b"file")
        os.mkdir(m.path("d"))
        os.symlink("f", m.path("l"))
        os.rename(m.path("l"), m.path("d", "l2"))
        self.assertFalse(os.path.lexists(m.path("l")))
        self.assertEqual(os.readlink(m.path("d", "l2")), "f")
        # A file renamed over a symlink replaces the link, not its target.
        os.symlink("f", m.path("l3"))
        write_file(m.path("g"), b"gee")
        os.rename(m.path("g"), m.path("l3"))
        self.assertTrue(stat.S_ISREG(os.lstat(m.path("l3")).st_mode))
        self.assertEqual(read_file(m.path("l3")), b"gee")
        self.assertEqual(read_file(m.path("f")), b"file")
        # The atomic "current -> vN" switch: a new symlink renamed over the old one.
        os.mkdir(m.path("v1"))
        os.mkdir(m.path("v2"))
        write_file(m.path("v1", "w"), b"one")
        write_file(m.path("v2", "w"), b"two")
        os.symlink("v1", m.path("current"))
        self.assertEqual(read_file(m.path("current", "w")), b"one")
        os.symlink("v2", m.path("current.tmp"))
        os.rename(m.path("current.tmp"), m.path("current"))
        self.assertEqual(read_file(m.path("current", "w")), b"two")
        self.assertEqual(os.readlink(m.path("current")), "v2")
        # a symlink renamed over a file; NOREPLACE; EXCHANGE with a FIFO; over a directory
        os.symlink("v1", m.path("l4"))
        os.rename(m.path("l4"), m.path("l3"))
        self.assertEqual(os.readlink(m.path("l3")), "v1")
        os.mkfifo(m.path("p"))
        self.assertErrno(errno.EEXIST, renameat2, m.path("l3"), m.path("p"), RENAME_NOREPLACE)
        renameat2(m.path("l3"), m.path("p"), RENAME_EXCHANGE)
        self.assertEqual(os.readlink(m.path("p")), "v1")
        self.assertTrue(stat.S_ISFIFO(os.lstat(m.path("l3")).st_mode))
        self.assertErrno(errno.EISDIR, os.rename, m.path("p"), m.path("v1"))
        os.mkdir(m.path("emptydir"))
        self.assertErrno(errno.ENOTDIR, os.rename, m.path("emptydir"), m.path("p"))
        # unlink leaves the target alone; rmdir refuses a symlink to a directory
        self.assertErrno(errno.ENOTDIR, os.rmdir, m.path("current"))
        os.unlink(m.path("current"))
        self.assertEqual(read_file(m.path("v2", "w")), b"two")
        os.unlink(m.path("p"))
        os.unlink(m.path("l3"))
        self.assertEqual(m.stats()["namespace"]["symlinks"], 1)  # d/l2
        self.assertEqual(m.stats()["namespace"]["fifos_sockets"], 0)

    def test_rm_rf_does_not_follow(self):
        m = self.m
        os.makedirs(m.path("keep"))
        write_file(m.path("keep", "k"), b"keep")
        os.makedirs(m.path("tree", "sub"))
        os.symlink("../keep", m.path("tree", "out"))
        os.symlink(m.path("keep"), m.path("tree", "sub", "abs"))
        os.mkfifo(m.path("tree", "sub", "p"))
        os.mknod(m.path("tree", "s"), stat.S_IFSOCK | 0o600)
        subprocess.run(["rm", "-rf", m.path("tree")], check=True)
        self.assertFalse(os.path.lexists(m.path("tree")))
        self.assertEqual(read_file(m.path("keep", "k")), b"keep")
        ns = m.stats()["namespace"]
        self.assertEqual((ns["keys"], ns["symlinks"], ns["fifos_sockets"]), (1, 0, 0))


class SpecialFileTest(kvfstest.KvfsTestCase):
    def test_fifo_and_socket_nodes(self):
        m = self.m
        old = os.umask(0o022)
        try:
            os.mkfifo(m.path("fifo"), 0o666)
            os.mknod(m.path("fifo2"), stat.S_IFIFO | 0o600)
            os.mknod(m.path("sock"), stat.S_IFSOCK | 0o640)
        finally:
            os.umask(old)
        for name, test, mode in (("fifo", stat.S_ISFIFO, 0o644), ("fifo2", stat.S_ISFIFO, 0o600),
                                 ("sock", stat.S_ISSOCK, 0o640)):
            st = os.lstat(m.path(name))
            self.assertTrue(test(st.st_mode), name)
            self.assertEqual(stat.S_IMODE(st.st_mode), mode, name)
            self.assertEqual(st.st_size, 0)
            self.assertEqual(st.st_nlink, 1)
        os.chmod(m.path("fifo"), 0o600)
        self.assertEqual(stat.S_IMODE(os.lstat(m.path("fifo")).st_mode), 0o600)
        self.assertTrue(stat.S_ISFIFO(os.lstat(m.path("fifo")).st_mode))
        kinds = {e.name: e.is_file(follow_symlinks=False) or e.is_dir(follow_symlinks=False)
                 for e in os.scandir(m.path())}
        self.assertEqual((kinds["fifo"], kinds["sock"]), (False, False))
        out = subprocess.run(["find", m.path(), "-path", m.path(".kvfs"), "-prune", "-o",
                              "-printf", "%y %P\n"], stdout=subprocess.PIPE, check=True).stdout
        self.assertEqual(sorted(out.decode().split("\n")),
                         sorted(["d ", "p fifo", "p fifo2", "s sock", ""]))
        self.assertErrno(errno.EINVAL, os.truncate, m.path("fifo"), 0)
        self.assertEqual(os.listxattr(m.path("fifo"), follow_symlinks=False), [])
        ns = m.stats()["namespace"]
        self.assertEqual((ns["keys"], ns["fifos_sockets"], ns["bytes"]), (0, 3, 0))

    def test_fifo_carries_bytes(self):
        m = self.m
        os.mkfifo(m.path("fifo"))
        data = pattern("fifo", 300000)  # more than a pipe buffer
        fifo_round_trip(self, m.path("fifo"), data)
        # a shell pipeline through it, both ends at once
        r = subprocess.run(["sh", "-c", "seq 1 20000 > %s & cat %s; wait"
                            % (m.path("fifo"), m.path("fifo"))],
                           stdout=subprocess.PIPE, check=True, timeout=60)
        self.assertEqual(r.stdout, "".join("%d\n" % i for i in range(1, 20001)).encode())
        # nothing was stored: it is still an empty FIFO node
        self.assertEqual(os.lstat(m.path("fifo")).st_size, 0)
        self.assertEqual(m.stats()["namespace"]["bytes"], 0)

    def test_unix_socket_bind_connect(self):
        m = self.m
        path = m.path("srv.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(srv.close)
        try:
            srv.bind(path)
        except OSError as e:
            if len(path) >= 108:
                kvfstest.skip("socket path too long: %s" % path)
            raise
        srv.listen(1)
        self.assertTrue(stat.S_ISSOCK(os.lstat(path).st_mode))
        cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(cli.close)
        cli.connect(path)
        conn, _ = srv.accept()
        self.addCleanup(conn.close)
        cli.sendall(b"ping over kvfs")
        self.assertEqual(conn.recv(100), b"ping over kvfs")
        # a second bind on the same name: the node exists
        other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(other.close)
        self.assertErrno(errno.EADDRINUSE, other.bind, path)
        os.rename(path, m.path("moved.sock"))
        self.assertTrue(stat.S_ISSOCK(os.lstat(m.path("moved.sock")).st_mode))
        os.unlink(m.path("moved.sock"))
        self.assertFalse(os.path.lexists(m.path("moved.sock")))

    def test_devices_and_hard_links_refused(self):
        m = self.m
        write_file(m.path("f"), b"x")
        os.symlink("f", m.path("l"))
        os.mkfifo(m.path("p"))
        self.assertErrno(errno.EPERM, os.mknod, m.path("chr"), stat.S_IFCHR | 0o600,
                         os.makedev(1, 3))
        self.assertErrno(errno.EPERM, os.mknod, m.path("blk"), stat.S_IFBLK | 0o600,
                         os.makedev(7, 0))
        self.assertErrno(errno.EPERM, os.link, m.path("f"), m.path("hf"))
        self.assertErrno(errno.EPERM, os.link, m.path("l"), m.path("hl"), follow_symlinks=False)
        self.assertErrno(errno.EPERM, os.link, m.path("p"), m.path("hp"))
        for n in ("chr", "blk", "hf", "hl", "hp"):
            self.assertFalse(os.path.lexists(m.path(n)), n)
        self.assertEqual(os.stat(m.path("f")).st_nlink, 1)
        self.assertEqual(read_file(m.path("f")), b"x")


class IoctlTest(kvfstest.KvfsTestCase):
    """The batch ioctls (core/batch.h) through libkvfs: nodes are names, not keys."""

    def setUp(self):
        super().setUp()
        import test_client
        test_client._tools()
        self.kvfs = test_client.kvfs
        self.c = self.kvfs.Client(self.m.mnt)
        self.addCleanup(self.c.close)

    def test_nodes_in_batches(self):
        c, m, kvfs = self.c, self.m, self.kvfs
        os.makedirs(m.path("v3"))
        write_file(m.path("v3", "blk"), b"block")
        # The kernel sends the release (the seal) after close returns: wait for it.
        kvfstest.wait_until(lambda: "user.kvfs.seq" in os.listxattr(m.path("v3", "blk")),
                            timeout=10, what="v3/blk sealed")
        os.symlink("v3", m.path("current"))
        os.symlink("v3/blk", m.path("ln"))
        os.mkfifo(m.path("fifo"))
        look = c.lookup(["current", "ln", "fifo", "current/blk", "v3/blk"])
        self.assertEqual(look.results[:4],
                         [-errno.EINVAL, -errno.EINVAL, -errno.EINVAL, -errno.ENOTDIR])
        self.assertEqual(look[4], 5)
        self.assertEqual(look.flags[0], kvfs.KEY_PRESENT)
        self.assertEqual(look.prefix, 0)
        g = c.get_into([("ln", bytearray(5)), ("fifo", bytearray(5))])
        self.assertEqual(list(g), [-errno.EINVAL, -errno.EINVAL])
        # A client opened through the symlink addresses the directory it points at.
        via = self.kvfs.Client(m.path("current"))
        self.addCleanup(via.close)
        self.assertEqual(via.lookup(["blk"])[0], 5)
        self.assertEqual(list(via.put_buffers([("new", b"new!")])), [4])
        self.assertEqual(read_file(m.path("v3", "new")), b"new!")
        # A put over a node replaces it (NOREPLACE leaves it); the kernel sees the change.
        self.assertEqual(c.put_buffers([("ln", b"x")], flags=kvfs.PUT_NOREPLACE)[0],
                         -errno.EEXIST)
        self.assertTrue(os.path.islink(m.path("ln")))
        self.assertEqual(c.put_buffers([("ln", b"xy")])[0], 2)
        self.assertTrue(stat.S_ISREG(os.lstat(m.path("ln")).st_mode))
        self.assertEqual(read_file(m.path("ln")), b"xy")
        self.assertEqual(read_file(m.path("v3", "blk")), b"block")
        # remove: a node counts no key; by prefix, everything below goes
        self.assertEqual(list(c.remove(["fifo"])), [0])
        self.assertFalse(os.path.lexists(m.path("fifo")))
        os.symlink("../ln", m.path("v3", "up"))
        os.mknod(m.path("v3", "sock"), stat.S_IFSOCK | 0o600)
        self.assertEqual(c.remove_prefix("v3"), 2)
        self.assertFalse(os.path.lexists(m.path("v3")))
        self.assertEqual(read_file(m.path("ln")), b"xy")
        ns = m.stats()["namespace"]
        self.assertEqual((ns["keys"], ns["symlinks"], ns["fifos_sockets"]), (1, 1, 0))


class CopyToolsTest(kvfstest.KvfsTestCase):
    """tar, cp -a and rsync -a of a tree with every node kind, tmpfs <-> kvfs."""

    def setUp(self):
        super().setUp()
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.src = tempfile.mkdtemp(prefix="kvfs-ftypes-", dir=base)
        self.addCleanup(shutil.rmtree, self.src, True)
        make_tree(self.src)
        self.want = snapshot(self.src)

    def check_diff(self, a, b, skip=()):
        """diff -r --no-dereference finds nothing but the FIFOs and sockets it cannot compare
        (and the names in skip, missing from b)."""
        r = subprocess.run(["diff", "-r", "--no-dereference", a, b], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60)
        lines = set(r.stdout.decode(errors="replace").splitlines())
        expect = set()
        for rel, (kind, *_rest) in self.want.items():
            if rel in skip:
                expect.add("Only in %s: %s" % (os.path.dirname(os.path.join(a, rel)),
                                               os.path.basename(rel)))
            elif kind == stat.S_IFIFO:
                expect.add("File %s/%s is a fifo while file %s/%s is a fifo" % (a, rel, b, rel))
            elif kind == stat.S_IFSOCK:
                expect.add("File %s/%s is a socket while file %s/%s is a socket"
                           % (a, rel, b, rel))
        self.assertEqual(lines, expect)

    def test_tar_in_and_out(self):
        m = self.m
        os.mkdir(m.path("t"))
        # pax format: nanosecond times. tar skips sockets ("socket ignored").
        tar = subprocess.Popen(["tar", "c", "--format=posix", "-C", self.src, "."],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        subprocess.run(["tar", "x", "-C", m.path("t")], stdin=tar.stdout, check=True, timeout=60)
        tar.stdout.close()
        self.assertEqual(tar.wait(60), 0)
        want = {p: v for p, v in self.want.items() if v[0] != stat.S_IFSOCK}
        self.assertEqual(snapshot(m.path("t")), want)
        self.check_diff(self.src, m.path("t"), skip=("sock",))
        # and back out of kvfs
        back = tempfile.mkdtemp(prefix="kvfs-ftypes-back-", dir=os.path.dirname(self.src))
        self.addCleanup(shutil.rmtree, back, True)
        tar = subprocess.Popen(["tar", "c", "--format=posix", "-C", m.path("t"), "."],
                               stdout=subprocess.PIPE)
        subprocess.run(["tar", "x", "-C", back], stdin=tar.stdout, check=True, timeout=60)
        tar.stdout.close()
        self.assertEqual(tar.wait(60), 0)
        self.assertEqual(snapshot(back), want)
        ns = m.stats()["namespace"]
        self.assertEqual((ns["keys"], ns["symlinks"], ns["fifos_sockets"]), (6, 5, 2))

    def test_cp_a(self):
        m = self.m
        subprocess.run(["cp", "-a", self.src, m.path("c")], check=True, timeout=60)
        self.assertEqual(snapshot(m.path("c")), self.want)
        self.check_diff(self.src, m.path("c"))
        subprocess.run(["cp", "-a", m.path("c"), m.path("c2")], check=True, timeout=60)
        self.assertEqual(snapshot(m.path("c2")), self.want)

    def test_rsync_a(self):
        if not shutil.which("rsync"):
            kvfstest.skip("rsync is not installed (scripts/deps.sh installs it)")
        m = self.m
        subprocess.run(["rsync", "-a", "--specials", self.src + "/", m.path("r") + "/"],
                       check=True, timeout=60)
        self.assertEqual(snapshot(m.path("r")), self.want)
        # a second run finds nothing to do, and one after a change carries the change
        os.unlink(os.path.join(self.src, "models", "current"))
        os.symlink("v2", os.path.join(self.src, "models", "current"))
        os.utime(os.path.join(self.src, "models", "current"), ns=(1, 1_700_000_000_000_000_000),
                 follow_symlinks=False)
        subprocess.run(["rsync", "-a", "--delete", self.src + "/", m.path("r") + "/"],
                       check=True, timeout=60)
        self.assertEqual(os.readlink(m.path("r", "models", "current")), "v2")
        self.assertEqual(snapshot(m.path("r")), snapshot(self.src))


class PersistTest(SsdTestCase):
    """Every node kind on the SSD tier's metadata: restart, kill -9, checkpoints, fsck, salvage."""

    OPTS = ("--mem-size=64M", "--bucket-size=4M")

    def populate(self, m):
        make_tree(m.path())
        os.chown(m.path("fifo"), 1234, 5678)
        os.chown(m.path("models", "current"), 4321, 8765, follow_symlinks=False)
        return snapshot(m.path())

    def test_clean_restart_twice(self):
        m = self.start("first")
        want = self.populate(m)
        m.stop()
        for name in ("second", "third"):  # the second start reads the checkpoint the first wrote
            m = self.start(name)
            self.assertEqual(snapshot(m.path()), want)
            st = os.lstat(m.path("fifo"))
            self.assertEqual((st.st_uid, st.st_gid), (1234, 5678))
            st = os.lstat(m.path("models", "current"))
            self.assertEqual((st.st_uid, st.st_gid), (4321, 8765))
            self.assertEqual(read_file(m.path("models", "current", "tp0", "b3")),
                             pattern("b3", 3007))
            fifo_round_trip(self, m.path("fifo"), b"after restart")
            ns = m.stats()["namespace"]
            self.assertEqual((ns["keys"], ns["symlinks"], ns["fifos_sockets"]), (6, 5, 3))
            m.stop()

    def test_kill9_after_fsync_of_the_directory(self):
        m = self.start("first")
        os.mkdir(m.path("d"))
        put(m.path("d", "k"), b"key", fsync=True)  # a key's bytes need its own fsync
        os.symlink("k", m.path("d", "l"))
        os.mkfifo(m.path("d", "p"))
        os.mknod(m.path("d", "s"), stat.S_IFSOCK | 0o600)
        os.symlink(LONG_TARGET, m.path("d", "long"))
        os.symlink("gone", m.path("d", "gone"))
        fsync_path(m.path("d"), directory=True)
        m = self.restart_after_crash(m, "second")
        self.assertEqual(os.readlink(m.path("d", "l")), "k")
        self.assertEqual(read_file(m.path("d", "l")), b"key")
        self.assertEqual(os.readlink(m.path("d", "long")), LONG_TARGET)
        self.assertTrue(stat.S_ISFIFO(os.lstat(m.path("d", "p")).st_mode))
        self.assertTrue(stat.S_ISSOCK(os.lstat(m.path("d", "s")).st_mode))
        # renames, a replacement and unlinks, made durable by fsync of the directory
        os.rename(m.path("d", "l"), m.path("d", "l2"))
        os.rename(m.path("d", "p"), m.path("d", "p2"))
        os.symlink("l2", m.path("d", "tmp"))
        os.rename(m.path("d", "tmp"), m.path("d", "long"))
        os.unlink(m.path("d", "gone"))
        os.unlink(m.path("d", "s"))
        fsync_path(m.path("d"), directory=True)
        m = self.restart_after_crash(m, "third")
        names = sorted(os.listdir(m.path("d")))
        self.assertEqual(names, ["k", "l2", "long", "p2"])
        self.assertEqual(os.readlink(m.path("d", "l2")), "k")
        self.assertEqual(os.readlink(m.path("d", "long")), "l2")
        self.assertTrue(stat.S_ISFIFO(os.lstat(m.path("d", "p2")).st_mode))
        ns = m.stats()["namespace"]
        self.assertEqual((ns["keys"], ns["symlinks"], ns["fifos_sockets"]), (1, 2, 1))
        m.stop()

    def test_kill9_after_syncfs(self):
        m = self.start("first")
        want = self.populate(m)
        fsync_path(m.path(), directory=True)  # the root: syncfs
        m = self.restart_after_crash(m, "second")
        self.assertEqual(snapshot(m.path()), want)
        m.stop()

    def restart_after_crash(self, m, name):
        self.crash(m)
        return self.start(name)

    def test_gc_fsck_salvage(self):
        m = self.start("first")
        want = self.populate(m)
        for i in range(20):  # dead records for compaction to reclaim
            write_file(m.path("junk%d" % i), pattern("junk", 100000))
        fsync_path(m.path(), directory=True)
        for i in range(20):
            os.unlink(m.path("junk%d" % i))
        with open(m.path(".kvfs", "ctl"), "w") as f:
            f.write("gc")
        self.assertEqual(snapshot(m.path()), want)
        m.stop()
        rc, out = run_kvfs("--fsck", self.data)
        self.assertEqual(rc, 0, out)
        self.assertIn("fsck: 5 symlinks, 3 FIFOs and sockets (metadata only)", out)
        self.assertIn("6 keys", out)
        self.assertEqual(out.strip().splitlines()[-1], "fsck: clean")
        m = self.start("after-fsck")
        self.assertEqual(snapshot(m.path()), want)
        m.stop()
        # Salvage knows only bucket records: the keys come back, the metadata-only nodes do not.
        rc, out = run_kvfs("--salvage", self.data)
        self.assertEqual(rc, 0, out)
        m = self.start("after-salvage")
        got = snapshot(m.path())
        keys = {p for p, v in want.items() if v[0] == stat.S_IFREG}
        self.assertEqual({p for p, v in got.items() if v[0] == stat.S_IFREG}, keys)
        self.assertEqual([p for p, v in got.items() if v[0] not in (stat.S_IFREG, stat.S_IFDIR)],
                         [])
        m.stop()

    def test_cache_mode_never_evicts_them(self):
        m = self.start("lru", opts=["--mem-size=16M", "--ssd-size=24M", "--bucket-size=2M",
                                    "--evict=lru"])
        os.symlink("k0", m.path("l"))
        os.mkfifo(m.path("p"))
        for i in range(40):  # 40 MiB through a 24 MiB quota: the oldest keys go
            write_file(m.path("k%d" % i), pattern("k%d" % i, 1 << 20))
        kvfstest.wait_until(lambda: not os.path.lexists(m.path("k0")), timeout=60,
                            what="k0 evicted")
        self.assertGreater(m.stats()["tier"]["evictions"], 0)
        self.assertEqual(os.readlink(m.path("l")), "k0")
        self.assertTrue(stat.S_ISFIFO(os.lstat(m.path("p")).st_mode))
        ns = m.stats()["namespace"]
        self.assertEqual((ns["symlinks"], ns["fifos_sockets"]), (1, 1))
        m.stop()


if __name__ == "__main__":
    main()
