# SPDX-License-Identifier: MIT
"""The device backend (--gpu, gpu/cuda.c) on a real mount.

Everywhere (no device needed):
- --gpu=auto (the default) starts with or without a device, says in
  .kvfs/config and .kvfs/stats which backend is in force, and serves the
  host paths (a HOST_PROC put/get round trip through the Python module);
- --gpu=cuda without a usable device refuses to start with one line on
  stderr, in all three spellings (--gpu, -o gpu=, KVFS_GPU); --gpu=off
  never has CUDA in force;
- device registrations that cannot be right fail with their documented
  errno (ioctl_e2e devregs), whether or not the daemon has a device;
- the Python module's register_device says why it cannot work here;
- the C example (examples/c) round-trips host memory (and device memory
  where there is a device).

With a CUDA build and a device (tests/gpu/run.sh on a GPU machine): the
device tests of tests/gpu/gpu_e2e.c — CUDA_IPC and CUDA_VMM regions, a
layout over 32 layer tensors, SSD-resident gets, a client killed
mid-batch, a second process denied another's region. Without them each
of those tests is reported as skipped with the reason.
"""

import errno
import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kvfstest  # noqa: E402

E2E_ENV = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")


def bindir():
    return os.path.dirname(kvfstest.KVFS)


def kvfs_module():
    return kvfstest.client()


def run(args, timeout=300):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, env=E2E_ENV)
    return r.returncode, r.stdout.decode(errors="replace")


_DEVICE = None


def device_problem():
    """None when this kvfs has CUDA in force with --gpu=auto; else why not."""
    global _DEVICE
    if _DEVICE is None:
        m = kvfstest.Mount(["--mem-size=64M", "--ssd-size=0"], name="gpu-probe")
        try:
            m.start()
            gpu = m.stats()["gpu"]
            m.stop()
        finally:
            m.cleanup()
        if gpu["built"] != "cuda":
            _DEVICE = "kvfs was built without CUDA (cmake -DKVFS_CUDA=ON)"
        elif gpu["backend"] != "cuda":
            _DEVICE = "no usable CUDA device: " + (gpu["note"] or "the daemon found none")
        else:
            _DEVICE = ""
    return _DEVICE or None


