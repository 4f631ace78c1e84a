# SPDX-License-Identifier: MIT
"""The ioctl ABI's promises (include/kvfs/kvfs_ioctl.h) where issue 25 found
them broken, driven with Python's own ioctl() on the structs of the header
(no libkvfs, so the file also runs against the ASan+UBSan daemon):

- a get compares the caller's memory with the whole size of the value
  before it copies anything (bug 1): values of 1, 5, 6 and 7 extents of
  2 MiB (core/obj.h KV_EXTENT) and one byte less and more, each got into
  memory one byte short, exact and one byte larger, from shared memory
  (HOST_SHM) and from the caller's own pages (HOST_PROC); the value in
  DRAM, only on the SSD (after a restart) and partly in DRAM (some
  extents let go under pressure, core/tier.c evict_part), the state
  checked with user.kvfs.tier before every get. Exact: every byte
  compared, and the memory around it untouched; short and larger:
  -EMSGSIZE, ik_size the value's whole size, and not one byte of the
  memory written (a guard pattern over the whole region). Partly in DRAM
  only the values of 5 extents and more: one of a single extent is in
  DRAM or not, and eviction takes part of a value only when the value is
  more than twice that part and an extent (core/tier.c evict), which 2
  MiB and one byte never is. Also the issue's own case: a 12 MiB key after
  a remount into 10 MiB and into 11 MiB of memory.
- regions registered through .kvfs/ctl (bug 2): one registered on a
  write-only descriptor A of .kvfs/ctl survives the open and close of
  other descriptors of .kvfs/ctl, of .kvfs/stats, of the mount's
  directories and of a key, by another process and by the same one (with
  regions of their own registered on each, so that the daemon's releases
  are awaited, not guessed), and still serves a put and a get (bytes
  compared); the regions of those other descriptors are gone with them
  (EBADF); when A closes, its region is gone: a later put, get or
  unregister naming its id through another fd fails with EBADF.
- KVFS_REMOVE_RECURSIVE of a tree holding an open key (bug 3): a tree of
  four levels with keys, an empty directory and a symlink, every name
  looked up before, a key held open and a directory of it held open
  during the remove; right after the ioctl every name is gone (lstat,
  fstatat through the held directory, listdir of the parent), the open
  key reads its old bytes and has no links left; after the last close the
  pool is empty again (the removed value freed), and the daemon's clean
  exit (the harness's check at unmount) is what LeakSanitizer checks in
  an ASan build (ASAN_OPTIONS gets detect_leaks=1 for every daemon of this
  file). A remove of the open key alone, and rm -rf by system calls of a
  tree with an open key, for comparison.
- errnos the header lists: ENAMETOOLONG for a HOST_SHM name that fills
  rg_shm_name without a NUL, ELOOP for a symlink in /dev/shm, EFBIG (per
  key) for a put of more than 16 TiB.

Runs in DRAM and with the daemon's default SSD tier; the tests that need
the SSD tier are skipped without one."""

import ctypes
import errno
import fcntl
import itertools
import mmap
import os
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
from kvfstest import pattern, read_file, write_file  # noqa: E402

MIB = 1 << 20
EXTENT = 2 * MIB  # core/obj.h KV_EXTENT
MAX_VALUE = 16 << 40  # core/obj.h KV_MAX_VALUE
TIER = "user.kvfs.tier"
PAGE = mmap.PAGESIZE
MAP_NORESERVE = 0x4000  # Linux; Python's mmap module names it only from 3.12

# ---------------------------------------------------------------------------
# the ABI, as include/kvfs/kvfs_ioctl.h lays it out

ABI_VERSION = 1
REGION = struct.Struct("<IIQ" "IIQQQiI16s64s256s")  # struct kvfs_ioc_region, 392 bytes
ID = struct.Struct("<IIQ" "II")  # struct kvfs_ioc_id, 24 bytes
BATCH_SIZE = 16376  # struct kvfs_ioc_batch
BATCH_HDR = struct.Struct("<IIQ" "IIIIQQ")  # its first 48 bytes
KEY = struct.Struct("<HHHHIIQQq")  # struct kvfs_ioc_key, 40 bytes
IOV = struct.Struct("<IIQQ")  # struct kvfs_ioc_iov, 24 bytes
assert (REGION.size, ID.size, BATCH_HDR.size, KEY.size, IOV.size) == (392, 24, 48, 40, 24)


def _iowr(nr, size):
    return (3 << 30) | (size << 16) | (0xCB << 8) | nr


