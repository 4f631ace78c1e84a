# SPDX-License-Identifier: MIT
"""The client side of the ioctl path on a real mount: the Python module
(client/python/kvfs over libkvfs) with numpy-free buffers — put, batch
lookup with hits, misses and a prefix, get and compare every byte, remove by
names and by prefix, values readable through read() and files written with
write() fetched by get; layouts over shared memory; batches larger than one
ioctl; several threads batching on one handle; values on the SSD tier; a
forked child refused the parent's regions; the caller's trace id in the
daemon's --trace file on every ioctl of a split call; and
kvfs-bench --scenario=all through both paths with zero failures and every
byte verified, plus runs that must count failures.

libkvfs.so and kvfs-bench are taken from the directory of the kvfs binary
(--kvfs): build/client/libkvfs.so and build/kvfs-bench."""

import array
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kvfstest  # noqa: E402
from kvfstest import pattern, read_file, write_file  # noqa: E402

kvfs = None  # the module, imported once the library's path is known


def _tools():
    """Loads libkvfs next to the kvfs binary; returns the kvfs-bench path."""
    global kvfs
    kvfs = kvfstest.client()
    return os.path.join(os.path.dirname(kvfstest.KVFS), "kvfs-bench")


class PythonRoundTrip(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=256M",)

    def setUp(self):
        super().setUp()
        _tools()
        self.c = kvfs.Client(self.m.mnt)
        self.addCleanup(self.c.close)

    def test_buffers_round_trip(self):
        c, m = self.c, self.m
        values = {
            "a": pattern("a", 1),
            "b": bytearray(pattern("b", 4096)),
            "c": memoryview(pattern("c", 100003)),
            "d": array.array("B", pattern("d", (1 << 20) + 5)),
        }
        r = c.put_buffers(list(values.items()), trace=0x1234)
        self.assertEqual(list(r), [1, 4096, 100003, (1 << 20) + 5], r.errors())
        self.assertEqual((r.ok, r.prefix, r.trace), (4, 4, 0x1234))
        self.assertEqual(r.bytes, sum(len(bytes(v)) for v in values.values()))

        look = c.lookup(["a", "b", "nope", "c", "d"])
        self.assertEqual(look.results[:2], [1, 4096])
        self.assertEqual(look[2], -errno.ENOENT)
        self.assertEqual(look.results[3:], [100003, (1 << 20) + 5])
        self.assertEqual((look.ok, look.prefix), (4, 2))
        self.assertTrue(look.flags[0] & kvfs.KEY_SEALED)
        self.assertEqual(look.sizes[4], (1 << 20) + 5)
        self.assertEqual(c.lookup_prefix(["a", "b", "nope", "c", "d"]), 2)
        self.assertEqual(c.lookup_prefix(["a", "b", "c", "d"]), 4)
        self.assertEqual(c.lookup_prefix([]), 0)

        # values come back through get and through read()
        outs = [(k, bytearray(len(bytes(v)))) for k, v in values.items()]
        g = c.get_into(outs)
        self.assertEqual(g.ok, 4, g.errors())
        for (k, out), v in zip(outs, values.values()):
            self.assertEqual(bytes(out), bytes(v), k)
            self.assertEqual(read_file(m.path(k)), bytes(v), k)
        out = array.array("B", bytes(4096))
        self.assertEqual(c.get_into([("b", out)])[0], 4096)
        self.assertEqual(out.tobytes(), bytes(values["b"]))

        # a file written with write() is fetched by get
        data = pattern("file", 300000)
        write_file(m.path("file"), data)
        out = bytearray(len(data))
        self.assertEqual(c.get_into([("file", out)])[0], len(data))
        self.assertEqual(bytes(out), data)

        # remove by names: the files are gone, a missing name fails alone
        rm = c.remove(["a", "nope", "b"])
        self.assertEqual(list(rm), [1, -errno.ENOENT, 1])
        self.assertFalse(os.path.exists(m.path("a")))
        self.assertFalse(os.path.exists(m.path("b")))
        self.assertEqual(read_file(m.path("c")), bytes(values["c"]))
        self.assertEqual(c.lookup(["a", "b", "c"]).results[:2], [-errno.ENOENT] * 2)

    def test_errors_per_key(self):
        c, m = self.c, self.m
        write_file(m.path("k"), b"x" * 1000)
        os.mkdir(m.path("dir"))
        outs = [("k", bytearray(999)), ("missing", bytearray(10)), ("dir", bytearray(10)),
                ("a" * 300, bytearray(10)), ("bad/../name", bytearray(10)), ("k", bytearray(1000))]
        g = c.get_into(outs)
        self.assertEqual(g[0], -errno.EMSGSIZE)
        self.assertEqual(g.sizes[0], 1000)
        self.assertEqual(g[1], -errno.ENOENT)
        self.assertEqual(g[2], -errno.EISDIR)
        self.assertEqual(g[3], -errno.ENAMETOOLONG)
        self.assertEqual(g[4], -errno.EINVAL)
        self.assertEqual(g[5], 1000)
        self.assertEqual(bytes(outs[5][1]), b"x" * 1000)
        # a missing parent fails without PUT_MKDIR and works with it
        p = c.put_buffers([("x/y/z", b"123")])
        self.assertEqual(p[0], -errno.ENOENT)
        p = c.put_buffers([("x/y/z", b"123")], flags=kvfs.PUT_MKDIR)
        self.assertEqual(p[0], 3)
        self.assertEqual(read_file(m.path("x", "y", "z")), b"123")
        p = c.put_buffers([("x/y/z", b"456")], flags=kvfs.PUT_NOREPLACE)
        self.assertEqual(p[0], -errno.EEXIST)
        self.assertEqual(read_file(m.path("x", "y", "z")), b"123")
        with self.assertRaises(ValueError):
            c.lookup(["nul\0name"])
        with self.assertRaises(OSError) as e:
            kvfs.Client("/tmp")
        self.assertEqual(e.exception.errno, errno.ENOTTY)
        with self.assertRaises(OSError) as e:
            c.unregister(999)
        self.assertEqual(e.exception.errno, errno.EBADF)
        with self.assertRaises(OSError) as e:
            c.remove_prefix("no-such-dir")
        self.assertEqual(e.exception.errno, errno.ENOENT)

    def test_layout_over_shared_memory(self):
        """64 keys through a 16-segment layout on one shared-memory region,
        fetched into a second region with the same shape; every block equals
        the concatenation of its slices, also when read through read()."""
        c, m = self.c, self.m
        layers, nblocks, lb = 16, 64, 1024
        tensor = nblocks * lb
        src, dst = c.alloc(layers * tensor), c.alloc(layers * tensor)
        src.buffer[:] = pattern("src", layers * tensor)
        lay_s = c.layout([(src, l * tensor, lb, lb) for l in range(layers)])
        lay_d = c.layout([(dst, l * tensor, lb, lb) for l in range(layers)])
        self.assertEqual((lay_s.nblocks, lay_s.block_len), (nblocks, layers * lb))
        names = ["m/tp0/%016x" % (b * 7919) for b in range(nblocks)]
        r = c.put(names, layout=lay_s, blocks=range(nblocks), flags=kvfs.PUT_MKDIR)
        self.assertEqual(r.ok, nblocks, r.errors())
        self.assertEqual(set(r), {layers * lb})

        def block(buf, b):
            return b"".join(bytes(buf[l * tensor + b * lb:l * tensor + (b + 1) * lb])
                            for l in range(layers))

        order = list(reversed(range(nblocks)))  # block b's key into dst block 63-b
        g = c.get(names, layout=lay_d, blocks=order)
        self.assertEqual(g.ok, nblocks, g.errors())
        for b in range(nblocks):
            self.assertEqual(block(dst.buffer, order[b]), block(src.buffer, b), names[b])
        self.assertEqual(read_file(m.path(names[5])), block(src.buffer, 5))
        # a block past the layout's end fails alone
        g = c.get([names[0], names[1]], layout=lay_d, blocks=[nblocks, 0])
        self.assertEqual(g[0], -errno.EFAULT)
        self.assertEqual(g[1], layers * lb)
        # explicit iovs: the first two layers of block 3 as one value
        r = c.put(["two"], iovs=[[(src, 3 * lb, lb), (src, tensor + 3 * lb, lb)]])
        self.assertEqual(r[0], 2 * lb)
        self.assertEqual(read_file(m.path("two")), block(src.buffer, 3)[:2 * lb])
        # a region a layout uses cannot go first
        with self.assertRaises(OSError) as e:
            c.unregister(src)
        self.assertEqual(e.exception.errno, errno.EBUSY)
        lay_s.unregister()
        src.unregister()
        self.assertEqual(c.remove_prefix("m"), nblocks)
        self.assertFalse(os.path.exists(m.path("m")))
        self.assertEqual(c.lookup(names[:3]).ok, 0)

    def test_forked_child_cannot_use_regions(self):
        """A child after fork() shares the handle's fd but not its regions:
        its keys fail with EPERM, it cannot unregister them, and the parent's
        regions keep working."""
        c = self.c
        reg = c.alloc(8192)
        reg.buffer[:5] = b"hello"
        lay = c.layout([(reg, 0, 4096, 4096)])
        self.assertEqual(list(c.put(["p"], iovs=[[(reg, 0, 5)]])), [5])
        rd, wr = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(rd)
            try:
                out = [c.put(["child"], iovs=[[(reg, 0, 5)]])[0],
                       c.get(["p"], layout=lay, blocks=[0])[0]]
                try:
                    c.unregister(reg.id)
                    out.append(0)
                except OSError as e:
                    out.append(-e.errno)
                os.write(wr, json.dumps(out).encode())
            finally:
                os._exit(0)
        os.close(wr)
        with os.fdopen(rd, "rb") as f:
            got = json.loads(f.read().decode())
        os.waitpid(pid, 0)
        self.assertEqual(got, [-errno.EPERM] * 3)
        self.assertFalse(os.path.exists(self.m.path("child")))
        self.assertEqual(list(c.get(["p"], iovs=[[(reg, 100, 5)]])), [5])
        self.assertEqual(bytes(reg.buffer[100:105]), b"hello")

    def test_batches_larger_than_an_ioctl(self):
        """2000 keys in one call (several ioctls), prefix over all of them."""
        c, m = self.c, self.m
        n, size = 2000, 64
        buf = bytearray(pattern("big", n * size))
        reg = c.register(buf)
        names = ["k%05d" % i for i in range(n)]
        r = c.put(names, iovs=[[(reg, i * size, size)] for i in range(n)])
        self.assertEqual(r.ok, n, r.errors())
        self.assertGreater(r.ioctls, 1)
        look = c.lookup(names + ["absent"] + names[:10])
        self.assertEqual((look.ok, look.prefix), (n + 10, n))
        self.assertGreater(look.ioctls, 1)
        self.assertEqual(c.lookup_prefix(names + ["absent"] + names[:10]), n)
        self.assertEqual(c.lookup_prefix(names[:700] + ["absent"] + names), 700)
        self.assertEqual(read_file(m.path("k01234")), bytes(buf[1234 * size:1235 * size]))
        ro = c.register(bytes(buf), writable=False)  # puts may read it, gets may not fill it
        self.assertEqual(list(c.put(["ro"], iovs=[[(ro, 64, 64)]])), [64])
        with self.assertRaises(ValueError):
            c.get(["ro"], iovs=[[(ro, 0, 64)]])
        ro.unregister()
        out = bytearray(n * size)
        oreg = c.register(out)
        g = c.get(names, iovs=[[(oreg, i * size, size)] for i in range(n)])
        self.assertEqual(g.ok, n, g.errors())
        self.assertEqual(out, buf)
        rm = c.remove(names + ["ro"])
        self.assertEqual(rm.ok, n + 1)
        self.assertEqual(len([e for e in os.listdir(m.mnt) if e.startswith("k")]), 0)

    def test_threads_share_one_handle(self):
        """Eight threads put, look up, get and remove their own keys through
        one Client at once; every byte checked."""
        c = self.c
        errors = []

        def worker(t):
            try:
                names = ["t%d-%03d" % (t, i) for i in range(150)]
                vals = [pattern(nm, 512 + t * 100 + i) for i, nm in enumerate(names)]
                for rnd in range(3):
                    r = c.put_buffers(list(zip(names, vals)))
                    if r.ok != len(names):
                        errors.append("put %d: %s" % (t, r.errors()))
                    look = c.lookup(names)
                    if look.prefix != len(names):
                        errors.append("lookup %d: prefix %d" % (t, look.prefix))
                    outs = [(nm, bytearray(len(v))) for nm, v in zip(names, vals)]
                    g = c.get_into(outs)
                    if g.ok != len(names) or any(bytes(o) != v for (_, o), v in zip(outs, vals)):
                        errors.append("get %d: %s" % (t, g.errors()))
                    if rnd == 2 and c.remove(names).ok != len(names):
                        errors.append("remove %d" % t)
            except Exception as e:  # reported by the main thread
                errors.append("thread %d: %r" % (t, e))

        ts = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual([e for e in os.listdir(self.m.mnt) if e.startswith("t")], [])


class SsdRoundTrip(kvfstest.KvfsTestCase):
    """Values pushed out of a 32M pool to the SSD tier come back through an
    ioctl get byte-exact, flagged as served from the SSD."""
    MOUNT_OPTS = ("--mem-size=32M",)

    def setUp(self):
        if not kvfstest.has_ssd_tier():
            self.skipTest("this kvfs has no SSD tier")
        super().setUp()
        _tools()
        self.c = kvfs.Client(self.m.mnt)
        self.addCleanup(self.c.close)

    def test_get_from_ssd(self):
        c, m = self.c, self.m
        vals = [("v%03d" % i, pattern("v%d" % i, (1 << 20) + i)) for i in range(96)]
        for i in range(0, len(vals), 8):
            r = c.put_buffers(vals[i:i + 8])
            self.assertEqual(r.ok, 8, r.errors())
        tiers = [os.getxattr(m.path(n), "user.kvfs.tier").decode() for n, _ in vals]
        on_ssd = [i for i, t in enumerate(tiers) if t == "ssd"]
        self.assertGreater(len(on_ssd), 32, tiers)  # 96 MiB through a 32 MiB pool
        outs = [(n, bytearray(len(v))) for n, v in vals]
        g = c.get_into(outs)
        self.assertEqual(g.ok, len(vals), g.errors())
        for (n, out), (_, v) in zip(outs, vals):
            self.assertEqual(bytes(out), v, n)
        for i in on_ssd:
            self.assertTrue(g.flags[i] & kvfs.KEY_SSD, (vals[i][0], g.flags[i]))


class TraceTest(kvfstest.KvfsTestCase):
    """The trace id a caller gives one library call reaches the daemon's
    trace (--trace=FILE) on every ioctl the call was cut into, next to each
    of its keys, in order; kvfs-bench's ids name scenario and request."""

    def setUp(self):
        self.tdir = tempfile.mkdtemp(prefix="kvfs-trace-", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.tdir, True)
        self.trace = os.path.join(self.tdir, "trace.jsonl")
        self.MOUNT_OPTS = ("--mem-size=128M", "--trace=" + self.trace)
        super().setUp()
        self.bench = _tools()

    def lines(self):
        with open(self.trace) as f:
            return [json.loads(line) for line in f if line.strip()]

    def test_trace_id_follows_a_split_call(self):
        names = ["blk%05d" % i for i in range(1000)]
        with kvfs.Client(self.m.mnt) as c:
            r = c.put_buffers([(n, b"v") for n in names[:600]], trace=0xABCDEF)
            self.assertEqual(r.ok, 600)
            look = c.lookup(names, trace=0x5151)
            self.assertGreater(look.ioctls, 1)
            auto = c.lookup(names[:3])
        self.assertNotEqual(auto.trace, 0)
        lines = self.lines()
        batches = [x for x in lines if x["type"] == "batch" and x["trace_id"] == 0x5151]
        self.assertEqual(len(batches), look.ioctls)
        self.assertEqual({b["op"] for b in batches}, {"lookup"})
        self.assertEqual(sum(b["keys"] for b in batches), 1000)
        self.assertEqual(sum(b["failures"] for b in batches), 400)
        keys = [x for x in lines if x["type"] == "key" and x["trace_id"] == 0x5151]
        self.assertEqual([k["key"] for k in keys], names)
        self.assertEqual([k["status"] for k in keys], [1] * 600 + [-errno.ENOENT] * 400)
        puts = [x for x in lines if x["type"] == "batch" and x["trace_id"] == 0xABCDEF]
        self.assertEqual(({b["op"] for b in puts}, sum(b["keys"] for b in puts)), ({"put"}, 600))
        self.assertEqual(len([x for x in lines if x["type"] == "batch"
                              and x["trace_id"] == auto.trace]), 1)

    def test_bench_trace_ids(self):
        d = self.m.path("b")
        os.mkdir(d)
        r = subprocess.run([self.bench, "--blocks=4", "--layers=2", "--layer-bytes=4K",
                            "--requests=3", "--scenario=all", d], stdout=subprocess.PIPE)
        self.assertEqual(r.returncode, 0)
        got = sorted((x["op"], x["trace_id"]) for x in self.lines() if x["type"] == "batch")
        want = sorted([(op, sc << 48 | (req + 1)) for sc, op in ((1, "put"), (2, "lookup"),
                                                                  (3, "get")) for req in range(3)]
                      # the untimed get that warms the shm region, request 0
                      + [("get", 3 << 48)])
        self.assertEqual(got, want)


class BatchPermissionsTest(kvfstest.KvfsTestCase):
    """A mount others may use (allow_other): the kernel checks only the
    directory a client opens, so the daemon checks every key a batch names
    as the system calls on the same paths would."""
    MOUNT_OPTS = ("--mem-size=64M", "-o", "allow_other")

    def setUp(self):
        super().setUp()
        _tools()
        m = self.m
        os.chmod(m.mnt, 0o755)
        for d, mode in (("pub", 0o755), ("priv", 0o700), ("tmp", 0o1777)):
            os.mkdir(m.path(d))
            os.chmod(m.path(d), mode)
        for name, mode in (("pub/k600", 0o600), ("pub/k644", 0o644), ("priv/k", 0o644),
                           ("tmp/roots", 0o644)):
            write_file(m.path(name), name.encode())
            os.chmod(m.path(name), mode)

    def test_other_user_is_checked(self):
        mnt = self.m.mnt

        def batches():
            out = {}
            with kvfs.Client(mnt) as c:
                out["lookup"] = c.lookup(["pub/k600", "priv/k", "pub/k644"]).results
                bufs = [(n, bytearray(len(n))) for n in ("pub/k600", "priv/k", "pub/k644")]
                out["get"] = c.get_into(bufs).results
                out["got"] = [bytes(b).decode() for _, b in bufs]
                out["put"] = c.put_buffers([("pub/new", b"x"), ("pub/k644", b"x"),
                                            ("tmp/mine", b"mine"), ("tmp/roots", b"x")]).results
                out["mkdir"] = c.put_buffers([("pub/d/new", b"x"), ("tmp/d/new", b"new")],
                                             flags=kvfs.PUT_MKDIR).results
                out["remove"] = c.remove(["pub/k644", "priv/k", "tmp/roots", "tmp/mine"]).results
                out["rm-rf"] = c.remove(["pub"], recursive=True).results
            return out

        r = kvfstest.as_user(kvfstest.NOBODY, kvfstest.NOBODY, batches)
        self.assertEqual(r[0], "ok", r)
        out, e = r[1], errno
        # stat needs search on the path only; a value needs read on the key too
        self.assertEqual(out["lookup"], [8, -e.EACCES, 8])
        self.assertEqual(out["get"], [-e.EACCES, -e.EACCES, 8])
        self.assertEqual(out["got"], ["\0" * 8, "\0" * 6, "pub/k644"])
        # a put writes the directory; in a sticky one, only its owner replaces a key
        self.assertEqual(out["put"], [-e.EACCES, -e.EACCES, 4, -e.EPERM])
        self.assertEqual(out["mkdir"], [-e.EACCES, 3])
        self.assertEqual(out["remove"], [-e.EACCES, -e.EACCES, -e.EPERM, 1])
        self.assertEqual(out["rm-rf"], [-e.EACCES])
        # what was refused is untouched; what was allowed happened, owned by nobody
        m = self.m
        for name in ("pub/k600", "pub/k644", "priv/k", "tmp/roots"):
            self.assertEqual(read_file(m.path(name)), name.encode())
        for name in ("pub/new", "pub/d", "tmp/mine"):
            self.assertFalse(os.path.exists(m.path(name)), name)
        self.assertEqual(read_file(m.path("tmp/d/new")), b"new")
        st = os.stat(m.path("tmp/d/new"))
        self.assertEqual((st.st_uid, st.st_gid), (kvfstest.NOBODY, kvfstest.NOBODY))


class BenchTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=512M",)
    SMALL = ["--blocks=8", "--layers=4", "--layer-bytes=8K", "--requests=24", "--threads=3"]

    def setUp(self):
        super().setUp()
        self.bench = _tools()

    def run_bench(self, args, expect_rc=0):
        r = subprocess.run([self.bench, "--json"] + args, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300)
        out = r.stdout.decode()
        self.assertEqual(r.returncode, expect_rc, "kvfs-bench %s\n%s\n%s"
                         % (" ".join(args), out, r.stderr.decode()))
        doc = json.loads(out)
        return {s["scenario"]: s for s in doc["scenarios"]}

    def check_all(self, res, path):
        keys, nbytes = 8 * 24, 8 * 24 * 4 * 8192
        self.assertEqual(list(res), ["write", "is_exist", "get"])
        for name, s in res.items():
            self.assertEqual(s["path"], path)
            self.assertEqual((s["requests"], s["keys"], s["failures"]), (24, keys, 0), name)
            self.assertEqual(s["bytes"], 0 if name == "is_exist" else nbytes, name)
            self.assertLessEqual(s["p50_us"], s["p90_us"])
            self.assertLessEqual(s["p90_us"], s["p99_us"])
            if name != "is_exist":
                self.assertGreater(s["mib_s"], 0)

    def test_all_both_paths(self):
        for path, region in (("ioctl", "shm"), ("posix", "shm"), ("ioctl", "proc")):
            d = self.m.path("%s-%s" % (path, region))
            os.mkdir(d)
            res = self.run_bench(self.SMALL + ["--scenario=all", "--path=" + path,
                                               "--region=" + region, d])
            self.check_all(res, path)
            # what the bench wrote is what a plain read() returns
            self.assertEqual(len(os.listdir(d)), 8 * 24)

    def test_paths_read_each_other(self):
        """Blocks written through one path are verified byte by byte through the other."""
        for w, g in (("posix", "ioctl"), ("ioctl", "posix")):
            d = self.m.path("from-" + w)
            os.mkdir(d)
            self.run_bench(self.SMALL + ["--scenario=write", "--path=" + w, d])
            res = self.run_bench(self.SMALL + ["--scenario=get", "--path=" + g, d])
            self.assertEqual((res["get"]["failures"], res["get"]["keys"]), (0, 8 * 24))

    def test_failures_are_counted(self):
        """Nothing stored: every is_exist and get key fails, exit status 1;
        one damaged value fails its get."""
        d = self.m.path("empty")
        os.mkdir(d)
        for path in ("ioctl", "posix"):
            res = self.run_bench(self.SMALL + ["--scenario=is_exist", "--path=" + path, d], 1)
            self.assertEqual(res["is_exist"]["failures"], 8 * 24)
            res = self.run_bench(self.SMALL + ["--scenario=get", "--path=" + path, d], 1)
            self.assertEqual(res["get"]["failures"], 8 * 24)
        self.run_bench(self.SMALL + ["--scenario=write", d])
        victim = sorted(os.listdir(d))[17]
        with open(os.path.join(d, victim), "r+b") as f:
            f.seek(20000)
            b = f.read(1)
            f.seek(20000)
            f.write(bytes([b[0] ^ 1]))
        for path in ("ioctl", "posix"):
            res = self.run_bench(self.SMALL + ["--scenario=get", "--path=" + path, d], 1)
            self.assertEqual(res["get"]["failures"], 1, path)

    def test_usage(self):
        for args in (["--blocks=0", "x"], ["--scenario=nope", "x"], ["--path=x", "x"], [],
                     ["--blocks=1048576", "--layers=65536", "--layer-bytes=1M", "x"]):
            r = subprocess.run([self.bench] + args, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
            self.assertEqual(r.returncode, 2, args)
        r = subprocess.run([self.bench, "--path=ioctl", "/tmp"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"not a kvfs directory", r.stderr)


class PackageTest(kvfstest.KvfsTestCase):
    """client/python is a package: pip installs it, with no network, into a
    fresh virtual environment, and `kvfs` and `kvfs.vllm` import from there,
    outside the checkout, and move bytes through a mount."""

    MOUNT_OPTS = ("--mem-size=64M",)
    SCRIPT = """
import os, sys
import kvfs, kvfs.vllm
assert kvfs.__file__.startswith(sys.prefix), kvfs.__file__
assert kvfs.vllm.KvfsConnector
with kvfs.Client(sys.argv[1]) as c:
    data = os.urandom(100000)
    assert c.put_buffers([("pkg/key", data)], flags=kvfs.PUT_MKDIR).ok == 1
    out = bytearray(len(data))
    assert c.get_into([("pkg/key", out)]).ok == 1 and out == data
print("round trip from", kvfs.__file__)
"""

    def test_pip_install_into_a_venv(self):
        src = os.path.join(os.path.dirname(os.path.dirname(HERE)), "client", "python")
        venv = os.path.join(self.m.root, "venv")
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv],
                       check=True)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PIP_NO_INDEX"] = "1"  # nothing from the network, whatever pip.conf says
        r = subprocess.run([os.path.join(venv, "bin", "pip"), "install", src], env=env,
                           cwd="/", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.assertEqual(r.returncode, 0, r.stdout.decode(errors="replace"))
        env.setdefault("KVFS_LIB", os.path.join(os.path.dirname(kvfstest.KVFS), "client",
                                                "libkvfs.so"))
        r = subprocess.run([os.path.join(venv, "bin", "python"), "-c", self.SCRIPT, self.m.mnt],
                           env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.assertEqual(r.returncode, 0, r.stdout.decode(errors="replace"))
        self.assertIn(b"round trip from " + venv.encode(), r.stdout)


if __name__ == "__main__":
    kvfstest.main()
