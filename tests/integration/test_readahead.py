# SPDX-License-Identifier: MIT
"""Read-ahead of bytes only on the SSD (README.md "Tiers", "Read-ahead";
core/readahead.h):

- a sequential reader of a file only on the SSD (a restart leaves every
  value there) has its next reads served from read-ahead buffers:
  tier.prefetch_bytes and tier.prefetch_hits rise, every byte is the file's
  (sha256), and nothing is read from the disk twice; with O_DIRECT reads
  (each FUSE read one syscall's 1 MiB) and with buffered reads (sha256sum,
  the kernel's own read-ahead in front);
- a file partly in DRAM (larger than the pool) the same way;
- random reads read nothing ahead;
- --readahead=0 reads nothing ahead; bad values are refused;
- a write into the file, and an unlink, while a reader streams it: the
  reader sees the new bytes (resp. keeps the old ones), never stale ones.

Counters only, never timings. Skipped (77) when the kvfs binary has no SSD
tier."""

import hashlib
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
import test_ssd  # noqa: E402
from test_ssd import MIB, SsdTestCase, put, tier_of  # noqa: E402

KIB = 1024
SIZE = 40 * MIB + 12345  # not a multiple of anything


def data_of(seed, size=SIZE):
    return random.Random(seed).randbytes(size)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def open_direct(path, flags=os.O_RDONLY):
    return os.open(path, flags | os.O_DIRECT)


def pread_direct(fd, off, length):
    """length bytes at off (multiples of 4 KiB) with O_DIRECT: one syscall, one FUSE read
    up to 1 MiB."""
    import mmap
    buf = mmap.mmap(-1, max(4096, length))
    try:
        n = os.preadv(fd, [memoryview(buf)[:length]], off)
        return bytes(buf[:n])
    finally:
        buf.close()


def write_direct(fd, off, data):
    import mmap
    buf = mmap.mmap(-1, len(data))
    try:
        buf.write(data)
        return os.pwritev(fd, [memoryview(buf)], off)
    finally:
        buf.close()