IOC_REGION_REGISTER = _iowr(0x01, REGION.size)
IOC_REGION_UNREGISTER = _iowr(0x02, ID.size)
IOC_PUT = _iowr(0x11, BATCH_SIZE)
IOC_GET = _iowr(0x12, BATCH_SIZE)
IOC_REMOVE = _iowr(0x13, BATCH_SIZE)
HOST_SHM, HOST_PROC = 1, 2
PUT_MKDIR = 2
REMOVE_RECURSIVE = 1
KEY_DRAM, KEY_SSD = 8, 16

_names = itertools.count()


def register(fd, kind, length, addr=0, name=b""):
    """KVFS_IOC_REGION_REGISTER on fd; returns the id, raises OSError."""
    buf = bytearray(REGION.pack(REGION.size, ABI_VERSION, 0, kind, 0, 0, addr, length, 0, 0,
                                b"", b"", name))
    fcntl.ioctl(fd, IOC_REGION_REGISTER, buf)
    return REGION.unpack(buf)[4]


def unregister(fd, rid):
    fcntl.ioctl(fd, IOC_REGION_UNREGISTER, bytearray(ID.pack(ID.size, ABI_VERSION, 0, rid, 0)))


class Key:
    """One key's outcome: result (bytes, a count or -errno), size, flags."""

    def __init__(self, result, size, flags):
        self.result, self.size, self.flags = result, size, flags

    def __repr__(self):
        r = self.result if self.result >= 0 else "-" + errno.errorcode.get(-self.result, "?")
        return "Key(result=%s, size=%d, flags=%#x)" % (r, self.size, self.flags)


def batch(fd, cmd, keys, flags=0):
    """One batch ioctl on the directory fd: keys are (name, [(region id,
    offset, length), ...]). Returns a Key per key."""
    data = bytearray(BATCH_SIZE - BATCH_HDR.size)
    heap = len(keys) * KEY.size
    for i, (name, iovs) in enumerate(keys):
        iov_off = heap if iovs else 0
        for rid, off, length in iovs:
            IOV.pack_into(data, heap, rid, 0, off, length)
            heap += IOV.size
        nb = os.fsencode(name)
        data[heap:heap + len(nb)] = nb
        KEY.pack_into(data, i * KEY.size, heap, len(nb), iov_off, len(iovs), 0, 0, 0, 0, 0)
        heap = (heap + len(nb) + 7) & ~7
    buf = bytearray(BATCH_HDR.pack(BATCH_SIZE, ABI_VERSION, 0, len(keys), flags, 0, 0, 0, 0))
    buf += data
    fcntl.ioctl(fd, cmd, buf)
    out = []
    for i in range(len(keys)):
        k = KEY.unpack_from(buf, BATCH_HDR.size + i * KEY.size)
        out.append(Key(k[8], k[7], k[5]))
    return out


class Memory:
    """Memory of this process to register: "shm" (a POSIX shared-memory
    object in /dev/shm, mapped here too) or "proc" (anonymous pages of this
    process, HOST_PROC). .mm is the mapping, .fill() rewrites all of it."""

    def __init__(self, size, kind):
        self.size, self.kind, self.name = size, kind, None
        if kind == "shm":
            self.name = "/kvfs-it-contract-%d-%d" % (os.getpid(), next(_names))
            fd = os.open("/dev/shm" + self.name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, size)
                self.mm = mmap.mmap(fd, size)
            finally:
                os.close(fd)
            self.addr = 0
        else:
            self.mm = mmap.mmap(-1, size)
            c = ctypes.c_char.from_buffer(self.mm)
            self.addr = ctypes.addressof(c)
            del c

    def register(self, fd):
        if self.kind == "shm":
            return register(fd, HOST_SHM, self.size, name=self.name.encode())
        return register(fd, HOST_PROC, self.size, addr=self.addr)

    def close(self):
        self.mm.close()
        if self.name:
            try:
                os.unlink("/dev/shm" + self.name)
            except FileNotFoundError:
                pass


def first_difference(a, b):
    """The first offset where the byte strings differ, or None."""
    if a == b:
        return None
    step = 1 << 16
    for off in range(0, min(len(a), len(b)), step):
        if a[off:off + step] != b[off:off + step]:
            return off + next(i for i, (x, y) in enumerate(zip(a[off:off + step],
                                                                  b[off:off + step])) if x != y)
    return min(len(a), len(b))


def tier_of(path):
    try:
        return os.getxattr(path, TIER).decode()
    except OSError as e:
        return "(%s)" % errno.errorcode.get(e.errno, e.errno)


