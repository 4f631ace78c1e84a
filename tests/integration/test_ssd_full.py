# SPDX-License-Identifier: MIT
"""A full SSD quota never loses what it acknowledged (issue 25, bug 4).

--ssd-size=64M under a 256 MiB pool: every value fits in DRAM, so without
a promise at write time all of them were acknowledged and most were lost
at the clean stop ("N keys could not be written to the SSD", exit 1). Now
a write, put or create that the quota cannot keep fails with ENOSPC, and
each scenario ends with a clean unmount (exit 0, asserted by the harness)
and a remount where every acknowledged key reads back whole:
- 150 cp of a 1 MiB file: some fail with ENOSPC, none of the others lost;
  an overwrite of a kept file still works at the full quota;
- ioctl puts of 1 MiB keys (libkvfs): per-key ENOSPC, none acknowledged lost;
  an overwrite by put still works;
- two writer threads at once;
- --evict=lru: every cp succeeds, old keys are evicted, the newest kept.
"""

import errno
import os
import shutil
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
from kvfstest import pattern  # noqa: E402

MB = 1 << 20
OPTS = ("--mem-size=256M", "--ssd-size=64M")


class SsdFullTest(kvfstest.KvfsTestCase):
    OPTS = OPTS

    def setUp(self):
        # the data directory outlives each mount (stop() removes its root)
        self.data = tempfile.mkdtemp(prefix="kvfs-it-full-", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.data, True)
        self.m = self.mount(opts=self.OPTS, data=self.data)

    def remount_and_check(self, kept, opts=OPTS):
        """Stops the daemon (exit 0), remounts its data and checks every key
        in kept (name -> bytes) reads back whole. Returns the names there."""
        self.m.stop(expect_status=0)
        self.assertNotIn("could not be written", self.m.log_text())
        m2 = self.mount(opts=opts, data=self.data, name="remount")
        for name, data in kept.items():
            got = kvfstest.read_file(m2.path(name))
            self.assertEqual(len(got), len(data), name)
            self.assertTrue(got == data, "%s: bytes differ after the remount" % name)
        return set(os.listdir(m2.mnt)) - {".kvfs"}

    def cp_files(self, prefix, n, src):
        """cp src to prefix-i for i < n; returns (acknowledged names, failures)."""
        ok, failed = [], []
        for i in range(n):
            name = "%s-%03d" % (prefix, i)
            r = subprocess.run(["cp", src, self.m.path(name)], capture_output=True, text=True)
            if r.returncode == 0:
                ok.append(name)
            else:
                self.assertIn("No space left on device", r.stderr)
                failed.append(name)
        return ok, failed

    def test_cp_at_full_quota(self):
        src = os.path.join(self.m.root, "src")
        data = pattern("src", MB)
        with open(src, "wb") as f:
            f.write(data)
        ok, failed = self.cp_files("f", 150, src)
        # 64 MiB hold about 62 values of 1 MiB and their heads: never all 150
        self.assertGreater(len(ok), 40)
        self.assertGreater(len(failed), 60)
        self.assertEqual(len(ok) + len(failed), 150)
        # an overwrite of a kept key works at the full quota
        data2 = pattern("second", MB)
        kvfstest.write_file(self.m.path(ok[0]), data2)
        kept = {n: data for n in ok}
        kept[ok[0]] = data2
        self.remount_and_check(kept)

    def test_ioctl_puts_at_full_quota(self):
        kvfs = kvfstest.client()
        kept, refused = {}, 0
        with kvfs.Client(self.m.mnt) as c:
            for b in range(15):  # batches of 10 keys: 150 MiB offered
                items = [("k%03d" % (b * 10 + i), pattern("k%d" % (b * 10 + i), MB))
                         for i in range(10)]
                r = c.put_buffers(items)
                for (name, data), res in zip(items, r.results):
                    if res >= 0:
                        self.assertEqual(res, MB, name)
                        kept[name] = data
                    else:
                        self.assertEqual(res, -errno.ENOSPC, name)
                        refused += 1
            self.assertGreater(len(kept), 40)
            self.assertGreater(refused, 60)
            # an overwrite by put works at the full quota
            first = sorted(kept)[0]
            again = pattern("again", MB)
            self.assertEqual(list(c.put_buffers([(first, again)]).results), [MB])
            kept[first] = again
        names = self.remount_and_check(kept)
        self.assertEqual(names, set(kept))  # a refused put left nothing behind

    def test_two_writers_at_full_quota(self):
        acked = {}
        lock = threading.Lock()
        errors = []

        def writer(t):
            for i in range(60):
                name = "t%d-%03d" % (t, i)
                data = pattern(name, MB)
                try:
                    kvfstest.write_file(self.m.path(name), data)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        errors.append(e)
                    continue
                with lock:
                    acked[name] = data

        ts = [threading.Thread(target=writer, args=(t,)) for t in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])
        self.assertGreater(len(acked), 40)
        self.assertLess(len(acked), 120)
        self.remount_and_check(acked)

    def test_evict_lru_makes_room(self):
        self.m.stop(expect_status=0)
        shutil.rmtree(self.data)
        opts = OPTS + ("--evict=lru",)
        self.m = self.mount(opts=opts, data=self.data, name="lru")
        src = os.path.join(self.m.root, "src")
        data = pattern("src", MB)
        with open(src, "wb") as f:
            f.write(data)
        ok, failed = self.cp_files("f", 150, src)
        self.assertEqual(failed, [])
        self.assertGreater(self.m.stats()["gc"]["evicted_keys"], 60)
        self.m.stop(expect_status=0)
        self.assertNotIn("could not be written", self.m.log_text())
        m2 = self.mount(opts=opts, data=self.data, name="remount")
        names = sorted(set(os.listdir(m2.mnt)) - {".kvfs"})
        self.assertGreater(len(names), 40)
        self.assertIn(ok[-1], names)  # the newest key is kept
        for name in names:
            self.assertTrue(kvfstest.read_file(m2.path(name)) == data, name)


if __name__ == "__main__":
    kvfstest.main(skip_if=lambda: None if kvfstest.has_ssd_tier() else "no SSD tier")
