# SPDX-License-Identifier: MIT
"""FUSE over io_uring (--uring, fs/uring.c), what is particular to the
transport; the whole integration suite also runs over it (scripts/test.sh,
KVFS_URING=on). Each test sets /sys/module/fuse/parameters/enable_uring as
it needs and puts it back; where the kernel has no FUSE over io_uring or
the parameter cannot be set, the file is skipped saying so.

- requests made on every CPU land on that CPU's queue (threads pinned to
  each CPU issue them; each queue's count rises by at least theirs);
- an INTERRUPT (a signal to a process blocked in a batch put) comes through
  /dev/fuse while its request sits in a ring entry: the process ends, its
  regions are released, every key it put is whole, the mount serves on;
- an unmount (lazy) while threads keep requests queued: the daemon exits 0
  in time and no thread hangs;
- kill -9 of the daemon in the middle of a batch: the client's call fails
  instead of hanging, and a new daemon on the data finds whole keys only;
- a whole value only on the SSD is read from its bucket straight into
  the ring entry's payload buffer (counted as an in-place reply); values
  in DRAM, and parts of values, are read as before;
- a reply larger than the payload buffer (made so by a test build's
  KVFS_FAULT_URING_REPLY_MAX) is refused: that read fails with EIO, the
  count says so, the next requests are served;
- --uring=on with enable_uring off exits 1 with one line naming it, and
  --uring=auto then serves through /dev/fuse; --uring=off never uses the
  ring even where it is on.
"""

import errno
import mmap
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402

PARAM = "/sys/module/fuse/parameters/enable_uring"


def set_param(value):
    with open(PARAM, "w") as f:
        f.write(value)


def why_not():
    if not os.path.exists(PARAM):
        return "this kernel has no FUSE over io_uring (%s is missing)" % PARAM
    try:
        with open(PARAM) as f:
            was = f.read().strip()
        set_param(was)
    except OSError as e:
        return "cannot set %s: %s" % (PARAM, e)
    return None


def e2e_bin():
    return os.path.join(os.path.dirname(kvfstest.KVFS), "ioctl_e2e")