def is_asan(path):
    """Whether the kvfs binary was built with AddressSanitizer."""
    with open(path, "rb") as f:
        return b"__asan_init" in f.read()


def daemon_env():
    """Leak detection on in an ASan daemon whatever the caller's ASAN_OPTIONS
    say: a leak then makes the daemon exit non-zero, which the harness's
    stop() fails on. Harmless to a daemon without ASan."""
    opts = [o for o in os.environ.get("ASAN_OPTIONS", "").split(":")
            if o and not o.startswith("detect_leaks=")]
    return {"ASAN_OPTIONS": ":".join(opts + ["detect_leaks=1"])}


ioctl_stats = kvfstest.stats_by_read


class ContractCase(kvfstest.KvfsTestCase):
    """No mount in setUp: each test mounts what it needs (on self.data, a
    DATA_DIR that outlives its daemons, when it restarts one)."""

    def setUp(self):
        self.MOUNT_ENV = daemon_env()
        self.tmp = tempfile.mkdtemp(prefix="kvfs-it-contract-", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.tmp, True)  # runs after every unmount
        self.data = os.path.join(self.tmp, "data")

    def start(self, opts, data=None, name=None):
        m = self.mount(opts=list(opts), data=data or self.data, name=name)
        self.addCleanup(self.drain, m)  # after the closes registered later, before the stop
        return m

    @staticmethod
    def drain(m):
        """Makes sure the daemon has taken every release the kernel sent for
        the files closed so far, before an unmount: a close queues its
        release in the background, and an unmount aborts what is still
        queued, so the daemon would never free that handle (which an ASan
        daemon reports as a leak at exit). A statfs is sent after them and
        read by the daemon after them (/dev/fuse hands requests out in
        order), and the daemon finishes every request it has read before it
        exits."""
        if not m.done and m.proc.poll() is None and m.mounted():
            os.statvfs(m.mnt)

    def stop(self, m):
        self.drain(m)
        m.stop()

    def open_dir(self, path):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        self.addCleanup(os.close, fd)
        return fd

    def memory(self, size, kind):
        mem = Memory(size, kind)
        self.addCleanup(mem.close)
        return mem


# ---------------------------------------------------------------------------
# bug 1: a get into memory of another size


GUARD_OFF = PAGE  # the value's memory starts a page into the region: O_DIRECT could land there
SIZES = [n * EXTENT + d for n in (1, 5, 6, 7) for d in (-1, 0, 1)]


def key_name(size):
    n, d = divmod(size + 1, EXTENT)
    return "v%dx%+d" % (n, d - 1)


