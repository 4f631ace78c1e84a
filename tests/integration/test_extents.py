# SPDX-License-Identifier: MIT
"""Values made of 2 MiB extents (issue 9), as far as they are built: a
small write into a large sealed value copies only the extent it touches
(pool.cow_bytes in .kvfs/stats), with the bytes right before and after a
restart, and concurrent readers undisturbed; EFBIG past the largest file
(16 TiB); on the SSD, one record per extent plus a manifest (format
version 2), read back across extent boundaries, changed in place, moved
by compaction (kill -9 after the move), checked by --fsck and rebuilt by
--salvage; holes: a write far past the end, truncate up, fallocate
(unwritten) and PUNCH_HOLE take no memory and no SSD space for what they
do not write, read as zeros, show in st_blocks and SEEK_DATA/SEEK_HOLE,
in DRAM and from the SSD after a restart."""

import errno
import hashlib
import mmap
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
from kvfstest import pattern, read_file, write_file  # noqa: E402
from test_ssd import (SsdTestCase, bucket_records, fsync_path, read_direct,  # noqa: E402
                      run_kvfs, tier_of)

EXTENT = 2 << 20
SIZE = 64 << 20  # 32 extents
MAX_SIZE = 16 << 40  # core/obj.h KV_MAX_VALUE
REC_WHOLE, REC_EXTENT, REC_MANIFEST = 1, 2, 4  # ssd/format.h KV_REC_*
MANIFEST_INDEX = 0xFFFFFFFF


def records(data_dir):
    """{key: [(seq, flags, index, value_len)]} of every record in DATA_DIR's
    buckets."""
    out = {}
    bdir = os.path.join(data_dir, "buckets")
    for n in sorted(os.listdir(bdir)):
        if n.endswith(".kvb"):
            for r in bucket_records(os.path.join(bdir, n)):
                out.setdefault(r.key.decode().lstrip("/"), []).append(
                    (r.seq, r.flags, r.index, r.value_len))
    return out


def newest_manifest(data_dir, key):
    """(seq, [(birth seq, index, len)]) of the newest manifest record of key:
    struct kv_manifest (size, seq, count, pad), then kv_manifest_ent each."""
    import struct
    best = None
    bdir = os.path.join(data_dir, "buckets")
    for n in sorted(os.listdir(bdir)):
        p = os.path.join(bdir, n)
        if not n.endswith(".kvb"):
            continue
        for r in bucket_records(p):
            if (r.key.decode().lstrip("/") == key and r.flags == REC_MANIFEST and
                    (best is None or r.seq > best[0])):
                best = (r.seq, p, r.off + r.head_len, r.value_len)
    assert best, "no manifest of %s" % key
    with open(best[1], "rb") as f:
        f.seek(best[2])
        v = f.read(best[3])
    _, seq, count, _ = struct.unpack_from("<QQII", v)
    return seq, [struct.unpack_from("<QII", v, 24 + 16 * i) for i in range(count)]


def expected_records(size):
    """The records of one version of a value of `size` bytes: a WHOLE one up
    to one extent, else one EXTENT record per extent and a MANIFEST."""
    if size <= EXTENT:
        return [(REC_WHOLE, 0, size)]
    n = (size + EXTENT - 1) // EXTENT
    return ([(REC_EXTENT, i, min(EXTENT, size - i * EXTENT)) for i in range(n)] +
            [(REC_MANIFEST, MANIFEST_INDEX, 24 + 16 * n)])


class ExtentCowTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=256M",)

    def cow(self, m):
        return m.stats()["pool"]["cow_bytes"]

    def overwrite(self, path, writes):
        fd = os.open(path, os.O_RDWR)
        try:
            for off, data in writes:
                self.assertEqual(os.pwrite(fd, data, off), len(data))
        finally:
            os.close(fd)

    def check_cow(self, m, path, model):
        cow0 = self.cow(m)
        # 4 KiB inside extent 18, then 4 KiB across the boundary of extents 20 and 21.
        writes = [(18 * EXTENT + 100, b"a" * 4096), (21 * EXTENT - 2048, b"b" * 4096)]
        self.overwrite(path, writes)
        for off, data in writes:
            model[off:off + len(data)] = data
        # One version. The first write copies extent 18, the one it touches,
        # while the old version still shares it; putting the new version in
        # place lets go of the old one, so extents 20 and 21 are no longer
        # shared when the second write comes and nothing more is copied.
        self.assertEqual(self.cow(m) - cow0, EXTENT)
        self.assertEqual(hashlib.sha256(read_file(path)).hexdigest(),
                         hashlib.sha256(model).hexdigest())

    def test_small_writes_copy_only_their_extents_dram(self):
        m = self.mount(opts=list(self.MOUNT_OPTS) + kvfstest.dram_only_opts(), name="dram")
        p = m.path("big")
        model = bytearray(pattern("big", SIZE))
        write_file(p, bytes(model))
        used0 = m.stats()["pool"]["used"]
        self.check_cow(m, p, model)
        # The old version is gone: its copied extent went back to the pool.
        self.assertEqual(m.stats()["pool"]["used"], used0)
        # Another round, on the new version: again one extent.
        self.check_cow(m, p, model)

    def test_small_writes_copy_only_their_extents_ssd(self):
        if not kvfstest.has_ssd_tier():
            kvfstest.skip("no SSD tier in this build")
        data = tempfile.mkdtemp(prefix="kvfs-it-extents-", dir="/tmp")
        self.addCleanup(shutil.rmtree, data, True)
        m = self.mount(data=os.path.join(data, "d"), name="first")
        p = m.path("big")
        model = bytearray(pattern("big", SIZE))
        write_file(p, bytes(model))
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        self.check_cow(m, p, model)
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        m.stop()
        m2 = self.mount(data=os.path.join(data, "d"), name="again")
        self.assertEqual(hashlib.sha256(read_file(m2.path("big"))).hexdigest(),
                         hashlib.sha256(model).hexdigest())

    def test_readers_during_copy_on_write(self):
        """O_DIRECT readers (served from the pool under read guards, which
        hold the version they started on) run while a writer makes 40
        versions, each with a small write into a different extent: every
        read sees the original bytes outside the written ranges and, inside
        them, old or new bytes only; the end result is byte-exact."""
        m = self.m
        p = m.path("k")
        size = 8 * EXTENT + 12345
        orig = pattern("k", size)
        write_file(p, orig)
        spots = [((i * 5) % 8 * EXTENT + i * 4096 + 7, bytes([65 + i % 26]) * 10)
                 for i in range(40)]
        stop = threading.Event()
        errors = []

        def reader():
            buf = mmap.mmap(-1, (size + 4095) // 4096 * 4096)
            fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
            try:
                while not stop.is_set():
                    got = os.preadv(fd, [buf], 0)
                    data = bytearray(buf[:got])
                    if got != size:
                        errors.append("short read %d" % got)
                        return
                    for off, new in spots:
                        piece = bytes(data[off:off + len(new)])
                        if piece != new and piece != orig[off:off + len(new)]:
                            errors.append("torn bytes at %d" % off)
                            return
                        data[off:off + len(new)] = orig[off:off + len(new)]
                    if data != orig:
                        errors.append("an untouched byte changed")
                        return
            finally:
                os.close(fd)
                buf.close()

        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            for off, new in spots:
                self.overwrite(p, [(off, new)])
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.assertEqual(errors, [])
        model = bytearray(orig)
        for off, new in spots:
            model[off:off + len(new)] = new
        self.assertEqual(read_file(p), bytes(model))


class MaxSizeTest(kvfstest.KvfsTestCase):
    """The largest file is 16 TiB: a write, truncate or fallocate that would
    end past it fails with EFBIG and changes nothing."""

    MOUNT_OPTS = ("--mem-size=64M",)

    def test_efbig(self):
        p = self.m.path("k")
        write_file(p, b"hello")
        fd = os.open(p, os.O_RDWR)
        try:
            self.assertErrno(errno.EFBIG, os.pwrite, fd, b"x", MAX_SIZE)
            self.assertErrno(errno.EFBIG, os.pwrite, fd, b"xy" * 3000, MAX_SIZE + 12345)
            self.assertErrno(errno.EFBIG, os.ftruncate, fd, MAX_SIZE + 1)
            self.assertErrno(errno.EFBIG, os.truncate, p, MAX_SIZE + (1 << 30))
            self.assertErrno(errno.EFBIG, kvfstest.fallocate, fd, 0, MAX_SIZE - 4096, 8192)
            self.assertErrno(errno.EFBIG, kvfstest.fallocate, fd, 1, MAX_SIZE, 1)
            self.assertEqual(os.fstat(fd).st_size, 5)
        finally:
            os.close(fd)
        self.assertEqual(read_file(p), b"hello")


class ExtentRecordsTest(SsdTestCase):
    """Sealed values on the SSD, one record per extent (README "Extents")."""

    OPTS = ("--mem-size=64M", "--bucket-size=4M")
    SIZES = {"z": 0, "one": 1, "page": 4095, "ext": EXTENT, "ext1": EXTENT + 1,
             "d/three": 3 * EXTENT - 5, "d/seven": 12 * (1 << 20) + 777, "d/e/five": 5 * EXTENT}

    def put_all(self, m):
        keys = {}
        os.makedirs(m.path("d", "e"))
        for name, size in self.SIZES.items():
            keys[name] = bytearray(pattern(name, size))
            write_file(m.path(name), bytes(keys[name]))
        fsync_path(m.mnt, directory=True)  # syncfs: every value durable
        return keys

    def check_records(self, keys):
        """The newest version of every key is the records it should be: its
        WHOLE record, or its manifest naming, for each extent, an EXTENT
        record of the right length (born in that version or shared with an
        older one) that is in the buckets."""
        recs = records(self.data)
        for name, data in keys.items():
            newest = max(seq for seq, _, _, _ in recs[name])
            want = expected_records(len(data))
            if len(want) == 1:
                self.assertIn((newest, REC_WHOLE, 0, len(data)), recs[name], name)
                continue
            mseq, ents = newest_manifest(self.data, name)
            self.assertEqual(mseq, newest, name)
            self.assertEqual([(i, n) for _, i, n in ents],
                             [(i, n) for _, i, n in want[:-1]], name)
            for seq, i, n in ents:
                self.assertLessEqual(seq, newest, name)
                self.assertIn((seq, REC_EXTENT, i, n), recs[name], name)

    def check_reads(self, m, keys, what):
        for name, data in keys.items():
            p = m.path(name)
            with self.subTest(what=what, key=name):
                self.assertEqual(read_direct(p), bytes(data))
                self.assertEqual(read_file(p), bytes(data))
                # Reads that straddle extent boundaries, served by the daemon.
                for b in range(EXTENT, len(data), EXTENT):
                    for off, n in ((b - 8192, 16384), (b - (512 << 10), 1 << 20),
                                   (b - EXTENT // 2 - 4096, 3 << 20)):
                        off = max(0, off)
                        self.assertEqual(read_direct(p, off, n), bytes(data[off:off + n]),
                                         "%d bytes at %d" % (n, off))

    def test_records_reads_changes_compaction_crash_fsck_salvage(self):
        m = self.start("first")
        keys = self.put_all(m)
        m.stop()
        self.check_records(keys)

        m = self.start("second")
        for name in keys:
            self.assertEqual(tier_of(m.path(name)), "ssd", name)
        self.check_reads(m, keys, "after a restart, from the SSD")
        self.assertGreater(m.stats()["tier"]["ssd_hits"], 0)
        m.stop()

        # Changes to values only on the SSD: each reads back the extents it keeps.
        m = self.start("third")
        fd = os.open(m.path("d/seven"), os.O_RDWR)
        try:
            self.assertEqual(os.pwrite(fd, b"X" * 100, 5 * (1 << 20) + 3), 100)
        finally:
            os.close(fd)
        keys["d/seven"][5 * (1 << 20) + 3:5 * (1 << 20) + 103] = b"X" * 100
        os.truncate(m.path("d/e/five"), 3 * (1 << 20) + 5)
        del keys["d/e/five"][3 * (1 << 20) + 5:]
        os.truncate(m.path("ext1"), 77)
        del keys["ext1"][77:]
        fsync_path(m.mnt, directory=True)
        self.check_reads(m, keys, "changed")
        m.stop()
        self.check_records(keys)

        # Compaction moves extent records of the survivors; kill -9 after it.
        m = self.start("fourth", opts=list(self.OPTS) + ["--gc=off"])
        for name in ("one", "ext", "d/three"):
            os.unlink(m.path(name))
            del keys[name]
        fsync_path(m.mnt, directory=True)
        with open(m.path(".kvfs", "ctl"), "w") as f:
            f.write("gc\n")
        g = m.stats()["gc"]
        self.assertGreater(g["bytes_rewritten"], 0, g)
        self.assertEqual(g["csum_failures"], 0, g)
        self.check_reads(m, keys, "after compaction")
        self.crash(m)

        m = self.start("fifth")
        self.assertEqual(m.stats()["recovery"]["keys_lost"], 0)
        self.check_reads(m, keys, "after kill -9 past the moves")
        m.stop()
        self.check_records(keys)

        rc, out = run_kvfs("--fsck", self.data)
        self.assertEqual(rc, 0, out)
        self.assertIn("%d keys read back" % len(keys), out)

        # Salvage: the metadata gone, the manifests rebuild the large values.
        for n in os.listdir(self.data):
            if n == "checkpoint" or n.startswith("journal."):
                os.unlink(os.path.join(self.data, n))
        rc, out = run_kvfs("--salvage", self.data)
        self.assertEqual(rc, 0, out)
        mo = re.search(r"salvage: (\d+) keys rebuilt", out)
        self.assertTrue(mo, out)
        m = self.start("sixth")
        self.check_reads(m, keys, "after salvage")
        m.stop()


KEEP_SIZE, PUNCH_HOLE = 1, 2  # linux/falloc.h


class HolesTest(SsdTestCase):
    OPTS = ("--mem-size=32M", "--bucket-size=8M")
    GIB = 1 << 30

    def make(self, m):
        """{name: (size, {offset: bytes written})}: what each file holds."""
        files = {}
        # 4 KiB at 2 GiB of a new file, on a 32 MiB pool.
        fd = os.open(m.path("far"), os.O_CREAT | os.O_WRONLY, 0o644)
        self.assertEqual(os.pwrite(fd, b"F" * 4096, 2 * self.GIB), 4096)
        os.close(fd)
        files["far"] = (2 * self.GIB + 4096, {2 * self.GIB: b"F" * 4096})
        # truncate up to 1 TiB, then a few bytes at 100 GiB + 3.
        write_file(m.path("tera"), b"head")
        os.truncate(m.path("tera"), 1 << 40)
        fd = os.open(m.path("tera"), os.O_WRONLY)
        self.assertEqual(os.pwrite(fd, b"middle", 100 * self.GIB + 3), 6)
        os.close(fd)
        files["tera"] = (1 << 40, {0: b"head", 100 * self.GIB + 3: b"middle"})
        # fallocate twice the pool, then 1 MiB written into it.
        data = pattern("alloc", 1 << 20)
        fd = os.open(m.path("alloc"), os.O_CREAT | os.O_RDWR, 0o644)
        kvfstest.fallocate(fd, 0, 0, 64 << 20)
        kvfstest.fallocate(fd, KEEP_SIZE, 0, 128 << 20)
        self.assertEqual(os.fstat(fd).st_size, 64 << 20)
        self.assertEqual(os.pwrite(fd, data, 10 << 20), len(data))
        os.close(fd)
        files["alloc"] = (64 << 20, {10 << 20: data})
        self.reserved = {"alloc": 128 << 20}  # allocated, unwritten (its extent 5 written)
        # 8 MiB of data, [1 MiB, 7 MiB) punched.
        data = bytearray(pattern("punch", 8 << 20))
        write_file(m.path("punch"), bytes(data))
        fd = os.open(m.path("punch"), os.O_RDWR)
        self.assertErrno(errno.EOPNOTSUPP, kvfstest.fallocate, fd, PUNCH_HOLE, 0, 4096)
        kvfstest.fallocate(fd, PUNCH_HOLE | KEEP_SIZE, 1 << 20, 6 << 20)
        kvfstest.fallocate(fd, PUNCH_HOLE | KEEP_SIZE, 100 << 20, 4096)  # past the end
        os.close(fd)
        data[1 << 20:7 << 20] = bytes(6 << 20)
        files["punch"] = (8 << 20, {0: bytes(data)})
        # A small sparse value: one WHOLE record of zeros.
        os.truncate(write_file(m.path("small"), b"") or m.path("small"), 1 << 20)
        files["small"] = (1 << 20, {})
        return files

    def check(self, m, files, what):
        for name, (size, writes) in files.items():
            p = m.path(name)
            with self.subTest(what=what, key=name):
                st = os.stat(p)
                self.assertEqual(st.st_size, size)
                # Allocated: the extents written and those reserved, never the holes.
                resv = getattr(self, "reserved", {}).get(name, 0)
                self.assertGreaterEqual(st.st_blocks * 512, resv)
                self.assertLessEqual(st.st_blocks * 512, resv + 3 * EXTENT * max(1, len(writes)))
                for off, data in writes.items():
                    self.assertEqual(read_direct(p, off // 4096 * 4096, 4096 + len(data)
                                                 // 4096 * 4096 + 4096)[off % 4096:][:len(data)],
                                     data)
                    with open(p, "rb") as f:
                        f.seek(off)
                        self.assertEqual(f.read(len(data)), data)
                # Holes read as zeros, also across a hole/data boundary.
                with open(p, "rb") as f:
                    for off in (size // 3, size // 2 + 12345, size - 10):
                        if not any(o <= off < o + len(d) for o, d in writes.items()):
                            f.seek(off)
                            self.assertEqual(f.read(1), b"\0", "byte %d" % off)
        p = m.path("far")
        fd = os.open(p, os.O_RDONLY)
        try:
            self.assertEqual(os.lseek(fd, 0, os.SEEK_DATA), 2 * self.GIB)
            self.assertEqual(os.lseek(fd, 0, os.SEEK_HOLE), 0)
            self.assertEqual(os.lseek(fd, 2 * self.GIB, os.SEEK_HOLE), 2 * self.GIB + 4096)
            self.assertErrno(errno.ENXIO, os.lseek, fd, 2 * self.GIB + 4096, os.SEEK_DATA)
        finally:
            os.close(fd)
        fd = os.open(m.path("punch"), os.O_RDONLY)
        try:
            self.assertEqual(os.lseek(fd, 0, os.SEEK_HOLE), EXTENT)
            self.assertEqual(os.lseek(fd, EXTENT, os.SEEK_DATA), 3 * EXTENT)
        finally:
            os.close(fd)
        fd = os.open(m.path("tera"), os.O_RDONLY)
        try:
            self.assertEqual(os.lseek(fd, 1, os.SEEK_DATA), 1)
            self.assertEqual(os.lseek(fd, EXTENT, os.SEEK_DATA), 100 * self.GIB)
            self.assertEqual(os.lseek(fd, 100 * self.GIB + 7, os.SEEK_HOLE), 100 * self.GIB + EXTENT)
        finally:
            os.close(fd)
        full = read_file(m.path("punch"))
        self.assertEqual(full, files["punch"][1][0])

    def test_fallocate_beyond_the_ssd_quota(self):
        """A fallocate the pool could hold but the SSD quota cannot: ENOSPC
        at once (not the pool's room: nothing to wait for, never a loop of
        retries), the file unchanged."""
        m = self.start("quota", opts=("--mem-size=64M", "--ssd-size=16M", "--bucket-size=1M"))
        p = m.path("q")
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"head")
            self.assertErrno(errno.ENOSPC, kvfstest.fallocate, fd, 0, 0, 32 << 20)
            self.assertEqual(os.fstat(fd).st_size, 4)
        finally:
            os.close(fd)
        self.assertEqual(read_file(p), b"head")
        m.stop()

    def test_sparse_files_in_dram_and_on_the_ssd(self):
        m = self.start("first")
        files = self.make(m)
        self.check(m, files, "in DRAM")
        self.assertLess(m.stats()["pool"]["used"], 24 << 20)
        fsync_path(m.mnt, directory=True)
        m.stop()
        # On the SSD: only the extents written (and the small value) take space.
        du = sum(os.path.getsize(os.path.join(self.data, "buckets", n))
                 for n in os.listdir(os.path.join(self.data, "buckets")))
        self.assertLess(du, 48 << 20)
        recs = records(self.data)

        def newest(name):
            top = max(seq for seq, _, _, _ in recs[name])
            return sorted((f, i) for seq, f, i, _ in recs[name] if seq == top)

        self.assertEqual(newest("far"), [(REC_EXTENT, 1024), (REC_MANIFEST, MANIFEST_INDEX)])
        self.assertEqual(newest("small"), [(REC_WHOLE, 0)])
        m = self.start("second")
        for name in files:
            self.assertEqual(tier_of(m.path(name)), "ssd", name)
        self.check(m, files, "from the SSD")
        # A write into a hole of a value only on the SSD keeps the others.
        fd = os.open(m.path("alloc"), os.O_WRONLY)
        os.pwrite(fd, b"N" * 10, (40 << 20) + 5)
        os.close(fd)
        files["alloc"][1][(40 << 20) + 5] = b"N" * 10
        self.check(m, files, "changed")
        m.stop()
        rc, out = run_kvfs("--fsck", self.data)
        self.assertEqual(rc, 0, out)
        m = self.start("third")
        self.check(m, files, "after another restart")
        m.stop()


class LargerThanDramTest(SsdTestCase):
    """A file larger than the pool: its complete extents spill to the SSD
    while it is written (README "Extents", milestone 3)."""

    OPTS = ("--mem-size=32M", "--bucket-size=16M")
    SIZE = 4 * (32 << 20) + 12345  # 4x the pool, not extent-aligned

    def test_write_read_change_restart_4x_pool(self):
        m = self.start("first")
        data = bytearray(pattern("big", self.SIZE))
        p = m.path("big")
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            for off in range(0, self.SIZE, 1 << 20):
                self.assertEqual(os.pwrite(fd, data[off:off + (1 << 20)], off),
                                 min(1 << 20, self.SIZE - off))
            # While open: spilled extents read back, through this fd and another.
            self.assertEqual(os.pread(fd, 5000, 3 * EXTENT - 100), bytes(data[3 * EXTENT - 100:
                                                                             3 * EXTENT + 4900]))
            self.assertEqual(read_direct(p, 0, 8 << 20), bytes(data[:8 << 20]))
            # A change to a spilled extent reads it back first.
            self.assertEqual(os.pwrite(fd, b"Q" * 3000, EXTENT + 777), 3000)
            data[EXTENT + 777:EXTENT + 3777] = b"Q" * 3000
            # Cut into a spilled extent, then grow again: zeros past the cut.
            os.ftruncate(fd, 100 * (1 << 20) + 5)
            del data[100 * (1 << 20) + 5:]
            os.ftruncate(fd, 110 * (1 << 20))
            data += bytes(110 * (1 << 20) - len(data))
            self.assertEqual(os.pwrite(fd, b"end", len(data)), 3)
            data += b"end"
        finally:
            os.close(fd)
        self.assertLess(m.stats()["pool"]["used"], 33 << 20)
        want = hashlib.sha256(data).hexdigest()
        self.assertEqual(hashlib.sha256(read_file(p)).hexdigest(), want)
        # cp out and in again: another file 4x the pool.
        out = os.path.join(self.tmp, "copy")
        subprocess.run(["cp", p, out], check=True)
        subprocess.run(["cp", out, m.path("again")], check=True)
        os.unlink(out)
        self.assertEqual(hashlib.sha256(read_file(m.path("again"))).hexdigest(), want)
        m.stop()
        rc, out = run_kvfs("--fsck", self.data)
        self.assertEqual(rc, 0, out)
        m = self.start("second")
        for name in ("big", "again"):
            self.assertEqual(hashlib.sha256(read_direct(m.path(name))).hexdigest(), want, name)
        m.stop()

    def test_other_writers_find_room(self):
        """While two files each 3x the pool are written, still open, other
        files are written beside them: the big ones spill in the background
        (the offloader keeps room free), so no writer gets ENOSPC, and every
        byte reads back, before and after a restart."""
        m = self.start("first")
        big = {"big%d" % i: pattern("other-big%d" % i, 3 * (32 << 20)) for i in range(2)}
        small = {"s/%03d" % i: pattern("other-small%d" % i, (i % 4 + 1) * (256 << 10))
                 for i in range(48)}
        os.mkdir(m.path("s"))
        errors = []

        def write_big(name):
            try:
                data = big[name]
                fd = os.open(m.path(name), os.O_CREAT | os.O_WRONLY, 0o644)
                try:
                    for off in range(0, len(data), 1 << 20):
                        self.assertEqual(os.pwrite(fd, data[off:off + (1 << 20)], off),
                                         1 << 20)
                    done.wait(120)  # still open while the small files are written
                finally:
                    os.close(fd)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append("%s: %r" % (name, e))

        done = threading.Event()
        threads = [threading.Thread(target=write_big, args=(n,)) for n in big]
        for t in threads:
            t.start()
        try:
            for name, data in small.items():
                write_file(m.path(name), data)
        finally:
            done.set()
            for t in threads:
                t.join()
        self.assertEqual(errors, [])
        self.assertGreater(m.stats()["tier"]["spilled_bytes"], 64 << 20)
        for name, data in list(big.items()) + list(small.items()):
            self.assertEqual(hashlib.sha256(read_file(m.path(name))).hexdigest(),
                             hashlib.sha256(data).hexdigest(), name)
        m.stop()
        m = self.start("second")
        for name, data in list(big.items()) + list(small.items()):
            self.assertEqual(hashlib.sha256(read_direct(m.path(name))).hexdigest(),
                             hashlib.sha256(data).hexdigest(), name)
        m.stop()

    def test_unlinked_while_open_then_compacted(self):
        """Deleted while open, a spilled file still reads whole through its
        fd, compaction leaves its records alone, and after the last close
        a pass gives the space back."""
        m = self.start("first")
        data = pattern("gone", 3 * (32 << 20))
        p = m.path("gone")
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            for off in range(0, len(data), 1 << 20):
                os.pwrite(fd, data[off:off + (1 << 20)], off)
            self.assertGreater(m.stats()["tier"]["spilled_bytes"], 32 << 20)
            os.unlink(p)
            with open(m.path(".kvfs", "ctl"), "w") as f:
                f.write("gc\n")
            got = bytearray()
            for off in range(0, len(data), 1 << 20):
                got += os.pread(fd, 1 << 20, off)
            self.assertEqual(hashlib.sha256(got).hexdigest(), hashlib.sha256(data).hexdigest())
        finally:
            os.close(fd)
        kvfstest.wait_until(lambda: m.stats()["namespace"]["open_handles"] == 0, what="the release")
        with open(m.path(".kvfs", "ctl"), "w") as f:
            f.write("gc\n")
        ssd = m.stats()["ssd"]
        self.assertLess(ssd["used"], 40 << 20, ssd)
        m.stop()

    def test_deleted_first_then_written(self):
        """Created, deleted and only then written (a temporary file): it
        spills too, reads back whole, and leaves no live space behind."""
        m = self.start("first")
        p = m.path("tmp")
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.unlink(p)
            data = pattern("tmp", 3 * (32 << 20))
            for off in range(0, len(data), 1 << 20):
                os.pwrite(fd, data[off:off + (1 << 20)], off)
            self.assertGreater(m.stats()["tier"]["spilled_bytes"], 32 << 20)
            got = b"".join(os.pread(fd, 1 << 20, off) for off in range(0, len(data), 1 << 20))
            self.assertEqual(hashlib.sha256(got).hexdigest(), hashlib.sha256(data).hexdigest())
        finally:
            os.close(fd)
        kvfstest.wait_until(lambda: m.stats()["namespace"]["open_handles"] == 0,
                            what="the release")
        with open(m.path(".kvfs", "ctl"), "w") as f:
            f.write("gc\n")
        ssd = m.stats()["ssd"]
        self.assertLess(ssd["used"] - ssd["dead"], 1 << 20, ssd)
        m.stop()

    def test_stress_ng_iomix(self):
        """stress-ng's iomix (a temporary file written with O_SYNC by several
        processes at once, read, fsync'ed, fadvised, mmapped) on a file
        three times the pool: no error, fsck clean."""
        sng = shutil.which("stress-ng")
        if sng is None:
            self.skipTest("stress-ng is not installed (scripts/deps.sh installs it)")
        m = self.start("iomix")
        r = subprocess.run([sng, "--iomix", "1", "--iomix-bytes", "96m", "--timeout", "10s",
                            "--temp-path", m.mnt], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120)
        out = r.stdout.decode(errors="replace")
        self.assertEqual(r.returncode, 0, out)
        self.assertIn("successful run completed", out)
        self.assertNotIn("fail:", out)
        st = m.stats()
        self.assertEqual(kvfstest.errcount(st, "ENOSPC"), 0, st.get("errors"))
        self.assertEqual(kvfstest.errcount(st, "EIO"), 0, st.get("errors"))
        m.stop()
        rc, out = run_kvfs("--fsck", self.data)
        self.assertEqual(rc, 0, out)

    def test_kill_before_the_seal_leaves_nothing(self):
        m = self.start("first")
        write_file(m.path("small"), b"kept")
        fsync_path(m.path("small"))
        fd = os.open(m.path("half"), os.O_CREAT | os.O_WRONLY, 0o644)
        chunk = pattern("half", 1 << 20)
        for off in range(0, 3 * (32 << 20), 1 << 20):
            os.pwrite(fd, chunk, off)
        self.assertGreater(m.stats()["ssd"]["bytes_written"], 32 << 20)  # it spilled
        self.crash(m)
        os.close(fd)
        m = self.start("second")
        self.assertFalse(os.path.exists(m.path("half")))
        self.assertEqual(read_file(m.path("small")), b"kept")
        ssd = m.stats()["ssd"]
        # The spilled records are dead (or their buckets gone): nothing live but "small".
        self.assertLess(ssd["used"] - ssd["dead"], 1 << 20, ssd)
        m.stop()


class SharedExtentsTest(SsdTestCase):
    """A change to a value only on the SSD reads back and writes only the
    extents it touches; the new version shares the others' records."""

    OPTS = ("--mem-size=32M", "--bucket-size=16M")
    SIZE = 64 << 20  # twice the pool

    def change(self, m, data, i, off):
        """Writes 4 KiB of change i at off into v (and the model), closes, fsyncs."""
        fd = os.open(m.path("v"), os.O_WRONLY)
        try:
            self.assertEqual(os.pwrite(fd, b"%04d" % i * 1024, off), 4096)
        finally:
            os.close(fd)
        data[off:off + 4096] = b"%04d" % i * 1024
        fsync_path(m.path("v"))

    def test_salvage_after_a_rename(self):
        """--salvage finds a version's shared records by birth sequence number
        and extent index, whatever key they were written under: a value
        renamed, then changed, comes back whole under its new name."""
        m = self.start("first")
        data = bytearray(pattern("renamed", 8 * EXTENT))
        write_file(m.path("old"), bytes(data))
        fsync_path(m.path("old"))
        os.rename(m.path("old"), m.path("new"))
        fd = os.open(m.path("new"), os.O_WRONLY)
        self.assertEqual(os.pwrite(fd, b"N" * 4096, 3 * EXTENT + 5), 4096)
        os.close(fd)
        data[3 * EXTENT + 5:3 * EXTENT + 5 + 4096] = b"N" * 4096
        fsync_path(m.path("new"))
        fsync_path(m.mnt, directory=True)
        m.stop()
        seq, ents = newest_manifest(self.data, "new")
        self.assertGreater(sum(1 for birth, _, _ in ents if birth != seq), 0,
                           "the new version shares records written under the old name")
        for n in os.listdir(self.data):
            if n == "checkpoint" or n.startswith("journal."):
                os.unlink(os.path.join(self.data, n))
        rc, out = run_kvfs("--salvage", self.data)
        self.assertEqual(rc, 0, out)
        m = self.start("salvaged")
        self.assertEqual(hashlib.sha256(read_file(m.path("new"))).hexdigest(),
                         hashlib.sha256(bytes(data)).hexdigest())
        m.stop()

    def test_small_writes_into_a_sealed_value_twice_the_pool(self):
        m = self.start("first")
        data = bytearray(pattern("shared", self.SIZE))
        write_file(m.path("v"), bytes(data))
        fsync_path(m.path("v"))
        m.stop()
        m = self.start("second")
        self.assertEqual(tier_of(m.path("v")), "ssd")
        rng = random.Random(9)
        for i in range(12):
            off = rng.randrange(0, self.SIZE - 4096)
            w0 = m.stats()["ssd"]["bytes_written"]
            self.change(m, data, i, off)
            # Written: the one or two extents touched, their heads and the manifest.
            self.assertLessEqual(m.stats()["ssd"]["bytes_written"] - w0, 2 * EXTENT + (64 << 10))
        self.assertEqual(hashlib.sha256(read_file(m.path("v"))).hexdigest(),
                         hashlib.sha256(data).hexdigest())
        # A cut inside a borrowed extent, then a read through the cut.
        os.truncate(m.path("v"), 40 * (1 << 20) + 3)
        del data[40 * (1 << 20) + 3:]
        with open(m.path(".kvfs", "ctl"), "w") as f:
            f.write("gc\n")
        self.assertEqual(hashlib.sha256(read_direct(m.path("v"))).hexdigest(),
                         hashlib.sha256(data).hexdigest())
        m.stop()
        rc, out = run_kvfs("--fsck", self.data)
        self.assertEqual(rc, 0, out)
        m = self.start("third")
        self.assertEqual(hashlib.sha256(read_file(m.path("v"))).hexdigest(),
                         hashlib.sha256(data).hexdigest())
        # The superseded records of the untouched extents stayed live: a pass keeps them.
        with open(m.path(".kvfs", "ctl"), "w") as f:
            f.write("gc\n")
        self.assertEqual(hashlib.sha256(read_direct(m.path("v"))).hexdigest(),
                         hashlib.sha256(data).hexdigest())
        m.stop()

    def test_small_writes_into_a_sealed_value_in_dram(self):
        """The same for a value still in DRAM: the new version shares the
        records of the extents it did not change (tier.shared_bytes), its
        manifest names them with their older birth sequence numbers, and
        they survive compaction, a restart and --fsck."""
        m = self.start("first", opts=("--mem-size=256M", "--bucket-size=16M"))
        data = bytearray(pattern("dram-shared", self.SIZE))
        write_file(m.path("v"), bytes(data))
        fsync_path(m.path("v"))
        self.assertEqual(tier_of(m.path("v")), "dram+ssd")
        seq0, ents0 = newest_manifest(self.data, "v")
        rng = random.Random(11)
        touched = set()
        for i in range(8):
            off = rng.randrange(0, self.SIZE - 4096)
            w0, s0 = m.stats()["ssd"]["bytes_written"], m.stats()["tier"]["shared_bytes"]
            self.change(m, data, i, off)
            touched |= {off // EXTENT, (off + 4095) // EXTENT}
            st = m.stats()
            self.assertLessEqual(st["ssd"]["bytes_written"] - w0, 2 * EXTENT + (64 << 10))
            self.assertGreaterEqual(st["tier"]["shared_bytes"] - s0, self.SIZE - 2 * EXTENT)
            self.assertEqual(tier_of(m.path("v")), "dram+ssd")
        seq, ents = newest_manifest(self.data, "v")
        self.assertGreater(seq, seq0)
        self.assertEqual(len(ents), self.SIZE // EXTENT)
        for birth, index, length in ents:
            self.assertEqual(length, EXTENT)
            if index in touched:
                self.assertGreater(birth, seq0, "extent %d was written" % index)
            else:
                self.assertEqual(birth, seq0, "extent %d is shared" % index)
        with open(m.path(".kvfs", "ctl"), "w") as f:
            f.write("gc\n")
        m.stop()
        fsck_restart_check(self, "v", data)


def fsck_restart_check(test, name, data):
    """--fsck clean on the stopped store; after a restart the key is only on
    the SSD and reads back byte-exact."""
    rc, out = run_kvfs("--fsck", test.data)
    test.assertEqual(rc, 0, out)
    m = test.start("restarted")
    test.assertEqual(tier_of(m.path(name)), "ssd")
    test.assertEqual(hashlib.sha256(read_direct(m.path(name))).hexdigest(),
                     hashlib.sha256(data).hexdigest())
    m.stop()


class ReservationTest(SsdTestCase):
    """fallocate mode 0 and KEEP_SIZE reserve the SSD quota of the holes they
    cover (unwritten extents: zeros, no memory, no record): other files
    cannot take it, a write into them cannot fail for lack of it, st_blocks
    and ssd.reserved count it; punch, truncate and unlink give it back; it
    survives a restart and a kill -9 once synced."""

    OPTS = ("--mem-size=32M", "--ssd-size=96M", "--bucket-size=8M")
    MIB = 1 << 20

    def reserved(self, m):
        return m.stats()["ssd"]["reserved"]

    def assert_reserved(self, m, nbytes, what):
        """ssd.reserved promises nbytes of extents, with at most 2% for record heads."""
        got = self.reserved(m)
        self.assertGreaterEqual(got, nbytes, what)
        self.assertLessEqual(got, nbytes * 1.02, what)

    def test_reserved_room_is_kept_for_the_file(self):
        m = self.start("first")
        a = m.path("a")
        fd = os.open(a, os.O_CREAT | os.O_RDWR, 0o644)
        os.posix_fallocate(fd, 0, 48 * self.MIB)
        os.close(fd)  # sealed: fio's layout step
        self.assertEqual(os.stat(a).st_size, 48 * self.MIB)
        self.assertEqual(os.stat(a).st_blocks * 512, 48 * self.MIB)
        self.assert_reserved(m, 48 * self.MIB, "after fallocate")
        fd = os.open(a, os.O_RDONLY)
        self.assertErrno(errno.ENXIO, os.lseek, fd, 0, os.SEEK_DATA)  # unwritten: a hole
        self.assertEqual(os.pread(fd, 4096, 47 * self.MIB), bytes(4096))
        os.close(fd)
        # Another file cannot reserve what is promised ...
        fd = os.open(m.path("b"), os.O_CREAT | os.O_RDWR, 0o644)
        self.assertErrno(errno.ENOSPC, kvfstest.fallocate, fd, 0, 0, 48 * self.MIB)
        self.assertEqual(os.fstat(fd).st_size, 0)
        self.assertEqual(os.fstat(fd).st_blocks, 0)
        os.close(fd)
        # ... nor write into it: 56 MiB elsewhere do not fit.
        with self.assertRaises(OSError) as e:
            with open(m.path("c"), "wb") as f:
                for i in range(56):
                    f.write(pattern("c%d" % i, self.MIB))
                f.flush()
                os.fsync(f.fileno())
        self.assertEqual(e.exception.errno, errno.ENOSPC)
        os.unlink(m.path("c"))
        # The reserved file is written whole (its dead neighbour compacted meanwhile).
        data = pattern("a", 48 * self.MIB)
        with open(a, "r+b") as f:
            for off in range(0, len(data), 4 * self.MIB):
                self.assertEqual(os.pwrite(f.fileno(), data[off:off + 4 * self.MIB], off),
                                 4 * self.MIB)
            os.fsync(f.fileno())
        self.assertEqual(self.reserved(m), 0)
        self.assertEqual(os.stat(a).st_blocks * 512, 48 * self.MIB)
        self.assertEqual(read_file(a), data)
        m.stop()
        fsck_restart_check(self, "a", data)

    def test_reservations_survive_restart_and_crash(self):
        m = self.start("first")
        d, k = m.path("d"), m.path("k")
        with open(d, "wb") as f:
            kvfstest.fallocate(f.fileno(), 0, 0, 32 * self.MIB)
            f.write(b"head")
            os.fsync(f.fileno())
        with open(k, "wb") as f:  # KEEP_SIZE: past the end
            kvfstest.fallocate(f.fileno(), KEEP_SIZE, 0, 10 * self.MIB)
            os.fsync(f.fileno())
        self.assertEqual(os.stat(k).st_size, 0)
        self.assertEqual(os.stat(k).st_blocks * 512, 10 * self.MIB)
        # d: extent 0 holds data, its 15 others are reserved; k: 5 past its end
        self.assert_reserved(m, 20 * EXTENT, "d and k")
        self.crash(m)
        m = self.start("after kill -9")
        d, k = m.path("d"), m.path("k")
        self.assert_reserved(m, 20 * EXTENT, "after kill -9")
        self.assertEqual(os.stat(d).st_size, 32 * self.MIB)
        self.assertEqual(os.stat(k).st_size, 0)
        self.assertEqual(os.stat(k).st_blocks * 512, 10 * self.MIB)
        self.assertGreaterEqual(os.stat(d).st_blocks * 512, 32 * self.MIB)
        self.assertEqual(read_file(d)[:8], b"head\0\0\0\0")
        # Room promised is room kept: 96 MiB hold d, k and ~40 MiB more, not 64.
        fd = os.open(m.path("e"), os.O_CREAT | os.O_RDWR, 0o644)
        self.assertErrno(errno.ENOSPC, kvfstest.fallocate, fd, 0, 0, 64 * self.MIB)
        os.close(fd)
        # A punch of whole extents, a truncate to the size, an unlink give it back.
        fd = os.open(d, os.O_RDWR)
        kvfstest.fallocate(fd, PUNCH_HOLE | KEEP_SIZE, 8 * self.MIB, 8 * self.MIB)
        os.close(fd)
        self.assert_reserved(m, 16 * EXTENT, "after the punch")
        os.truncate(k, 0)
        self.assertEqual(os.stat(k).st_blocks, 0)
        self.assert_reserved(m, 11 * EXTENT, "after truncating k to its size")
        fsync_path(m.mnt, directory=True)  # the journal: changes of reservations alone
        self.crash(m)
        m = self.start("after a second kill -9")
        self.assert_reserved(m, 11 * EXTENT, "after a second kill -9")
        self.assertEqual(os.stat(m.path("k")).st_blocks, 0)
        m.stop()
        m = self.start("after a clean restart")
        d = m.path("d")
        self.assert_reserved(m, 11 * EXTENT, "after a clean restart")
        fd = os.open(m.path("e"), os.O_RDWR)
        kvfstest.fallocate(fd, 0, 0, 40 * self.MIB)  # fits now
        os.close(fd)
        self.assert_reserved(m, 31 * EXTENT, "e too")
        os.unlink(d)
        os.unlink(m.path("e"))
        kvfstest.wait_until(lambda: self.reserved(m) == 0, what="reservations given back")
        m.stop()
        rc, out = run_kvfs("--fsck", self.data)
        self.assertEqual(rc, 0, out)


class DramReservationTest(kvfstest.KvfsTestCase):
    """Without an SSD the pool keeps the promise: a fallocated file's
    unwritten extents hold pool room no other file can take, a write into
    them cannot fail for lack of it and copies nothing (a sealed fallocated
    file, fio's layout), and pool.reserved counts it until it is written."""

    MIB = 1 << 20

    def test_pool_room_is_kept_for_the_file(self):
        m = self.mount(opts=["--mem-size=64M"] + kvfstest.dram_only_opts(), name="dram")
        pool = lambda: m.stats()["pool"]
        a = m.path("a")
        fd = os.open(a, os.O_CREAT | os.O_RDWR, 0o644)
        os.posix_fallocate(fd, 0, 32 * self.MIB)
        os.close(fd)  # sealed
        self.assertEqual(pool()["reserved"], 32 * self.MIB)
        self.assertEqual(os.stat(a).st_blocks * 512, 32 * self.MIB)
        fd = os.open(m.path("b"), os.O_CREAT | os.O_RDWR, 0o644)
        self.assertErrno(errno.ENOSPC, kvfstest.fallocate, fd, 0, 0, 40 * self.MIB)
        self.assertEqual(os.fstat(fd).st_size, 0)
        os.close(fd)
        written = 0
        with self.assertRaises(OSError) as e:
            with open(m.path("c"), "wb") as f:
                for i in range(40):
                    f.write(pattern("c%d" % i, self.MIB))
                    f.flush()
                    written += 1
        self.assertEqual(e.exception.errno, errno.ENOSPC)
        self.assertLess(written, 33)
        cow0 = pool()["cow_bytes"]
        data = pattern("a", 32 * self.MIB)
        with open(a, "r+b") as f:
            for off in range(0, len(data), self.MIB):
                self.assertEqual(os.pwrite(f.fileno(), data[off:off + self.MIB], off), self.MIB)
        self.assertEqual(pool()["reserved"], 0)
        self.assertEqual(pool()["cow_bytes"], cow0)  # unwritten: nothing to copy
        self.assertEqual(read_file(a), data)
        os.unlink(m.path("c"))
        m.stop()


class ResidencyTest(SsdTestCase):
    """A clean value may be in DRAM in part (user.kvfs.tier
    partly-dram+ssd): a spilled file stays as far as it is in DRAM once
    sealed, a large value leaves DRAM an extent at a time under pressure,
    and (--promote=on) a read of a value larger than the pool brings in only
    the extents it reads; bytes, st_blocks, SEEK_DATA and changes stay
    right throughout."""

    OPTS = ("--mem-size=32M", "--bucket-size=16M", "--promote=on")

    def stats(self, m):
        st = m.stats()
        return st["tier"], st["pool"]

    def test_large_value_partly_in_dram(self):
        m = self.start("first")
        size = 96 << 20  # 3x the pool
        data = bytearray(pattern("resident", size))
        p = m.path("big")
        write_file(p, bytes(data))
        fsync_path(p)
        # Sealed after spilling: durable, part of it still in DRAM.
        self.assertEqual(tier_of(p), "partly-dram+ssd")
        self.assertEqual(os.stat(p).st_blocks * 512, size)
        tier0, pool0 = self.stats(m)
        # A small read of an extent only on the SSD brings in that extent, not the value.
        fd = os.open(p, os.O_RDONLY)
        try:
            ext = next(k for k in range(size // EXTENT)
                       if os.lseek(fd, k * EXTENT, os.SEEK_DATA) == k * EXTENT)
            self.assertEqual(ext, 0)
            self.assertEqual(os.lseek(fd, 0, os.SEEK_HOLE), size)
        finally:
            os.close(fd)
        off = 5 * EXTENT + 1000
        self.assertEqual(read_direct(p, 5 * EXTENT, 8192)[1000:1000 + 4096],
                         bytes(data[off:off + 4096]))
        tier1, pool1 = self.stats(m)
        self.assertGreater(tier1["promotions"], tier0["promotions"])
        self.assertLessEqual(tier1["promotions"] - tier0["promotions"], 1)
        self.assertLessEqual(pool1["used"] - pool0["used"], EXTENT)
        self.assertEqual(tier_of(p), "partly-dram+ssd")
        # Read again: from DRAM.
        self.assertEqual(read_direct(p, 5 * EXTENT, 8192)[1000:1000 + 4096],
                         bytes(data[off:off + 4096]))
        tier2, _ = self.stats(m)
        self.assertEqual(tier2["ssd_hits"], tier1["ssd_hits"])
        self.assertGreater(tier2["dram_hits"], tier1["dram_hits"])
        # The whole value reads right, part from DRAM, part from the SSD.
        self.assertEqual(hashlib.sha256(read_file(p)).hexdigest(),
                         hashlib.sha256(data).hexdigest())
        # A change to a version partly in DRAM: only the extents touched are written.
        w0 = m.stats()["ssd"]["bytes_written"]
        fd = os.open(p, os.O_WRONLY)
        try:
            for at in (5 * EXTENT + 10, 40 * EXTENT + 7):  # one in DRAM, one likely not
                self.assertEqual(os.pwrite(fd, b"W" * 5000, at), 5000)
                data[at:at + 5000] = b"W" * 5000
        finally:
            os.close(fd)
        fsync_path(p)
        self.assertLessEqual(m.stats()["ssd"]["bytes_written"] - w0, 2 * EXTENT + (64 << 10))
        self.assertEqual(hashlib.sha256(read_file(p)).hexdigest(),
                         hashlib.sha256(data).hexdigest())
        m.stop()
        fsck_restart_check(self, "big", data)

    def test_eviction_by_extent(self):
        """Pressure takes the last extents of a large clean value, not all
        of it; a read (it fits the pool) brings the rest back."""
        m = self.start("first", opts=("--mem-size=32M", "--bucket-size=16M", "--promote=on"))
        big = pattern("evict-part", 20 << 20)
        write_file(m.path("big"), big)
        fsync_path(m.path("big"))
        self.assertEqual(tier_of(m.path("big")), "dram+ssd")
        ev0 = m.stats()["tier"]["evictions"]
        write_file(m.path("other"), pattern("evict-other", 10 << 20))
        fsync_path(m.path("other"))
        kvfstest.wait_until(lambda: m.stats()["tier"]["evictions"] > ev0, timeout=10,
                            what="an eviction")
        self.assertEqual(tier_of(m.path("big")), "partly-dram+ssd")
        _, pool = self.stats(m)
        self.assertEqual(hashlib.sha256(read_direct(m.path("big"))).hexdigest(),
                         hashlib.sha256(big).hexdigest())
        self.assertEqual(tier_of(m.path("big")), "dram+ssd")
        self.assertEqual(read_file(m.path("other")), pattern("evict-other", 10 << 20))
        m.stop()


class RandomOpsTest(SsdTestCase):
    """fsx-style: random writes, reads, truncates, punches, fsyncs and
    reopens of one file up to three times the pool, every read checked
    against a model of the bytes (seeded: a failure names its seed)."""

    OPTS = ("--mem-size=32M", "--bucket-size=16M")
    MAX = 96 << 20
    OPS = 400

    def test_random_ops_with_a_model(self):
        seed = int(os.environ.get("KVFS_FSX_SEED", "1"))
        rng = random.Random(seed)
        m = self.start("first")
        p = m.path("fsx")
        model = bytearray()
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            for n in range(self.OPS):
                op = rng.random()
                what = "seed %d, op %d" % (seed, n)
                if op < 0.45 or len(model) < (8 << 20):
                    # Mostly appends and large writes until the file is big, then anywhere.
                    off = rng.randrange(0, min(self.MAX, len(model) + (4 << 20)))
                    data = rng.randbytes(rng.choice((1, 4096, 65536, 1 << 20, 3 << 20)))
                    data = data[:max(0, self.MAX - off)]
                    self.assertEqual(os.pwrite(fd, data, off), len(data), what)
                    if off > len(model):
                        model += bytes(off - len(model))
                    model[off:off + len(data)] = data
                elif op < 0.75:
                    off = rng.randrange(0, len(model))
                    ln = rng.choice((1, 4096, 1 << 20, 5 << 20))
                    self.assertEqual(os.pread(fd, ln, off), bytes(model[off:off + ln]), what)
                elif op < 0.82:
                    size = rng.randrange(0, self.MAX)
                    os.ftruncate(fd, size)
                    if size > len(model):
                        model += bytes(size - len(model))
                    else:
                        del model[size:]
                elif op < 0.88 and model:
                    off = rng.randrange(0, len(model))
                    ln = rng.randrange(1, 8 << 20)
                    kvfstest.fallocate(fd, PUNCH_HOLE | KEEP_SIZE, off, ln)
                    end = min(len(model), off + ln)
                    model[off:end] = bytes(end - off)
                elif op < 0.94:
                    os.fsync(fd)
                else:  # the last close seals; the next open starts a new version
                    os.close(fd)
                    fd = os.open(p, os.O_RDWR)
                self.assertEqual(os.fstat(fd).st_size, len(model), what)
        finally:
            os.close(fd)
        want = hashlib.sha256(model).hexdigest()
        self.assertEqual(hashlib.sha256(read_file(p)).hexdigest(), want)
        m.stop()
        rc, out = run_kvfs("--fsck", self.data)
        self.assertEqual(rc, 0, out)
        m = self.start("second")
        self.assertEqual(hashlib.sha256(read_file(m.path("fsx"))).hexdigest(), want)
        m.stop()


if __name__ == "__main__":
    kvfstest.main()
