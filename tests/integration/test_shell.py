# SPDX-License-Identifier: MIT
"""kvfs with ordinary shell tools: cp, sha256sum, mkdir -p, mv, rm -rf, ls -l,
du, df and cat of the .kvfs control files."""

import hashlib
import json
import os
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402

MEM = "768M"


def sh(*cmd, cwd=None):
    """Runs a command; returns its stdout (text); fails the test on non-zero."""
    r = subprocess.run(list(cmd), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise AssertionError("%s exited %d: %s" % (" ".join(cmd), r.returncode,
                                                 r.stderr.decode(errors="replace")))
    return r.stdout.decode(errors="replace")


def sha256sum(path):
    out = sh("sha256sum", path)
    return out.split()[0]


def pages(n):
    """Bytes allocated for an n-byte value: whole 4 KiB pages."""
    return (n + 4095) // 4096 * 4096


class ShellTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=" + MEM,)

    def test_cp_100mib_roundtrip(self):
        tmp = tempfile.mkdtemp(prefix="kvfs-it-src-", dir="/tmp")
        try:
            src = os.path.join(tmp, "src.bin")
            h = hashlib.sha256()
            with open(src, "wb") as f:
                for _ in range(100):
                    b = os.urandom(1 << 20)
                    h.update(b)
                    f.write(b)
            want = h.hexdigest()
            self.assertEqual(sha256sum(src), want)
            dst = self.m.path("big.bin")
            sh("cp", src, dst)
            self.assertEqual(os.stat(dst).st_size, 100 << 20)
            self.assertEqual(sha256sum(dst), want)
            # out again, through a fresh read of the mount
            out = os.path.join(tmp, "out.bin")
            sh("cp", dst, out)
            self.assertEqual(sha256sum(out), want)
            # a copy inside the mount
            sh("cp", dst, self.m.path("big2.bin"))
            self.assertEqual(sha256sum(self.m.path("big2.bin")), want)
            sh("cmp", src, self.m.path("big2.bin"))
        finally:
            subprocess.run(["rm", "-rf", tmp])

    def test_mkdir_mv_rm_ls(self):
        m = self.m
        sh("mkdir", "-p", m.path("a/b/c"))
        for d in ("a", "a/b", "a/b/c"):
            self.assertTrue(os.path.isdir(m.path(d)), d)
        files = {"a/one": 10, "a/b/two": 4096, "a/b/c/three": 70000, "a/b/c/empty": 0}
        for rel, size in files.items():
            kvfstest.write_file(m.path(rel), kvfstest.pattern(rel, size))

        # ls -l shows the names and sizes
        out = sh("ls", "-l", m.path("a/b/c"))
        rows = {}
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 9 and not line.startswith("total"):
                rows[f[-1]] = int(f[4])
        self.assertEqual(rows, {"three": 70000, "empty": 0})
        out = sh("ls", "-l", m.path("a"))
        names = {line.split()[-1]: line[0] for line in out.splitlines()
                 if not line.startswith("total")}
        self.assertEqual(names, {"one": "-", "b": "d"})
        self.assertEqual(sorted(sh("ls", "-A", m.path("a/b")).split()), ["c", "two"])

        # mv a file, then a directory tree
        sh("mv", m.path("a/one"), m.path("a/b/one-moved"))
        self.assertFalse(os.path.exists(m.path("a/one")))
        self.assertEqual(kvfstest.read_file(m.path("a/b/one-moved")),
                         kvfstest.pattern("a/one", 10))
        sh("mkdir", m.path("z"))
        sh("mv", m.path("a/b"), m.path("z/"))
        self.assertFalse(os.path.exists(m.path("a/b")))
        self.assertEqual(kvfstest.read_file(m.path("z/b/c/three")),
                         kvfstest.pattern("a/b/c/three", 70000))
        self.assertEqual(sorted(sh("ls", m.path("z/b")).split()), ["c", "one-moved", "two"])

        # rm -rf removes the whole tree
        sh("rm", "-rf", m.path("z"), m.path("a"))
        self.assertFalse(os.path.exists(m.path("z")))
        self.assertFalse(os.path.exists(m.path("a")))
        self.assertEqual(sorted(x for x in os.listdir(m.mnt) if x != ".kvfs"), [])
        st = m.stats()
        self.assertEqual(st["namespace"]["keys"], 0)

    def test_find_cp_a_tar_dd_touch(self):
        m = self.m
        # find walks a nested tree completely (it trusts st_nlink of dirs)
        for d in ("tree/a/b/c", "tree/a/d", "tree/e"):
            os.makedirs(m.path(d))
        files = ["tree/f", "tree/a/g", "tree/a/b/h", "tree/a/b/c/i", "tree/a/d/j", "tree/e/k"]
        for f in files:
            kvfstest.write_file(m.path(f), f.encode())
        out = sh("find", ".", cwd=m.path("tree")).split()
        want = {"."} | {"./" + p[len("tree/"):] for p in files} | {
            "./a", "./a/b", "./a/b/c", "./a/d", "./e"}
        self.assertEqual(sorted(out), sorted(want))
        self.assertEqual(sorted(sh("find", ".", "-type", "f", cwd=m.path("tree")).split()),
                         sorted("./" + p[len("tree/"):] for p in files))
        nl = os.stat(m.path("tree/a")).st_nlink
        self.assertIn(nl, (1, 4), "st_nlink of a directory with 2 subdirectories")

        # cp -a and tar keep modes and times
        src = tempfile.mkdtemp(prefix="kvfs-it-cpa-", dir="/tmp")
        try:
            os.mkdir(os.path.join(src, "s"))
            kvfstest.write_file(os.path.join(src, "s", "f"), b"hello\n")
            os.chmod(os.path.join(src, "s", "f"), 0o600)
            os.utime(os.path.join(src, "s", "f"), (978307200, 978307200))
            sh("cp", "-a", os.path.join(src, "s"), m.path("cpa"))
            st = os.stat(m.path("cpa", "f"))
            self.assertEqual((st.st_mode & 0o7777, int(st.st_mtime), st.st_size),
                             (0o600, 978307200, 6))
            sh("tar", "-C", src, "-cf", os.path.join(src, "x.tar"), "s")
            sh("tar", "-C", m.mnt, "-xf", os.path.join(src, "x.tar"))
            st = os.stat(m.path("s", "f"))
            self.assertEqual((st.st_mode & 0o7777, int(st.st_mtime)), (0o600, 978307200))
            self.assertEqual(kvfstest.read_file(m.path("s", "f")), b"hello\n")
            # and back out of the mount
            sh("cp", "-a", m.path("tree"), os.path.join(src, "tree-out"))
            sh("diff", "-r", m.path("tree"), os.path.join(src, "tree-out"))
        finally:
            subprocess.run(["rm", "-rf", src])

        # dd with O_DIRECT and fsync, in and out
        sh("dd", "if=/dev/urandom", "of=" + m.path("dd.bin"), "bs=1M", "count=8",
           "oflag=direct", "conv=fsync", "status=none")
        self.assertEqual(os.stat(m.path("dd.bin")).st_size, 8 << 20)
        self.assertEqual(sha256sum(m.path("dd.bin")),
                         hashlib.sha256(kvfstest.read_file(m.path("dd.bin"))).hexdigest())
        sh("dd", "if=" + m.path("dd.bin"), "of=/dev/null", "bs=1M", "iflag=direct", "status=none")

        # touch creates and sets times; truncate(1) and fallocate(1)
        sh("touch", m.path("t"))
        self.assertEqual(os.stat(m.path("t")).st_size, 0)
        sh("touch", "-d", "2020-02-02 02:02:02 UTC", m.path("t"))
        self.assertEqual(int(os.stat(m.path("t")).st_mtime), 1580608922)
        sh("truncate", "-s", "5M", m.path("tr"))
        self.assertEqual(os.stat(m.path("tr")).st_size, 5 << 20)
        sh("fallocate", "-l", "10M", m.path("fa"))
        self.assertEqual(os.stat(m.path("fa")).st_size, 10 << 20)
        # allocated (README "Extents": reserved, or zeroed memory without an SSD), reads zeros
        self.assertEqual(os.stat(m.path("fa")).st_blocks * 512, 10 << 20)
        with open(m.path("fa"), "rb") as f:
            self.assertEqual(f.read(), bytes(10 << 20))
        sh("fallocate", "-p", "-o", "1M", "-l", "3M", m.path("tr"))
        self.assertEqual(os.stat(m.path("tr")).st_size, 5 << 20)
        sh("sync")

        # ln -s and mkfifo work (tests/integration/test_ftypes.py has the rest)
        sh("ln", "-s", "t", m.path("sym"))
        self.assertEqual(os.readlink(m.path("sym")), "t")
        sh("mkfifo", "-m", "600", m.path("fifo"))
        self.assertEqual(os.lstat(m.path("fifo")).st_mode, stat.S_IFIFO | 0o600)
        # what the tools refuse (a hard link, a device node), they say so
        for cmd in (["ln", m.path("t"), m.path("hard")],
                    ["mknod", m.path("null"), "c", "1", "3"]):
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self.assertNotEqual(r.returncode, 0, cmd)
            self.assertIn(b"Operation not permitted", r.stderr, cmd)

    def test_rm_rf_big_directory(self):
        m = self.m
        os.makedirs(m.path("big", "sub"))
        for i in range(5000):
            fd = os.open(m.path("big", "file-with-a-longish-name-%05d" % i),
                         os.O_WRONLY | os.O_CREAT, 0o644)
            if i % 10 == 0:
                os.write(fd, b"x" * 5000)
            os.close(fd)
        for i in range(300):
            kvfstest.write_file(m.path("big", "sub", "s%d" % i), b"s")
        self.assertEqual(len(sh("ls", "-A", m.path("big")).split()), 5001)
        sh("rm", "-rf", m.path("big"))
        self.assertFalse(os.path.exists(m.path("big")))
        st = m.stats()
        self.assertEqual(st["namespace"]["keys"], 0)

    def test_du_reports_allocated(self):
        m = self.m
        os.mkdir(m.path("d"))
        sizes = {"ten": 10, "page": 4096, "page1": 4097, "mib1": (1 << 20) + 1,
                 "empty": 0}
        for name, size in sizes.items():
            kvfstest.write_file(m.path("d", name), b"x" * size)
        for name, size in sizes.items():
            st = os.stat(m.path("d", name))
            self.assertEqual(st.st_blocks * 512, pages(size),
                             "%s (%d bytes): st_blocks %d" % (name, size, st.st_blocks))
            out = sh("du", "-k", m.path("d", name))
            self.assertEqual(int(out.split()[0]), pages(size) // 1024, name)
        # the 10-byte file pins exactly one page: 8 blocks
        self.assertEqual(os.stat(m.path("d", "ten")).st_blocks, 8)
        # du -sk of the directory == sum of st_blocks of everything in it
        total = 0
        for root, dirs, fs in os.walk(m.path("d")):
            for n in dirs + fs + ["."]:
                total += os.lstat(os.path.join(root, n)).st_blocks * 512
        out = sh("du", "-sk", m.path("d"))
        self.assertEqual(int(out.split()[0]), total // 1024)
        self.assertGreaterEqual(total, sum(pages(s) for s in sizes.values()))
        # apparent sizes
        out = sh("du", "-b", "--apparent-size", m.path("d", "mib1"))
        self.assertEqual(int(out.split()[0]), (1 << 20) + 1)

    def test_cat_control_files(self):
        m = self.m
        doc = json.loads(sh("cat", m.path(".kvfs/stats")))
        for k in ("ops", "pool", "namespace"):
            self.assertIn(k, doc)
        sv = os.statvfs(m.mnt)
        self.assertLessEqual(abs(doc["pool"]["size"] - kvfstest.parse_size(MEM)), 2 << 20)
        self.assertLessEqual(abs(kvfstest.expected_capacity(m) - sv.f_blocks * sv.f_frsize),
                             2 << 20)
        cfg = sh("cat", m.path(".kvfs/config"))
        lines = dict(l.split("=", 1) for l in cfg.splitlines() if "=" in l)
        lines = {k.strip(): v.strip() for k, v in lines.items()}
        self.assertEqual(int(lines["mem_size"]), kvfstest.parse_size(MEM))
        self.assertLessEqual({"config", "stats"}, set(sh("ls", m.path(".kvfs")).split()))
        # each cat re-renders: a second read sees the first one counted
        doc2 = json.loads(sh("cat", m.path(".kvfs/stats")))
        self.assertGreater(sum(o["calls"] for o in doc2["ops"].values()),
                           sum(o["calls"] for o in doc["ops"].values()))


class ShellDfTest(kvfstest.KvfsTestCase):
    """df on a DRAM-only mount: the pool is the file system's size, and
    deleting gives the space back at once."""
    MOUNT_OPTS = ("--mem-size=" + MEM,)
    DRAM_ONLY = True

    def test_df_shows_pool(self):
        m = self.m
        mem = kvfstest.parse_size(MEM)

        def df():
            out = sh("df", "-B1", "--output=size,used,avail", m.mnt).splitlines()
            return [int(x) for x in out[1].split()]

        size, used0, avail0 = df()
        cap = kvfstest.expected_capacity(m)  # the pool (+ the SSD quota, if any)
        self.assertLessEqual(abs(size - cap), cap * 0.05, "df size %d vs %d" % (size, cap))
        kvfstest.write_file(m.path("f"), os.urandom(32 << 20))
        size1, used1, avail1 = df()
        self.assertEqual(size1, size)
        self.assertGreaterEqual(used1 - used0, 32 << 20)
        self.assertLessEqual(used1 - used0, (32 << 20) + (4 << 20))
        self.assertLessEqual(avail1, avail0 - (32 << 20))
        os.unlink(m.path("f"))
        # freeing happens when the last handle is released (asynchronously)
        kvfstest.wait_until(lambda: df()[1] <= used0 + (1 << 20), what="df used to drop")
        # df's own view through statvfs
        sv = os.statvfs(m.mnt)
        self.assertLessEqual(abs(sv.f_blocks * sv.f_frsize - cap), cap * 0.05)
        self.assertEqual(m.stats()["pool"]["size"], mem)


if __name__ == "__main__":
    kvfstest.main()
