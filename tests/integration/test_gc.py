# SPDX-License-Identifier: MIT
"""Compaction and cache mode on a real mount (README.md "Compaction and
cache mode", core/gc.h):

- deletes and overwrites give SSD space back: `gc` written to
  MNT/.kvfs/ctl shrinks DATA_DIR (du) to the live bytes, every survivor
  reads back byte-exact, a remount keeps the deletes;
- an overwrite workload of 4x the quota over a live set that fits never
  sees ENOSPC (the offload waits for compaction instead);
- explicit-delete mode: ENOSPC at the quota, and after deletes and a pass
  puts succeed again;
- writers at the quota wait while passes they start copy live records out,
  and a clean unmount compacts to write what DRAM holds;
- cache mode (--evict=lru): twice the quota written, no put fails, the
  newest keys, a key read again and again and a key held open are there,
  evictions counted, and an evicted name is gone from the kernel's dentry
  cache as soon as the eviction is seen;
- .kvfs/ctl refuses other users;
- concurrency: writers, readers, deleters, renamers and overwriters while
  compaction runs every few ms, checked against a model of what they did;
- crash safety: KVFS_FAULT=<point>[:n] aborts the daemon at each step of a
  pass, of its first output and of its second (written over a victim's
  file); a remount finds survivors exact and deleted keys gone, the next
  pass leaves no orphan and --fsck is clean; kill -9 during rm -rf of
  20,000 keys leaves each key whole or gone.

Sizes: the issue's "about 1 GiB" scenario is run with KVFS_GC_BYTES (default
256 MiB) to keep CI time sane on two cores; set it to 1G for the full size.
"""

import errno
import os
import random
import stat
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
from kvfstest import pattern, read_file, write_file  # noqa: E402
from test_ssd import (SsdTestCase, digest, find_record, flip_byte, fsync_path, put,  # noqa: E402
                      read_direct, tree, MIB)

KIB = 1 << 10
GC_BYTES = kvfstest.parse_size(os.environ.get("KVFS_GC_BYTES", "256M"))
BUCKET = 4 * MIB
VALUE = 256 * KIB


def du(path):
    """Bytes DATA_DIR occupies on disk (du -sb would count apparent sizes:
    blocks are what is given back)."""
    out = subprocess.check_output(["du", "-s", "--block-size=1", path])
    return int(out.split()[0])


def run_gc(m):
    """Writes `gc` to MNT/.kvfs/ctl: returns when the pass is done."""
    fd = os.open(m.path(".kvfs", "ctl"), os.O_WRONLY)
    try:
        os.write(fd, b"gc\n")
    finally:
        os.close(fd)


def syncfs(m):
    fsync_path(m.mnt, directory=True)


def bucket_files(data):
    d = os.path.join(data, "buckets")
    return sorted(n for n in os.listdir(d) if n.endswith(".kvb"))


def spare_files(data):
    """Victims' files kept for a pass's outputs (ID.kvs): none outside a pass."""
    d = os.path.join(data, "buckets")
    return sorted(n for n in os.listdir(d) if n.endswith(".kvs"))


class GcTestCase(SsdTestCase):
    def fill(self, m, n, size=VALUE, prefix="k", seed=0):
        keys = {}
        for i in range(n):
            name = "%s%05d" % (prefix, i)
            data = pattern(name, size, seed)
            write_file(m.path(name), data)
            keys[name] = (size, digest(data))
        syncfs(m)
        return keys

    def fsck_clean(self):
        r = subprocess.run([kvfstest.KVFS, "--fsck", self.data], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=300)
        out = r.stdout.decode(errors="replace")
        self.assertEqual(r.returncode, 0, out)
        self.assertIn("fsck: clean", out)
        return out

    def names(self, m):
        return {p for p, s in tree(m.mnt).items() if stat.S_ISREG(s.st_mode)}