class GetSizeTest(ContractCase):
    """Bug 1: every get checks the caller's memory against the value's whole
    size before it copies anything, from DRAM, from the SSD and partly in
    DRAM."""

    def setUp(self):
        if not kvfstest.has_ssd_tier():
            self.skipTest("this kvfs has no SSD tier")
        super().setUp()

    def assertNoneWrong(self, bad, what):
        if bad:
            self.fail("%d %s:\n  %s" % (len(bad), what, "\n  ".join(bad)))

    def regions(self, dfd, largest):
        """A shared-memory and a HOST_PROC region, each room for the largest
        value plus one byte between guard pages; and the guard pattern."""
        size = (GUARD_OFF + largest + 1 + PAGE + PAGE - 1) // PAGE * PAGE
        mems = {k: self.memory(size, k) for k in ("shm", "proc")}
        return {k: (m, m.register(dfd)) for k, m in mems.items()}, pattern("guard", size)

    def put_values(self, dfd, mem, rid, sizes):
        """Puts each size's value by ioctl from mem; returns {name: data}."""
        vals = {}
        for s in sizes:
            name, data = key_name(s), pattern(key_name(s), s)
            mem.mm[GUARD_OFF:GUARD_OFF + s] = data
            r = batch(dfd, IOC_PUT, [(name, [(rid, GUARD_OFF, s)])])[0]
            self.assertEqual(r.result, s, "put %s: %r" % (name, r))
            vals[name] = data
        return vals

    def check_gets(self, dfd, regions, guard, name, data, state, bad, prepare):
        """Gets name into memory one byte short, exact and one byte larger,
        through every region, each after prepare() has made sure that the
        value is in `state`; appends what is wrong to bad."""
        s = len(data)
        for kind, (mem, rid) in sorted(regions.items()):
            for d in (-1, 0, 1):
                what = "%s (%d bytes, %s) into %d bytes of %s" % (name, s, state, s + d, kind)
                prepare()
                mem.mm[:] = guard
                r = batch(dfd, IOC_GET, [(name, [(rid, GUARD_OFF, s + d)])])[0]
                got = mem.mm[:]
                if d == 0:
                    if r.result != s or r.size != s:
                        bad.append("%s: %r, expected result and size %d" % (what, r, s))
                        continue
                    off = first_difference(got[GUARD_OFF:GUARD_OFF + s], data)
                    if off is not None:
                        bad.append("%s: byte %d differs" % (what, off))
                    if (got[:GUARD_OFF] != guard[:GUARD_OFF] or
                            got[GUARD_OFF + s:] != guard[GUARD_OFF + s:]):
                        bad.append("%s: memory outside the value's written" % what)
                    want = KEY_DRAM if state == "dram" else KEY_SSD
                    if not r.flags & want:
                        bad.append("%s: flags %#x without %#x" % (what, r.flags, want))
                else:
                    if r.result != -errno.EMSGSIZE or r.size != s:
                        bad.append("%s: %r, expected -EMSGSIZE with size %d" % (what, r, s))
                    off = first_difference(got, guard)
                    if off is not None:
                        bad.append("%s: memory written (region byte %d, value byte %d)"
                                   % (what, off, off - GUARD_OFF))

    def test_dram_then_ssd(self):
        """Every size from DRAM, then (after a restart) from the SSD only."""
        m = self.start(["--mem-size=256M"], name="dram")
        dfd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            regions, guard = self.regions(dfd, max(SIZES))
            vals = self.put_values(dfd, *regions["shm"], SIZES)
            bad = []
            for name, data in vals.items():
                def in_dram():
                    self.assertIn(tier_of(m.path(name)), ("dram", "dram+ssd"), name)
                self.check_gets(dfd, regions, guard, name, data, "dram", bad, in_dram)
                in_dram()
            self.assertNoneWrong(bad, "wrong gets from DRAM")
        finally:
            os.close(dfd)
        self.stop(m)

        m = self.start(["--mem-size=256M"], name="ssd")
        dfd = self.open_dir(m.mnt)
        regions, guard = self.regions(dfd, max(SIZES))
        bad = []
        for name, data in vals.items():
            def on_ssd():
                self.assertEqual(tier_of(m.path(name)), "ssd", name)
            self.check_gets(dfd, regions, guard, name, data, "ssd", bad, on_ssd)
            on_ssd()  # reads promote nothing by default
        self.assertNoneWrong(bad, "wrong gets from the SSD")
        self.assertGreater(ioctl_stats(m)["ioctl"]["ssd_direct_keys"], 0,
                           "the exact page-multiple gets into shared memory read straight there")

    def test_partly_in_dram(self):
        """Values of 5, 6 and 7 extents (and one byte less and more) partly in
        DRAM: a pool two MiB larger than the value, so that once the value is
        on the SSD (clean) the offloader's keeping a quarter of the pool
        free lets go of its last extent (evict_part). Reads promote nothing
        by default, but an exact get of a page multiple into HOST_PROC
        memory stages the value in the pool (core/batch.c get_staged),
        which evicts the rest of it: the value is put again before the
        next get then."""
        bad = []
        for n in (5, 6, 7):
            m = self.start(["--mem-size=%dM" % (2 * n + 2)], data=os.path.join(self.tmp, "p%d" % n),
                           name="partial%d" % n)
            dfd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
            try:
                sizes = [n * EXTENT + d for d in (-1, 0, 1)]
                regions, guard = self.regions(dfd, max(sizes))
                for s in sizes:
                    name = key_name(s)

                    def partly():
                        if tier_of(m.path(name)) != "partly-dram+ssd":
                            self.put_values(dfd, *regions["shm"], [s])
                        try:
                            kvfstest.wait_until(
                                lambda: tier_of(m.path(name)) == "partly-dram+ssd", timeout=30)
                        except AssertionError:
                            st = ioctl_stats(m)
                            self.fail("%s not partly in DRAM in 30 s but %s; pool %s; tier %s"
                                      % (name, tier_of(m.path(name)), st["pool"], st["tier"]))

                    self.check_gets(dfd, regions, guard, name, pattern(name, s),
                                    "partly-dram+ssd", bad, partly)
                    # gone, so that the next value is the pool's only one
                    self.assertEqual(batch(dfd, IOC_REMOVE, [(name, [])])[0].result, 1)
                for _, rid in regions.values():
                    unregister(dfd, rid)
            finally:
                os.close(dfd)
            self.stop(m)
        self.assertNoneWrong(bad, "wrong gets partly in DRAM")

    def test_issue_example(self):
        """The report: a 12 MiB key put by ioctl, the daemon restarted (the
        value only on the SSD), then got into 10 MiB (a truncated success
        before the fix) and into 11 MiB (-EMSGSIZE with ik_size 10 MiB)."""
        m = self.start(["--mem-size=64M"], name="put")
        dfd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            mem = self.memory(12 * MIB, "shm")
            rid = mem.register(dfd)
            data = pattern("k", 12 * MIB)
            mem.mm[:] = data
            self.assertEqual(batch(dfd, IOC_PUT, [("k", [(rid, 0, 12 * MIB)])])[0].result,
                             12 * MIB)
        finally:
            os.close(dfd)
        self.stop(m)
        m = self.start(["--mem-size=64M"], name="get")
        dfd = self.open_dir(m.mnt)
        self.assertEqual(tier_of(m.path("k")), "ssd")
        rid = mem.register(dfd)
        for mib in (10, 11):
            guard = pattern("guard%d" % mib, 12 * MIB)
            mem.mm[:] = guard
            r = batch(dfd, IOC_GET, [("k", [(rid, 0, mib * MIB)])])[0]
            self.assertEqual((r.result, r.size), (-errno.EMSGSIZE, 12 * MIB),
                             "12 MiB into %d MiB: %r" % (mib, r))
            self.assertIsNone(first_difference(mem.mm[:], guard),
                              "12 MiB into %d MiB: memory written" % mib)
        mem.mm[:] = bytes(12 * MIB)
        r = batch(dfd, IOC_GET, [("k", [(rid, 0, 12 * MIB)])])[0]
        self.assertEqual((r.result, r.size), (12 * MIB, 12 * MIB))
        self.assertIsNone(first_difference(mem.mm[:], data))


