# SPDX-License-Identifier: MIT
"""The ioctl path (include/kvfs/kvfs_ioctl.h) on a real mount, driven through
the raw-ioctl program tests/ioctl/ioctl_e2e.c (built next to kvfs):

- end to end: two shared-memory regions and a HOST_PROC buffer, a 64-segment
  layout, 512 keys put, batch lookup with hits, a miss and a directory, get
  into other regions with every byte compared, ioctl-put keys read back with
  read(), file-written keys fetched by ioctl get, per-key errors, remove by
  names and by prefix; once in DRAM and once with a pool so small that the
  gets come from the SSD;
- the statistics move exactly as the program counted its ioctls, keys and
  failures; the trace file has a line per batch and per key;
- atomicity: gets racing puts of the same key never see a mix of versions,
  lookups racing puts never count an incomplete key;
- isolation: a second process cannot use the first's regions; regions go
  with their fd, their process, or a client killed mid-batch;
- bad input: 100,000 random and adversarial ioctls get only documented
  errors, the daemon stays up, guard bytes and canary keys are untouched,
  and the error counters match;
- exact oracles (tests/ioctl/fuzz.c): the fuzzer models every key it wrote
  and predicts every key of every batch that runs (a successful get is
  compared byte for byte); oracle rounds inject one fault per key, each of
  which must fail with its own errno while the rest succeed; values over
  five SSD extents are got into memory of the wrong size; regions on a
  directory fd and on .kvfs/ctl opened write-only outlive other
  descriptors' closes, in this process and a child; the fuzz runs on one
  data directory mounted three times, each unmount clean (exit 0, which
  under ASan includes LeakSanitizer), and each mount first reads every
  modelled key back from the SSD.
"""

import fcntl
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402

KINDS = ("lookup", "put", "get", "remove")
FUZZ_IOCTLS = int(os.environ.get("KVFS_FUZZ_IOCTLS", "100000"))
FUZZ_SEED = int(os.environ.get("KVFS_FUZZ_SEED", "7"))

# struct kvfs_ioc_batch, as include/kvfs/kvfs_ioctl.h draws it
BATCH_SIZE = 16376
BATCH_HDR = struct.Struct("<IIQIIIIQQ")
KEY = struct.Struct("<HHHHIIQQq")
KVFS_IOC_LOOKUP = (3 << 30) | (BATCH_SIZE << 16) | (0xCB << 8) | 0x10


def e2e_bin():
    return os.path.join(os.path.dirname(kvfstest.KVFS), "ioctl_e2e")


# The test program keeps its buffers to the end on purpose; in a sanitizer
# build only the daemon's leaks count (they fail its exit status).
E2E_ENV = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")


def run_e2e(*args, timeout=300):
    """Runs ioctl_e2e; returns its key=value lines as a dict (asserts exit 0)."""
    r = subprocess.run([e2e_bin()] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout, env=E2E_ENV)
    out = r.stdout.decode(errors="replace")
    if r.returncode != 0 or not out.rstrip().endswith("ok"):
        raise AssertionError("ioctl_e2e %s failed (%d):\n%s" % (args[0], r.returncode, out))
    kv = {}
    for line in out.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            kv[k] = int(v)
    return kv


def lookup(fd, names, trace_id):
    """One KVFS_IOC_LOOKUP with Python's own ioctl; returns (ok, prefix, results)."""
    data = bytearray(BATCH_SIZE - BATCH_HDR.size)
    heap = len(names) * KEY.size
    for i, n in enumerate(names):
        b = n.encode()
        data[heap:heap + len(b)] = b
        KEY.pack_into(data, i * KEY.size, heap, len(b), 0, 0, 0, 0, 0, 0, 0)
        heap += len(b)
    buf = bytearray(BATCH_HDR.pack(BATCH_SIZE, 1, trace_id, len(names), 0, 0, 0, 0, 0)) + data
    fcntl.ioctl(fd, KVFS_IOC_LOOKUP, buf)
    hdr = BATCH_HDR.unpack_from(buf)
    res = [KEY.unpack_from(buf, BATCH_HDR.size + i * KEY.size)[8] for i in range(len(names))]
    return hdr[5], hdr[6], res


stats = kvfstest.stats_by_read


