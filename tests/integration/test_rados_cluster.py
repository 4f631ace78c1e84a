# SPDX-License-Identifier: MIT
"""The Ceph test cluster (scripts/ceph-cluster.sh, cephtest.py) and librados's
C API, the ground the RADOS tier stands on. No kvfs mount.

- the cluster starts (one monitor, one memstore OSD, a pool of size 1, no
  authentication, loopback only) and serves I/O through the rados CLI;
- tests/rados/rados_smoke.c, compiled here against librados: objects, stat,
  xattrs, omap compare-and-set in one atomic write op (a stale one fails
  with -ECANCELED and changes nothing), aio reads all in flight and compared
  byte for byte, listing every namespace (a GC sweep), errnos of missing
  objects;
- with the OSD stopped, a write, a read and an aio read fail with
  -ETIMEDOUT within rados_osd_op_timeout instead of hanging; the OSD
  started again serves the objects written before (memstore keeps them
  across a clean stop);
- with the monitor stopped too, connecting fails within the timeout;
- stop leaves no daemon; a test process that dies without cleaning up
  (SIGKILL) leaves no daemon and no directory behind (the owner watcher).

Skipped (77) where Ceph's packages cannot be installed.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cephtest  # noqa: E402
import kvfstest  # noqa: E402

SMOKE_SRC = os.path.join(cephtest.ROOT, "tests", "rados", "rados_smoke.c")
OP_TIMEOUT = 2  # seconds: rados_osd_op_timeout etc. in the failure checks


def build_smoke(outdir):
    """Compiles rados_smoke.c; returns the binary's path."""
    exe = os.path.join(outdir, "rados_smoke")
    cc = os.environ.get("CC", "cc")
    r = subprocess.run([cc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", exe,
                        SMOKE_SRC, "-lrados"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120)
    if r.returncode != 0:
        raise AssertionError("cc rados_smoke.c failed:\n%s" % r.stdout.decode(errors="replace"))
    return exe


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class ClusterTest(cephtest.CephTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kvfs-it-rados-smoke-", dir="/tmp")
        try:
            cls.smoke = build_smoke(cls.tmp)
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_smoke(self, c, mode, *args, timeout=60):
        t0 = time.monotonic()
        r = subprocess.run([self.smoke, c.conf, c.pool, mode] + [str(a) for a in args],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        out = r.stdout.decode(errors="replace")
        sys.stdout.write("".join("  [%s] %s\n" % (mode, line) for line in out.splitlines()))
        self.assertEqual(r.returncode, 0, "rados_smoke %s failed:\n%s" % (mode, out))
        return out, time.monotonic() - t0

    def test_cluster_and_librados(self):
        c = self.cluster()
        print("  cluster up in %.1fs (%s, pool %s)" % (c.start_seconds, c.conf, c.pool))
        self.assertEqual(sorted(c.pids()), ["mon", "osd"])
        self.assertLess(c.start_seconds, 30.0)

        # the CLI the tier's tests and benchmarks will use
        blob = os.path.join(self.tmp, "blob")
        data = kvfstest.pattern("blob", 300000)
        with open(blob, "wb") as f:
            f.write(data)
        self.assertEqual(c.rados("put", "cli.blob", blob)[0], 0)
        rc, out = c.rados("get", "cli.blob", blob + ".back")
        self.assertEqual(rc, 0, out)
        self.assertEqual(kvfstest.read_file(blob + ".back"), data)
        self.assertEqual(c.rados("stat", "cli.blob")[0], 0)

        self.run_smoke(c, "io", OP_TIMEOUT)

        # the OSD down: operations time out, they do not hang
        c.osd_stop()
        self.assertEqual(sorted(c.pids()), ["mon"])
        _, took = self.run_smoke(c, "osd-down", OP_TIMEOUT, timeout=60)
        self.assertLess(took, 3 * OP_TIMEOUT + 10)

        # back up: what was written before is still there
        c.osd_start()
        self.run_smoke(c, "verify", OP_TIMEOUT)

        # the monitor down as well: connecting fails within the timeout
        pids = c.pids()
        c.shutdown()
        for d, pid in pids.items():
            self.assertFalse(alive(pid), "%s (pid %d) still runs after stop" % (d, pid))
        self.run_smoke(c, "mon-down", OP_TIMEOUT, timeout=60)

    def test_owner_killed(self):
        """A test process SIGKILLed with a cluster up leaves nothing behind."""
        owner = subprocess.Popen([sys.executable, "-c", """
import sys
sys.path.insert(0, %r)
import cephtest
c = cephtest.Cluster(name="owner").start()
print(c.dir, *c.pids().values(), flush=True)
sys.stdin.read()
""" % HERE], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            line = owner.stdout.readline().decode().split()
            self.assertEqual(len(line), 3, "the owner did not start its cluster: %r" % line)
            d, pids = line[0], [int(p) for p in line[1:]]
            self.assertTrue(os.path.isdir(d))
            owner.kill()
            owner.wait()
            kvfstest.wait_until(lambda: not any(alive(p) for p in pids), timeout=30,
                                what="the orphaned daemons to stop")
            kvfstest.wait_until(lambda: not os.path.exists(d), timeout=10,
                                what="the orphaned cluster's directory to go")
        finally:
            if owner.poll() is None:
                owner.kill()
                owner.wait()
            owner.stdin.close()
            owner.stdout.close()

    def test_script_usage(self):
        """Bad usage, stop of nothing, status of a stopped cluster."""
        script = cephtest.SCRIPT
        r = subprocess.run([script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"start DIR", r.stdout)
        d = os.path.join(self.tmp, "none")
        self.assertEqual(subprocess.run([script, "stop", d]).returncode, 0)
        os.makedirs(d)
        r = subprocess.run([script, "status", d], stdout=subprocess.PIPE)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, b"mon: stopped\nosd: stopped\n")


if __name__ == "__main__":
    cephtest.main()