# ---------------------------------------------------------------------------
# bug 2: regions of .kvfs/ctl descriptors


class CtlRegionTest(ContractCase):
    """Bug 2: a region registered on a descriptor of .kvfs/ctl lives until
    that descriptor's last close, whatever other descriptors of the mount
    come and go."""

    def setUp(self):
        super().setUp()
        self.m = self.start(["--mem-size=64M"])
        self.ctl = self.m.path(".kvfs", "ctl")

    def regions(self):
        return ioctl_stats(self.m)["ioctl"]["regions"]

    def settle(self, want, what):
        """Waits until the daemon holds at most `want` regions (releases
        are sent asynchronously by the kernel after close()), then asserts it
        holds exactly that many."""
        kvfstest.wait_until(lambda: self.regions() <= want, timeout=20,
                            what="%s: %d regions left" % (what, want))
        self.assertEqual(self.regions(), want, what)

    def roundtrip(self, dfd, mem, rid, name):
        """A put from the region and a get back into another part of it."""
        data = pattern(name, 3 * PAGE + 5)
        mem.mm[:len(data)] = data
        r = batch(dfd, IOC_PUT, [(name, [(rid, 0, len(data))])])[0]
        self.assertEqual(r.result, len(data), "put %s through region %d: %r" % (name, rid, r))
        mem.mm[8 * PAGE:8 * PAGE + len(data)] = bytes(len(data))
        r = batch(dfd, IOC_GET, [(name, [(rid, 8 * PAGE, len(data))])])[0]
        self.assertEqual(r.result, len(data), "get %s into region %d: %r" % (name, rid, r))
        self.assertEqual(mem.mm[8 * PAGE:8 * PAGE + len(data)], data)
        self.assertEqual(read_file(self.m.path(name)), data)

    def child_opens_and_closes(self):
        """A child process opens, registers a region on, and closes: three
        write-only descriptors of .kvfs/ctl (one beside another), one of
        .kvfs/stats, the mount's root, a directory and a key; exits 0."""
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                mem = Memory(16 * PAGE, "proc")
                fds = []

                def one(path, flags):
                    fd = os.open(path, flags)
                    register(fd, HOST_PROC, PAGE, addr=mem.addr)
                    fds.append(fd)
                    return fd

                os.close(one(self.ctl, os.O_WRONLY))
                a, b = one(self.ctl, os.O_WRONLY), one(self.ctl, os.O_WRONLY)
                os.close(b)
                os.close(a)
                os.close(one(self.m.path(".kvfs", "stats"), os.O_RDONLY))
                os.close(one(self.m.mnt, os.O_RDONLY | os.O_DIRECTORY))
                os.close(one(self.m.path("d"), os.O_RDONLY | os.O_DIRECTORY))
                os.close(one(self.m.path("d", "key"), os.O_RDONLY))
                code = 0 if len(fds) == 7 else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(status, 0, "the child's opens, registrations and closes")

    def open_a(self):
        """Descriptor A of .kvfs/ctl (write-only) with a region on it, and one
        on a directory's handle (never at stake); both work."""
        m = self.m
        os.mkdir(m.path("d"))
        write_file(m.path("d", "key"), b"some bytes")
        self.dfd = self.open_dir(m.mnt)
        self.mem_a, self.mem_d = self.memory(16 * PAGE, "shm"), self.memory(16 * PAGE, "shm")
        self.a = os.open(self.ctl, os.O_WRONLY)
        self.addCleanup(lambda: self.a is None or os.close(self.a))
        self.rid_a = self.mem_a.register(self.a)
        self.rid_d = self.mem_d.register(self.dfd)
        self.assertEqual(self.regions(), 2)
        self.roundtrip(self.dfd, self.mem_a, self.rid_a, "a0")

    def close_a(self):
        """A's last close takes its region with it: its id then fails with
        EBADF through another fd, for a put, a get and an unregister."""
        dfd, rid_a = self.dfd, self.rid_a
        os.close(self.a)
        self.a = None
        self.settle(1, "after A's close its region is gone")
        r = batch(dfd, IOC_PUT, [("a3", [(rid_a, 0, 10)])])
        self.assertEqual(r[0].result, -errno.EBADF, "a put through A's old region: %r" % r[0])
        r = batch(dfd, IOC_GET, [("a0", [(rid_a, 0, 3 * PAGE + 5)])])
        self.assertEqual(r[0].result, -errno.EBADF, "a get into A's old region: %r" % r[0])
        self.assertErrno(errno.EBADF, unregister, dfd, rid_a)
        self.assertFalse(os.path.exists(self.m.path("a3")))
        self.roundtrip(dfd, self.mem_d, self.rid_d, "d0")

    def test_another_process_opens_and_closes(self):
        """A child opens and closes .kvfs/ctl (three times, two at once),
        .kvfs/stats, the root, a directory and a key, a region on each."""
        self.open_a()
        self.child_opens_and_closes()
        self.settle(2, "after another process closed .kvfs/ctl and other files, A's "
                    "region (and the directory's) must be left")
        self.roundtrip(self.dfd, self.mem_a, self.rid_a, "a1")
        self.close_a()

    def test_same_process_opens_and_closes(self):
        """While A is open: two more descriptors of .kvfs/ctl, one of
        .kvfs/stats and one of a directory, each with a region of its own
        (gone with it), closed; a dup of A closed (not A's last close)."""
        self.open_a()
        dfd = self.dfd
        os.close(os.dup(self.a))
        mem = self.memory(16 * PAGE, "shm")
        fds = []
        try:
            for path, flags in ((self.ctl, os.O_WRONLY), (self.ctl, os.O_WRONLY),
                                (self.m.path(".kvfs", "stats"), os.O_RDONLY),
                                (self.m.path("d"), os.O_RDONLY | os.O_DIRECTORY)):
                fds.append(os.open(path, flags))
                rid = mem.register(fds[-1])
            self.assertEqual(self.regions(), 6)
            self.roundtrip(dfd, mem, rid, "b0")
        finally:
            for fd in fds:
                os.close(fd)
        self.settle(2, "after this process closed other descriptors of .kvfs/ctl, A's "
                    "region (and the directory's) must be left")
        self.roundtrip(dfd, self.mem_a, self.rid_a, "a1")
        r = batch(dfd, IOC_PUT, [("b1", [(rid, 0, 10)])])[0]
        self.assertEqual(r.result, -errno.EBADF, "a region gone with its descriptor: %r" % r)
        self.close_a()


