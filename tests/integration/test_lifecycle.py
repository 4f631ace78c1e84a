# SPDX-License-Identifier: MIT
"""The daemon's life: option errors, --help/--version, the DATA_DIR lock,
clean exits on unmount/SIGTERM/SIGINT, and where settings come from."""

import os
import signal
import subprocess
import sys
import tempfile
import shutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
from kvfstest import Mount, is_mounted, read_file, write_file  # noqa: E402


def run_kvfs(args, env=None, timeout=20):
    """Runs kvfs to completion (it must not mount); returns CompletedProcess.
    If it does mount or hangs, it is unmounted/killed and the test fails."""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.Popen([kvfstest.KVFS] + list(args), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=e)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for a in args:
            if os.path.isdir(a) and is_mounted(a):
                subprocess.run(["fusermount3", "-u", "-z", a])
        p.kill()
        p.communicate()
        raise AssertionError("kvfs %s did not exit within %ds" % (" ".join(args), timeout))
    return subprocess.CompletedProcess(p.args, p.returncode, out.decode(errors="replace"),
                                       err.decode(errors="replace"))


class Dirs:
    """A temporary data/ and mnt/ pair that is never left mounted."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="kvfs-it-lc-", dir="/tmp")
        self.data = os.path.join(self.root, "data")
        self.mnt = os.path.join(self.root, "mnt")
        os.mkdir(self.mnt)

    def close(self):
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", self.mnt])
        shutil.rmtree(self.root, ignore_errors=True)


class OptionsTest(kvfstest.KvfsTestCase):
    def setUp(self):  # no mount by default
        self.d = Dirs()
        self.addCleanup(self.d.close)

    def bad(self, args, names, env=None):
        r = run_kvfs(list(args) + [self.d.data, self.d.mnt], env=env)
        self.assertEqual(r.returncode, 2, "%s: status %d, stderr %r" % (args, r.returncode, r.stderr))
        lines = r.stderr.strip("\n").split("\n")
        self.assertEqual(len(lines), 1, "%s: expected one line on stderr, got %r" % (args, r.stderr))
        self.assertTrue(any(n in lines[0] for n in names),
                        "%s: message %r names none of %s" % (args, lines[0], names))
        self.assertFalse(is_mounted(self.d.mnt))
        return lines[0]

    def test_bad_options(self):
        self.bad(["-f", "--mem-size=banana"], ("mem-size", "mem_size"))
        self.bad(["-f", "--mem-size="], ("mem-size", "mem_size"))
        self.bad(["-f", "--mem-size=12Q"], ("mem-size", "mem_size"))
        self.bad(["-f", "--mem-size=-5M"], ("mem-size", "mem_size"))
        self.bad(["-f", "--no-such-option"], ("no-such-option",))
        self.bad(["-f", "--threads=lots"], ("threads",))
        self.bad(["-f", "--numa-node=x"], ("numa-node", "numa_node"))
        self.bad(["-f", "-o", "mem_size=banana"], ("mem-size", "mem_size"))

    def test_bad_fuse_option(self):
        """An -o option neither kvfs nor FUSE knows is a bad option too."""
        self.bad(["-f", "-o", "no_such_fuse_opt"], ("no_such_fuse_opt",))

    def test_bad_env(self):
        self.bad(["-f"], ("KVFS_MEM_SIZE", "mem-size", "mem_size"), env={"KVFS_MEM_SIZE": "lots"})

    def test_missing_operands(self):
        r = run_kvfs(["-f", self.d.data])
        self.assertNotEqual(r.returncode, 0)
        self.assertNotEqual(r.stderr.strip(), "")
        self.assertFalse(is_mounted(self.d.mnt))
        r = run_kvfs(["-f"])
        self.assertNotEqual(r.returncode, 0)

    def test_missing_mountpoint_dir(self):
        r = run_kvfs(["-f", self.d.data, os.path.join(self.d.root, "no-such-dir")])
        self.assertNotEqual(r.returncode, 0)
        self.assertNotEqual(r.stderr.strip(), "")

    def test_help_and_version(self):
        r = run_kvfs(["--help"])
        self.assertEqual(r.returncode, 0, r.stderr)
        text = r.stdout + r.stderr
        self.assertIn("--mem-size", text)
        self.assertIn("usage", text.lower())
        r = run_kvfs(["--version"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout + r.stderr, r"\b0\.1\.0\b")


class LockTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=64M",)

    def test_second_daemon_refused(self):
        first = self.m
        write_file(first.path("before"), b"1")
        other_mnt = os.path.join(first.root, "mnt2")
        os.mkdir(other_mnt)
        try:
            r = run_kvfs(["-f", "--mem-size=64M", first.data, other_mnt])
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("in use", r.stdout + r.stderr)
            self.assertFalse(is_mounted(other_mnt))
            # without -f too: must not daemonize and then fail silently
            r = run_kvfs(["--mem-size=64M", first.data, other_mnt])
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("in use", r.stdout + r.stderr)
            self.assertFalse(is_mounted(other_mnt))
        finally:
            if is_mounted(other_mnt):
                subprocess.run(["fusermount3", "-u", "-z", other_mnt])
        # the first keeps working
        self.assertEqual(first.proc.poll(), None)
        write_file(first.path("after"), b"2")
        self.assertEqual(read_file(first.path("before")), b"1")
        self.assertEqual(read_file(first.path("after")), b"2")
        first.stats()

    def d_root(self):
        if not hasattr(self, "_root"):
            self._root = tempfile.mkdtemp(prefix="kvfs-it-lock-", dir="/tmp")
            self.addCleanup(shutil.rmtree, self._root, True)
        return self._root

    def test_lock_released_after_exit(self):
        data = os.path.join(self.d_root(), "data")
        a = self.mount(data=data, name="a")
        a.stop()
        b = self.mount(data=data, name="b")
        b.stats()
        b.signal(signal.SIGTERM)
        self.assertEqual(b.wait_exit(), 0)
        c = self.mount(data=data, name="c")
        c.stats()

    def test_two_daemons_side_by_side(self):
        a = self.m
        b = self.mount(name="second")
        write_file(a.path("f"), b"in a")
        write_file(b.path("f"), b"in b")
        self.assertEqual(read_file(a.path("f")), b"in a")
        self.assertEqual(read_file(b.path("f")), b"in b")
        self.assertEqual(a.stats()["namespace"]["keys"], 1)
        self.assertEqual(b.stats()["namespace"]["keys"], 1)

    def test_data_dir_created(self):
        data = os.path.join(self.d_root(), "new-data")
        m = self.mount(data=data, name="mk")
        self.assertTrue(os.path.isdir(data))
        write_file(m.path("f"), b"f")


class ExitTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=64M",)

    def exits_cleanly(self, how):
        m = self.m
        write_file(m.path("f"), b"data")
        fd = os.open(m.path("f"), os.O_RDONLY)
        os.close(fd)
        if how == "umount":
            m.unmount()
        else:
            m.signal(how)
        self.assertEqual(m.wait_exit(), 0, m.log_text())
        kvfstest.wait_until(lambda: not is_mounted(m.mnt), what="the mount to go away")

    def test_exit_on_fusermount(self):
        self.exits_cleanly("umount")

    def test_exit_on_sigterm(self):
        self.exits_cleanly(signal.SIGTERM)

    def test_exit_on_sigint(self):
        self.exits_cleanly(signal.SIGINT)

    def test_exit_with_open_files_on_sigterm(self):
        m = self.m
        fd = os.open(m.path("held"), os.O_RDWR | os.O_CREAT, 0o644)
        os.write(fd, b"held")
        try:
            m.signal(signal.SIGTERM)
            self.assertEqual(m.wait_exit(), 0, m.log_text())
        finally:
            try:
                os.close(fd)
            except OSError:
                pass
        kvfstest.wait_until(lambda: not is_mounted(m.mnt), what="the mount to go away")

    def test_debug_flag(self):
        m = self.mount(opts=["-d", "--mem-size=64M"], name="debug")
        write_file(m.path("f"), b"x")
        self.assertEqual(read_file(m.path("f")), b"x")
        self.assertGreater(len(m.log_text()), 200)


def alive(pid):
    """Whether pid runs (a zombie nobody reaped yet has exited)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class BackgroundTest(kvfstest.KvfsTestCase):
    """Without -f (as mount(8) and fstab run it) kvfs forks before it starts a
    thread: the background daemon offloads, fsyncs and exits on unmount."""

    def setUp(self):  # no mount by default
        self.d = Dirs()
        self.addCleanup(self.d.close)

    def test_background_daemon_serves_offloads_and_exits(self):
        d = self.d
        r = run_kvfs(["--mem-size=64M", d.data, d.mnt], timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        # the parent returns once the child serves the mount
        self.assertTrue(is_mounted(d.mnt))
        with open(os.path.join(d.data, "LOCK")) as f:
            pid = int(f.read())
        self.addCleanup(lambda: alive(pid) and os.kill(pid, signal.SIGKILL))
        self.assertTrue(alive(pid))
        data = kvfstest.pattern("bg", 8 << 20)
        write_file(os.path.join(d.mnt, "bg"), data)
        fd = os.open(os.path.join(d.mnt, "bg"), os.O_RDONLY)
        try:
            os.fsync(fd)  # needs the offloader thread: it hung without one
        finally:
            os.close(fd)
        buckets = os.path.join(d.data, "buckets")
        on_ssd = sum(os.path.getsize(os.path.join(buckets, n)) for n in os.listdir(buckets))
        self.assertGreaterEqual(on_ssd, len(data))
        self.assertEqual(subprocess.run(["fusermount3", "-u", d.mnt]).returncode, 0)
        kvfstest.wait_until(lambda: not alive(pid), timeout=20,
                            what="the background daemon to exit after the unmount")
        m = self.mount(data=d.data, name="bg-again")
        self.assertEqual(read_file(m.path("bg")), data)


class SettingsTest(kvfstest.KvfsTestCase):
    def setUp(self):
        pass

    def mem(self, m):
        return int(m.config()["mem_size"])

    def df_size(self, m):
        """df's total minus the SSD quota, if any: the DRAM pool's share."""
        sv = os.statvfs(m.mnt)
        return sv.f_blocks * sv.f_frsize - int(m.config().get("ssd_size", "0"))

    def test_long_option(self):
        m = self.mount(opts=["--mem-size=40M"])
        self.assertEqual(self.mem(m), 40 << 20)
        self.assertLessEqual(abs(self.df_size(m) - (40 << 20)), 2 << 20)
        self.assertLessEqual(abs(m.stats()["pool"]["size"] - (40 << 20)), 2 << 20)

    def test_dash_o(self):
        m = self.mount(opts=["-o", "mem_size=32M"])
        self.assertEqual(self.mem(m), 32 << 20)
        self.assertLessEqual(abs(self.df_size(m) - (32 << 20)), 2 << 20)

    def test_dash_o_with_fuse_options(self):
        m = self.mount(opts=["-o", "allow_other,mem_size=36M"])
        self.assertEqual(self.mem(m), 36 << 20)

    def test_env(self):
        m = self.mount(opts=[], env={"KVFS_MEM_SIZE": "48M"})
        self.assertEqual(self.mem(m), 48 << 20)
        self.assertLessEqual(abs(self.df_size(m) - (48 << 20)), 2 << 20)

    def test_command_line_beats_env(self):
        m = self.mount(opts=["--mem-size=40M"], env={"KVFS_MEM_SIZE": "48M"})
        self.assertEqual(self.mem(m), 40 << 20)

    def test_suffixes(self):
        for arg, want in (("65536K", 64 << 20), ("1G", 1 << 30), ("1073741824", 1 << 30)):
            m = self.mount(opts=["--mem-size=" + arg], name="sfx")
            self.assertEqual(self.mem(m), want, arg)
            m.stop()

    def test_ssd_size_option(self):
        """--ssd-size, where --help offers it: 0 makes a DRAM-only mount
        whose df is the pool alone."""
        if not kvfstest.has_ssd_tier():
            self.skipTest("no --ssd-size in --help")
        m = self.mount(opts=["--mem-size=32M", "--ssd-size=0"], name="ssd0")
        self.assertEqual(int(m.config()["ssd_size"]), 0)
        sv = os.statvfs(m.mnt)
        self.assertLessEqual(abs(sv.f_blocks * sv.f_frsize - (32 << 20)), 2 << 20)
        m.stop()
        m = self.mount(opts=["--mem-size=32M", "--ssd-size=1G"], name="ssd1g")
        self.assertEqual(int(m.config()["ssd_size"]), 1 << 30)
        m.stop()
        m = self.mount(opts=["-o", "mem_size=32M,ssd_size=256M"], name="ssd-o")
        self.assertEqual(int(m.config()["ssd_size"]), 256 << 20)

    def test_threads_option(self):
        m = self.mount(opts=["--threads=2", "--mem-size=32M"])
        for i in range(20):
            write_file(m.path("t%d" % i), b"t" * 1000)
        self.assertEqual(len([n for n in os.listdir(m.mnt) if n.startswith("t")]), 20)

    def test_numa_node_option(self):
        m = self.mount(opts=["--numa-node=0", "--mem-size=32M"])
        write_file(m.path("n"), b"n")
        self.assertEqual(read_file(m.path("n")), b"n")


if __name__ == "__main__":
    kvfstest.main()
