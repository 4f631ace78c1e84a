# SPDX-License-Identifier: MIT
"""The shared tier on Ceph RADOS, step 1: kvfs connects to a pool in the
background and says how it goes (issue 10; rados/shared.h).

- with the test cluster up, a mount with --rados-pool/--rados-conf (and
  -o / KVFS_* spellings of the others) reaches "connected" in .kvfs/stats,
  .kvfs/config shows the settings, local files work, unmount is prompt;
- with --rados-conf naming a cluster that does not run, the mount still comes
  up at once, local files work, the state is "unreachable" with failures
  counted, the errno named and one line in the log; once a cluster starts
  on that address, the next retry connects;
- --rados-pool with an empty name is refused (exit 2, one line); a kvfs built
  without librados refuses --rados-pool (exit 1, one line).

Skipped (77) where Ceph's packages cannot be installed or FUSE is missing.
"""

import os
import random
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cephtest  # noqa: E402
import kvfstest  # noqa: E402

TIMEOUT_S = 1  # --rados-timeout in these tests: a dead monitor costs 1 s per attempt


def free_port_block():
    """A monitor port P with P..P+99 free on 127.0.0.1 (the OSD binds P+1..)."""
    for _ in range(200):
        p = random.randrange(20000, 60000, 100)
        ok = True
        for q in (p, p + 1, p + 2, p + 3, p + 4):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", q))
            except OSError:
                ok = False
            finally:
                s.close()
        if ok:
            return p
    raise AssertionError("no free port block found")


def built_with_librados():
    r = subprocess.run([kvfstest.KVFS, "--version"], stdout=subprocess.PIPE, timeout=20)
    return "rados librados" in r.stdout.decode()


def rados_section(m):
    st = m.stats()
    if "rados" not in st:
        raise AssertionError("no 'rados' section in stats: %s" % sorted(st))
    return st["rados"]