# ---------------------------------------------------------------------------
# bug 3: a recursive remove by ioctl of a tree holding an open key


class RecursiveRemoveTest(ContractCase):
    """Bug 3: KVFS_REMOVE_RECURSIVE reports every name it removes to the
    kernel as deleted, so that the kernel lets each node go at its last
    close; otherwise the removed nodes stay cached until the mount ends and
    leak (LeakSanitizer fails the daemon's exit in an ASan build)."""

    FILES = {"t/k0": 4096, "t/a/k1": 5000, "t/a/b/k2": 3 * MIB, "t/a/b/c/k3": 100,
             "t/a/b/c/held": 2 * MIB + 7}
    DIRS = ["t", "t/a", "t/a/b", "t/a/b/c", "t/a/e", "t/x"]
    XKEYS = ["t/x/x%02d" % i for i in range(20)]

    def setUp(self):
        super().setUp()
        self.m = self.start(["--mem-size=64M"])
        if is_asan(kvfstest.KVFS):  # what LeakSanitizer is asked to do in this daemon
            with open("/proc/%d/environ" % self.m.proc.pid, "rb") as f:
                env = f.read().split(b"\0")
            asan = [e for e in env if e.startswith(b"ASAN_OPTIONS=")]
            self.assertEqual(len(asan), 1, env)
            self.assertIn(b"detect_leaks=1", asan[0].split(b"=", 1)[1].split(b":"))
            self.assertNotIn(b"detect_leaks=0", asan[0])

    def make_tree(self):
        m = self.m
        for d in self.DIRS[1:]:
            os.makedirs(m.path(d))
        for f, size in self.FILES.items():
            write_file(m.path(f), pattern(f, size))
        dfd = self.open_dir(m.mnt)
        mem = self.memory(64 * 1024, "shm")
        rid = mem.register(dfd)
        mem.mm[:] = pattern("x", len(mem.mm))
        r = batch(dfd, IOC_PUT, [(n, [(rid, i * 1000, 1000 + i)]) for i, n in
                                 enumerate(self.XKEYS)])
        self.assertEqual([k.result for k in r], [1000 + i for i in range(len(self.XKEYS))])
        os.symlink("k2", m.path("t/a/b/s"))
        names = self.DIRS + list(self.FILES) + self.XKEYS + ["t/a/b/s"]
        for n in names:  # every name looked up: the kernel holds an entry for each
            os.lstat(m.path(n))
        return dfd, names

    def pool_used(self):
        return ioctl_stats(self.m)["pool"]["used"]

    def test_remove_tree_holding_an_open_key(self):
        """The tree removed by one ioctl while a key and a directory in it
        are open; everything gone at once, freed at the last close."""
        m = self.m
        dfd, names = self.make_tree()
        held_data = pattern("t/a/b/c/held", self.FILES["t/a/b/c/held"])
        held = os.open(m.path("t/a/b/c/held"), os.O_RDONLY)
        try:
            bfd = os.open(m.path("t/a/b"), os.O_RDONLY | os.O_DIRECTORY)
            try:
                r = batch(dfd, IOC_REMOVE, [("t", [])], flags=REMOVE_RECURSIVE)[0]
                self.assertEqual(r.result, len(self.FILES) + len(self.XKEYS), r)
                # right away: every name gone, also below the directory held open
                left = [n for n in names if kvfstest.errno_of(os.lstat, m.path(n)) != errno.ENOENT]
                self.assertEqual(left, [], "names left after the remove")
                for n in ("k2", "s", "c", "c/held"):
                    self.assertErrno(errno.ENOENT, os.lstat, n, dir_fd=bfd)
                self.assertNotIn("t", os.listdir(m.mnt))
                self.assertEqual(os.listdir(bfd), [])
                self.assertEqual(os.fstat(bfd).st_nlink, 0)
                # the open key: its old bytes, no links left
                self.assertEqual(os.fstat(held).st_nlink, 0)
                self.assertEqual(os.pread(held, len(held_data) + 10, 0), held_data)
                ns = ioctl_stats(m)["namespace"]
                self.assertEqual((ns["keys"], ns["dirs"], ns["symlinks"], ns["open_handles"]),
                                 (0, 1, 0, 1))
            finally:
                os.close(bfd)
        finally:
            os.close(held)
        # the last close lets the removed value go: the pool is empty again
        kvfstest.wait_until(lambda: self.pool_used() == 0, timeout=20,
                            what="the pool empty after the last close (%d bytes used)"
                            % self.pool_used())
        self.assertEqual(ioctl_stats(m)["namespace"]["open_handles"], 0)
        # a new tree of the same names is a new tree
        os.makedirs(m.path("t/a/b/c"))
        write_file(m.path("t/a/b/c/held"), b"new")
        self.assertEqual(read_file(m.path("t/a/b/c/held")), b"new")
        self.assertEqual(sorted(os.listdir(m.path("t/a/b"))), ["c"])
        # the harness's clean unmount then asserts exit status 0 (leaks included)

    def test_other_removes_holding_an_open_key(self):
        """For comparison, both without leaks before the fix: the open key
        removed alone by ioctl (its fd then shows no links left: the kernel
        hears of the delete; before the fix it kept st_nlink 1 until its
        attributes timed out), and rm -rf by system calls of a tree with an
        open key."""
        m = self.m
        dfd, names = self.make_tree()
        held_data = pattern("t/a/b/c/held", self.FILES["t/a/b/c/held"])
        held = os.open(m.path("t/a/b/c/held"), os.O_RDONLY)
        try:
            r = batch(dfd, IOC_REMOVE, [("t/a/b/c/held", [])])[0]
            self.assertEqual(r.result, 1, r)
            self.assertErrno(errno.ENOENT, os.lstat, m.path("t/a/b/c/held"))
            self.assertEqual(os.fstat(held).st_nlink, 0)
            self.assertEqual(os.pread(held, len(held_data) + 10, 0), held_data)
        finally:
            os.close(held)
        held = os.open(m.path("t/a/b/k2"), os.O_RDONLY)
        try:
            shutil.rmtree(m.path("t"))
            self.assertEqual(kvfstest.errno_of(os.lstat, m.path("t")), errno.ENOENT)
            self.assertEqual(os.pread(held, 10, 0),
                             pattern("t/a/b/k2", self.FILES["t/a/b/k2"])[:10])
        finally:
            os.close(held)
        kvfstest.wait_until(lambda: self.pool_used() == 0, timeout=20,
                            what="the pool empty after the last close (%d bytes used)"
                            % self.pool_used())


