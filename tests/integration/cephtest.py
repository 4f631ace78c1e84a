# SPDX-License-Identifier: MIT
"""
cephtest — a one-host Ceph cluster for the tests of the RADOS tier (standard
library only), on top of scripts/ceph-cluster.sh.

A `Cluster` owns one test cluster: a fresh temporary directory under /tmp
holding ceph.conf, the monitor's and the OSD's data, pid files and logs; one
monitor and one memstore OSD serving one pool of size 1, no authentication,
loopback only. start() returns once a put/get round trip through the pool
works; conf, pool and env() say how to reach it. Nothing outlives it:
cleanup() stops the OSD, then the monitor, and removes the directory, and it
runs on every path — the `with` block's exit, a test's cleanup, the
interpreter exiting, SIGTERM/SIGHUP through main(). If the test process dies
without running any of that (SIGKILL, os._exit), a watcher the script starts
(KVFS_CEPH_OWNER_PID) stops the daemons and removes the directory within a
second or so.

    with cephtest.Cluster() as c:
        subprocess.run(["rados", "-c", c.conf, "-p", c.pool, "ls"])
        c.osd_stop()   # clean stop: memstore keeps the objects
        c.osd_start()  # returns once I/O works again

`CephTestCase.cluster()` starts one for a test and cleans it up when the test
ends; when the test fails, the tails of the daemons' logs are printed with
the failure (also under kvfstest.main: a Cluster looks like a Mount to its
result printer).

ceph_problem() says why Ceph cannot run here (None when it can). It installs
the Debian packages that are missing first (scripts/ceph-cluster.sh install:
ceph-mon, ceph-osd, librados-dev; ~50 MB to download, ~25 s), so tests skip
(exit 77) only where they cannot be installed: not root, no apt-get, no
archive. Test files that need no kvfs mount end with

    if __name__ == "__main__":
        cephtest.main()

(the same arguments as kvfstest.main; --kvfs is accepted and optional); those
that mount kvfs against a cluster use kvfstest.main(skip_if=cephtest.ceph_problem).
"""

import argparse
import atexit
import faulthandler
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kvfstest  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "scripts", "ceph-cluster.sh")
INSTALL_TIMEOUT = 600.0  # seconds for apt-get to install the packages
START_TIMEOUT = 90.0  # the script gives up after 60 s of no I/O
STOP_TIMEOUT = 60.0

_CLUSTERS = []  # every Cluster not yet cleaned up
_LOCK = threading.Lock()
_PROBLEM = None


