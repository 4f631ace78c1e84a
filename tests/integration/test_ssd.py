# SPDX-License-Identifier: MIT
"""The SSD tier under load (DESIGN.md "Object model": Tiers, Pressure,
Durability; README.md "Options", "Semantics"):

- the SSD options in their three spellings (--long, -o, KVFS_*), bad
  values refused, --ssd-size=0 is DRAM-only;
- 1 GiB in 4,000 keys of 4 KiB-4 MiB through a 64 MiB pool: eviction, reads
  from the buckets, a clean restart with every key, directory, mode and
  mtime intact (the mount root's attributes too);
- the SSD quota: ENOSPC (write, fsync, close) without losing anything
  stored, the mount usable after a delete, no silent loss at unmount;
- user.kvfs.tier (dram, dram+ssd, ssd) and --promote=on, with room in the
  pool and with a pool full of clean values;
- fio (examples/fio/seq.fio, crc32c verify) over 4x the pool, buffered and
  O_DIRECT.

Crash (kill -9), corruption (a flipped byte, kvfs --fsck) and salvage tests
are in test_ssd_crash.py, which imports the helpers below.

Skipped (77) when the kvfs binary has no SSD tier (does not advertise
--ssd-size in --help); the fio tests alone are skipped when fio is missing.

Environment: KVFS_SSD_BIG_BYTES (default 1G) and KVFS_SSD_BIG_KEYS (default
4000) size the big data set; KVFS_SSD_TIMINGS=1 prints timings."""

import collections
import errno
import hashlib
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
from kvfstest import pattern, read_file, write_file  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIO_JOBS_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "examples", "fio"))
TIER = "user.kvfs.tier"
MIB = 1 << 20

# ---------------------------------------------------------------------------
# helpers (also used by test_ssd_crash.py)


def digest(data):
    return hashlib.sha1(data).digest()


def tier_of(path):
    """user.kvfs.tier of path as a str, or None when it has none."""
    try:
        return os.getxattr(path, TIER).decode()
    except OSError as e:
        if e.errno == errno.ENODATA:
            return None
        raise


