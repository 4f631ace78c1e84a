# SPDX-License-Identifier: MIT
"""Concurrent writers and readers on one mount, every byte verified.

Python threads release the GIL inside os.read/os.write/os.pread, so the
daemon sees truly concurrent requests."""

import os
import random
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
from kvfstest import pattern  # noqa: E402

MEM = "2G"
SEED = int(os.environ.get("KVFS_TEST_SEED", "1234"))
WRITERS = 8
READERS = 8
KEYS_PER_WRITER = 6
PREWRITTEN = 16


def key_size(name):
    """4 KiB .. 4 MiB, log-uniform, not page aligned, fixed by the name."""
    r = random.Random("size/%s/%d" % (name, SEED))
    return int(4096 * (1024 ** r.random())) + r.randrange(0, 4096)


def content(name):
    return pattern(name, key_size(name), SEED)


def write_in_pieces(path, data, rnd):
    """Writes data through one fd in random-sized pieces, in order."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        off = 0
        while off < len(data):
            n = rnd.choice((1, 100, 4096, 4097, 65536, 131072, 1 << 20))
            off += os.write(fd, data[off:off + n])
    finally:
        os.close(fd)


def verify_random_reads(path, want, rnd, count=20):
    """Random preads (unaligned offsets and lengths) plus one whole read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(count):
            off = rnd.randrange(0, len(want))
            n = rnd.randrange(1, 300000)
            got = os.pread(fd, n, off)
            if got != want[off:off + n]:
                return "%s: pread(%d, %d) mismatch" % (path, off, n)
        whole = bytearray()
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            whole += b
        if bytes(whole) != want:
            return "%s: whole read mismatch (%d vs %d bytes)" % (path, len(whole), len(want))
    finally:
        os.close(fd)
    return None


class ConcurrencyTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=" + MEM,)

    def run_threads(self, targets):
        errors = []

        def wrap(fn, *a):
            try:
                e = fn(*a)
                if e:
                    errors.append(e)
            except Exception as ex:
                errors.append("%s%r: %r" % (fn.__name__, a, ex))

        threads = [threading.Thread(target=wrap, args=t) for t in targets]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
            self.assertFalse(t.is_alive(), "a thread hung")
        return errors

    def test_writers_and_readers(self):
        m = self.m
        os.mkdir(m.path("pre"))
        os.mkdir(m.path("new"))
        pre = ["pre/key-%02d" % i for i in range(PREWRITTEN)]
        for name in pre:
            kvfstest.write_file(m.path(name), content(name))
        written = {}
        lock = threading.Lock()
        stop = threading.Event()

        def writer(w):
            rnd = random.Random("writer/%d/%d" % (w, SEED))
            for k in range(KEYS_PER_WRITER):
                name = "new/w%d-k%d" % (w, k)
                data = content(name)
                write_in_pieces(m.path(name), data, rnd)
                with lock:
                    written[name] = len(data)
            return None

        def reader(r):
            rnd = random.Random("reader/%d/%d" % (r, SEED))
            rounds = 0
            while not stop.is_set() or rounds < 3:
                name = rnd.choice(pre)
                e = verify_random_reads(m.path(name), content(name), rnd, count=5)
                if e:
                    return e
                rounds += 1
            return None

        # writers run to completion while readers keep reading the old keys
        readers = [threading.Thread(target=lambda r=r: reader_errors.append(reader(r)))
                   for r in range(READERS)]
        reader_errors = []
        for t in readers:
            t.start()
        try:
            errors = self.run_threads([(writer, w) for w in range(WRITERS)])
        finally:
            stop.set()
            for t in readers:
                t.join(300)
        self.assertEqual(errors, [])
        self.assertEqual([e for e in reader_errors if e], [])
        self.assertEqual(len(reader_errors), READERS)

        # every key reads back byte-exact, listing and stats agree
        self.assertEqual(len(written), WRITERS * KEYS_PER_WRITER)
        for name, size in written.items():
            self.assertEqual(os.stat(m.path(name)).st_size, size, name)
            self.assertEqual(kvfstest.read_file(m.path(name)), content(name), name)
        self.assertEqual(sorted(os.listdir(m.path("new"))),
                         sorted(n.split("/")[1] for n in written))
        ns = m.stats()["namespace"]
        self.assertEqual(ns["keys"], PREWRITTEN + WRITERS * KEYS_PER_WRITER)
        self.assertEqual(ns["bytes"], sum(written.values()) + sum(key_size(n) for n in pre))

    def test_concurrent_readers_of_written_keys(self):
        """Writers' keys are read by other threads as soon as they are closed."""
        m = self.m
        done = {}  # name -> True once closed
        cv = threading.Condition()

        def writer(w):
            rnd = random.Random("w2/%d" % w)
            for k in range(5):
                name = "w%d-%d" % (w, k)
                write_in_pieces(m.path(name), content(name), rnd)
                with cv:
                    done[name] = True
                    cv.notify_all()

        def reader(r):
            rnd = random.Random("r2/%d" % r)
            checked = 0
            while checked < 10:
                with cv:
                    cv.wait_for(lambda: done, timeout=60)
                    names = list(done)
                if not names:
                    return "reader %d: nothing written in 60 s" % r
                name = rnd.choice(names)
                e = verify_random_reads(m.path(name), content(name), rnd, count=3)
                if e:
                    return e
                checked += 1

        errors = self.run_threads([(writer, w) for w in range(WRITERS)]
                                  + [(reader, r) for r in range(READERS)])
        self.assertEqual(errors, [])
        self.assertEqual(len(done), WRITERS * 5)

    def test_concurrent_namespace_ops(self):
        """Threads create, rename and unlink in one directory at once."""
        m = self.m
        os.mkdir(m.path("ns"))

        def worker(t):
            for i in range(150):
                a = m.path("ns", "t%d-%d" % (t, i))
                kvfstest.write_file(a, b"%d/%d" % (t, i))
                if i % 3 == 1:
                    os.rename(a, a + ".renamed")
                elif i % 3 == 2:
                    os.unlink(a)
                os.mkdir(m.path("ns", "d%d-%d" % (t, i)))
                if i % 2:
                    os.rmdir(m.path("ns", "d%d-%d" % (t, i)))

        errors = self.run_threads([(worker, t) for t in range(8)])
        self.assertEqual(errors, [])
        want = set()
        for t in range(8):
            for i in range(150):
                if i % 3 == 0:
                    want.add("t%d-%d" % (t, i))
                elif i % 3 == 1:
                    want.add("t%d-%d.renamed" % (t, i))
                if i % 2 == 0:
                    want.add("d%d-%d" % (t, i))
        got = os.listdir(m.path("ns"))
        self.assertEqual(len(got), len(want))
        self.assertEqual(set(got), want)
        for n in want:
            if n.startswith("t"):
                t, i = n.split(".")[0][1:].split("-")
                self.assertEqual(kvfstest.read_file(m.path("ns", n)), ("%s/%s" % (t, i)).encode())
        st = m.stats()["namespace"]
        self.assertEqual(st["keys"], sum(1 for n in want if n.startswith("t")))


if __name__ == "__main__":
    kvfstest.main()