class RadosTierTest(kvfstest.KvfsTestCase, cephtest.CephTestCase):
    def setUp(self):
        pass  # each test mounts its own daemons

    def need_librados(self):
        if not built_with_librados():
            self.skipTest("this kvfs was built without librados (-DKVFS_RADOS=OFF or no "
                          "librados-dev)")

    def check_local_files(self, m):
        os.makedirs(m.path("model", "tp0"))
        data = kvfstest.pattern("blk", 3 << 20)
        kvfstest.write_file(m.path("model", "tp0", "blk"), data)
        self.assertEqual(kvfstest.read_file(m.path("model", "tp0", "blk")), data)
        self.assertEqual(os.listdir(m.path("model", "tp0")), ["blk"])

    def stop_timed(self, m, limit):
        t0 = time.monotonic()
        m.stop()
        took = time.monotonic() - t0
        print("  unmounted in %.2fs" % took)
        self.assertLess(took, limit)

    def test_connected(self):
        self.need_librados()
        c = self.cluster()
        m = self.mount(["--mem-size=64M", "--rados-pool=" + c.pool, "--rados-conf=" + c.conf,
                        "-o", "rados_namespace=ns1,rados_cache_ttl=250ms",
                        "--rados-timeout=%ds" % TIMEOUT_S, "--rados-sync"],
                       env={"KVFS_RADOS_ID": "admin"})
        t0 = time.monotonic()
        r = kvfstest.wait_until(lambda: (lambda r: r if r["state"] == "connected" else None)(
            rados_section(m)), timeout=15, what="state 'connected'")
        print("  connected in %.2fs after the mount" % (time.monotonic() - t0))
        self.assertEqual(r["pool"], c.pool)
        self.assertEqual(r["namespace"], "ns1")
        self.assertGreaterEqual(r["connect_attempts"], 1)
        self.assertEqual(r["connect_failures"], 0)
        self.assertEqual(r["last_error"], "")
        for k in ("objects_read", "objects_written", "bytes_read", "bytes_written", "errors",
                  "timeouts"):
            self.assertEqual(r[k], 0, k)
        cfg = m.config()
        self.assertEqual(cfg["rados_pool"], c.pool)
        self.assertEqual(cfg["rados_conf"], c.conf)
        self.assertEqual(cfg["rados_id"], "admin")
        self.assertEqual(cfg["rados_namespace"], "ns1")
        self.assertEqual(float(cfg["rados_timeout_ms"]), TIMEOUT_S * 1000.0)
        self.assertEqual(float(cfg["rados_cache_ttl_ms"]), 250.0)
        self.assertEqual(cfg["rados_sync"], "on")
        self.check_local_files(m)
        self.assertNotIn("cannot connect", m.log_text())
        self.stop_timed(m, 5.0)

    def test_unreachable_then_back(self):
        self.need_librados()
        port = free_port_block()
        conf = os.path.join(self.tmpdir(), "ceph.conf")
        with open(conf, "w") as f:
            f.write("[global]\nmon host = v2:127.0.0.1:%d\nms bind msgr1 = false\n"
                    "ms bind ipv6 = false\nauth cluster required = none\n"
                    "auth service required = none\nauth client required = none\n"
                    "auth supported = none\nlog to stderr = false\nerr to stderr = false\n"
                    % port)
        t0 = time.monotonic()
        m = self.mount(["--mem-size=64M", "--rados-pool=kvfs", "--rados-conf=" + conf,
                        "--rados-timeout=%ds" % TIMEOUT_S])
        up = time.monotonic() - t0
        print("  mounted in %.2fs with no cluster" % up)
        self.assertLess(up, 5.0)
        r = kvfstest.wait_until(
            lambda: (lambda r: r if r["connect_failures"] > 0 else None)(rados_section(m)),
            timeout=10, what="a failed connection attempt")
        self.assertEqual(r["state"], "unreachable")
        self.assertEqual(r["last_error"], "ETIMEDOUT", r)
        self.assertIn("connect", r["last_error_text"])
        self.check_local_files(m)
        lines = [ln for ln in m.log_text().splitlines() if "kvfs: rados:" in ln]
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("kvfs: rados: cannot connect to pool 'kvfs': ", lines[0])
        self.assertIn("retrying every", lines[0])
        self.assertEqual(rados_section(m)["state"], "unreachable")

        # the cluster comes up on that address: a retry connects
        self.cluster(port=port, pool="kvfs")
        t0 = time.monotonic()
        r = kvfstest.wait_until(lambda: (lambda r: r if r["state"] == "connected" else None)(
            rados_section(m)), timeout=40, what="state 'connected' once the cluster is up")
        print("  connected %.2fs after the cluster came up, %d attempts"
              % (time.monotonic() - t0, r["connect_attempts"]))
        self.assertGreater(r["connect_failures"], 0)
        self.assertIn("kvfs: rados: connected to pool 'kvfs'", m.log_text())
        self.assertEqual(kvfstest.read_file(m.path("model", "tp0", "blk")),
                         kvfstest.pattern("blk", 3 << 20))
        self.stop_timed(m, 5.0)

    def test_refusals(self):
        d = self.tmpdir()
        os.makedirs(os.path.join(d, "data"))
        os.makedirs(os.path.join(d, "mnt"))

        def run(*args):
            r = subprocess.run([kvfstest.KVFS, "-f"] + list(args)
                               + [os.path.join(d, "data"), os.path.join(d, "mnt")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
            return r.returncode, r.stderr.decode(errors="replace").strip()

        rc, err = run("--rados-pool=")
        self.assertEqual(rc, 2, err)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("--rados-pool", err)
        rc, err = run("--rados-timeout=0s", "--rados-pool=kvfs")
        self.assertEqual(rc, 2, err)
        self.assertIn("--rados-timeout", err)
        if built_with_librados():
            print("  built with librados: the refusal without it is not tested here")
            return
        rc, err = run("--rados-pool=kvfs")
        self.assertEqual(rc, 1, err)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("built without librados", err)
        self.assertFalse(kvfstest.is_mounted(os.path.join(d, "mnt")))

    def tmpdir(self):
        import shutil
        import tempfile
        d = tempfile.mkdtemp(prefix="kvfs-it-rados-tier-", dir="/tmp")
        self.addCleanup(shutil.rmtree, d, True)
        return d


if __name__ == "__main__":
    kvfstest.main(skip_if=cephtest.ceph_problem)
