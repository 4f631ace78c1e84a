# SPDX-License-Identifier: MIT
"""
kvfstest — the harness of the kvfs integration tests (standard library only).

Every test_*.py here is a plain unittest module that ends with

    if __name__ == "__main__":
        kvfstest.main()

and is run as `python3 test_x.py --kvfs PATH [-v] [-k PATTERN] [TestClass.test_name ...]`.
main() exits 0 when every test passed, 1 when one failed, and 77 (ctest's
SKIP_RETURN_CODE) when the machine cannot mount FUSE file systems at all: not
root, no /dev/fuse, or no fusermount3.

A `Mount` owns one kvfs daemon: a fresh temporary directory under /tmp holding
data/ (the DATA_DIR), mnt/ (the mount point) and kvfs.log (the daemon's stdout
and stderr), a `kvfs -f [options] data mnt` subprocess, and the guarantee that
no mount outlives it: stop() unmounts with `fusermount3 -u` and checks the exit
status; every failure path (an exception, a signal, the global watchdog, the
interpreter exiting) falls back to `fusermount3 -u -z` and SIGKILL. The daemon
is also started with PR_SET_PDEATHSIG=SIGTERM, so it unmounts itself when the
test process dies without running any of its cleanup.

`KvfsTestCase` mounts a fresh kvfs for each test (options from the class
attribute MOUNT_OPTS / MOUNT_ENV) as self.m, and unmounts it in a cleanup
that asserts a clean exit (status 0). When a test fails, the log of every
daemon that test started is printed with the failure.
"""

import argparse
import ctypes
import errno
import faulthandler
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

SKIP = 77
READY_TIMEOUT = 20.0  # seconds for a daemon to mount
EXIT_TIMEOUT = 30.0  # seconds for a daemon to exit after unmount/signal
GLOBAL_TIMEOUT = float(os.environ.get("KVFS_TEST_TIMEOUT", "540"))  # < ctest's 600

KVFS = None  # path of the kvfs binary, set by main() from --kvfs
_MOUNTS = []  # every Mount not yet cleaned up
_MOUNTS_LOCK = threading.Lock()
_ROOTS = set()  # every temporary directory this process created (leak check)

OP_NAMES = (
    "lookup getattr setattr mkdir rmdir create open read write flush release fsync unlink "
    "rename opendir readdir statfs fallocate getxattr listxattr setxattr ioctl symlink readlink "
    "mknod lseek other"
).split()

_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


class Skip(Exception):
    """Raised (or passed to skip()) when the whole test file cannot run here."""


# ---------------------------------------------------------------------------
# environment checks


def environment_problem():
    """Returns why FUSE mounts cannot be tested here, or None."""
    if os.geteuid() != 0:
        return "not root"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed"
    return None


def skip(reason):
    """Ends the test program as skipped (exit 77)."""
    print("SKIP: %s" % reason, flush=True)
    sys.exit(SKIP)


# ---------------------------------------------------------------------------
# small utilities