class CtlTest(GcTestCase):
    OPTS = ("--mem-size=32M", "--ssd-size=64M", "--bucket-size=1M")

    def test_ctl_is_write_only_and_takes_gc_only(self):
        m = self.start("ctl")
        st = os.stat(m.path(".kvfs", "ctl"))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o200)
        self.assertErrno((errno.EACCES, errno.EPERM), os.open, m.path(".kvfs", "ctl"),
                         os.O_RDONLY)
        fd = os.open(m.path(".kvfs", "ctl"), os.O_WRONLY)
        try:
            self.assertErrno(errno.EINVAL, os.write, fd, b"compact-everything")
            self.assertEqual(os.write(fd, b"gc"), 2)
        finally:
            os.close(fd)
        # the shell way
        subprocess.run(["sh", "-c", "echo gc > %s" % m.path(".kvfs", "ctl")], check=True)
        self.assertIn("ctl", os.listdir(m.path(".kvfs")))
        cfg = m.config()
        for k, v in (("gc", "on"), ("gc_dead_ratio", "0.250"), ("gc_high_watermark", "0.900"),
                     ("gc_low_watermark", "0.800"), ("gc_max_buckets", "4"),
                     ("evict", "none"), ("gc_interval_ms", "1000.000")):
            self.assertEqual(cfg.get(k), v, k)
        self.assertIn("gc", m.stats())

    def test_ctl_refuses_other_users(self):
        # allow_other lets nobody reach the mount at all; the file's mode
        # (0200, root's) and the daemon's own check both refuse the write
        m = self.start("ctl-others", opts=list(self.OPTS) + ["-o", "allow_other"])
        keys = self.fill(m, 4, size=64 * KIB)
        os.unlink(m.path("k00000"))
        syncfs(m)
        passes = m.stats()["gc"]["passes"]
        ctl = m.path(".kvfs", "ctl")
        self.assertEqual(kvfstest.as_user(kvfstest.NOBODY, kvfstest.NOBODY,
                                          lambda: os.open(ctl, os.O_WRONLY)),
                         ["err", errno.EACCES])
        # nobody is not refused the mount itself: it reads a key
        self.assertEqual(kvfstest.as_user(kvfstest.NOBODY, kvfstest.NOBODY,
                                          lambda: len(read_file(m.path("k00001")))),
                         ["ok", keys["k00001"][0]])
        self.assertEqual(m.stats()["gc"]["passes"], passes)
        run_gc(m)  # root may
        self.assertEqual(m.stats()["gc"]["passes"], passes + 1)
        m.stop()

    def test_options_three_spellings(self):
        m = self.start("opts-long", opts=list(self.OPTS) + [
            "--gc=off", "--gc-interval=5ms", "--gc-dead-ratio=0.5", "--gc-high-watermark=0.95",
            "--gc-low-watermark=0.7", "--gc-max-buckets=9", "--gc-rate=10M", "--evict=lru"])
        want = {"gc": "off", "gc_interval_ms": "5.000", "gc_dead_ratio": "0.500",
                "gc_high_watermark": "0.950", "gc_low_watermark": "0.700",
                "gc_max_buckets": "9", "gc_rate": str(10 * MIB), "evict": "lru"}
        cfg = m.config()
        self.assertEqual({k: cfg.get(k) for k in want}, want)
        m.stop()
        m = self.start("opts-o", opts=list(self.OPTS) + [
            "-o", "gc=off,gc_interval=5ms,gc_dead_ratio=0.5,gc_high_watermark=0.95,"
            "gc_low_watermark=0.7,gc_max_buckets=9,gc_rate=10M,evict=lru"])
        cfg = m.config()
        self.assertEqual({k: cfg.get(k) for k in want}, want)
        m.stop()
        m = self.mount(opts=list(self.OPTS), data=self.data, name="opts-env", env={
            "KVFS_GC": "off", "KVFS_GC_INTERVAL": "5ms", "KVFS_GC_DEAD_RATIO": "0.5",
            "KVFS_GC_HIGH_WATERMARK": "0.95", "KVFS_GC_LOW_WATERMARK": "0.7",
            "KVFS_GC_MAX_BUCKETS": "9", "KVFS_GC_RATE": "10M", "KVFS_EVICT": "lru"})
        cfg = m.config()
        self.assertEqual({k: cfg.get(k) for k in want}, want)
        m.stop()
        for bad in ("--gc-dead-ratio=1.5", "--gc-dead-ratio=x", "--evict=fifo", "--gc=maybe",
                    "--gc-max-buckets=0"):
            r = subprocess.run([kvfstest.KVFS, bad, self.data, m.mnt], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=30)
            self.assertEqual(r.returncode, 2, "%s: %s" % (bad, r.stdout))