class ReadAheadTest(SsdTestCase):
    OPTS = ("--mem-size=32M", "--bucket-size=8M")

    def ssd_only(self, name, data, opts=None):
        """Puts `name` and restarts: the value is then only on the SSD."""
        m = self.start("put", opts=opts)
        put(m.path(name), data, fsync=True)
        m.stop()
        m = self.start("read", opts=opts)
        self.assertEqual(tier_of(m.path(name)), "ssd")
        return m

    @staticmethod
    def counters(m):
        s = m.stats()
        t = s["tier"]
        return {"bytes": t["prefetch_bytes"], "hits": t["prefetch_hits"],
                "unused": t["prefetch_unused_bytes"], "read": s["ssd"]["bytes_read"],
                "calls": kvfstest.op(s, "read")}

    def delta(self, m, before):
        now = self.counters(m)
        return {k: now[k] - before[k] for k in now}

    def read_sequential_direct(self, path, size, step=MIB):
        out = []
        fd = open_direct(path)
        try:
            for off in range(0, size, step):
                out.append(pread_direct(fd, off, step))
        finally:
            os.close(fd)
        return b"".join(out)

    def test_sequential_direct(self):
        data = data_of(1)
        m = self.ssd_only("big", data)
        c0 = self.counters(m)
        got = self.read_sequential_direct(m.path("big"), SIZE)
        self.assertEqual(sha(got), sha(data))
        d = self.delta(m, c0)
        reads = (SIZE + MIB - 1) // MIB
        # Every read after the first one or two is served from the read-ahead.
        self.assertGreaterEqual(d["hits"], reads - 2, d)
        self.assertGreaterEqual(d["bytes"], SIZE - 2 * MIB, d)
        # Nothing read twice: the disk gave about the file, in whole 64 KiB chunks.
        self.assertLessEqual(d["read"], SIZE + 2 * MIB, d)
        self.assertEqual(tier_of(m.path("big")), "ssd", "read-ahead is not a promotion")

    def test_sequential_buffered(self):
        data = data_of(2)
        m = self.ssd_only("big", data)
        c0 = self.counters(m)
        r = subprocess.run(["sha256sum", m.path("big")], stdout=subprocess.PIPE, check=True,
                           timeout=120)
        self.assertEqual(r.stdout.split()[0].decode(), sha(data))
        d = self.delta(m, c0)
        self.assertGreater(d["hits"], 0, d)
        self.assertGreaterEqual(d["hits"], d["calls"] // 2, d)
        self.assertLessEqual(d["read"], SIZE + 4 * MIB, d)

    def test_partly_in_dram(self):
        """A file twice the pool: its extents spill while it is written, part of it stays in
        DRAM; the reads of the rest are read ahead (kv_tier_read_mixed)."""
        size = 64 * MIB + 4096
        data = data_of(3, size)
        m = self.start("mixed")
        put(m.path("big"), data, fsync=True)
        self.assertIn(tier_of(m.path("big")), ("partly-dram+ssd", "ssd"))
        c0 = self.counters(m)
        self.assertEqual(sha(self.read_sequential_direct(m.path("big"), size)), sha(data))
        d = self.delta(m, c0)
        self.assertGreater(d["hits"], 0, d)
        self.assertGreater(d["bytes"], 0, d)

    def test_random_reads_read_nothing_ahead(self):
        data = data_of(4)
        m = self.ssd_only("big", data)
        c0 = self.counters(m)
        fd = open_direct(m.path("big"))
        try:
            # MiB: each read 5 MiB or more from the two before it, never at 0
            for mib in (1, 11, 21, 31, 6, 16, 26, 36, 1, 11, 21, 31, 6, 16, 26, 36):
                off = mib * MIB + 8 * KIB
                self.assertEqual(pread_direct(fd, off, 4 * KIB), data[off:off + 4 * KIB])
        finally:
            os.close(fd)
        d = self.delta(m, c0)
        self.assertEqual((d["bytes"], d["hits"]), (0, 0), d)

    def test_readahead_off(self):
        data = data_of(5)
        m = self.ssd_only("big", data, opts=list(self.OPTS) + ["--readahead=0"])
        self.assertEqual(m.config()["readahead"], "0")
        c0 = self.counters(m)
        self.assertEqual(sha(self.read_sequential_direct(m.path("big"), SIZE)), sha(data))
        d = self.delta(m, c0)
        self.assertEqual((d["bytes"], d["hits"]), (0, 0), d)

    def test_options(self):
        m = self.start("default")
        self.assertEqual(m.config()["readahead"], str(8 * MIB))
        m.stop()
        m = self.start("dash-o", opts=["-o", "mem_size=32M,readahead=2M"])
        self.assertEqual(m.config()["readahead"], str(2 * MIB))
        m.stop()
        for opt in ("--readahead=33M", "--readahead=x", "--readahead=-1"):
            r = subprocess.run([kvfstest.KVFS, opt, self.data, self.tmp],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
            out = r.stdout.decode(errors="replace").strip()
            self.assertEqual(r.returncode, 2, "%s: %s" % (opt, out))
            self.assertIn("readahead", out, opt)

    def test_write_while_streaming(self):
        """A reader streams the file; another fd overwrites bytes the read-ahead has (or will
        have) in flight: the reader sees the new bytes, and the file stays exact."""
        data = bytearray(data_of(6))
        m = self.ssd_only("big", bytes(data))
        rfd = open_direct(m.path("big"))
        wfd = open_direct(m.path("big"), os.O_WRONLY)
        try:
            got = [pread_direct(rfd, off, MIB) for off in range(0, 4 * MIB, MIB)]
            self.assertGreater(self.counters(m)["bytes"], 0, "read-ahead started")
            new = random.Random(66).randbytes(MIB)
            self.assertEqual(write_direct(wfd, 6 * MIB, new), MIB)
            data[6 * MIB:7 * MIB] = new
            got += [pread_direct(rfd, off, MIB) for off in range(4 * MIB, SIZE, MIB)]
        finally:
            os.close(wfd)
            os.close(rfd)
        self.assertEqual(sha(b"".join(got)), sha(bytes(data)))
        self.assertEqual(sha(self.read_sequential_direct(m.path("big"), SIZE)),
                         sha(bytes(data)))

    def test_unlink_while_streaming(self):
        """Unlinked while a reader streams it: the open fd keeps reading the old bytes; a new
        file of the same name is another key."""
        data = data_of(7)
        m = self.ssd_only("big", data)
        fd = open_direct(m.path("big"))
        try:
            got = [pread_direct(fd, off, MIB) for off in range(0, 3 * MIB, MIB)]
            os.unlink(m.path("big"))
            other = data_of(8, 8 * MIB)
            put(m.path("big"), other, fsync=True)
            got += [pread_direct(fd, off, MIB) for off in range(3 * MIB, SIZE, MIB)]
        finally:
            os.close(fd)
        self.assertEqual(sha(b"".join(got)), sha(data))
        self.assertEqual(sha(self.read_sequential_direct(m.path("big"), 8 * MIB)), sha(other))


if __name__ == "__main__":
    test_ssd.main()