def wait_until(cond, timeout=10.0, interval=0.02, what="condition"):
    """Polls cond() until it returns a true value, which is returned; raises
    AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def is_mounted(path):
    """True when `path` is a mount point listed in /proc/mounts (does not
    touch the file system itself, so it never hangs on a dead daemon)."""
    path = os.path.realpath(path)
    try:
        with open("/proc/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 1 and _unescape_mount(fields[1]) == path:
                    return True
    except OSError:
        pass
    return False


def _unescape_mount(s):
    return (s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
            .replace("\\134", "\\"))


def parse_size(s):
    """'64M' -> 67108864 (K/M/G/T, powers of 1024)."""
    s = str(s).strip()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if s and s[-1].upper() in mult:
        return int(s[:-1]) * mult[s[-1].upper()]
    return int(s)


def pattern(name, size, seed=0):
    """Deterministic pseudo-random bytes derived from a name and a seed."""
    import random
    r = random.Random("%s/%d" % (name, seed))
    return r.randbytes(size)


def write_file(path, data, chunk=1 << 20, mode=0o644, flags=0):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flags, mode)
    try:
        view = memoryview(data)
        off = 0
        while off < len(view):
            n = os.write(fd, view[off:off + chunk])
            if n <= 0:
                raise AssertionError("write returned %d" % n)
            off += n
    finally:
        os.close(fd)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def client():
    """The kvfs Python package (client/python: on PYTHONPATH, as ctest sets
    it, or installed) on the libkvfs built with the kvfs under test, unless
    KVFS_LIB names another."""
    lib = os.path.join(os.path.dirname(KVFS), "client", "libkvfs.so")
    if "KVFS_LIB" not in os.environ and os.path.exists(lib):
        os.environ["KVFS_LIB"] = lib
    import kvfs
    kvfs.load()
    return kvfs


def stats_by_read(m):
    """MNT/.kvfs/stats read with os.read: Python's open() would ask isatty(),
    an ioctl (TCGETS) that the daemon counts like any other."""
    fd = os.open(m.path(".kvfs", "stats"), os.O_RDONLY)
    try:
        chunks = []
        while True:
            b = os.read(fd, 1 << 16)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(fd)
    return json.loads(b"".join(chunks))


def errno_of(fn, *args, **kw):
    """Calls fn; returns the errno of the OSError it raised, or None."""
    try:
        fn(*args, **kw)
    except OSError as e:
        return e.errno
    return None


# The unprivileged user tests act as.
NOBODY = 65534


def as_user(uid, gid, fn, umask=0o022):
    """Runs fn() in a forked child with the given ids; returns ["ok", value]
    or ["err", errno]."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            os.umask(umask)
            try:
                res = ["ok", fn()]
            except OSError as e:
                res = ["err", e.errno]
            os.write(w, json.dumps(res).encode())
            os._exit(0)
        except BaseException:
            os._exit(3)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not out:
        raise AssertionError("child failed (status %d)" % status)
    return json.loads(out)



# renameat2(2) flags
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
AT_FDCWD = -100


def renameat2(old, new, flags):
    """renameat2(AT_FDCWD, old, AT_FDCWD, new, flags); raises OSError."""
    fn = getattr(_libc, "renameat2", None)
    o, n = os.fsencode(old), os.fsencode(new)
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                       ctypes.c_uint]
        rc = fn(AT_FDCWD, o, AT_FDCWD, n, flags)
    else:  # x86_64 syscall number
        rc = _libc.syscall(316, AT_FDCWD, o, AT_FDCWD, n, ctypes.c_uint(flags))
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), old, None, new)


FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2