class Backend(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=128M", "--ssd-size=0")

    def test_auto_says_what_is_in_force_and_serves_host_regions(self):
        cfg = self.m.config()
        self.assertEqual(cfg["gpu"], "auto")
        gpu = self.m.stats()["gpu"]
        self.assertIn(gpu["backend"], ("cuda", "none"))
        self.assertEqual(cfg["gpu_backend"], gpu["backend"])
        self.assertEqual(int(cfg["gpu_devices"]), gpu["devices"])
        if gpu["backend"] == "none":
            self.assertEqual(gpu["devices"], 0)
            self.assertEqual(gpu["pool_pinned"], 0)
            self.assertNotEqual(gpu["note"], "")  # why not
            self.assertNotIn("kvfs: gpu", self.m.log_text())  # auto starts quietly
        else:
            self.assertGreater(gpu["devices"], 0)
            self.assertEqual(gpu["pool_pin_target"], 128 << 20)
        kvfs = kvfs_module()
        os.mkdir(self.m.path("h"))
        with kvfs.Client(self.m.path("h")) as c:
            src = bytearray(kvfstest.pattern("host", 3 << 20))
            dst = bytearray(len(src))
            rs, rd = c.register(src, writable=False), c.register(dst)
            self.assertEqual(c.put(["k"], iovs=[[(rs, 0, len(src))]]).ok, 1)
            self.assertEqual(c.get(["k"], iovs=[[(rd, 0, len(dst))]]).ok, 1)
            self.assertEqual(dst, src)

    def test_off_never_has_cuda(self):
        m = self.mount(list(self.MOUNT_OPTS) + ["--gpu=off"], name="off")
        self.assertEqual(m.config()["gpu"], "off")
        self.assertEqual(m.config()["gpu_backend"], "none")
        self.assertEqual(m.stats()["gpu"]["backend"], "none")
        self.assertEqual(m.stats()["gpu"]["note"], "")
        os.mkdir(m.path("d"))
        rc, out = run([os.path.join(bindir(), "ioctl_e2e"), "devregs", m.path("d")])
        self.assertEqual(rc, 0, out)
        self.assertIn("cuda=0", out)

    def test_device_registrations_fail_cleanly(self):
        os.mkdir(self.m.path("d"))
        rc, out = run([os.path.join(bindir(), "ioctl_e2e"), "devregs", self.m.path("d")])
        self.assertEqual(rc, 0, out)
        cuda = self.m.stats()["gpu"]["backend"] == "cuda"
        self.assertIn("cuda=%d" % cuda, out)
        # The daemon is still there and serving.
        kvfstest.write_file(self.m.path("after"), b"alive")
        self.assertEqual(kvfstest.read_file(self.m.path("after")), b"alive")
        self.assertEqual(self.m.stats()["ioctl"]["regions"], 0)

    def test_c_example(self):
        rc, out = run([os.path.join(bindir(), "kvfs-roundtrip"), self.m.mnt])
        self.assertEqual(rc, 0, out)
        self.assertIn("host memory: round trip ok", out)
        self.assertEqual(sorted(os.listdir(self.m.path("example-host"))),
                         ["key0", "key1", "key2", "key3"])
        for k in range(4):
            self.assertEqual(os.stat(self.m.path("example-host", "key%d" % k)).st_size,
                             256 << 10)
        if device_problem() is None:
            self.assertIn("device memory: round trip ok", out)
        else:
            self.assertRegex(out, r"device memory: skipped: .+")

    def test_python_register_device_says_why(self):
        if device_problem() is None:
            self.skipTest("a device is present: tests/gpu/gpu_e2e.c covers registration")
        kvfs = kvfs_module()
        with kvfs.Client(self.m.mnt) as c:
            with self.assertRaises(OSError) as cm:
                c.register_device(0x7f0000000000, 4096)
            self.assertIn(cm.exception.errno, (errno.EOPNOTSUPP, errno.ENODEV))
            self.assertRegex(str(cm.exception), r"kvfs_register_device: .+: .+")
            # A put that would wait for a CUDA event: refused as a whole here.
            src = bytearray(4096)
            r = c.register(src, writable=False)
            with self.assertRaises(OSError) as cm:
                c.put(["ev"], iovs=[[(r, 0, 4096)]], event=b"\x5a" * 64)
            self.assertEqual(cm.exception.errno, errno.EOPNOTSUPP)
            with self.assertRaises(ValueError):
                c.put(["ev"], iovs=[[(r, 0, 4096)]], event=b"short")
        self.assertFalse(os.path.exists(self.m.path("ev")))


class RefusedWithoutDevice(kvfstest.KvfsTestCase):
    def setUp(self):
        why = device_problem()
        if why is None:
            self.skipTest("a CUDA device is present: --gpu=cuda starts here")
        self.why = why

    def refused(self, opts, env=None):
        m = self.mount(["--mem-size=64M", "--ssd-size=0"] + opts, env=env, start=False,
                       name="refused")
        r = subprocess.run(m.command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=60, env=dict(os.environ, **(env or {})))
        self.assertNotEqual(r.returncode, 0)
        self.assertFalse(m.mounted())
        lines = r.stderr.decode().strip().splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertRegex(lines[0], r"^kvfs: --gpu=cuda: .+")
        return lines[0]

    def test_cuda_without_device_fails_in_one_line(self):
        line = self.refused(["--gpu=cuda"])
        self.assertNotIn("serving host regions", line)
        self.refused(["-o", "gpu=cuda"])
        self.refused([], env={"KVFS_GPU": "cuda"})


def gpu_e2e():
    return os.path.join(bindir(), "gpu_e2e")


class Device(kvfstest.KvfsTestCase):
    """The CUDA tests proper: they need a CUDA build and a device."""

    MOUNT_OPTS = ("--mem-size=512M", "--gpu=cuda")

    def setUp(self):
        why = device_problem()
        if why is None and not os.path.exists(gpu_e2e()):
            why = "gpu_e2e was not built (a build without CUDA)"
        if why:
            self.skipTest(why)
        super().setUp()
        os.mkdir(self.m.path("g"))

    def e2e(self, *args):
        rc, out = run([gpu_e2e()] + list(args), timeout=240)
        self.assertEqual(rc, 0, out)
        self.assertTrue(out.rstrip().endswith("ok"), out)
        return out

    def wait_released(self):
        kvfstest.wait_until(lambda: self.m.stats()["ioctl"]["regions"] == 0, timeout=30,
                            what="regions released")

    def test_ipc_regions(self):
        self.e2e("ipc", self.m.path("g"))
        self.wait_released()

    def test_vmm_regions(self):
        self.e2e("vmm", self.m.path("g"))
        self.wait_released()

    def test_layout_over_32_layers(self):
        self.e2e("layers", self.m.path("g"), "32")
        self.wait_released()

    def test_ssd_resident_gets(self):
        m = self.mount(["--mem-size=64M", "--gpu=cuda", "--flush-delay=1ms"], name="ssd")
        os.mkdir(m.path("g"))
        out = self.e2e("ssd", m.path("g"))
        self.assertIn("ssd_keys=", out)
        self.assertGreater(m.stats()["ioctl"]["get"]["keys"], 0)

    def test_client_killed_mid_batch(self):
        p = subprocess.Popen([gpu_e2e(), "hold", self.m.path("g")], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, env=E2E_ENV)
        try:
            self.assertEqual(p.stdout.readline().strip(), b"ready")
            kvfstest.wait_until(lambda: self.m.stats()["ioctl"]["put"]["calls"] >= 2,
                                timeout=60, what="two put batches")
            p.send_signal(signal.SIGKILL)
        finally:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.wait_released()
        for n in os.listdir(self.m.path("g", "hold")):
            self.assertEqual(os.stat(self.m.path("g", "hold", n)).st_size, 2 << 20, n)

    def test_second_process_denied(self):
        self.e2e("deny", self.m.path("g"))
        self.wait_released()


if __name__ == "__main__":
    kvfstest.main()