class ReclaimTest(GcTestCase):
    """GC_BYTES in 256 KiB keys, 4 MiB buckets, a 64 MiB pool."""

    OPTS = ("--mem-size=64M", "--ssd-size=%d" % (4 * GC_BYTES), "--bucket-size=%d" % BUCKET,
            "--gc=off")

    def test_delete_75_percent_then_gc(self):
        m = self.start("del75")
        n = GC_BYTES // VALUE
        keys = self.fill(m, n)
        before = du(self.data)
        self.assertGreaterEqual(before, GC_BYTES)
        gone = {k for i, k in enumerate(sorted(keys)) if i % 4}
        for k in gone:
            os.unlink(m.path(k))
        syncfs(m)
        s = m.stats()
        self.assertGreaterEqual(s["ssd"]["dead"], len(gone) * VALUE)
        run_gc(m)
        after = du(self.data)
        self.assertLessEqual(after, 0.35 * before + BUCKET,
                             "du %d -> %d bytes" % (before, after))
        s = m.stats()
        g = s["gc"]
        self.assertGreater(g["buckets_compacted"] + g["buckets_dropped"], 0, g)
        # nothing changed while it ran: every record copied was switched
        self.assertEqual(g["revalidation_skips"], 0, g)
        self.assertEqual(g["bytes_rewritten"], g["bytes_copied"], g)
        self.assertGreater(g["seconds"], 0, g)
        self.assertEqual(g["passes"], 1, g)  # --gc=off: the forced one only
        # a quarter of what was put copied once: bytes to buckets / bytes put
        w = s["ssd"]["bytes_written"]
        self.assertAlmostEqual(g["write_amplification"], (w + g["bytes_copied"]) / w, places=3)
        self.assertGreater(g["write_amplification"], 1.15, g)
        self.assertLess(g["write_amplification"], 1.35, g)
        # outputs after the first are written over victims' files
        self.assertGreater(g["buckets_recycled"], 0, g)
        self.assertEqual(list(spare_files(self.data)), [])
        self.assertGreater(g["bytes_reclaimed"], 0.6 * before, g)
        self.assertEqual(m.stats()["ssd"]["dead"], 0)
        live = {k: v for k, v in keys.items() if k not in gone}
        self.verify_keys(m, live, "after the pass")
        m.stop()
        m = self.start("del75-again")
        self.assertEqual(self.names(m), set(live))
        self.verify_keys(m, live, "after the remount")
        self.assertEqual(m.stats()["ssd"]["dead"], 0)
        m.stop()
        self.fsck_clean()

    def test_overwrite_75_percent_then_gc(self):
        m = self.start("ow75")
        n = GC_BYTES // VALUE
        keys = self.fill(m, n)
        before = du(self.data)
        for i, k in enumerate(sorted(keys)):
            if i % 4:
                data = pattern(k, VALUE, 1)
                write_file(m.path(k), data)
                keys[k] = (VALUE, digest(data))
        syncfs(m)
        grown = du(self.data)
        self.assertGreater(grown, 1.5 * before)
        run_gc(m)
        after = du(self.data)
        # the dead copies are all gone: what is left is the live set
        self.assertLessEqual(after, 1.05 * before + BUCKET,
                             "du %d -> %d -> %d bytes" % (before, grown, after))
        self.assertEqual(m.stats()["ssd"]["dead"], 0)
        self.verify_keys(m, keys, "after the pass")
        m.stop()
        m = self.start("ow75-again")
        self.assertEqual(self.names(m), set(keys))
        self.verify_keys(m, keys, "after the remount")
        self.assertEqual(m.stats()["ssd"]["dead"], 0)
        m.stop()
        self.fsck_clean()

    def test_dead_counts_survive_restart_and_kill(self):
        """Every way a value dies counts its record as dead, and a clean
        restart and a kill -9 find the same counts (rebuilt from the index)."""
        m = self.start("dead")
        keys = self.fill(m, 64, size=64 * KIB)
        names = sorted(keys)
        s0 = m.stats()["ssd"]["dead"]
        rec = 64 * KIB + 4 * KIB  # value + head
        os.unlink(m.path(names[0]))                                 # unlink
        os.rename(m.path(names[1]), m.path(names[2]))               # rename over
        write_file(m.path(names[3]), pattern("new", 64 * KIB))     # overwrite
        os.truncate(m.path(names[4]), 1000)                         # truncate
        os.mkdir(m.path("sub"))
        for k in names[5:9]:
            os.rename(m.path(k), m.path("sub", k))
        subprocess.run(["rm", "-rf", m.path("sub")], check=True)    # rm -rf
        syncfs(m)
        dead = m.stats()["ssd"]["dead"]
        self.assertEqual(dead - s0, 8 * rec, m.stats()["ssd"])
        self.crash(m)  # the deletes are only in the journal
        m = self.start("dead-kill")
        self.assertEqual(m.stats()["ssd"]["dead"], dead)
        m.stop()
        m = self.start("dead-restart")
        self.assertEqual(m.stats()["ssd"]["dead"], dead)
        m.stop()
        # --fsck reports the dead bytes of each bucket
        out = self.fsck_clean()
        per_bucket = [int(line.split(" dead")[0].rsplit(" ", 1)[1])
                      for line in out.splitlines() if line.startswith("fsck: bucket ")]
        self.assertTrue(per_bucket, out)
        self.assertEqual(sum(per_bucket), dead, out)

    def test_large_value_is_copied_in_pieces(self):
        """A value larger than the compactor's 8 MiB staging buffer."""
        m = self.start("large", opts=["--mem-size=64M", "--bucket-size=64M", "--gc=off"])
        big = pattern("big", 20 * MIB + 12345)
        write_file(m.path("big"), big)
        small = self.fill(m, 16, size=MIB)
        for k in small:
            os.unlink(m.path(k))
        syncfs(m)
        run_gc(m)
        g = m.stats()["gc"]
        self.assertEqual(g["buckets_compacted"], 1, g)
        self.assertGreaterEqual(g["bytes_rewritten"], len(big), g)
        self.assertEqual(digest(read_direct(m.path("big"))), digest(big))
        m.stop()
        m = self.start("large-again", opts=["--mem-size=64M", "--bucket-size=64M"])
        self.assertEqual(digest(read_direct(m.path("big"))), digest(big))
        m.stop()
        self.fsck_clean()

    def test_damaged_record_is_not_copied(self):
        """A record failing its checksum is not copied as good data: the pass
        counts it, keeps its bucket, the key reads EIO, the others are
        exact."""
        m = self.start("damaged", opts=list(self.OPTS) + ["--mem-size=16M"])
        keys = self.fill(m, 32)
        m.stop()
        names = sorted(keys)
        bad = names[1]
        path, off, head_len, _ = find_record(self.data, bad)
        flip_byte(path, off + head_len + 5000)
        m = self.start("damaged-2")
        for k in names[2::2]:
            os.unlink(m.path(k))
            del keys[k]
        del keys[bad]
        syncfs(m)
        run_gc(m)
        g = m.stats()["gc"]
        self.assertGreaterEqual(g["csum_failures"], 1, g)
        self.assertIn(os.path.basename(path), bucket_files(self.data))
        self.assertErrno(errno.EIO, read_direct, m.path(bad))
        self.verify_keys(m, keys, "the undamaged keys")
        # the kept bucket's records copied out count as dead, as a restart
        # (which rebuilds the counts from the index) finds them
        dead = m.stats()["ssd"]["dead"]
        m.stop()
        m = self.start("damaged-3")
        self.assertEqual(m.stats()["ssd"]["dead"], dead)
        self.verify_keys(m, keys, "the undamaged keys, restarted")
        m.stop()

    def test_open_deleted_key_keeps_its_bucket(self):
        """An fd open on a deleted key reads its bytes across a pass (the
        bucket is pinned until the last close)."""
        m = self.start("pinned")
        keys = self.fill(m, 64)
        name = sorted(keys)[0]
        fd = os.open(m.path(name), os.O_RDONLY | os.O_DIRECT)
        try:
            for k in keys:
                os.unlink(m.path(k))
            syncfs(m)
            run_gc(m)
            got = b""
            while len(got) < VALUE:
                b = os.pread(fd, VALUE, len(got))
                if not b:
                    break
                got += b
            self.assertEqual(digest(got), keys[name][1])
        finally:
            os.close(fd)
        run_gc(m)
        self.assertEqual(m.stats()["ssd"]["dead"], 0)
        m.stop()