def fallocate(fd, mode, offset, length):
    """fallocate(2) with a mode; raises OSError."""
    fn = _libc.fallocate
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    if fn(fd, mode, offset, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def _set_pdeathsig():
    # runs in the child between fork and exec
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


# ---------------------------------------------------------------------------
# the daemon


class Mount:
    """One kvfs daemon on a fresh temporary directory.

    opts: extra command-line arguments (placed after -f, before DATA_DIR MNT).
    env:  extra environment variables for the daemon.
    Use as a context manager (start on enter, stop + cleanup on exit) or call
    start()/stop()/cleanup() yourself.
    """

    def __init__(self, opts=(), env=None, name="kvfs", root=None, data=None):
        self.opts = list(opts)
        self.env = dict(env or {})
        self.root = root or tempfile.mkdtemp(prefix="kvfs-it-%s-" % name, dir="/tmp")
        os.chmod(self.root, 0o755)  # other users (setuid tests) must traverse it
        self.data = data or os.path.join(self.root, "data")
        self.mnt = os.path.join(self.root, "mnt")
        os.makedirs(self.mnt, exist_ok=True)
        self.log_path = os.path.join(self.root, "kvfs.log")
        self.proc = None
        self.returncode = None
        self._log_cache = None
        self._own_root = root is None
        self.done = False
        with _MOUNTS_LOCK:
            _ROOTS.add(os.path.realpath(self.mnt))
            _MOUNTS.append(self)

    # -- lifecycle --

    def command(self):
        return [KVFS, "-f"] + self.opts + [self.data, self.mnt]

    def start(self, timeout=READY_TIMEOUT):
        if KVFS is None:
            raise RuntimeError("kvfstest.KVFS is not set (run through kvfstest.main)")
        env = dict(os.environ)
        env.update(self.env)
        log = open(self.log_path, "ab")
        try:
            log.write(("$ %s\n" % " ".join(self.command())).encode())
            log.flush()
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=env,
                                         preexec_fn=_set_pdeathsig)
        finally:
            log.close()
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=READY_TIMEOUT):
        deadline = time.monotonic() + timeout
        stats = os.path.join(self.mnt, ".kvfs", "stats")
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self.returncode = rc
                raise AssertionError("kvfs exited with status %d before mounting\n%s"
                                     % (rc, self.log_text()))
            if is_mounted(self.mnt) and os.path.exists(stats):
                return
            if time.monotonic() > deadline:
                raise AssertionError("kvfs did not mount %s within %.0fs\n%s"
                                     % (self.mnt, timeout, self.log_text()))
            time.sleep(0.02)

    def mounted(self):
        return is_mounted(self.mnt)

    def unmount(self, retries_s=10.0):
        """fusermount3 -u, retried while the mount is busy (e.g. a release
        still in flight); raises AssertionError if it never succeeds."""
        deadline = time.monotonic() + retries_s
        while True:
            r = subprocess.run(["fusermount3", "-u", self.mnt], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
            if r.returncode == 0:
                return
            if not is_mounted(self.mnt):
                return
            if time.monotonic() > deadline:
                raise AssertionError("fusermount3 -u %s failed: %s"
                                     % (self.mnt, r.stdout.decode(errors="replace")))
            time.sleep(0.1)

    def wait_exit(self, timeout=EXIT_TIMEOUT):
        """Waits for the daemon to exit and returns its status."""
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("kvfs did not exit within %.0fs\n%s" % (timeout, self.log_text()))
        return self.returncode

    def stop(self, expect_status=0):
        """Clean shutdown: unmount, wait for the daemon, check its status
        (pass expect_status=None to accept any), then cleanup()."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.unmount()
                rc = self.wait_exit()
            else:
                rc = self.proc.returncode if self.proc is not None else None
                self.returncode = rc
            if expect_status is not None and rc != expect_status:
                raise AssertionError("kvfs exited with status %s, expected %s\n%s"
                                     % (rc, expect_status, self.log_text()))
            if is_mounted(self.mnt):
                raise AssertionError("%s still mounted after the daemon exited" % self.mnt)
        finally:
            self.cleanup()
        return rc

    def signal(self, sig):
        self.proc.send_signal(sig)

    def abort(self):
        """Failure path: lazy unmount and kill, never raises."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
        except Exception:
            pass
        for _ in range(3):
            if not is_mounted(self.mnt):
                break
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            if is_mounted(self.mnt):
                subprocess.run(["umount", "-l", self.mnt], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)

    def cleanup(self):
        """Makes sure nothing is left: no mount, no process, no directory."""
        self.abort()
        self._log_cache = self.log_text()
        self.done = True
        if self._own_root and not is_mounted(self.mnt):
            shutil.rmtree(self.root, ignore_errors=True)
        with _MOUNTS_LOCK:
            if self in _MOUNTS:
                _MOUNTS.remove(self)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, et, ev, tb):
        if et is None:
            self.stop()
        else:
            self.cleanup()
        return False

    def log_text(self):
        if self._log_cache is not None:
            return self._log_cache
        try:
            with open(self.log_path, "rb") as f:
                t = f.read()
        except OSError:
            return "(no log)"
        if len(t) > 20000:
            t = b"...(truncated)...\n" + t[-20000:]
        return t.decode(errors="replace")

    # -- the mounted file system --

    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    def stats_text(self):
        with open(self.path(".kvfs", "stats"), "rb") as f:
            return f.read().decode()

    def stats(self):
        """The parsed MNT/.kvfs/stats document."""
        t = self.stats_text()
        try:
            return json.loads(t)
        except ValueError as e:
            raise AssertionError("stats is not JSON (%s): %r" % (e, t[:2000]))

    def config_text(self):
        with open(self.path(".kvfs", "config"), "rb") as f:
            return f.read().decode()

    def config(self):
        """MNT/.kvfs/config as a dict of key -> value (strings)."""
        out = {}
        for line in self.config_text().splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise AssertionError("config line without '=': %r" % line)
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
        return out