# ---------------------------------------------------------------------------
# errnos of the ABI header


class ErrnoTest(ContractCase):
    """ENAMETOOLONG, ELOOP and EFBIG, where kvfs_ioctl.h lists them."""

    def setUp(self):
        super().setUp()
        self.m = self.start(["--mem-size=64M"])
        self.dfd = self.open_dir(self.m.mnt)

    def shm_path(self, tag):
        p = "/dev/shm/kvfs-it-contract-%d-%s" % (os.getpid(), tag)
        self.addCleanup(lambda: os.path.lexists(p) and os.unlink(p))
        return p

    def test_shm_name_without_nul(self):
        """A HOST_SHM name that fills rg_shm_name (256 bytes) with no NUL:
        ENAMETOOLONG, the whole call; one byte shorter is a name (ENOENT:
        no such object)."""
        name = b"/" + b"n" * 255
        self.assertErrno(errno.ENAMETOOLONG, register, self.dfd, HOST_SHM, PAGE, name=name)
        self.assertErrno(errno.ENOENT, register, self.dfd, HOST_SHM, PAGE, name=name[:-1])
        self.assertEqual(ioctl_stats(self.m)["ioctl"]["regions"], 0)

    def test_shm_symlink(self):
        """A symlink in /dev/shm, to an object of the caller's or to nothing:
        ELOOP (shm_open does not follow links); its target itself registers."""
        target, link, dangling = (self.shm_path(t) for t in ("target", "link", "dangling"))
        with open(target, "wb") as f:
            f.truncate(16 * PAGE)
        os.symlink(target, link)
        os.symlink(target + "-none", dangling)
        for p in (link, dangling):
            self.assertErrno(errno.ELOOP, register, self.dfd, HOST_SHM, PAGE,
                             name=p[len("/dev/shm"):].encode())
        rid = register(self.dfd, HOST_SHM, 16 * PAGE, name=target[len("/dev/shm"):].encode())
        unregister(self.dfd, rid)

    def test_put_over_16_tib(self):
        """A put of 16 TiB and one byte (from a HOST_PROC region that big, only
        reserved, never touched): the key fails with EFBIG and nothing is
        stored; the other key of the batch is."""
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        length = MAX_VALUE + PAGE
        addr = libc.mmap(None, length, mmap.PROT_READ,
                         mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            self.skipTest("cannot reserve 16 TiB of address space: %s"
                          % os.strerror(ctypes.get_errno()))
        self.addCleanup(libc.munmap, addr, length)
        rid = register(self.dfd, HOST_PROC, length, addr=addr)
        r = batch(self.dfd, IOC_PUT, [("huge", [(rid, 0, MAX_VALUE + 1)]),
                                      ("small", [(rid, PAGE, 100)])])
        self.assertEqual(r[0].result, -errno.EFBIG, r[0])
        self.assertEqual(r[1].result, 100, r[1])
        self.assertFalse(os.path.exists(self.m.path("huge")))
        self.assertEqual(read_file(self.m.path("small")), bytes(100))
        unregister(self.dfd, rid)


if __name__ == "__main__":
    kvfstest.main()