class PressureTest(GcTestCase):
    OPTS = ("--mem-size=32M", "--ssd-size=96M", "--bucket-size=4M")

    def test_overwrites_4x_quota_no_enospc(self):
        """A quarter of the quota rewritten until 4x the quota went through:
        no error at all, no forced pass."""
        m = self.start("ow4x")
        live = 96 * MIB // 4 // VALUE
        keys = {}
        total = 0
        rnd = random.Random(3)
        gen = 0
        while total < 4 * 96 * MIB:
            gen += 1
            for i in rnd.sample(range(live), live // 2):
                name = "w%03d" % i
                data = pattern(name, VALUE, gen)
                write_file(m.path(name), data)
                keys[name] = (VALUE, digest(data))
                total += VALUE
        syncfs(m)
        s = m.stats()
        self.assertEqual(kvfstest.errcount(s, "ENOSPC"), 0, s.get("errors"))
        self.assertEqual(s["tier"]["offload_errors"], 0, s["tier"])
        self.assertLessEqual(s["ssd"]["used"], s["ssd"]["cap"] + BUCKET)
        self.assertGreater(s["gc"]["bytes_reclaimed"], 0, s["gc"])
        self.verify_keys(m, keys, "after 4x the quota")
        m.stop(expect_status=0)
        m = self.start("ow4x-again")
        self.verify_keys(m, keys, "after the remount")
        m.stop()


    def test_urgent_passes_copy_live_records(self):
        """Half the quota live, single keys rewritten at random (so every
        bucket holds live and dead records), 3x the quota in all, and no
        periodic pass in the run: the writers wait at the quota while
        passes they start copy live records out of the deadest buckets."""
        m = self.start("urgent", opts=["--mem-size=16M", "--ssd-size=64M", "--bucket-size=4M",
                                       "--gc-interval=1h"])
        live = 64 * MIB // 2 // VALUE
        keys = {}
        rnd = random.Random(5)
        for n in range(3 * 64 * MIB // VALUE):
            name = "u%03d" % (n if n < live else rnd.randrange(live))
            data = pattern(name, VALUE, n)
            write_file(m.path(name), data)
            keys[name] = (VALUE, digest(data))
        syncfs(m)
        s = m.stats()
        self.assertEqual(kvfstest.errcount(s, "ENOSPC"), 0, s.get("errors"))
        self.assertEqual(s["tier"]["offload_errors"], 0, s["tier"])
        g = s["gc"]
        self.assertGreater(g["room_waits"], 0, g)
        self.assertGreater(g["bytes_copied"], 0, g)
        self.assertGreater(g["buckets_compacted"], 0, g)
        self.verify_keys(m, keys, "after 3x the quota")
        m.stop(expect_status=0)
        m = self.start("urgent-again", opts=["--mem-size=16M", "--ssd-size=64M",
                                             "--bucket-size=4M", "--gc=off"])
        self.verify_keys(m, keys, "after the remount")
        m.stop()

    def test_clean_unmount_makes_room(self):
        """Every key overwritten in DRAM (no offload before the stop), the
        new values too many to fit beside the old: the stop writes those
        that fit, whose predecessors die as they land, compacts, writes
        more, and loses none."""
        opts = ["--mem-size=48M", "--ssd-size=32M", "--bucket-size=2M", "--gc=off"]
        m = self.start("unmount", opts=opts)
        keys = {}
        for i in range(24):
            name = "m%02d" % i
            put(m.path(name), pattern(name, MIB), fsync=True)
        m.stop()
        m = self.start("unmount-full", opts=opts + ["--flush-delay=10s"])
        for i in range(24):
            name = "m%02d" % i
            data = pattern(name, MIB, 1)
            write_file(m.path(name), data)
            keys[name] = (MIB, digest(data))
        s = m.stats()
        # the new values not offloaded yet, the old ones live until they are
        self.assertEqual(s["ssd"]["bytes_written"], 0, s["ssd"])
        self.assertEqual(s["ssd"]["dead"], 0, s["ssd"])
        self.assertGreater(s["ssd"]["used"] + 24 * MIB, s["ssd"]["cap"], s["ssd"])
        m.stop(expect_status=0)
        m = self.start("unmount-after", opts=opts)
        self.assertEqual(self.names(m), set(keys))
        self.verify_keys(m, keys, "after the stop")
        s = m.stats()
        self.assertLessEqual(s["ssd"]["used"], s["ssd"]["cap"] + 2 * MIB, s["ssd"])
        m.stop()
        self.fsck_clean()


class ExplicitDeleteTest(GcTestCase):
    OPTS = ("--mem-size=16M", "--ssd-size=32M", "--bucket-size=2M")

    def test_enospc_then_delete_half_then_puts_succeed(self):
        m = self.start("explicit")
        keys = {}
        failed = None
        for i in range(200):
            name = "f%03d" % i
            data = pattern(name, MIB)
            try:
                put(m.path(name), data, fsync=True)
            except OSError as e:
                self.assertEqual(e.errno, errno.ENOSPC, e)
                failed = name
                break
            keys[name] = (MIB, digest(data))
        self.assertIsNotNone(failed, "200 MiB fit a 32 MiB quota")
        self.assertGreaterEqual(len(keys), 16)
        os.unlink(m.path(failed))  # its bytes never reached the SSD
        self.verify_keys(m, keys, "at the quota")
        half = sorted(keys)[::2]
        for k in half:
            os.unlink(m.path(k))
            del keys[k]
        run_gc(m)
        for i in range(len(half) // 2):
            name = "g%03d" % i
            data = pattern(name, MIB)
            put(m.path(name), data, fsync=True)
            keys[name] = (MIB, digest(data))
        self.verify_keys(m, keys, "after the deletes and a pass")
        m.stop()


class CacheModeTest(GcTestCase):
    OPTS = ("--mem-size=16M", "--ssd-size=48M", "--bucket-size=2M", "--evict=lru")

    def check_gone(self, m, written, present):
        """Names gone from a listing since the last call (evicted: nothing
        else deletes) are gone from the kernel's dentry cache too, once the
        daemon's invalidations for them went out: evictions and their
        invalidations run in one order, so the first len(written) -
        len(present) invalidations are theirs. Takes them out of `present`."""
        gone = present - set(os.listdir(m.mnt))
        if not gone:
            return
        present -= gone
        evicted = len(written) - len(present)
        deadline = time.monotonic() + 10
        while True:
            s = m.stats()["gc"]
            # a daemon without these counters has nothing to wait for
            if s.get("evict_invalidations", evicted) + \
                    s.get("evict_invalidations_dropped", 0) >= evicted:
                break
            self.assertLess(time.monotonic(), deadline, s)
            time.sleep(0.001)
        self.assertEqual(s.get("evict_invalidations_dropped", 0), 0, s)
        stale = sorted(k for k in gone if os.path.lexists(m.path(k)))
        self.assertEqual(stale, [], "evicted names the kernel still has")

    def test_twice_the_quota(self):
        m = self.start("lru")
        written = []
        present = set()
        # the oldest key, read (past the page cache) again and again: recently
        # used; the second, open throughout: never evicted
        hot, held = "c0000", "c0001"
        fd = None
        for i in range(2 * 48 * MIB // VALUE):
            name = "c%04d" % i
            data = pattern(name, VALUE)
            write_file(m.path(name), data)
            written.append((name, digest(data)))
            present.add(name)
            if name == held:
                fd = os.open(m.path(held), os.O_RDONLY)
            if i % 8 == 0:
                self.assertEqual(read_direct(m.path(hot)), pattern(hot, VALUE))
            # the kernel keeps each entry for 1 s (KV_FS_TIMEOUT): keep
            # them all cached, so an eviction has entries to invalidate
            for k in present:
                os.path.lexists(m.path(k))
            self.check_gone(m, written, present)
        syncfs(m)
        self.check_gone(m, written, present)
        s = m.stats()
        self.assertEqual(kvfstest.errcount(s, "ENOSPC"), 0, s.get("errors"))
        self.assertEqual(s["tier"]["offload_errors"], 0, s["tier"])
        self.assertGreater(s["gc"]["evicted_keys"], 0, s["gc"])
        self.assertGreaterEqual(s["gc"]["evicted_bytes"], s["gc"]["evicted_keys"] * VALUE)
        names = self.names(m)
        # the newest tenth is there, exactly
        newest = written[-len(written) // 10:]
        self.verify_keys(m, {k: (VALUE, d) for k, d in newest}, "the newest keys")
        # what is there is exact; what is not was evicted, counted
        self.verify_keys(m, {k: (VALUE, d) for k, d in written if k in names}, "kept keys")
        self.assertEqual(len(written) - len(names), s["gc"]["evicted_keys"])
        self.assertLessEqual(s["ssd"]["used"], s["ssd"]["cap"] + 2 * MIB)
        # keys written after them were evicted, they were not
        self.assertNotIn("c0002", names)
        self.assertIn(hot, names)
        self.assertIn(held, names)
        self.assertEqual(os.pread(fd, VALUE + 1, 0), pattern(held, VALUE))
        os.close(fd)
        m.stop()


class ConcurrencyTest(GcTestCase):
    """Threads on their own keys (so the model is exact) while compaction
    runs every 5 ms on 1 MiB buckets. Bounded by KVFS_GC_STRESS_S seconds."""

    OPTS = ("--mem-size=32M", "--ssd-size=256M", "--bucket-size=1M", "--gc-interval=5ms",
            "--gc-dead-ratio=0.1", "--flush-delay=1ms")
    SECONDS = float(os.environ.get("KVFS_GC_STRESS_S", "15"))

    def worker(self, m, tid, model, errors, stop):
        rnd = random.Random(tid)
        d = m.path("t%d" % tid)
        os.mkdir(d)
        gen = 0
        try:
            while not stop.is_set():
                gen += 1
                op = rnd.random()
                names = sorted(model)
                if op < 0.35 or not names:
                    name = "k%03d" % rnd.randrange(40)
                    data = pattern(name, rnd.choice((4 * KIB, 20 * KIB, 70 * KIB)), gen)
                    write_file(os.path.join(d, name), data)
                    model[name] = data
                elif op < 0.65:
                    name = rnd.choice(names)
                    got = read_file(os.path.join(d, name))
                    if got != model[name]:
                        errors.append("t%d/%s: %d bytes differ" % (tid, name, len(got)))
                elif op < 0.8:
                    name = rnd.choice(names)
                    os.unlink(os.path.join(d, name))
                    del model[name]
                elif op < 0.9:
                    src = rnd.choice(names)
                    dst = "k%03d" % rnd.randrange(40)
                    os.rename(os.path.join(d, src), os.path.join(d, dst))
                    if src != dst:
                        model[dst] = model.pop(src)
                else:
                    name = rnd.choice(names)
                    with open(os.path.join(d, name), "r+b") as f:
                        f.seek(rnd.randrange(len(model[name])))
                        patch = pattern(name, 1000, gen)
                        off = f.tell()
                        f.write(patch)
                    cur = model[name]
                    model[name] = cur[:off] + patch + cur[off + len(patch):]
                if rnd.random() < 0.05:
                    fsync_path(d, directory=True)
        except OSError as e:
            errors.append("t%d: %s" % (tid, e))

    def check_model(self, m, models, what):
        want = {"t%d/%s" % (t, k): v for t, mod in models.items() for k, v in mod.items()}
        self.assertEqual(self.names(m), set(want), what)
        bad = [k for k, v in want.items() if read_file(m.path(k)) != v]
        self.assertEqual(bad, [], what)

    def test_stress_with_model(self):
        m = self.start("stress")
        models = {t: {} for t in range(4)}
        errors = []
        stop = threading.Event()
        ths = [threading.Thread(target=self.worker, args=(m, t, models[t], errors, stop))
               for t in models]
        for t in ths:
            t.start()
        time.sleep(self.SECONDS)
        stop.set()
        for t in ths:
            t.join()
        self.assertEqual(errors, [])
        syncfs(m)
        run_gc(m)
        s = m.stats()
        self.assertGreater(s["gc"]["passes"], 1, s["gc"])
        self.assertGreater(s["gc"]["buckets_compacted"] + s["gc"]["buckets_dropped"], 0, s["gc"])
        self.assertEqual(s["ssd"]["checksum_errors"], 0)
        self.check_model(m, models, "live")
        m.stop()
        m = self.start("stress-again")
        self.check_model(m, models, "after the remount")
        m.stop()
        self.fsck_clean()


class CrashTest(GcTestCase):
    OPTS = ("--mem-size=32M", "--ssd-size=256M", "--bucket-size=1M", "--gc=off")
    # ":2": the second output of the pass, written over the file of a victim the
    # first one freed (half the keys live: two outputs)
    POINTS = ("gc_after_copy", "gc_after_durable", "gc_after_switch", "gc_after_journal",
              "gc_before_remove", "gc_after_remove", "gc_after_copy:2", "gc_after_durable:2",
              "gc_after_switch:2", "gc_before_remove:2")

    def crash_at(self, point):
        m = self.mount(opts=list(self.OPTS), data=self.data, name=point.replace(":", "-"),
                       env={"KVFS_FAULT": point})
        if m.config().get("faults") != "on":
            m.stop()
            self.skipTest("kvfs built without -DKVFS_FAULTS=ON: no crash points")
        every = 2 if point.endswith(":2") else 4
        keys = self.fill(m, 48, size=64 * KIB, prefix=point.replace(":", "-") + "-")
        gone = {k for i, k in enumerate(sorted(keys)) if i % every}
        for k in gone:
            os.unlink(m.path(k))
        syncfs(m)
        try:
            run_gc(m)
        except OSError:
            pass  # the daemon died under the write
        m.proc.wait(30)
        self.assertNotEqual(m.proc.returncode, 0, "%s: the daemon did not abort" % point)
        subprocess.run(["fusermount3", "-u", "-z", m.mnt], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        m.cleanup()
        return {k: v for k, v in keys.items() if k not in gone}, gone

    def test_abort_at_every_step(self):
        survivors = {}
        deleted = set()
        for point in self.POINTS:
            live, gone = self.crash_at(point)
            survivors.update(live)
            deleted |= gone
            m = self.start(point + "-after")
            names = self.names(m)
            self.assertEqual(names & deleted, set(), "%s: deleted keys came back" % point)
            self.assertEqual(names, set(survivors), point)
            self.verify_keys(m, survivors, "after a crash at %s" % point)
            run_gc(m)
            s = m.stats()
            self.assertEqual(s["ssd"]["dead"], 0, point)
            # no orphan: every bucket file holds a live key; no spare left
            self.assertEqual(len(bucket_files(self.data)), s["ssd"]["buckets"], point)
            self.assertEqual(list(spare_files(self.data)), [], point)
            m.stop()
            out = self.fsck_clean()
            self.assertNotIn(" 0 records", out, point)

    def test_kill_during_rm_rf_20000_keys(self):
        m = self.start("rmrf", opts=["--mem-size=64M", "--ssd-size=1G", "--bucket-size=16M"])
        d = m.path("dir")
        os.mkdir(d)
        keys = {}
        for i in range(20000):
            name = "dir/k%05d" % i
            data = pattern(name, 512)
            write_file(m.path(name), data)
            keys[name] = (512, digest(data))
        syncfs(m)
        rm = subprocess.Popen(["rm", "-rf", d], stderr=subprocess.DEVNULL)
        # kill while rm -rf is half way: when about a third of the keys are gone
        kvfstest.wait_until(lambda: m.stats()["namespace"]["keys"] < 14000 or
                            rm.poll() is not None, timeout=120, what="rm -rf under way")
        self.crash(m)
        rm.wait(60)
        m = self.start("rmrf-after", opts=["--mem-size=64M", "--ssd-size=1G",
                                           "--bucket-size=16M"])
        names = self.names(m)
        self.assertTrue(names <= set(keys))
        self.assertGreater(len(names), 0, "rm -rf ended before the kill: nothing was tested")
        self.verify_keys(m, {k: keys[k] for k in names}, "after kill -9 in rm -rf")
        if os.path.isdir(d):
            self.assertEqual(len(os.listdir(d)), len(names))
        run_gc(m)
        m.stop()
        self.fsck_clean()


if __name__ == "__main__":
    kvfstest.main()