def put(path, data, fsync=False, mode=0o644):
    """Writes a whole key (O_TRUNC), optionally fsync'ed before the close."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        off = 0
        while off < len(view):
            off += os.write(fd, view[off:off + MIB])
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def read_direct(path, off=0, length=None):
    """The file (or `length` bytes at `off`, multiples of 4 KiB) read with
    O_DIRECT (past the kernel's page cache, so the daemon serves every byte,
    each FUSE read up to 1 MiB) into a page-aligned buffer."""
    import mmap
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        if length is None:
            length = os.fstat(fd).st_size - off
        buf = mmap.mmap(-1, max(KV_BLOCK, (length + KV_BLOCK - 1) // KV_BLOCK * KV_BLOCK))
        try:
            got = 0
            while got < length:
                n = os.preadv(fd, [memoryview(buf)[got:]], off + got)
                if n <= 0:
                    break
                got += n
            return bytes(buf[:min(got, length)])
        finally:
            buf.close()
    finally:
        os.close(fd)


def fsync_path(path, directory=False):
    fd = os.open(path, (os.O_RDONLY | os.O_DIRECTORY) if directory else os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def run_kvfs(*args, timeout=120):
    """Runs the kvfs binary offline (--fsck / --salvage); returns
    (exit status, output)."""
    r = subprocess.run([kvfstest.KVFS] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace")


def tree(mnt):
    """{relative path: os.stat_result} of everything under the mount, .kvfs
    excluded."""
    out = {}
    for root, dirs, files in os.walk(mnt):
        if root == mnt and ".kvfs" in dirs:
            dirs.remove(".kvfs")
        for n in dirs + files:
            p = os.path.join(root, n)
            out[os.path.relpath(p, mnt)] = os.lstat(p)
    return out


# On-disk format (ssd/format.h): bucket files start with a 4 KiB header,
# then records: a 4 KiB-aligned head (struct kv_rec_head, the key, chunk
# checksums, padding) and the value padded to 4 KiB.
KV_BLOCK = 4096
KV_REC_MAGIC = 0x31524B56
REC_HEAD = 64  # struct kv_rec_head, format version 2 (version 1: 56 bytes)


Rec = collections.namedtuple("Rec", "off key head_len value_len seq flags index")


def bucket_records(path):
    """[Rec] of one bucket file, walking the records from the first to the
    first non-record (version 1 heads are 56 bytes, flags 0, index 0;
    version 2 heads 64, with rh_flags and rh_ext_index)."""
    import struct
    out = []
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        off = KV_BLOCK
        while off + REC_HEAD <= size:
            f.seek(off)
            h = f.read(REC_HEAD)
            magic, version, flags, key_len, head_len, value_len, seq = struct.unpack_from(
                "<IHHIIQQ", h)
            if magic != KV_REC_MAGIC or head_len == 0 or head_len % KV_BLOCK:
                break
            index = struct.unpack_from("<I", h, 56)[0] if version >= 2 else 0
            f.seek(off + (56 if version == 1 else REC_HEAD))
            key = f.read(key_len)
            out.append(Rec(off, key, head_len, value_len, seq, flags, index))
            off += head_len + (value_len + KV_BLOCK - 1) // KV_BLOCK * KV_BLOCK
    return out


KV_BUCKET_MAGIC = 0x314B4342534656B4
KV_TRAILER_MAGIC = 0x31525442534656B4


def bucket_states(data_dir):
    """{bucket file name: (size, has a bucket header, ends with a trailer)}."""
    import struct
    out = {}
    bdir = os.path.join(data_dir, "buckets")
    for n in sorted(os.listdir(bdir)):
        if not n.endswith(".kvb"):
            continue
        with open(os.path.join(bdir, n), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            tail = b""
            if size >= 2 * KV_BLOCK:
                f.seek(size - KV_BLOCK)
                tail = f.read(8)
        hm = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        tm = struct.unpack("<Q", tail)[0] if len(tail) == 8 else 0
        out[n] = (size, hm == KV_BUCKET_MAGIC, tm == KV_TRAILER_MAGIC)
    return out


def bucket_inconsistencies(data_dir, headerless=True):
    """Sealed buckets whose trailer does not match the records that can be
    walked from the start (the trailer claims records that are not there),
    and (if headerless) bucket files without a valid header: a list of
    lines. (Right after a crash a file without a header is no fault: the
    daemon may die between creating a bucket file and writing its header;
    recovery must remove it.)"""
    import struct
    out = []
    for n, (size, hdr, trl) in bucket_states(data_dir).items():
        p = os.path.join(data_dir, "buckets", n)
        if not hdr:
            if headerless:
                out.append("%s: %d bytes, no bucket header" % (n, size))
            continue
        if not trl:
            continue
        with open(p, "rb") as f:
            f.seek(size - KV_BLOCK)
            _, _, index_off, _, count = struct.unpack("<QQQQQ", f.read(40))
        recs = bucket_records(p)
        end = KV_BLOCK
        if recs:
            off, _, head_len, value_len = recs[-1][:4]
            end = off + head_len + (value_len + KV_BLOCK - 1) // KV_BLOCK * KV_BLOCK
        if (len(recs), end) != (count, index_off):
            out.append("%s: trailer says %d records ending at %d, the file holds %d ending at %d"
                       % (n, count, index_off, len(recs), end))
    return out


def find_record(data_dir, key):
    """The newest record of `key` (a path relative to the mount, matched
    with or without a leading '/') in DATA_DIR's buckets:
    (bucket file, rec_off, head_len, value_len). Raises AssertionError if
    there is none."""
    want = key.encode().lstrip(b"/")
    best = None
    bdir = os.path.join(data_dir, "buckets")
    for n in sorted(os.listdir(bdir)):
        if not n.endswith(".kvb"):
            continue
        p = os.path.join(bdir, n)
        for off, k, head_len, value_len, seq, _, _ in bucket_records(p):
            if k.lstrip(b"/") == want and (best is None or seq > best[0]):
                best = (seq, p, off, head_len, value_len)
    if best is None:
        raise AssertionError("no record of %r in %s" % (key, bdir))
    return best[1:]


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))
        f.flush()
        os.fsync(f.fileno())


class SsdTestCase(kvfstest.KvfsTestCase):
    """No mount in setUp: each test mounts on self.data (a DATA_DIR that
    outlives its daemons, removed after the last of them stopped)."""

    OPTS = ()

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvfs-it-ssd-", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.tmp, True)  # runs after every unmount
        self.data = os.path.join(self.tmp, "data")

    def start(self, name, opts=None, data=None):
        return self.mount(opts=list(self.OPTS if opts is None else opts),
                          data=data or self.data, name=name)

    def crash(self, m):
        """kill -9 the daemon, then `fusermount3 -u -z` the dead mount."""
        m.proc.kill()
        m.proc.wait(30)
        r = subprocess.run(["fusermount3", "-u", "-z", m.mnt], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        self.assertFalse(kvfstest.is_mounted(m.mnt),
                         "dead mount still there: %s" % r.stdout.decode(errors="replace"))
        m.cleanup()

    def verify_keys(self, m, keys, what=""):
        """keys: {relative path: (size, digest)}; every one reads back exact."""
        bad = []
        for name, (size, d) in keys.items():
            try:
                got = read_file(m.path(name))
            except OSError as e:
                bad.append("%s: %s" % (name, errno.errorcode.get(e.errno, e.errno)))
                continue
            if len(got) != size:
                bad.append("%s: %d bytes, expected %d" % (name, len(got), size))
            elif digest(got) != d:
                bad.append("%s: content differs" % name)
            if len(bad) > 20:
                break
        self.assertEqual(bad, [], "%s: %d keys wrong, first: %s" % (what, len(bad), bad[:20]))


# ---------------------------------------------------------------------------
# 0. the SSD options, in their three spellings (README.md "Options")


class SsdOptionsTest(SsdTestCase):
    WANT = {"ssd_size": str(48 * MIB), "bucket_size": str(2 * MIB), "bucket_keys": "100",
            "flush_delay_ms": "5.000", "promote": "on"}

    def check_config(self, m):
        cfg = m.config()
        self.assertEqual({k: cfg.get(k) for k in self.WANT}, self.WANT)
        self.assertEqual(m.stats()["ssd"]["cap"], 48 * MIB)

    def test_long_options(self):
        m = self.start("long", opts=["--mem-size=32M", "--ssd-size=48M", "--bucket-size=2M",
                                     "--bucket-keys=100", "--flush-delay=5ms", "--promote=on"])
        self.check_config(m)

    def test_dash_o_options(self):
        m = self.start("dash-o", opts=["-o", "mem_size=32M,ssd_size=48M,bucket_size=2M,"
                                       "bucket_keys=100,flush_delay=5ms,promote=on"])
        self.check_config(m)

    def test_environment(self):
        m = self.mount(opts=["--mem-size=32M"], data=self.data, name="env",
                       env={"KVFS_SSD_SIZE": "48M", "KVFS_BUCKET_SIZE": "2M",
                            "KVFS_BUCKET_KEYS": "100", "KVFS_FLUSH_DELAY": "5",
                            "KVFS_PROMOTE": "on"})
        self.check_config(m)

    def test_bad_values_exit_2(self):
        for opt in ("--bucket-size=512K", "--bucket-size=x", "--ssd-size=-1", "--promote=yes",
                    "--flush-delay=5parsecs", "--bucket-keys=0"):
            r = subprocess.run([kvfstest.KVFS, opt, self.data, self.tmp], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=30)
            out = r.stdout.decode(errors="replace").strip()
            self.assertEqual(r.returncode, 2, "%s: %s" % (opt, out))
            self.assertIn(opt.split("=")[0].lstrip("-").split("-")[0], out, opt)

    def test_ssd_size_0_is_dram_only(self):
        m = self.start("dram-only", opts=["--mem-size=16M", "--ssd-size=0"])
        put(m.path("k"), b"k" * 5000)
        self.assertEqual(tier_of(m.path("k")), "dram")
        self.assertErrno(errno.ENOSPC, put, m.path("big"), b"b" * (17 * MIB))
        m.stop()
        self.assertFalse(os.path.exists(os.path.join(self.data, "buckets")) and
                         os.listdir(os.path.join(self.data, "buckets")),
                         "a DRAM-only mount wrote bucket files")


# ---------------------------------------------------------------------------
# 1. a data set 16x the DRAM pool, read back, restarted, read back again


def parse_env_size(name, default):
    return kvfstest.parse_size(os.environ.get(name, default))


BIG_BYTES = parse_env_size("KVFS_SSD_BIG_BYTES", "1G")
BIG_KEYS = int(os.environ.get("KVFS_SSD_BIG_KEYS", "4000"))
MIN_KEY, MAX_KEY = 4 << 10, 4 << 20


def big_dataset(nkeys=BIG_KEYS, total=BIG_BYTES, seed=7):
    """A deterministic list of (relative path, size, mode or None, mtime_ns
    or None): nkeys keys of 4 KiB-4 MiB (mostly small, some large, many
    not 4 KiB multiples) adding up to exactly `total` bytes, in 28
    directories."""
    if not (nkeys > 3 and MIN_KEY * nkeys <= total <= MAX_KEY * nkeys):
        raise ValueError("%d keys of 4 KiB-4 MiB cannot add up to %d bytes" % (nkeys, total))
    r = random.Random("ssd-big/%d" % seed)
    dirs = ["m%d/tp%d" % (a, b) for a in range(4) for b in range(4)]
    dirs += ["m%d/tp%d/layer%d" % (a, b, c) for a in range(2) for b in range(2) for c in range(3)]
    raw = []
    for i in range(nkeys):
        if r.random() < 0.9:
            raw.append(int(MIN_KEY * (64 ** r.random())))  # log-uniform 4 KiB-256 KiB
        else:
            raw.append(r.randint(256 << 10, MAX_KEY))
    scale = total / sum(raw)
    sizes = [min(MAX_KEY, max(MIN_KEY, int(s * scale))) for s in raw]
    sizes[0], sizes[1], sizes[2] = MIN_KEY, MAX_KEY, MIN_KEY + 1
    diff = total - sum(sizes)
    i = 3
    while diff:  # spread the rounding error, staying in bounds
        s = sizes[i]
        n = min(diff, MAX_KEY - s) if diff > 0 else max(diff, MIN_KEY - s)
        sizes[i] += n
        diff -= n
        i = 3 + (i - 2) % (nkeys - 3)
    out = []
    for i, size in enumerate(sizes):
        name = "%s/k%04d" % (dirs[i % len(dirs)], i)
        mode = {0: 0o600, 1: 0o640, 2: 0o444}.get(i % 11)
        mtime = 1_600_000_000_000_000_000 + i * 1_000_003 if i % 7 == 0 else None
        out.append((name, size, mode, mtime))
    return out


class BigDataSetTest(SsdTestCase):
    OPTS = ("--mem-size=64M", "--bucket-size=16M")

    def check_tree(self, m, files, dir_modes, dir_mtimes, what):
        t = tree(m.mnt)
        want_dirs = set(dir_modes)
        got_dirs = {p for p, st in t.items() if stat.S_ISDIR(st.st_mode)}
        got_files = {p for p, st in t.items() if stat.S_ISREG(st.st_mode)}
        self.assertEqual(sorted(got_dirs ^ want_dirs), [], "%s: directories differ" % what)
        missing = sorted(set(files) - got_files)
        extra = sorted(got_files - set(files))
        self.assertEqual((missing[:10], extra[:10]), ([], []),
                         "%s: %d keys missing, %d unexpected" % (what, len(missing), len(extra)))
        bad = []
        for p, (size, mode, mtime) in files.items():
            st = t[p]
            if (st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime_ns) != (size, mode, mtime):
                bad.append("%s: size/mode/mtime %d/%o/%d, expected %d/%o/%d" % (
                    p, st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime_ns, size, mode, mtime))
        for p, mode in dir_modes.items():
            if stat.S_IMODE(t[p].st_mode) != mode:
                bad.append("dir %s: mode %o, expected %o" % (p, stat.S_IMODE(t[p].st_mode), mode))
        for p, mtime in dir_mtimes.items():
            if t[p].st_mtime_ns != mtime:
                bad.append("dir %s: mtime %d, expected %d" % (p, t[p].st_mtime_ns, mtime))
        self.assertEqual(bad[:20], [], "%s: %d attribute mismatches" % (what, len(bad)))

    def test_1gib_through_64m_pool_and_restart(self):
        t0 = time.monotonic()
        ds = big_dataset()
        total = sum(s for _, s, _, _ in ds)
        self.assertEqual(total, BIG_BYTES)
        m = self.start("first")
        pool = m.stats()["pool"]["size"]
        self.assertEqual(pool, 64 * MIB)
        keys = {}
        dirs = set()
        for name, size, mode, mtime in ds:
            d = os.path.dirname(name)
            if d not in dirs:
                os.makedirs(m.path(d), exist_ok=True)
                dirs.add(d)
            data = pattern(name, size, 1)
            write_file(m.path(name), data)
            keys[name] = (size, digest(data))
            if mode is not None:
                os.chmod(m.path(name), mode)
            if mtime is not None:
                os.utime(m.path(name), ns=(mtime, mtime))
        os.mkdir(m.path("empty"))
        os.chmod(m.path("m3"), 0o750)
        os.utime(m.path("m2"), ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
        t_write = time.monotonic() - t0

        st = m.stats()
        self.assertEqual(st["namespace"]["keys"], len(ds))
        self.assertLessEqual(st["pool"]["used"], pool)
        self.assertEqual(kvfstest.errcount(st, "ENOSPC"), 0)

        t1 = time.monotonic()
        self.verify_keys(m, keys, "first mount")
        t_read = time.monotonic() - t1
        st = m.stats()
        self.assertGreater(st["tier"]["evictions"], 0, st["tier"])
        self.assertGreater(st["tier"]["ssd_hits"], 0, st["tier"])
        self.assertGreater(st["ssd"]["bytes_read"], 0, st["ssd"])
        self.assertGreaterEqual(st["ssd"]["bytes_written"], total, st["ssd"])
        self.assertGreaterEqual(st["ssd"]["used"], total, st["ssd"])
        self.assertGreater(st["ssd"]["buckets"], 1, st["ssd"])
        self.assertEqual(st["ssd"]["checksum_errors"], 0)
        self.assertEqual(st["tier"]["offload_errors"], 0)
        self.assertLessEqual(st["pool"]["used"], pool)

        # what must survive the restart, as the first mount shows it now
        t = tree(m.mnt)
        files = {p: (s.st_size, stat.S_IMODE(s.st_mode), s.st_mtime_ns)
                 for p, s in t.items() if stat.S_ISREG(s.st_mode)}
        for name, size, mode, mtime in ds:  # the chmods and utimes took effect
            self.assertEqual(files[name][0], size, name)
            self.assertEqual(files[name][1], mode if mode is not None else 0o644, name)
            if mtime is not None:
                self.assertEqual(files[name][2], mtime, name)
        dir_modes = {p: stat.S_IMODE(s.st_mode) for p, s in t.items() if stat.S_ISDIR(s.st_mode)}
        self.assertEqual(dir_modes["m3"], 0o750)
        self.assertEqual(t["m2"].st_mtime_ns, 1_500_000_000_000_000_000)
        dir_mtimes = {p: s.st_mtime_ns for p, s in t.items() if stat.S_ISDIR(s.st_mode)}
        m.stop()

        t2 = time.monotonic()
        m2 = self.start("second")
        st = m2.stats()
        self.assertEqual(st["recovery"]["keys"], len(ds), st["recovery"])
        self.assertEqual(st["namespace"]["keys"], len(ds))
        self.check_tree(m2, files, dir_modes, dir_mtimes, "after restart")
        self.verify_keys(m2, keys, "after restart")
        st = m2.stats()
        self.assertGreater(st["tier"]["ssd_hits"], 0, st["tier"])
        self.assertEqual(st["ssd"]["checksum_errors"], 0)
        t_restart = time.monotonic() - t2
        if os.environ.get("KVFS_SSD_TIMINGS"):
            print("\n  %d keys, %d MiB: write %.1fs, read %.1fs, restart+check+read %.1fs, "
                  "recovery %.3fs" % (len(ds), total >> 20, t_write, t_read, t_restart,
                                      st["recovery"]["seconds"]), flush=True)


class RootAttrTest(SsdTestCase):
    OPTS = ("--mem-size=64M",)

    def test_root_directory_attributes_survive_restart(self):
        """The mount root is a directory like the others: its mode, owner
        and times come back after a clean restart."""
        m = self.start("first")
        put(m.path("k"), b"k")
        os.chmod(m.mnt, 0o710)
        os.utime(m.mnt, ns=(1_400_000_000_000_000_000, 1_400_000_000_000_000_000))
        st = os.stat(m.mnt)
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o710)
        m.stop()
        m2 = self.start("second")
        st2 = os.stat(m2.mnt)
        self.assertEqual((oct(stat.S_IMODE(st2.st_mode)), st2.st_uid, st2.st_gid, st2.st_mtime_ns),
                         (oct(0o710), st.st_uid, st.st_gid, 1_400_000_000_000_000_000))
        os.chmod(m2.mnt, 0o755)


class CleanRestartTest(SsdTestCase):
    OPTS = ("--mem-size=64M",)

    def test_clean_restart_keeps_the_checkpoint_crash_restart_too(self):
        """A clean stop writes a checkpoint of the whole namespace; the next
        start reads it and, with nothing to replay, does not write it again
        (what makes a clean restart of millions of keys quick). Changes after
        that go to the journal: after a kill -9 they are replayed, and the
        checkpoint and the one journal file stay (the journal goes on from
        its tail; a crash start writes no checkpoint). What changes then
        survives another kill -9, and a clean stop writes a fresh
        checkpoint."""
        ckpt = os.path.join(self.data, "checkpoint")

        def journals():
            return sorted(n for n in os.listdir(self.data) if n.startswith("journal."))

        keys = {}
        m = self.start("first")
        for i in range(200):
            data = b"%05d" % i * (i + 1)
            put(m.path("k%03d" % i), data)
            keys["k%03d" % i] = (len(data), digest(data))
        m.stop()
        before = os.stat(ckpt)
        m = self.start("second")
        self.assertEqual(m.stats()["recovery"]["keys"], 200)
        self.verify_keys(m, keys, "after a clean restart")
        after = os.stat(ckpt)
        self.assertEqual((after.st_ino, after.st_mtime_ns), (before.st_ino, before.st_mtime_ns))
        for i in range(200, 260):
            data = b"%05d" % i * 7
            put(m.path("k%03d" % i), data)
            keys["k%03d" % i] = (len(data), digest(data))
        os.unlink(m.path("k000"))
        del keys["k000"]
        fsync_path(m.mnt, directory=True)
        journal = journals()
        self.assertEqual(len(journal), 1)
        self.crash(m)
        m = self.start("third")
        self.assertEqual(m.stats()["recovery"]["keys"], 259)
        self.verify_keys(m, keys, "after kill -9")
        self.assertFalse(os.path.exists(m.path("k000")))
        after = os.stat(ckpt)
        self.assertEqual((after.st_ino, after.st_mtime_ns), (before.st_ino, before.st_mtime_ns))
        self.assertEqual(journals(), journal)
        data = b"after the crash" * 100
        put(m.path("k260"), data)
        keys["k260"] = (len(data), digest(data))
        os.unlink(m.path("k001"))
        del keys["k001"]
        fsync_path(m.mnt, directory=True)
        self.crash(m)
        m = self.start("fourth")
        self.assertEqual(m.stats()["recovery"]["keys"], 259)
        self.verify_keys(m, keys, "after a second kill -9")
        self.assertFalse(os.path.exists(m.path("k001")))
        m.stop()
        self.assertNotEqual(os.stat(ckpt).st_ino, before.st_ino)
        m = self.start("fifth")
        self.assertEqual(m.stats()["recovery"]["keys"], 259)
        self.verify_keys(m, keys, "after a clean stop")


# ---------------------------------------------------------------------------
# 4. the SSD quota


class LongKeyTest(SsdTestCase):
    OPTS = ("--mem-size=64M",)

    def test_fsync_of_a_key_too_long_for_a_record_fails(self):
        """A key whose path is longer than a record can hold (4 KiB) cannot
        be offloaded: its fsync fails with ENAMETOOLONG at once instead of
        waiting for ever, and the daemon goes on serving."""
        m = self.start("long")
        fd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i in range(17):  # 17 x 251 bytes: past 4096
                name = ("d%02d" % i).ljust(250, "x")
                os.mkdir(name, dir_fd=fd)
                nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = nfd
            f = os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
            try:
                os.write(f, b"x" * 5000)
                with self.assertRaises(OSError) as cm:
                    os.fsync(f)
                self.assertEqual(cm.exception.errno, errno.ENAMETOOLONG)
            finally:
                os.close(f)
            # gone, so the clean unmount has nothing it could not save
            os.unlink("f", dir_fd=fd)
        finally:
            os.close(fd)
        put(m.path("short"), b"still serving", fsync=True)
        self.assertEqual(read_file(m.path("short")), b"still serving")


class QuotaTest(SsdTestCase):
    OPTS = ("--ssd-size=32M", "--mem-size=32M", "--bucket-size=4M")

    def fill(self, m):
        """Puts 1 MiB keys (every third fsync'ed) until one fails with
        ENOSPC (in write, fsync or close). Returns (stored: {name: (size,
        digest)} of the keys closed without error, synced: names fsync'ed,
        (failed name, the call, seconds it took))."""
        stored, synced, failed = {}, set(), None
        for i in range(200):  # 200 MiB >> 32 MiB DRAM + 32 MiB SSD
            name = "q%03d" % i
            data = pattern(name, MIB)
            fd = os.open(m.path(name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            where = "write"
            t = time.monotonic()
            try:
                view = memoryview(data)
                off = 0
                while off < len(view):
                    t = time.monotonic()
                    off += os.write(fd, view[off:off + (256 << 10)])
                if i % 3 == 0:
                    where = "fsync"
                    t = time.monotonic()
                    os.fsync(fd)
            except OSError as e:
                self.assertEqual(e.errno, errno.ENOSPC, "%s of %s: %s" % (where, name, e))
                failed = (name, where, time.monotonic() - t)
            where = "close"
            try:
                t = time.monotonic()
                os.close(fd)
            except OSError as e:
                self.assertEqual(e.errno, errno.ENOSPC, "close of %s: %s" % (name, e))
                failed = failed or (name, where, time.monotonic() - t)
            if failed:
                break
            stored[name] = (MIB, digest(data))
            if i % 3 == 0:
                synced.add(name)
        self.assertIsNotNone(failed, "200 MiB went into 32 MiB DRAM + 32 MiB SSD")
        name, where, secs = failed
        # the offloader had nothing it could write: no long back-pressure wait
        self.assertLess(secs, 15.0, "ENOSPC (%s of %s) came after %.1fs" % (where, name, secs))
        n = len(stored)
        self.assertGreaterEqual(n, 16, "ENOSPC after only %d MiB" % n)
        self.assertLessEqual(n, 64, "%d MiB stored in 64 MiB" % n)
        # the failed key holds no more than it was given; drop it
        if os.path.exists(m.path(name)):
            self.assertLessEqual(os.stat(m.path(name)).st_size, MIB)
            os.unlink(m.path(name))
        return stored, synced, failed

    def test_quota_enospc_keeps_everything(self):
        m = self.start("quota")
        cap = m.stats()["ssd"]["cap"]
        self.assertEqual(cap, 32 * MIB)
        self.assertEqual(kvfstest.expected_capacity(m), 64 * MIB)
        sv = os.statvfs(m.mnt)
        self.assertEqual(sv.f_blocks * sv.f_frsize, 64 * MIB, "df: DRAM + SSD quota")

        stored, synced, failed = self.fill(m)
        st = m.stats()
        self.assertLessEqual(st["ssd"]["used"], cap, st["ssd"])
        self.assertGreater(st["ssd"]["used"], cap // 2, st["ssd"])
        self.assertGreater(kvfstest.errcount(st, "ENOSPC"), 0, st.get("errors"))

        # everything stored stays readable, fsync'ed keys are on SSD
        self.verify_keys(m, stored, "after ENOSPC")
        for s in synced:
            self.assertIn(tier_of(m.path(s)), ("ssd", "dram+ssd"), s)

        # nothing was acknowledged that the quota cannot keep (README "SSD
        # full"): once the backlog is written, every key is on the SSD and
        # its fsync succeeds
        os.sync()
        tiers = {k: tier_of(m.path(k)) for k in sorted(stored)}
        self.assertEqual([k for k, t in tiers.items() if t not in ("ssd", "dram+ssd")], [],
                         tiers)
        for k in sorted(stored)[:8]:
            fsync_path(m.path(k))

        # the mount stays usable: deleting a key makes room
        victim = sorted(stored)[-1]
        self.assertErrno(errno.ENOSPC, put, m.path("big"), pattern("big", 4 * MIB))
        os.unlink(m.path(victim))
        del stored[victim]
        small = pattern("small", 64 << 10)
        put(m.path("small"), small)
        self.assertEqual(read_file(m.path("small")), small)
        self.verify_keys(m, stored, "after the delete")
        m.stop()

    def test_quota_clean_unmount_never_loses_silently(self):
        """A clean unmount at a full quota (DESIGN.md: "Pressure, never
        silent loss"): nothing acknowledged was left that the SSD cannot
        keep, so the daemon exits 0, says nothing is lost, and every key
        comes back exactly."""
        m = self.start("quota-stop")
        stored, synced, failed = self.fill(m)
        log0 = len(m.log_text())
        m.stop()
        self.assertNotIn("could not be written", m.log_text()[log0:])

        m2 = self.start("quota-again")
        names = {p for p, s in tree(m2.mnt).items() if stat.S_ISREG(s.st_mode)}
        self.assertEqual(sorted(names ^ set(stored)), [], "keys lost or come back unasked")
        self.verify_keys(m2, stored, "every key after the unmount")


# ---------------------------------------------------------------------------
# 5. user.kvfs.tier and --promote


class TierXattrTest(SsdTestCase):
    """Reads here use O_DIRECT: a buffered read may be served from the
    kernel's page cache and never reach the daemon."""

    OPTS = ("--mem-size=32M", "--bucket-size=8M")

    def evict(self, m, victim, prefix="filler", limit=40):
        """Writes other 4 MiB keys until `victim` has left DRAM; returns
        their names."""
        names = []
        for i in range(limit):
            if tier_of(m.path(victim)) == "ssd":
                return names
            name = "%s%02d" % (prefix, i)
            put(m.path(name), pattern(name, 4 * MIB))
            names.append(name)
        kvfstest.wait_until(lambda: tier_of(m.path(victim)) == "ssd", timeout=10,
                            what="%s evicted (tier %s)" % (victim, tier_of(m.path(victim))))
        return names

    def written_and_offloaded(self, m, name, data, strict=True):
        """Puts a key and waits until it is on SSD; strict: it must still be
        in DRAM too (nothing else is pushing it out)."""
        put(m.path(name), data)
        want = ("dram+ssd",) if strict else ("dram+ssd", "ssd")
        self.assertIn(tier_of(m.path(name)), ("dram",) + want)
        kvfstest.wait_until(lambda: tier_of(m.path(name)) in want, timeout=10,
                            what="%s offloaded (tier %s)" % (name, tier_of(m.path(name))))

    def test_tier_xattr_dram_ssd(self):
        m = self.start("tier")
        # fsync: durable when it returns, so on SSD at once
        fd = os.open(m.path("synced"), os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"s" * 10000)
        os.fsync(fd)
        self.assertIn(tier_of(m.path("synced")), ("ssd", "dram+ssd"))
        os.close(fd)

        data = pattern("hot", MIB + 123)
        self.written_and_offloaded(m, "hot", data)
        self.assertIn(TIER, os.listxattr(m.path("hot")))
        self.assertIsNone(tier_of(m.mnt), "a directory has no tier")
        self.evict(m, "hot")
        # without --promote a read leaves it on SSD only
        st0 = m.stats()["tier"]
        self.assertEqual(read_direct(m.path("hot")), data)
        st1 = m.stats()["tier"]
        self.assertGreater(st1["ssd_hits"], st0["ssd_hits"])
        self.assertEqual(st1["promotions"], st0["promotions"])
        self.assertEqual(tier_of(m.path("hot")), "ssd")
        # a rewrite makes a new version in DRAM, then offloads it
        data2 = pattern("hot2", 5000)
        self.written_and_offloaded(m, "hot", data2, strict=False)
        self.assertEqual(read_direct(m.path("hot")), data2)

    def promoted_by_read(self, m, name, data):
        """Reads bring name into DRAM. A promotion is a bonus the daemon
        declines when it cannot make room at that instant (the clock gives
        values read just now a second chance before evicting them), so each
        poll reads again, every byte checked, until one is promoted."""
        st0 = m.stats()["tier"]

        def read_promotes():
            self.assertEqual(read_direct(m.path(name)), data)
            return tier_of(m.path(name)) == "dram+ssd"
        kvfstest.wait_until(read_promotes, timeout=10, interval=0.2,
                            what="%s (%d bytes) promoted by a read" % (name, len(data)))
        st1 = m.stats()["tier"]
        self.assertGreater(st1["promotions"], st0["promotions"])
        # the next read is a DRAM hit
        self.assertEqual(read_direct(m.path(name)), data)
        st2 = m.stats()["tier"]
        self.assertGreater(st2["dram_hits"], st1["dram_hits"])
        self.assertEqual(st2["ssd_hits"], st1["ssd_hits"])

    def test_promote_on_with_room(self):
        """--promote=on, the pool has free space: a read of an SSD-only key
        brings it into DRAM."""
        m = self.start("promote", opts=list(self.OPTS) + ["--promote=on"])
        self.assertEqual(m.config()["promote"], "on")
        data = pattern("cold", 3 * MIB + 5)
        self.written_and_offloaded(m, "cold", data)
        for name in self.evict(m, "cold"):
            os.unlink(m.path(name))
        kvfstest.wait_until(lambda: m.stats()["pool"]["free"] >= 8 * MIB, timeout=10,
                            what="the pool freed by the unlinks")
        self.assertEqual(tier_of(m.path("cold")), "ssd")
        self.promoted_by_read(m, "cold", data)

    def test_promote_on_pool_full_of_clean_values(self):
        """--promote=on in the steady state of a cache: the pool is full of
        clean (evictable) values; a read of an SSD-only key still brings it
        into DRAM, evicting colder ones."""
        m = self.start("promote-full", opts=list(self.OPTS) + ["--promote=on"])
        data = pattern("cold", 20 * MIB + 5)  # more than the pool keeps free
        self.written_and_offloaded(m, "cold", data)
        self.evict(m, "cold")
        last = "filler-last"
        self.written_and_offloaded(m, last, pattern(last, 4 * MIB))  # everything is clean
        self.assertEqual(m.stats()["tier"]["offload_backlog_keys"], 0)
        pool = m.stats()["pool"]
        self.assertLess(pool["free"], len(data), "the test needs a pool too full for %d bytes: %s"
                        % (len(data), pool))
        self.promoted_by_read(m, "cold", data)


# ---------------------------------------------------------------------------
# 6. fio with crc32c verification over 4x the DRAM pool


class FioOverPoolTest(SsdTestCase):
    OPTS = ("--mem-size=64M", "--bucket-size=16M")

    def run_seq(self, direct, jobs, nrfiles, filesize=16):
        fio = shutil.which("fio")
        if fio is None:
            self.skipTest("fio is not installed")
        m = self.start("fio-direct%d" % direct)
        d = m.path("fio")
        os.mkdir(d)
        env = dict(os.environ, KVFS_FIO_DIR=d, KVFS_FIO_NRFILES=str(nrfiles),
                   KVFS_FIO_FILESIZE="%dm" % filesize, KVFS_FIO_JOBS=str(jobs),
                   KVFS_FIO_DIRECT=str(direct))
        total = jobs * nrfiles * filesize * MIB
        self.assertEqual(total, 4 * 64 * MIB)
        r = subprocess.run([fio, "--output-format=json", os.path.join(FIO_JOBS_DIR, "seq.fio")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                           timeout=200, cwd=self.tmp)
        out = r.stdout.decode(errors="replace")
        self.assertEqual(r.returncode, 0, "fio failed:\n%s" % out[-6000:])
        doc = kvfstest.parse_fio_json(out)
        jobs_ = doc["jobs"]
        self.assertEqual(len(jobs_), 2 * jobs, [j["jobname"] for j in jobs_])
        for j in jobs_:
            self.assertEqual(j["error"], 0, "job %s: error %d" % (j["jobname"], j["error"]))
        wr = [j for j in jobs_ if j["jobname"] == "seq-write"]
        rd = [j for j in jobs_ if j["jobname"] == "seq-read"]
        # the write jobs wrote everything and read it all back to verify it;
        # the read jobs read (and verified) everything again
        self.assertEqual(sum(j["write"]["io_bytes"] for j in wr), total)
        self.assertEqual(sum(j["read"]["io_bytes"] for j in wr), total)
        self.assertEqual(sum(j["read"]["io_bytes"] for j in rd), total)
        st = m.stats()
        # Many files: the DRAM copies of sealed ones go; one file: it spills as it is written.
        self.assertGreater(st["tier"]["evictions" if nrfiles > 1 else "spilled_bytes"], 0,
                           st["tier"])
        self.assertGreater(st["tier"]["ssd_hits"], 0, st["tier"])
        self.assertEqual(st["ssd"]["checksum_errors"], 0)
        self.assertEqual(kvfstest.errcount(st, "ENOSPC"), 0, st.get("errors"))

    def test_fio_seq_buffered_4x_pool(self):
        self.run_seq(direct=0, jobs=1, nrfiles=16)

    def test_fio_seq_direct_4x_pool(self):
        self.run_seq(direct=1, jobs=2, nrfiles=8)

    def test_fio_one_file_4x_pool(self):
        """One file four times the pool: its extents spill while fio writes."""
        self.run_seq(direct=1, jobs=1, nrfiles=1, filesize=256)


# ---------------------------------------------------------------------------


def kvfs_from_argv(argv):
    """The --kvfs PATH the harness will use (kvfstest.main parses it
    again), to ask the binary whether it has an SSD tier."""
    for i, a in enumerate(argv):
        if a == "--kvfs" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--kvfs="):
            return a[len("--kvfs="):]
    return os.environ.get("KVFS_BIN", "build/kvfs")


def main():
    """kvfstest.main(), but skipped (77) when the binary has no SSD tier."""
    path = os.path.abspath(kvfs_from_argv(sys.argv[1:]))
    if kvfstest.environment_problem() is None and os.access(path, os.X_OK):
        try:
            r = subprocess.run([path, "--help"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=30)
            if b"--ssd-size" not in r.stdout:
                kvfstest.skip("this kvfs has no SSD tier (no --ssd-size in --help)")
        except (OSError, subprocess.SubprocessError):
            pass
    kvfstest.main()


if __name__ == "__main__":
    main()