def ceph_problem():
    """Why a Ceph test cluster cannot run here, or None. Installs the missing
    packages on the first call (cached)."""
    global _PROBLEM
    if _PROBLEM is None:
        try:
            r = subprocess.run([SCRIPT, "install"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT)
            out = r.stdout.decode(errors="replace").strip()
            if r.returncode == 0:
                _PROBLEM = ""
            elif r.returncode == kvfstest.SKIP:
                _PROBLEM = "Ceph cannot be installed here: " + out
            else:
                _PROBLEM = "%s install failed (status %d): %s" % (SCRIPT, r.returncode, out)
        except (OSError, subprocess.TimeoutExpired) as e:
            _PROBLEM = "%s install failed: %s" % (SCRIPT, e)
    return _PROBLEM or None


class Cluster:
    """One test cluster in a fresh temporary directory.

    mem: memstore size ('1G', '256M'); op_timeout: seconds for the client
    timeouts written into ceph.conf; pool: the pool's name; port: the
    monitor's port (default: the script picks a free one).
    """

    def __init__(self, name="ceph", mem=None, op_timeout=None, pool=None, port=None):
        self.root = tempfile.mkdtemp(prefix="kvfs-it-%s-" % name, dir="/tmp")
        os.chmod(self.root, 0o755)
        self.dir = self.root
        self.log_path = os.path.join(self.dir, "log")
        self.conf = None
        self.pool = None
        self.start_seconds = None
        self.running = False
        self.done = False
        self._log_cache = None
        self._env = {"KVFS_CEPH_OWNER_PID": str(os.getpid()), "KVFS_CEPH_OWNER_RMDIR": "1"}
        for k, v in (("KVFS_CEPH_MEM", mem), ("KVFS_CEPH_OP_TIMEOUT", op_timeout),
                     ("KVFS_CEPH_POOL", pool), ("KVFS_CEPH_PORT", port)):
            if v is not None:
                self._env[k] = str(v)
        with _LOCK:
            _CLUSTERS.append(self)

    def _script(self, *args, timeout=STOP_TIMEOUT, check=True):
        env = dict(os.environ)
        env.update(self._env)
        try:
            r = subprocess.run([SCRIPT] + list(args), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=env, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace")
            raise AssertionError("%s %s did not finish within %.0fs\n%s\n%s"
                                 % (SCRIPT, " ".join(args), timeout, out, self.log_text()))
        out = r.stdout.decode(errors="replace")
        if check and r.returncode != 0:
            raise AssertionError("%s %s failed with status %d\n%s"
                                 % (SCRIPT, " ".join(args), r.returncode, out))
        return r.returncode, out

    # -- lifecycle --

    def start(self):
        """Starts the cluster; returns once the pool serves I/O."""
        t0 = time.monotonic()
        _, out = self._script("start", self.dir, timeout=START_TIMEOUT)
        self.start_seconds = time.monotonic() - t0
        self.running = True
        vals = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        self.conf = vals.get("CEPH_CONF")
        self.pool = vals.get("KVFS_CEPH_POOL")
        if not self.conf or not self.pool:
            raise AssertionError("%s start printed no CEPH_CONF/KVFS_CEPH_POOL:\n%s"
                                 % (SCRIPT, out))
        return self

    def osd_stop(self):
        """Stops the OSD cleanly (memstore saves its objects for osd_start)."""
        self._script("osd-stop", self.dir)

    def osd_start(self):
        """Starts the OSD again; returns once I/O works."""
        self._script("osd-start", self.dir, timeout=START_TIMEOUT)

    def pids(self):
        """{'mon': pid, 'osd': pid} of the daemons that run."""
        out = {}
        for d in ("mon", "osd"):
            try:
                with open(os.path.join(self.dir, "run", d + ".pid")) as f:
                    pid = int(f.read())
                os.kill(pid, 0)
                out[d] = pid
            except (OSError, ValueError):
                pass
        return out

    def shutdown(self):
        """Stops the OSD, then the monitor; keeps the directory (cleanup()
        removes it)."""
        if os.path.isdir(self.dir):
            self._script("stop", self.dir)
        self.running = False

    def cleanup(self):
        """Makes sure nothing is left: no daemon, no directory. Never raises."""
        if self.done:
            return
        try:
            self._log_cache = self.log_text()
            self.shutdown()
        except Exception as e:
            sys.stderr.write("cephtest: stopping %s: %s\n" % (self.dir, e))
            for pid in self.pids().values():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        self.done = True
        shutil.rmtree(self.root, ignore_errors=True)
        with _LOCK:
            if self in _CLUSTERS:
                _CLUSTERS.remove(self)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, et, ev, tb):
        self.cleanup()
        return False

    # -- for tests --

    def env(self):
        """CEPH_CONF and KVFS_CEPH_POOL, for a child's environment."""
        return {"CEPH_CONF": self.conf, "KVFS_CEPH_POOL": self.pool}

    def rados(self, *args, timeout=60):
        """Runs the rados CLI against the pool; returns (status, output)."""
        r = subprocess.run(["rados", "-c", self.conf, "-p", self.pool] + list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        return r.returncode, r.stdout.decode(errors="replace")

    def log_text(self):
        """The tails of the daemons' logs (the script's `logs`)."""
        if self._log_cache is not None:
            return self._log_cache
        if not os.path.isdir(self.dir):
            return "(no logs)"
        try:
            r = subprocess.run([SCRIPT, "logs", self.dir], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=30)
            return r.stdout.decode(errors="replace")
        except (OSError, subprocess.TimeoutExpired) as e:
            return "(logs unavailable: %s)" % e


def cleanup_all():
    """Stops every cluster this process started and removes its directory."""
    with _LOCK:
        cs = list(_CLUSTERS)
    for c in cs:
        c.cleanup()


atexit.register(cleanup_all)


class CephTestCase(unittest.TestCase):
    """A test case that starts clusters with self.cluster()."""

    def cluster(self, **kw):
        """Starts a cluster for this test; it is cleaned up when the test
        ends, and the tails of its logs are printed if the test fails."""
        c = Cluster(name=kw.pop("name", self._testMethodName), **kw)
        # kvfstest's result printer shows the logs of everything listed here
        self.__dict__.setdefault("_kvfs_mounts", []).append(c)
        self.addCleanup(c.cleanup)
        try:
            c.start()
        except BaseException:
            c.cleanup()
            raise
        return c


def _watchdog(deadline_s):
    time.sleep(deadline_s)
    sys.stderr.write("cephtest: global timeout of %.0fs reached, aborting\n" % deadline_s)
    faulthandler.dump_traceback(all_threads=True)
    with _LOCK:
        cs = list(_CLUSTERS)
    for c in cs:
        sys.stderr.write("----- cluster logs (%s) -----\n%s\n" % (c.dir, c.log_text()))
    cleanup_all()
    os._exit(1)


def main(argv=None):
    """Runs the module's tests against clusters, no kvfs mount needed: the
    arguments of kvfstest.main (--kvfs optional), exit 0 / 1 / 77 (Ceph
    cannot be installed here)."""
    ap = argparse.ArgumentParser(add_help=True)
    ap.add_argument("--kvfs", default=None, help="path of the kvfs binary (not needed)")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("-k", dest="patterns", action="append", default=[],
                    help="only tests matching this substring")
    ap.add_argument("tests", nargs="*", help="TestClass or TestClass.test_name")
    args = ap.parse_args(argv)
    if args.kvfs:
        kvfstest.KVFS = os.path.abspath(args.kvfs)

    why = ceph_problem()
    if why:
        kvfstest.skip(why)

    def on_signal(signum, frame):
        cleanup_all()
        sys.stderr.write("cephtest: killed by signal %d\n" % signum)
        os._exit(1)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    threading.Thread(target=_watchdog, args=(kvfstest.GLOBAL_TIMEOUT,), daemon=True).start()

    main_mod = sys.modules["__main__"]
    loader = unittest.TestLoader()
    if args.patterns:
        loader.testNamePatterns = ["*%s*" % p for p in args.patterns]
    if args.tests:
        suite = loader.loadTestsFromNames(args.tests, main_mod)
    else:
        suite = loader.loadTestsFromModule(main_mod)
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2 if args.verbose else 1,
                                     resultclass=kvfstest._Result)
    t0 = time.monotonic()
    try:
        result = runner.run(suite)
    finally:
        cleanup_all()
    print("%s: %d run, %d failed, %d errors, %d skipped in %.1fs" % (
        os.path.basename(sys.argv[0]), result.testsRun, len(result.failures),
        len(result.errors), len(result.skipped), time.monotonic() - t0), flush=True)
    if not result.wasSuccessful():
        sys.exit(1)
    if result.testsRun > 0 and len(result.skipped) == result.testsRun:
        sys.exit(kvfstest.SKIP)
    sys.exit(0)