class IoctlCase(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=256M",)

    def counters(self, m=None):
        st = stats(m or self.m)
        c = {"ioctls": st["ops"]["ioctl"]["calls"], "ioctl_errors": st["ops"]["ioctl"]["errors"]}
        for k in KINDS:
            s = st["ioctl"][k]
            c["calls_" + k], c["keys_" + k], c["failed_" + k] = (s["calls"], s["keys"],
                                                                 s["failed_keys"])
        return c

    def assertCountersMoved(self, before, kv, m=None):
        """The daemon counted exactly what the program says it sent."""
        after = self.counters(m)
        for k in before:
            self.assertEqual(after[k] - before[k], kv[k], k)

    def wait_released(self, m=None):
        def released():
            io = (m or self.m).stats()["ioctl"]
            return io["regions"] == 0 and io["layouts"] == 0
        kvfstest.wait_until(released, timeout=20, what="regions and layouts released")


class EndToEndTest(IoctlCase):
    def run_e2e_on(self, m):
        os.mkdir(m.path("d"))
        before = self.counters(m)
        kv = run_e2e("e2e", m.path("d"))
        self.assertEqual(kv["daemon_pid"], m.proc.pid)  # what a client names in PR_SET_PTRACER
        self.assertCountersMoved(before, kv, m)
        self.assertGreaterEqual(kv["keys_put"], 512)
        self.assertEqual(kv["failed_get"], kv["key_errors"])
        self.wait_released(m)
        return kv

    def test_e2e_dram(self):
        trace = os.path.join(self.m.root, "unused")
        self.assertFalse(os.path.exists(trace))
        kv = self.run_e2e_on(self.m)
        self.assertEqual((kv["ssd_served"], kv["big_ssd"]), (0, 0))
        self.assertEqual(stats(self.m)["ioctl"]["ssd_direct_keys"], 0)
        self.assertEqual(self.m.config()["trace"], "off")
        io = self.m.stats()["ioctl"]
        for stage in ("validate", "index", "copy_in", "copy_out"):
            self.assertGreater(io["stages"][stage]["batches"], 0, stage)
            self.assertGreater(io["stages"][stage]["total_ns"], 0, stage)
        self.assertEqual(io["key_errors"].get("EMSGSIZE"), 1)

    def test_e2e_ssd(self):
        if not kvfstest.has_ssd_tier():
            self.skipTest("no SSD tier")
        m = self.mount(["--mem-size=24M", "--flush-delay=1ms"], name="ssd")
        kv = self.run_e2e_on(m)
        self.assertGreater(kv["ssd_served"], 0)
        self.assertEqual(kv["big_ssd"], 1)  # 12 MiB from the SSD, in 8 MiB pieces
        st = m.stats()
        # The oldest blocks, fetched into 4 KiB-aligned shared memory, came
        # straight from the buckets (and matched byte for byte).
        self.assertGreater(st["ioctl"]["ssd_direct_keys"], 0)
        self.assertGreater(st["ioctl"]["stages"]["ssd_read"]["batches"], 0)
        self.assertGreater(st["ssd"]["bytes_read"], 0)

    def test_trace(self):
        trace = os.path.join(self.m.root, "trace.jsonl")
        m = self.mount(["--mem-size=256M", "--trace=" + trace], name="trace")
        self.assertEqual(m.config()["trace"], trace)
        kv = self.run_e2e_on(m)
        with open(trace) as f:
            lines = [json.loads(line) for line in f]
        batches = [x for x in lines if x["type"] == "batch"]
        keys = [x for x in lines if x["type"] == "key"]
        self.assertEqual(len(batches), sum(kv["calls_" + k] for k in KINDS))
        self.assertEqual(len(keys), sum(kv["keys_" + k] for k in KINDS))
        self.assertEqual(sum(b["failures"] for b in batches),
                         sum(kv["failed_" + k] for k in KINDS))
        first = [b for b in batches if b["trace_id"] == 1000]
        self.assertEqual(len(first), 1)
        b = first[0]
        self.assertEqual((b["op"], b["keys"], b["failures"]), ("put", 100, 0))
        self.assertEqual(b["bytes"], 100 * kv["block_len"])
        for f in ("total_us", "validate_us", "index_us", "copy_in_us", "copy_out_us",
                  "ssd_read_us"):
            self.assertGreaterEqual(b[f], 0, f)
        self.assertGreater(b["copy_in_us"], 0)
        self.assertGreater(b["pid"], 0)
        mine = [k for k in keys if k["trace_id"] == 1000]
        self.assertEqual([k["key"] for k in mine], ["e2e/blk%04d" % i for i in range(100)])
        for k in mine:
            self.assertEqual((k["size"], k["status"], k["tier"]), (kv["block_len"],
                                                                   kv["block_len"], "dram"))
        errs = sorted({k["status"] for k in keys if k["trace_id"] == 6000 and k["status"] < 0})
        self.assertEqual(errs, sorted({-n for n in (
            kvfstest.errno.EBADF, kvfstest.errno.EFAULT, kvfstest.errno.ENOENT,
            kvfstest.errno.EMSGSIZE, kvfstest.errno.EINVAL, kvfstest.errno.ENAMETOOLONG,
            kvfstest.errno.ENOTDIR, kvfstest.errno.EISDIR)}))

    def test_trace_option_forms(self):
        for form in ("o", "env"):
            trace = os.path.join(self.m.root, "trace-%s.jsonl" % form)
            if form == "o":
                m = self.mount(["--mem-size=64M", "-o", "trace=" + trace], name=form)
            else:
                m = self.mount(["--mem-size=64M"], env={"KVFS_TRACE": trace}, name=form)
            self.assertEqual(m.config()["trace"], trace)
            kvfstest.write_file(m.path("k"), b"v" * 5000)
            fd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
            try:
                ok, prefix, res = lookup(fd, ["k", "nope", "k"], 4242)
            finally:
                os.close(fd)
            self.assertEqual((ok, prefix, res), (2, 1, [5000, -kvfstest.errno.ENOENT, 5000]))
            with open(trace) as f:
                lines = [json.loads(x) for x in f]
            self.assertEqual([x["type"] for x in lines], ["batch", "key", "key", "key"])
            self.assertEqual((lines[0]["trace_id"], lines[0]["op"], lines[0]["keys"],
                              lines[0]["failures"], lines[0]["bytes"]),
                             (4242, "lookup", 3, 1, 10000))
            self.assertEqual([(x["key"], x["status"], x["tier"]) for x in lines[1:]],
                             [("k", 5000, "dram"), ("nope", -kvfstest.errno.ENOENT, "none"),
                              ("k", 5000, "dram")])
            m.stop()


class AtomicityTest(IoctlCase):
    MOUNT_OPTS = ("--mem-size=1G",)

    def test_no_mixed_versions_no_incomplete_keys(self):
        os.mkdir(self.m.path("d"))
        kv = run_e2e("atomic", self.m.path("d"))
        self.assertEqual(kv["mixed"], 0)
        self.assertGreater(kv["gets"], 0)
        self.wait_released()


class IsolationTest(IoctlCase):
    def test_second_process(self):
        os.mkdir(self.m.path("d"))
        run_e2e("isolation", self.m.path("d"), self.m.path(".kvfs", "stats"))
        self.wait_released()

    def test_client_killed_mid_batch(self):
        os.mkdir(self.m.path("d"))
        p = subprocess.Popen([e2e_bin(), "hold", self.m.path("d")], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, env=E2E_ENV)
        try:
            self.assertEqual(p.stdout.readline().strip(), b"ready")
            kvfstest.wait_until(lambda: self.m.stats()["ioctl"]["put"]["calls"] >= 2,
                                timeout=60, what="two put batches")
            self.assertEqual(self.m.stats()["ioctl"]["regions"], 2)
            p.send_signal(signal.SIGKILL)
        finally:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.assertEqual(p.returncode, -signal.SIGKILL)
        self.wait_released()
        # Every key is whole: an interrupted batch published complete keys or none.
        names = os.listdir(self.m.path("d", "hold"))
        self.assertGreater(len(names), 0)
        for n in names:
            self.assertEqual(os.stat(self.m.path("d", "hold", n)).st_size, 8 << 20, n)
        kvfstest.write_file(self.m.path("after"), b"still here")
        self.assertEqual(kvfstest.read_file(self.m.path("after")), b"still here")


def sanitized(path):
    """True when the binary was built with AddressSanitizer."""
    with open(path, "rb") as f:
        return b"__asan_init" in f.read()


class FuzzTest(IoctlCase):
    """FUZZ_IOCTLS ioctls over one data directory mounted three times: half
    on the first mount, half on the second (which first reads every key the
    first one left, from the SSD), none on the third (which reads them all
    back again). The model of the keys goes from mount to mount in a file.
    Each unmount must end the daemon with status 0: under ASan that is also
    LeakSanitizer finding nothing (detect_leaks=1 whatever the environment
    says)."""

    BIG_OVER_5_EXTENTS = 4  # fuzz.c big_sizes over 10 MiB

    def setUp(self):  # no self.m: the mounts share a data directory
        self.root = tempfile.mkdtemp(prefix="kvfs-it-fuzz-", dir="/tmp")
        os.chmod(self.root, 0o755)
        self.addCleanup(shutil.rmtree, self.root, True)
        self.data = os.path.join(self.root, "data")
        self.model = os.path.join(self.root, "fuzz.model")
        self.env = None
        if sanitized(kvfstest.KVFS):
            opts = [o for o in os.environ.get("ASAN_OPTIONS", "").split(":")
                    if o and not o.startswith("detect_leaks=")]
            self.env = {"ASAN_OPTIONS": ":".join(opts + ["detect_leaks=1"])}

    def phase(self, phase, n, seed):
        m = self.mount(list(self.MOUNT_OPTS), env=self.env, name="fuzz-" + phase,
                       root=self.root, data=self.data)
        if self.env:
            with open("/proc/%d/environ" % m.proc.pid, "rb") as f:
                env = f.read().split(b"\0")
            opts = [e for e in env if e.startswith(b"ASAN_OPTIONS=")]
            self.assertTrue(opts and opts[0].endswith(b"detect_leaks=1"), opts)  # LSan on
        if phase == "first":
            os.mkdir(m.path("fuzz"))
        before = self.counters(m)
        try:
            kv = run_e2e("fuzz", m.path("fuzz"), n, seed, self.model, phase, timeout=400)
        except AssertionError as e:
            raise AssertionError("%s\n(phase %s, seed %d: KVFS_FUZZ_SEED=%d reruns it)"
                                 % (e, phase, seed, FUZZ_SEED)) from None
        self.assertEqual(kv["seed"], seed)
        self.assertEqual(kv["ioctls"], self.counters(m)["ioctls"] - before["ioctls"])
        self.assertGreaterEqual(kv["ioctls"], n)
        self.assertCountersMoved(before, kv, m)
        self.wait_released(m)
        st = m.stats()
        self.assertEqual(sum(st["ioctl"]["key_errors"].values()),
                         sum(kv["failed_" + k] for k in KINDS))
        self.assertEqual(kv["final_verified"], kv["modelled_keys"])
        self.assertEqual(kv["unseen"], 0)  # every key's bytes known to the model
        m.stop()  # a clean unmount: exit 0, no leak
        return kv

    def assertReadBack(self, kv, before):
        """Every key the previous mount left was read back, from the SSD;
        the big ones into memory of the wrong size first."""
        self.assertEqual(kv["modelled_in"], before["modelled_keys"])
        self.assertEqual(kv["verified"] + kv["verified_empty"], before["modelled_keys"])
        self.assertEqual(kv["verified_ssd"], kv["verified"])
        self.assertEqual(kv["big_wrong_size_ssd"], kv["big_wrong_size_in"])
        self.assertGreaterEqual(kv["big_wrong_size_in"], 4 * self.BIG_OVER_5_EXTENTS)

    def test_fuzz(self):
        half = FUZZ_IOCTLS // 2
        kv = self.phase("first", half, FUZZ_SEED)
        self.assertGreater(kv["ioctl_errors"], 0)
        self.assertEqual(kv["big_keys"], self.BIG_OVER_5_EXTENTS)
        self.assertEqual(kv["rounds"], (half + 499) // 1000)  # one per 1000 ioctls
        self.assertGreaterEqual(kv["fault_keys"], 5 * kv["rounds"])
        if kv["rounds"] >= 20:  # KVFS_FUZZ_IOCTLS may ask for a short run
            self.assertEqual(kv["fault_kinds"], kv["fault_kinds_all"])  # each one injected
            self.assertGreater(kv["checked_gets"], 1000)
            self.assertGreater(kv["rmtrees"], 0)
        self.assertEqual(kv["regchecks"], 1)
        self.assertEqual(kv["enospc"], 0)
        if not kvfstest.has_ssd_tier():
            return  # a remount keeps nothing
        kv2 = self.phase("next", FUZZ_IOCTLS - half, FUZZ_SEED + 1)
        self.assertReadBack(kv2, kv)
        self.assertEqual(kv2["regchecks"], 1)
        kv3 = self.phase("verify", 0, FUZZ_SEED + 2)
        self.assertReadBack(kv3, kv2)
        self.assertEqual(kv3["modelled_keys"], kv2["modelled_keys"])


if __name__ == "__main__":
    kvfstest.main()