class UringCase(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--uring=on", "--mem-size=512M", "--ssd-size=0")
    PARAM_VALUE = "Y"

    def setUp(self):
        with open(PARAM) as f:
            was = f.read().strip()
        self.addCleanup(set_param, was)
        set_param(self.PARAM_VALUE)
        super().setUp()

    def fuse(self, m=None):
        return (m or self.m).stats()["fuse"]

    def hold(self):
        """ioctl_e2e hold on MNT/d, once it has put two batches (16 x 8 MiB
        each, over and over): the caller kills it."""
        p = subprocess.Popen([e2e_bin(), "hold", self.m.path("d")], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        try:
            self.assertEqual(p.stdout.readline().strip(), b"ready")
            kvfstest.wait_until(lambda: self.m.stats()["ioctl"]["put"]["calls"] >= 2,
                                timeout=60, what="two put batches")
        except BaseException:
            p.kill()
            p.wait()
            raise
        return p


class QueuesTest(UringCase):
    def test_every_cpu_queue(self):
        self.assertEqual(self.m.config()["fuse_transport"], "io_uring")
        st = self.fuse()
        cpus = sorted(os.sched_getaffinity(0))
        self.assertEqual(st["transport"], "io_uring")
        self.assertEqual(st["uring_queues"], len(st["uring_queue_requests"]))
        self.assertGreaterEqual(st["uring_queues"], len(cpus))
        kvfstest.write_file(self.m.path("f"), b"x" * 4096)
        before = list(st["uring_queue_requests"])
        n, errors = 300, []

        def on(cpu):
            try:
                os.sched_setaffinity(0, {cpu})  # this thread only
                for _ in range(n):
                    os.stat(self.m.path("f"))  # attributes time out at once: a GETATTR
                    with open(self.m.path("f"), "rb", buffering=0) as f:
                        f.read()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
        threads = [threading.Thread(target=on, args=(c,)) for c in cpus]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        after = self.fuse()["uring_queue_requests"]
        for c in cpus:  # an open at least, per round
            self.assertGreaterEqual(after[c] - before[c], n, "queue %d: %s -> %s"
                                    % (c, before, after))
        self.assertEqual(self.fuse()["uring_refused"], 0)


class InterruptTest(UringCase):
    MOUNT_OPTS = ("--uring=on", "--mem-size=1G", "--ssd-size=0")

    def test_interrupt_of_a_blocked_batch(self):
        os.mkdir(self.m.path("d"))
        before = self.fuse()["dev_interrupts"]
        p = self.hold()
        try:
            # SIGINT ends it (no handler): the kernel sends the daemon an INTERRUPT for
            # the put in flight, through /dev/fuse, and the put ends over the ring
            deadline = time.monotonic() + 30
            while p.poll() is None and time.monotonic() < deadline:
                p.send_signal(signal.SIGINT)
                time.sleep(0.05)
            p.wait(30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, -signal.SIGINT)
        kvfstest.wait_until(lambda: self.m.stats()["ioctl"]["regions"] == 0, timeout=30,
                            what="the client's regions released")
        self.assertGreater(self.fuse()["dev_interrupts"], before)
        names = os.listdir(self.m.path("d", "hold"))
        self.assertGreater(len(names), 0)
        for name in names:  # whole keys only
            self.assertEqual(os.stat(self.m.path("d", "hold", name)).st_size, 8 << 20, name)
        kvfstest.write_file(self.m.path("after"), b"still here")
        self.assertEqual(kvfstest.read_file(self.m.path("after")), b"still here")
        self.assertEqual(self.fuse()["transport"], "io_uring")


class UnmountTest(UringCase):
    def test_unmount_with_requests_queued(self):
        kvfstest.write_file(self.m.path("f"), b"y" * 65536)
        stop, hung = threading.Event(), []

        def hammer(i):
            while not stop.is_set():
                try:
                    with open(self.m.path("f"), "rb") as f:
                        f.read()
                    os.listdir(self.m.mnt)
                except OSError:
                    if not os.path.ismount(self.m.mnt):
                        return
        threads = [threading.Thread(target=hammer, args=(i,), daemon=True) for i in range(8)]
        for t in threads:
            t.start()
        kvfstest.wait_until(lambda: self.fuse()["uring_requests"] > 2000, timeout=30,
                            what="requests in flight")
        subprocess.run(["fusermount3", "-u", "-z", self.m.mnt], check=True)
        self.assertEqual(self.m.wait_exit(30), 0, self.m.log_text())
        stop.set()
        for t in threads:
            t.join(30)
            if t.is_alive():
                hung.append(t.name)
        self.assertEqual(hung, [])
        self.assertFalse(kvfstest.is_mounted(self.m.mnt))
        self.m.cleanup()


class Kill9Test(UringCase):
    MOUNT_OPTS = ("--uring=on", "--mem-size=1G", "--ssd-size=4G")

    def test_kill9_mid_batch(self):
        os.mkdir(self.m.path("d"))
        p = self.hold()
        try:
            self.m.signal(signal.SIGKILL)
            self.assertEqual(self.m.wait_exit(30), -signal.SIGKILL)
            p.wait(60)  # its call failed: it does not hang
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertNotEqual(p.returncode, 0)
        self.m.abort()  # the dead mount goes; the data stays
        again = self.mount(data=self.m.data, name="again")
        names = os.listdir(again.path("d", "hold")) if os.path.isdir(again.path("d", "hold")) \
            else []
        for name in names:  # what survived is whole
            self.assertEqual(os.stat(again.path("d", "hold", name)).st_size, 8 << 20, name)
        self.assertEqual(self.fuse(again)["transport"], "io_uring")
        again.stop()
        self.m.cleanup()


class RefusedTest(UringCase):
    MOUNT_ENV = {"KVFS_FAULT_URING_REPLY_MAX": "8192"}

    def test_reply_larger_than_the_buffer(self):
        if self.m.config()["faults"] != "on":
            self.skipTest("needs a test build (-DKVFS_FAULTS=ON) for KVFS_FAULT_URING_REPLY_MAX")
        data = os.urandom(65536)
        kvfstest.write_file(self.m.path("big"), data)
        fd = os.open(self.m.path("big"), os.O_RDONLY | os.O_DIRECT)
        try:
            buf = mmap.mmap(-1, 65536)
            with self.assertRaises(OSError) as e:
                os.readv(fd, [buf])
            self.assertEqual(e.exception.errno, errno.EIO)
        finally:
            os.close(fd)
        self.assertEqual(self.fuse()["uring_refused"], 1)
        fd = os.open(self.m.path("big"), os.O_RDONLY | os.O_DIRECT)
        try:  # small replies go on
            buf = mmap.mmap(-1, 4096)
            self.assertEqual(os.readv(fd, [buf]), 4096)
            self.assertEqual(bytes(buf), data[:4096])
        finally:
            os.close(fd)
        self.assertEqual(os.stat(self.m.path("big")).st_size, 65536)


class InPlaceTest(UringCase):
    MOUNT_OPTS = ("--uring=on", "--mem-size=32M", "--bucket-size=8M")

    def direct_read(self, name, n):
        fd = os.open(self.m.path(name), os.O_RDONLY | os.O_DIRECT)
        try:
            buf = mmap.mmap(-1, n)
            self.assertEqual(os.readv(fd, [buf]), n)
            return bytes(buf)
        finally:
            os.close(fd)

    def tier(self, name):
        return os.getxattr(self.m.path(name), "user.kvfs.tier").decode()

    def test_ssd_value_read_into_the_payload(self):
        data = os.urandom(512 * 1024)
        kvfstest.write_file(self.m.path("v"), data)
        for i in range(40):  # other values push it out of the 32 MiB pool
            if self.tier("v") == "ssd":
                break
            kvfstest.write_file(self.m.path("f%02d" % i), os.urandom(4 << 20))
        kvfstest.wait_until(lambda: self.tier("v") == "ssd", timeout=30, what="v only on SSD")
        before = self.fuse()["uring_inplace_replies"]
        self.assertEqual(self.direct_read("v", len(data)), data)  # the whole value, once
        self.assertEqual(self.fuse()["uring_inplace_replies"], before + 1)
        # a value in DRAM, and part of one on SSD, are read as before
        kvfstest.write_file(self.m.path("w"), data[:8192])
        self.assertEqual(self.direct_read("w", 8192), data[:8192])
        self.assertEqual(self.direct_read("v", 4096), data[:4096])
        self.assertEqual(self.fuse()["uring_inplace_replies"], before + 1)


class OffTest(UringCase):
    PARAM_VALUE = "N"
    MOUNT_OPTS = ("--uring=auto", "--mem-size=256M", "--ssd-size=0")

    def test_on_refused_auto_falls_back(self):
        self.assertEqual(self.m.config()["fuse_transport"], "/dev/fuse")
        self.assertEqual(self.fuse()["uring_requests"], 0)
        kvfstest.write_file(self.m.path("f"), b"z" * 100)
        self.assertEqual(kvfstest.read_file(self.m.path("f")), b"z" * 100)
        root = self.m.root + "-on"
        os.makedirs(os.path.join(root, "mnt"))
        try:
            r = subprocess.run([kvfstest.KVFS, "-f", "--uring=on", "--mem-size=64M",
                                os.path.join(root, "data"), os.path.join(root, "mnt")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            self.assertEqual(r.returncode, 1, r.stdout)
            lines = r.stdout.decode().strip().splitlines()
            self.assertEqual(len(lines), 1, lines)
            self.assertIn("enable_uring", lines[0])
            self.assertFalse(kvfstest.is_mounted(os.path.join(root, "mnt")))
        finally:
            subprocess.run(["rm", "-rf", root])

    def test_off_never_uses_the_ring(self):
        set_param("Y")
        m = self.mount(opts=("--uring=off", "--mem-size=256M", "--ssd-size=0"), name="off")
        kvfstest.write_file(m.path("f"), b"q" * 100)
        self.assertEqual(kvfstest.read_file(m.path("f")), b"q" * 100)
        self.assertEqual(m.config()["fuse_transport"], "/dev/fuse")
        self.assertEqual(m.config()["uring"], "off")
        self.assertEqual(self.fuse(m)["uring_requests"], 0)


if __name__ == "__main__":
    kvfstest.main(skip_if=why_not)
