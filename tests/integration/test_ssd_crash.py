# SPDX-License-Identifier: MIT
"""The SSD tier when things go wrong (DESIGN.md "Durability", "On disk",
ssd/format.h): kill -9 of the daemon (fsync'ed keys byte-exact, others
absent or whole, deletes stay deleted), a byte flipped in a value on disk
(EIO for that key alone, counted; kvfs --fsck names it), and kvfs --salvage
rebuilding lost metadata from the bucket records.

Skipped (77) when the kvfs binary has no SSD tier."""

import errno
import os
import re
import stat
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
from kvfstest import pattern, read_file  # noqa: E402
from test_ssd import (MIB, REC_HEAD, SsdTestCase, bucket_inconsistencies,  # noqa: E402
                      bucket_records, bucket_states, find_record, flip_byte, fsync_path,
                      main, put, read_direct, run_kvfs, tier_of, tree)


def fsck_report(out):
    lines = [l for l in out.splitlines() if l.strip()]
    return lines[-1] if lines else ""


# ---------------------------------------------------------------------------
# 2. kill -9


class CrashTest(SsdTestCase):
    OPTS = ("--mem-size=128M", "--bucket-size=8M")

    SYNCED_SIZES = [0, 1, 4095, 4096, 4097, 65535, 65536, 65537, 100000, 1 << 20,
                    (1 << 20) + 1, 3 << 20]

    def test_kill9_fsynced_exact_others_whole_deletes_stay(self):
        m = self.start("first")
        for d in ("c/a", "c/b", "c/gone"):
            os.makedirs(m.path(d))
        synced = {}  # name -> bytes that must come back exactly

        # 50 fsync'ed keys of various sizes
        for i in range(50):
            name = "c/%s/k%02d" % ("ab"[i % 2], i)
            size = self.SYNCED_SIZES[i] if i < len(self.SYNCED_SIZES) else 1000 + i * 40503
            synced[name] = pattern(name, size)
            put(m.path(name), synced[name], fsync=True)

        # deletes and a rename, made durable by a later fsync (the journal
        # is ordered) ...
        deleted = ["c/a/k00", "c/b/k01", "c/a/k12", "c/b/k13", "c/a/k20"]
        for name in deleted:
            os.unlink(m.path(name))
            del synced[name]
        os.rename(m.path("c/b/k03"), m.path("c/a/renamed03"))
        synced["c/a/renamed03"] = synced.pop("c/b/k03")
        deleted.append("c/b/k03")
        os.rmdir(m.path("c/gone"))
        synced["c/barrier"] = pattern("c/barrier", 5000)
        put(m.path("c/barrier"), synced["c/barrier"], fsync=True)
        # ... or by an fsync of the parent directory
        os.unlink(m.path("c/b/k15"))
        del synced["c/b/k15"]
        deleted.append("c/b/k15")
        fsync_path(m.path("c/b"), directory=True)

        # an open key, fsync'ed half way: the fsync'ed bytes are a version
        half = pattern("c/a/half", 2 * MIB)
        hfd = os.open(m.path("c/a/half"), os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(hfd, half[:MIB])
        os.fsync(hfd)
        os.write(hfd, half[MIB:])
        synced["c/a/half"] = half[:MIB]

        # unsynced keys, closed: absent, or whole
        loose = {}
        for i in range(20):
            name = "c/loose/l%02d" % i
            os.makedirs(m.path("c/loose"), exist_ok=True)
            loose[name] = pattern(name, 3000 + i * 150001)
            put(m.path(name), loose[name])
        # an fsync'ed key rewritten without fsync: the old or the new value
        rewritten = "c/a/k10"
        old_new = (synced.pop(rewritten), pattern("new", 777777))
        put(m.path(rewritten), old_new[1])
        # write-to-temp-then-rename over an fsync'ed key, not fsync'ed:
        # the old value or the new one
        published = "c/b/k05"
        old_new_pub = (synced.pop(published), pattern("published", 300001))
        put(m.path("c/tmp-publish"), old_new_pub[1])
        os.rename(m.path("c/tmp-publish"), m.path(published))
        # unsynced keys still open, written in part: never sealed, so absent
        open_fds = []
        never_sealed = []
        for i in range(3):
            name = "c/open%d" % i
            fd = os.open(m.path(name), os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, pattern(name, MIB + 3 * i))
            open_fds.append(fd)
            never_sealed.append(name)
        # and one being written while the daemon dies
        started = threading.Event()
        wfd = os.open(m.path("c/writing"), os.O_WRONLY | os.O_CREAT, 0o644)
        never_sealed.append("c/writing")

        def writer():
            chunk = pattern("c/writing", 256 << 10)
            try:
                for i in range(256):  # at most 64 MiB
                    os.write(wfd, chunk)
                    started.set()
            except OSError:
                pass
            started.set()

        # and closed keys put one after the other while the daemon dies
        # (their offload is in flight): absent or whole
        churned = []

        def churn():
            try:
                for i in range(100000):
                    name = "c/churn/k%05d" % i
                    churned.append(name)
                    put(m.path(name), pattern(name, 4096 + (i * 48271) % (600 << 10)))
            except OSError:
                pass

        os.mkdir(m.path("c/churn"))
        threads = [threading.Thread(target=writer, daemon=True),
                   threading.Thread(target=churn, daemon=True)]
        for th in threads:
            th.start()
        started.wait(10)
        kvfstest.wait_until(lambda: len(churned) > 30 or not threads[1].is_alive(), timeout=20,
                            what="30 keys put by the churn thread")
        self.crash(m)
        for th in threads:
            th.join(30)
            self.assertFalse(th.is_alive(), "a write into the killed daemon hangs")
        for name in churned:
            loose[name] = pattern(name, 4096 + (int(name[-5:]) * 48271) % (600 << 10))

        for fd in open_fds + [hfd, wfd]:
            try:
                os.close(fd)
            except OSError:
                pass

        crashed = self.crash_state()
        m2 = self.start("second")
        t = tree(m2.mnt)
        bad = []
        for name, data in synced.items():
            try:
                got = read_file(m2.path(name))
            except OSError as e:
                bad.append("%s (fsync'ed): %s" % (name, e))
                continue
            if got != data:
                bad.append("%s (fsync'ed): %d bytes, expected %d%s" % (
                    name, len(got), len(data), "" if len(got) != len(data) else ", other bytes"))
        for name, data in loose.items():
            if name in t:
                got = read_file(m2.path(name))
                if got != data:
                    bad.append("%s (closed, not fsync'ed): came back torn, %d of %d bytes" % (
                        name, len(got), len(data)))
        for name, pair in ((rewritten, old_new), (published, old_new_pub)):
            got = read_file(m2.path(name)) if name in t else None
            if got not in pair:
                bad.append("%s (replaced): neither the fsync'ed nor the new value (%s)"
                           % (name, "absent" if got is None else "%d bytes" % len(got)))
        if "c/tmp-publish" in t:
            bad.append("c/tmp-publish: renamed away, came back")
        for name in never_sealed:
            if name in t:
                bad.append("%s (open, never sealed): came back with %d bytes" % (
                    name, t[name].st_size))
        for name in deleted:
            if name in t:
                bad.append("%s: deleted, came back" % name)
        if "c/gone" in t:
            bad.append("c/gone: removed directory came back")
        allowed = set(synced) | set(loose) | set(never_sealed) | {
            rewritten, published, "c", "c/a", "c/b", "c/loose", "c/churn"}
        for name in t:
            if name not in allowed:
                bad.append("%s: unexpected" % name)
        self.assertEqual(bad, [], "after kill -9:\n  " + "\n  ".join(bad))
        if os.environ.get("KVFS_SSD_TIMINGS"):
            print("\n  churned %d, came back %d; loose back %d/%d; %s"
                  % (len(churned), sum(n in t for n in churned),
                     sum(n in t for n in loose), len(loose), m2.stats()["recovery"]),
                  flush=True)
        st = m2.stats()
        present = [p for p, s in t.items() if stat.S_ISREG(s.st_mode)]
        self.assertEqual(st["recovery"]["keys"], len(present), st["recovery"])
        # the buckets being filled when the daemon died were cut and sealed
        self.check_recovered_buckets(crashed, st, synced)
        self.assertEqual(st["ssd"]["checksum_errors"], 0)

        # the recovered store works on, and is sound after a clean stop
        put(m2.path("c/after"), b"after" * 1000, fsync=True)
        m2.stop()
        rc, out = run_kvfs("--fsck", self.data)
        self.assertEqual((rc, fsck_report(out)), (0, "fsck: clean"), out)
        m3 = self.start("third")
        self.assertEqual(read_file(m3.path("c/after")), b"after" * 1000)
        self.assertEqual(read_file(m3.path("c/barrier")), synced["c/barrier"])

    def test_fsync_of_root_is_syncfs(self):
        """fsync of the mount's root stands in for syncfs: every value closed
        before it, and every delete, survives a kill -9 right after it,
        although none of the keys was fsync'ed itself."""
        m = self.start("syncfs", opts=["--mem-size=128M", "--bucket-size=8M",
                                        "--flush-delay=5s"])
        os.mkdir(m.path("s"))
        keys = {"s/k%02d" % i: pattern("s/k%02d" % i, 1000 + i * 70001) for i in range(30)}
        for name, data in keys.items():
            put(m.path(name), data)
        os.unlink(m.path("s/k07"))
        del keys["s/k07"]
        # with a 5 s flush delay nothing would be written yet, but for this:
        fsync_path(m.mnt, directory=True)
        self.crash(m)
        m = self.start("after", opts=["--mem-size=128M", "--bucket-size=8M"])
        t = tree(m.mnt)
        self.assertNotIn("s/k07", t, "a delete before the root fsync came back")
        for name, data in keys.items():
            self.assertIn(name, t, "%s lost although the root was fsync'ed" % name)
            self.assertEqual(read_file(m.path(name)), data, name)

    def crash_state(self):
        """The bucket files right after a crash: ({name: (size, header,
        trailer)}, {name of an open bucket: the keys of its records})."""
        states = bucket_states(self.data)
        open_keys = {}
        for n, (size, hdr, trl) in states.items():
            if hdr and not trl:
                recs = bucket_records(os.path.join(self.data, "buckets", n))
                open_keys[n] = {r.key.decode(errors="replace").lstrip("/") for r in recs}
        return states, open_keys

    def check_recovered_buckets(self, crashed, st, durable):
        """After recovery every bucket file the crash left is sealed (it
        ends with a trailer) or gone; recovery.open_buckets_cut counts the
        open ones it cut, at least those holding a durable key's value."""
        states, open_keys = crashed
        now = bucket_states(self.data)
        bad = ["%s: %s at the crash, now %s" % (n, states[n], now[n])
               for n in sorted(states) if n in now and not (now[n][1] and now[n][2])]
        self.assertEqual(bad, [], "buckets not sealed by recovery (size, header, trailer)")
        live = sorted(n for n, keys in open_keys.items() if keys & set(durable))
        cut = st["recovery"]["open_buckets_cut"]
        self.assertTrue(len(live) <= cut <= len(open_keys),
                        "%s: %d open buckets at the crash, %d of them with durable keys"
                        % (st["recovery"], len(open_keys), len(live)))

    def test_repeated_kill9_during_offload(self):
        """Several kill -9s while two writers keep the offloader busy with
        small buckets (a batch spans several of them) and a third fsyncs
        every key it writes: after every restart the fsync'ed keys are exact
        and the others absent or whole; at the end the data directory is
        sound (kvfs --fsck: clean)."""
        opts = ["--mem-size=64M", "--bucket-size=1M", "--flush-delay=100ms"]
        synced, loose = {}, set()
        lies = []

        def size_of(name):
            return 4096 + (sum(name.encode()) * 48271) % (700 << 10)

        def check(m, what, prefix=""):
            """Every fsync'ed key exact, loose ones (under prefix) absent or whole."""
            t = tree(m.mnt)
            bad = []
            for name, data in synced.items():
                got = read_file(m.path(name)) if name in t else None
                if got != data:
                    bad.append("%s (fsync'ed): %s" % (name, "absent" if got is None else
                                                      "%d bytes of %d" % (len(got), len(data))))
            for name in loose:
                if not name.startswith(prefix):
                    continue
                if name in t and read_file(m.path(name)) != pattern(name, size_of(name)):
                    bad.append("%s (not fsync'ed): torn, %d bytes" % (name, t[name].st_size))
            self.assertEqual(bad, [], "%s:\n  %s" % (what, "\n  ".join(bad[:30])))

        rounds = 6
        for r in range(rounds):
            m = self.start("round%d" % r, opts=opts)
            if r:
                check(m, "after kill -9 number %d" % r, prefix="r%d/" % (r - 1))
                self.check_recovered_buckets(crashed, m.stats(), synced)
            os.mkdir(m.path("r%d" % r))
            stop = threading.Event()
            count = [0]

            def writer(j, r=r, m=m):
                try:
                    for i in range(100000):
                        if stop.is_set():
                            return
                        name = "r%d/w%d-%05d" % (r, j, i)
                        if j < 2:
                            loose.add(name)
                            put(m.path(name), pattern(name, size_of(name)))
                        else:
                            data = pattern(name, 20000 + i)
                            put(m.path(name), data, fsync=True)
                            synced[name] = data
                            stop.wait(0.05)  # seldom: an fsync cuts a batch short
                        count[0] += 1
                except OSError:
                    pass

            threads = [threading.Thread(target=writer, args=(j,), daemon=True) for j in range(3)]
            t0 = time.monotonic()
            for th in threads:
                th.start()
            kvfstest.wait_until(lambda: count[0] >= 10, timeout=30, what="writers under way")
            # kill at a different moment of the offloader's work each round
            time.sleep(max(0.0, 0.15 + 0.12 * r - (time.monotonic() - t0)))
            self.crash(m)
            stop.set()
            for th in threads:
                th.join(30)
                self.assertFalse(th.is_alive(), "a write into the killed daemon hangs")
            crashed = self.crash_state()
            # a sealed bucket's index and trailer may only name records that
            # are on disk: sealing comes after the records' writes
            for line in bucket_inconsistencies(self.data, headerless=False):
                lies.append("kill -9 number %d: %s" % (r + 1, line))

        rc, out = run_kvfs("--fsck", self.data)
        self.assertNotIn("damaged:", out, "a key the index finds is damaged after kill -9")
        m = self.start("last", opts=opts)
        check(m, "after kill -9 number %d" % rounds)
        m.stop()
        rc, out = run_kvfs("--fsck", self.data)
        if lies:
            self.fail("sealed buckets name records that are not on disk, right after a kill -9 "
                      "(%d in all):\n  %s\nkvfs --fsck after recovery and a clean stop:\n%s"
                      % (len(lies), "\n  ".join(lies[:15]), out))
        self.assertEqual((rc, fsck_report(out)), (0, "fsck: clean"),
                         "after %d kill -9s, recovery and a clean stop:\n%s\nbuckets:\n  %s"
                         % (rounds, out, "\n  ".join(bucket_inconsistencies(self.data))))


# ---------------------------------------------------------------------------
# 3. a flipped byte in a bucket file


class CorruptionTest(SsdTestCase):
    OPTS = ("--mem-size=64M", "--bucket-size=8M")

    def test_flipped_byte_eio_that_key_only_and_fsck(self):
        m = self.start("first")
        os.makedirs(m.path("d/e"))
        keys = {}
        for i in range(40):
            name = "d/%sk%02d" % ("e/" if i % 3 == 0 else "", i)
            keys[name] = pattern(name, 5000 + i * 91111)
        keys["d/e/victim"] = pattern("d/e/victim", 300000)  # 5 checksum chunks
        keys["d/headcase"] = pattern("d/headcase", 70000)
        for name, data in keys.items():
            put(m.path(name), data)
        m.stop()
        victims = ["d/e/victim", "d/headcase"]

        rc, out = run_kvfs("--fsck", self.data)
        self.assertEqual((rc, fsck_report(out)), (0, "fsck: clean"), out)
        self.assertNotIn("damaged:", out)

        bucket, off, head_len, value_len = find_record(self.data, "d/e/victim")
        self.assertEqual(value_len, 300000)
        flip_byte(bucket, off + head_len + 200000)  # inside chunk 3
        # and one in the other's head: in its second chunk checksum
        bucket2, off2, head_len2, value_len2 = find_record(self.data, "d/headcase")
        flip_byte(bucket2, off2 + REC_HEAD + len(b"d/headcase") + 8 + 3)

        rc, out = run_kvfs("--fsck", self.data)
        self.assertEqual((rc, fsck_report(out)), (1, "fsck: DAMAGED"), out)
        damaged = re.findall(r"^damaged: (\S+) \(", out, re.M)
        self.assertEqual(sorted(p.lstrip("/") for p in damaged), sorted(victims), out)

        m2 = self.start("second")
        e0 = m2.stats()["ssd"]["checksum_errors"]
        for v in victims:
            with open(m2.path(v), "rb") as f:
                self.assertErrno(errno.EIO, f.read)
            self.assertErrno(errno.EIO, read_direct, m2.path(v))
        for name, data in keys.items():
            if name not in victims:
                self.assertEqual(read_file(m2.path(name)), data, name)
        st = m2.stats()
        self.assertGreaterEqual(st["ssd"]["checksum_errors"], max(1, e0 + 1), st["ssd"])
        self.assertGreater(kvfstest.errcount(st, "EIO"), 0, st.get("errors"))
        # the damage is reported, not "repaired" into other bytes
        with open(m2.path("d/e/victim"), "rb") as f:
            self.assertErrno(errno.EIO, f.read)
        # the key can be deleted and written again
        os.unlink(m2.path("d/e/victim"))
        put(m2.path("d/e/victim"), b"fresh", fsync=True)
        self.assertEqual(read_file(m2.path("d/e/victim")), b"fresh")
        self.assertIn(tier_of(m2.path("d/e/victim")), ("ssd", "dram+ssd"))


    def test_damaged_checkpoint_fsck_then_salvage(self):
        """A flipped byte in the checkpoint: kvfs --fsck reports the data
        directory DAMAGED (exit 1, as documented: 0 clean / 1 damaged) and
        kvfs --salvage rebuilds it from the buckets."""
        m = self.start("first")
        keys = {"k%02d" % i: pattern("k%02d" % i, 3000 + i * 70001) for i in range(12)}
        for name, data in keys.items():
            put(m.path(name), data)
        m.stop()
        ck = os.path.join(self.data, "checkpoint")
        self.assertGreater(os.path.getsize(ck), 0)
        flip_byte(ck, os.path.getsize(ck) // 2)

        rc, out = run_kvfs("--fsck", self.data)
        with self.subTest("fsck of a damaged checkpoint"):  # the salvage runs regardless
            self.assertEqual((rc, fsck_report(out)), (1, "fsck: DAMAGED"), out)

        rc, out = run_kvfs("--salvage", self.data)
        self.assertEqual(rc, 0, out)
        m2 = self.start("second")
        for name, data in keys.items():
            self.assertEqual(read_file(m2.path(name)), data, name)


# ---------------------------------------------------------------------------
# 7. salvage


class SalvageTest(SsdTestCase):
    OPTS = ("--mem-size=64M", "--bucket-size=8M")

    def test_salvage_rebuilds_metadata_from_buckets(self):
        m = self.start("first")
        keys = {}
        for i in range(200):
            name = "s%d/t%d/k%03d" % (i % 4, i % 3, i)
            keys[name] = pattern(name, 4096 * (i % 7) + i * 7919)
        for d in sorted({os.path.dirname(n) for n in keys}):
            os.makedirs(m.path(d), exist_ok=True)
        for name, data in keys.items():
            put(m.path(name), data)
        # a key with two versions in the buckets: the newest must win
        name = "s0/t0/k000"
        kvfstest.wait_until(lambda: tier_of(m.path(name)) in ("ssd", "dram+ssd"), timeout=10,
                            what="%s offloaded" % name)
        keys[name] = pattern("second version", 123457)
        put(m.path(name), keys[name])
        m.stop()

        removed = [n for n in os.listdir(self.data)
                   if n == "checkpoint" or n.startswith("journal.")]
        self.assertIn("checkpoint", removed)
        for n in removed:
            os.unlink(os.path.join(self.data, n))

        rc, out = run_kvfs("--salvage", self.data)
        self.assertEqual(rc, 0, out)
        mo = re.search(r"salvage: (\d+) keys rebuilt", out)
        self.assertTrue(mo, out)
        self.assertEqual(int(mo.group(1)), len(keys), out)

        rc, out = run_kvfs("--fsck", self.data)
        self.assertEqual((rc, fsck_report(out)), (0, "fsck: clean"), out)

        m2 = self.start("second")
        t = tree(m2.mnt)
        files = sorted(p for p, s in t.items() if stat.S_ISREG(s.st_mode))
        self.assertEqual(files, sorted(keys))
        for name, data in keys.items():
            self.assertEqual(read_file(m2.path(name)), data, name)
        self.assertEqual(m2.stats()["recovery"]["keys"], len(keys))
        # and it takes new keys that survive another restart
        put(m2.path("s0/new"), b"new", fsync=True)
        m2.stop()
        m3 = self.start("third")
        self.assertEqual(read_file(m3.path("s0/new")), b"new")
        self.assertEqual(read_file(m3.path(name)), keys[name])


if __name__ == "__main__":
    main()