_HELP = None


def kvfs_help():
    """The output of `kvfs --help` (cached)."""
    global _HELP
    if _HELP is None:
        r = subprocess.run([KVFS, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=30)
        _HELP = r.stdout.decode(errors="replace")
    return _HELP


def has_ssd_tier():
    """True when this kvfs has an SSD tier (it advertises --ssd-size)."""
    return "--ssd-size" in kvfs_help()


def dram_only_opts():
    """Options that make the mount a DRAM pool only (no SSD tier), so that
    the pool filling up means ENOSPC and df shows the pool alone."""
    return ["--ssd-size=0"] if has_ssd_tier() else []


def expected_capacity(m):
    """What df should show as the mount's total size: the DRAM pool plus the
    SSD quota when there is one (both from .kvfs/config)."""
    cfg = m.config()
    return int(cfg["mem_size"]) + int(cfg.get("ssd_size", "0"))


def op(stats, name, field="calls"):
    """stats['ops'][name][field]."""
    return stats["ops"][name][field]


def errcount(stats, name):
    """How many errors of kind `name` ('ENOSPC') stats counted; 0 if absent."""
    return stats.get("errors", {}).get(name, 0)


def abort_all():
    with _MOUNTS_LOCK:
        ms = list(_MOUNTS)
    for m in ms:
        m.abort()


def cleanup_all():
    """abort_all() plus removal of the temporary directories."""
    with _MOUNTS_LOCK:
        ms = list(_MOUNTS)
    for m in ms:
        m.cleanup()


def leaked_mounts():
    """Mount points this process created that are still in /proc/mounts."""
    with _MOUNTS_LOCK:
        roots = list(_ROOTS)
    return [p for p in roots if is_mounted(p)]


# ---------------------------------------------------------------------------
# unittest glue


class KvfsTestCase(unittest.TestCase):
    """Each test gets a fresh daemon in self.m (MOUNT_OPTS, MOUNT_ENV)."""

    MOUNT_OPTS = ()
    MOUNT_ENV = None
    DRAM_ONLY = False  # add dram_only_opts() to every mount of this class

    def mount(self, opts=None, env=None, name=None, start=True, **kw):
        """Starts another daemon for this test; it is stopped (clean exit
        asserted) when the test ends, and its log shown if the test fails."""
        opts = list(self.MOUNT_OPTS if opts is None else opts)
        if self.DRAM_ONLY:
            opts += dram_only_opts()
        m = Mount(opts,
                  env=self.MOUNT_ENV if env is None else env,
                  name=name or self._testMethodName, **kw)
        self.__dict__.setdefault("_kvfs_mounts", []).append(m)
        self.addCleanup(self._stop_mount, m)
        if start:
            try:
                m.start()
            except BaseException:
                m.cleanup()
                raise
        return m

    def _stop_mount(self, m):
        if m.done:
            return
        if m.proc is None:
            m.cleanup()
            return
        m.stop(expect_status=0)

    def setUp(self):
        self.m = self.mount()

    # helpers used by many tests
    def assertErrno(self, expected, fn, *args, **kw):
        """Asserts fn(*args) raises OSError with errno in `expected` (an int or
        a tuple of ints)."""
        exp = expected if isinstance(expected, tuple) else (expected,)
        try:
            fn(*args, **kw)
        except OSError as e:
            if e.errno not in exp:
                self.fail("%s%r raised %s, expected %s" % (
                    getattr(fn, "__name__", fn), args, errno.errorcode.get(e.errno, e.errno),
                    "/".join(errno.errorcode[x] for x in exp)))
            return e
        self.fail("%s%r succeeded, expected %s" % (
            getattr(fn, "__name__", fn), args, "/".join(errno.errorcode[x] for x in exp)))


class _Result(unittest.TextTestResult):
    def _print_logs(self, test):
        for m in getattr(test, "__dict__", {}).get("_kvfs_mounts", []):
            self.stream.writeln("----- kvfs log (%s) -----" % m.log_path)
            self.stream.writeln(m.log_text())
            self.stream.writeln("----- end of kvfs log -----")
        self.stream.flush()

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._print_logs(test)

    def addError(self, test, err):
        super().addError(test, err)
        self._print_logs(test)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._print_logs(test)


def _watchdog(deadline_s):
    """After deadline_s, dump stacks, kill every daemon (the kernel then fails
    requests a hung test is blocked in) and end the process."""
    time.sleep(deadline_s)
    sys.stderr.write("kvfstest: global timeout of %.0fs reached, aborting\n" % deadline_s)
    faulthandler.dump_traceback(all_threads=True)
    for m in list(_MOUNTS):
        sys.stderr.write("----- kvfs log (%s) -----\n%s\n" % (m.log_path, m.log_text()))
    abort_all()
    time.sleep(10)
    abort_all()
    os._exit(1)


def main(argv=None, skip_reason=None, skip_if=None):
    """Parses --kvfs, checks the machine, runs the module's tests; exits.
    skip_reason: skip the whole file (77) with this message; skip_if: a
    function called once the binary is known, returning such a message or
    None."""
    global KVFS
    ap = argparse.ArgumentParser(add_help=True)
    ap.add_argument("--kvfs", default=os.environ.get("KVFS_BIN", "build/kvfs"),
                    help="path of the kvfs binary")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("-k", dest="patterns", action="append", default=[],
                    help="only tests matching this substring")
    ap.add_argument("tests", nargs="*", help="TestClass or TestClass.test_name")
    args = ap.parse_args(argv)

    why = environment_problem()
    if why:
        skip(why)
    if skip_reason:
        skip(skip_reason)
    KVFS = os.path.abspath(args.kvfs)
    if not os.access(KVFS, os.X_OK):
        print("FAIL: kvfs binary %s is missing or not executable" % KVFS)
        sys.exit(1)
    if skip_if is not None:
        why = skip_if()
        if why:
            skip(why)

    def on_signal(signum, frame):
        cleanup_all()
        sys.stderr.write("kvfstest: killed by signal %d\n" % signum)
        os._exit(1)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    import atexit
    atexit.register(cleanup_all)
    threading.Thread(target=_watchdog, args=(GLOBAL_TIMEOUT,), daemon=True).start()

    main_mod = sys.modules["__main__"]
    loader = unittest.TestLoader()
    if args.patterns:
        loader.testNamePatterns = ["*%s*" % p for p in args.patterns]
    if args.tests:
        suite = loader.loadTestsFromNames(args.tests, main_mod)
    else:
        suite = loader.loadTestsFromModule(main_mod)
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2 if args.verbose else 1,
                                     resultclass=_Result)
    t0 = time.monotonic()
    try:
        result = runner.run(suite)
    finally:
        cleanup_all()
    leaks = leaked_mounts()
    if leaks:
        print("FAIL: mounts left behind: %s" % leaks)
        for p in leaks:
            subprocess.run(["fusermount3", "-u", "-z", p])
        sys.exit(1)
    print("%s: %d run, %d failed, %d errors, %d skipped in %.1fs" % (
        os.path.basename(sys.argv[0]), result.testsRun, len(result.failures),
        len(result.errors), len(result.skipped), time.monotonic() - t0), flush=True)
    if not result.wasSuccessful():
        sys.exit(1)
    if result.testsRun > 0 and len(result.skipped) == result.testsRun:
        sys.exit(SKIP)
    sys.exit(0)


def parse_fio_json(text):
    """fio may print warnings before the JSON document; skip them."""
    start = text.find("{")
    while start >= 0:
        try:
            return json.JSONDecoder().raw_decode(text[start:])[0]
        except ValueError:
            start = text.find("\n{", start + 1)
            if start >= 0:
                start += 1
    raise AssertionError("no JSON in fio output:\n%s" % text[:4000])
