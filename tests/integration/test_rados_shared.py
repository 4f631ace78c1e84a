# SPDX-License-Identifier: MIT
"""The shared tier on Ceph RADOS: two kvfs nodes, one namespace (issue 10;
rados/shared.h, rados/rados_format.h).

Against the test cluster (scripts/ceph-cluster.sh), two daemons A and B with
their own DATA_DIRs and mounts on one pool and namespace:

- write on A, read on B byte-exact (a key B opens right after A's close
  returned, with --rados-sync): small keys, a file three times B's
  pool, a 32-layer ioctl put (read on B through the ioctl batch get, which
  asks the cluster too); an overwrite on A is seen on B within the TTL; an
  unlink and an `rm -rf` on A (which takes B's key in the tree too) are
  seen on B;
- a get batch of as many empty names as a batch holds fails key by key
  and the daemon goes on (it crashed in the batch prefetch before);
- symlinks are shared: made, read through, replaced, renamed and removed
  on A, seen so on B;
- A's DATA_DIR wiped and A restarted: its keys come back from the cluster;
- the OSD stopped: local reads work, a lookup of a name only the cluster
  could have fails with EIO within the timeout, and then the node answers
  from its own store (ENOENT), so puts are made and queue (stats: backlog);
  the OSD back: the queue drains and B sees the keys;
- changes queued while the OSD is down survive a clean stop and a kill -9
  of A (DATA_DIR/rados.log): A restarted on its DATA_DIR sends them, in
  order (a put, an overwrite, an unlink, a rename, a mkdir with its mode),
  and B sees the result;
- copies stay copies across a restart (DATA_DIR/rados.known): B restarted
  drops its copies of keys deleted meanwhile, its own published key
  deleted by A, and replaces a copy A overwrote, but keeps a key made
  while its tier was off;
- kill -9 of A between a large put's data objects and its entry: B never
  sees the key; `kvfs --rados-gc` removes the orphan objects and keeps
  those in use, and so does a daemon's own sweep (--rados-gc-interval).

Skipped (77) where Ceph's packages cannot be installed or FUSE is missing.
"""

import errno
import fcntl
import hashlib
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cephtest  # noqa: E402
import kvfstest  # noqa: E402
from kvfstest import pattern, read_file, write_file  # noqa: E402

# struct kvfs_ioc_batch, as include/kvfs/kvfs_ioctl.h draws it (and test_ioctl.py)
BATCH_SIZE = 16376
BATCH_HDR = struct.Struct("<IIQIIIIQQ")
KEY = struct.Struct("<HHHHIIQQq")
KVFS_IOC_GET = (3 << 30) | (BATCH_SIZE << 16) | (0xCB << 8) | 0x12

TIMEOUT_S = 2  # --rados-timeout
TTL_S = 0.3    # --rados-cache-ttl
MiB = 1 << 20


def built_with_librados():
    r = subprocess.run([kvfstest.KVFS, "--version"], stdout=subprocess.PIPE, timeout=20)
    return "rados librados" in r.stdout.decode()


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path, data):
    write_file(path, data)
    fsync_path(path)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(4 * MiB), b""):
            h.update(chunk)
    return h.hexdigest()


def rados_stats(m):
    return m.stats()["rados"]


def wait_connected(m):
    kvfstest.wait_until(lambda: rados_stats(m)["state"] == "connected", timeout=20,
                        what="rados state 'connected'")


class SharedTierTest(kvfstest.KvfsTestCase, cephtest.CephTestCase):
    def setUp(self):
        if not built_with_librados():
            self.skipTest("this kvfs was built without librados (-DKVFS_RADOS=OFF or no "
                          "librados-dev)")

    def node(self, c, mem="64M", sync=True, extra=(), **kw):
        opts = ["--mem-size=" + mem, "--rados-pool=" + c.pool, "--rados-conf=" + c.conf,
                "--rados-namespace=" + self._testMethodName, "--rados-timeout=%ds" % TIMEOUT_S,
                "--rados-cache-ttl=%dms" % int(TTL_S * 1000)]
        if sync:
            opts.append("--rados-sync")
        m = self.mount(opts + list(extra), **kw)
        wait_connected(m)
        return m

    def data_objects(self, c):
        st, out = c.rados("--namespace", self._testMethodName, "ls")
        self.assertEqual(st, 0, out)
        return sorted(o for o in out.split() if o.startswith("x."))

    def test_keys_cross_nodes(self):
        c = self.cluster()
        a, b = self.node(c, name="A"), self.node(c, mem="32M", name="B")
        os.makedirs(a.path("model", "tp0"))
        small = {"k%02d" % i: pattern("small%d" % i, 1000 + 4096 * i) for i in range(8)}
        for k, v in small.items():
            write_synced(a.path("model", "tp0", k), v)
        # --rados-sync: close(2) alone returns once the cluster has the value
        # (B has not read this directory yet: nothing of it is cached there)
        write_file(a.path("model", "closed"), pattern("closed", 3 * MiB + 5))
        self.assertEqual(read_file(b.path("model", "closed")), pattern("closed", 3 * MiB + 5))
        big = pattern("big", 96 * MiB + 12345)  # 3x B's pool, not a multiple of an object
        write_synced(a.path("model", "big"), big)
        # a 32-layer ioctl put of two 2 MiB blocks on A
        client = kvfstest.client()
        ca = client.Client(a.mnt)
        self.addCleanup(ca.close)
        layers, lb, nblocks = 32, 64 * 1024, 2
        tensor = nblocks * lb
        src = ca.alloc(layers * tensor)
        src.buffer[:] = pattern("layers", layers * tensor)
        lay = ca.layout([(src, l * tensor, lb, lb) for l in range(layers)])
        r = ca.put(["kv/blk0", "kv/blk1"], layout=lay, blocks=range(nblocks),
                   flags=client.PUT_MKDIR)
        self.assertEqual(r.ok, nblocks, r.errors())
        r = ca.put(["kv2/p0", "kv2/p1"], layout=lay, blocks=range(nblocks),
                   flags=client.PUT_MKDIR)
        self.assertEqual(r.ok, nblocks, r.errors())

        def block(buf, n):
            return b"".join(bytes(buf[l * tensor + n * lb:l * tensor + (n + 1) * lb])
                            for l in range(layers))

        sa = rados_stats(a)
        self.assertEqual(sa["backlog"], 0)
        self.assertGreaterEqual(sa["puts"], len(small) + 3)
        self.assertGreaterEqual(sa["bytes_written"], sum(map(len, small.values())) + len(big))

        # B: every byte, from the cluster
        self.assertEqual(sorted(os.listdir(b.path("model", "tp0"))), sorted(small))
        for k, v in small.items():
            self.assertEqual(read_file(b.path("model", "tp0", k)), v, k)
        self.assertEqual(os.path.getsize(b.path("model", "big")), len(big))
        self.assertEqual(sha256_file(b.path("model", "big")), hashlib.sha256(big).hexdigest())
        self.assertEqual(read_file(b.path("kv", "blk0")), block(src.buffer, 0))
        # blk1 through B's ioctl batch get, never looked up on B before
        cb = client.Client(b.mnt)
        self.addCleanup(cb.close)
        dst = cb.alloc(layers * tensor)
        lay_b = cb.layout([(dst, l * tensor, lb, lb) for l in range(layers)])
        g = cb.get(["kv/blk1"], layout=lay_b, blocks=[1])
        self.assertEqual(g.ok, 1, g.errors())
        self.assertEqual(block(dst.buffer, 1), block(src.buffer, 1))
        # a batch get of keys only the cluster has: read together, each once (kv_shared_prefetch)
        before = rados_stats(b)
        g = cb.get(["kv2/p1", "kv2/none", "kv2/p0"], layout=lay_b, blocks=[1, 0, 0])
        self.assertEqual(g.results[1], -errno.ENOENT)
        self.assertEqual(g.ok, 2, g.errors())
        self.assertEqual(block(dst.buffer, 1), block(src.buffer, 1))
        self.assertEqual(block(dst.buffer, 0), block(src.buffer, 0))
        after = rados_stats(b)
        self.assertEqual(after["hits"] - before["hits"], 2)
        self.assertEqual(after["prefetched"] - before["prefetched"], 2)
        self.assertEqual(after["objects_read"] - before["objects_read"], 2)
        self.assertEqual(after["bytes_read"] - before["bytes_read"], 2 * layers * lb)
        sb = rados_stats(b)
        self.assertGreaterEqual(sb["hits"], len(small) + 3)
        self.assertGreaterEqual(sb["bytes_read"], sum(map(len, small.values())) + len(big))
        self.assertEqual(sb["errors"] + sb["timeouts"], 0)
        # a second read is local: no more cluster reads
        before = rados_stats(b)["objects_read"]
        self.assertEqual(read_file(b.path("model", "tp0", "k03")), small["k03"])
        self.assertEqual(rados_stats(b)["objects_read"], before)

        # overwrite on A: B sees the new bytes within the TTL
        new = pattern("new", 5000)
        write_synced(a.path("model", "tp0", "k03"), new)
        t0 = time.monotonic()
        kvfstest.wait_until(lambda: read_file(b.path("model", "tp0", "k03")) == new,
                            timeout=TTL_S + 5, what="the overwrite seen on B")
        print("  overwrite seen on B after %.2fs" % (time.monotonic() - t0))
        # unlink on A (with --rados-sync it returns once the cluster has it)
        os.unlink(a.path("model", "tp0", "k00"))
        kvfstest.wait_until(lambda: not os.path.exists(b.path("model", "tp0", "k00")),
                            timeout=TTL_S + 5, what="the unlink seen on B")
        # an mtime in the future does not stop a delete: of A's own key on A, of B's copy on B
        future = time.time() + 86400
        for k in ("f1", "f2"):
            fd = os.open(a.path("model", k), os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, b"from the future")
            os.utime(fd, (future, future))
            os.close(fd)  # --rados-sync: published, with that mtime
        kvfstest.wait_until(lambda: os.path.exists(b.path("model", "f2")), timeout=TTL_S + 5,
                            what="f2 seen on B")  # B listed model/ within the TTL
        self.assertEqual(read_file(b.path("model", "f2")), b"from the future")
        self.assertGreater(os.stat(b.path("model", "f2")).st_mtime, future - 1)
        os.unlink(a.path("model", "f1"))
        os.unlink(b.path("model", "f2"))
        kvfstest.wait_until(lambda: not os.path.exists(b.path("model", "f1")),
                            timeout=TTL_S + 5, what="A's delete seen on B")
        kvfstest.wait_until(lambda: not os.path.exists(a.path("model", "f2")),
                            timeout=TTL_S + 5, what="B's delete seen on A")
        # a key B put there is in the shared tree too: A sees it, and its rm -rf takes it
        write_synced(b.path("model", "tp0", "from-b"), b"B's key")
        self.assertEqual(read_file(a.path("model", "tp0", "from-b")), b"B's key")
        shutil.rmtree(a.path("model"))
        kvfstest.wait_until(lambda: not os.path.exists(b.path("model")),
                            timeout=TTL_S + 5, what="rm -rf seen on B")
        self.assertEqual(sorted(os.listdir(b.mnt)), [".kvfs", "kv", "kv2"])
        # the tree's objects are gone from the cluster: only the four ioctl blocks' remain
        self.assertEqual(len(self.data_objects(c)), 4)

    def test_get_of_every_empty_name(self):
        """A get batch of as many keys as bt_data holds, all with an empty name:
        every key fails with its error, the prefetch in front of them (this tier's)
        takes them all in, and the daemon goes on serving."""
        c = self.cluster()
        a = self.node(c, name="A")
        os.makedirs(a.path("d"))
        nkeys = (BATCH_SIZE - BATCH_HDR.size) // KEY.size
        data = bytearray(BATCH_SIZE - BATCH_HDR.size)
        for i in range(nkeys):
            KEY.pack_into(data, i * KEY.size, nkeys * KEY.size, 0, 0, 0, 0, 0, 0, 0, 0)
        buf = bytearray(BATCH_HDR.pack(BATCH_SIZE, 1, 7, nkeys, 0, 0, 0, 0, 0)) + data
        fd = os.open(a.path("d"), os.O_RDONLY)
        try:
            fcntl.ioctl(fd, KVFS_IOC_GET, buf)
        finally:
            os.close(fd)
        self.assertEqual(BATCH_HDR.unpack_from(buf)[5], 0)  # bt_ok
        res = [KEY.unpack_from(buf, BATCH_HDR.size + i * KEY.size)[8] for i in range(nkeys)]
        self.assertTrue(all(r < 0 for r in res), set(res))
        write_file(a.path("d", "k"), b"still serving")
        self.assertEqual(read_file(a.path("d", "k")), b"still serving")

    def test_symlinks(self):
        c = self.cluster()
        a, b = self.node(c, name="A"), self.node(c, name="B")
        os.makedirs(a.path("m", "tp0"))
        write_file(a.path("m", "tp0", "k1"), b"one")
        write_file(a.path("m", "tp0", "k2"), b"two")
        os.symlink("tp0/k1", a.path("m", "latest"))  # --rados-sync: in the cluster on return
        self.assertEqual(os.readlink(b.path("m", "latest")), "tp0/k1")
        self.assertEqual(read_file(b.path("m", "latest")), b"one")
        self.assertEqual(sorted(os.listdir(b.path("m"))), ["latest", "tp0"])
        # replaced on A: B follows within the TTL
        os.unlink(a.path("m", "latest"))
        os.symlink("tp0/k2", a.path("m", "latest"))
        time.sleep(TTL_S + 0.2)
        self.assertEqual(os.readlink(b.path("m", "latest")), "tp0/k2")
        self.assertEqual(read_file(b.path("m", "latest")), b"two")
        # renamed, then removed
        os.rename(a.path("m", "latest"), a.path("m", "newest"))
        time.sleep(TTL_S + 0.2)
        self.assertErrno(errno.ENOENT, os.lstat, b.path("m", "latest"))
        self.assertEqual(os.readlink(b.path("m", "newest")), "tp0/k2")
        os.unlink(a.path("m", "newest"))
        time.sleep(TTL_S + 0.2)
        self.assertErrno(errno.ENOENT, os.lstat, b.path("m", "newest"))
        self.assertEqual(sorted(os.listdir(b.path("m"))), ["tp0"])
        # one made on B goes the other way, and a file over its name replaces it
        os.symlink("/abs/target", b.path("m", "fromb"))
        self.assertEqual(os.readlink(a.path("m", "fromb")), "/abs/target")
        os.unlink(b.path("m", "fromb"))
        write_file(b.path("m", "fromb"), b"a file now")
        time.sleep(TTL_S + 0.2)
        self.assertEqual(read_file(a.path("m", "fromb")), b"a file now")
        self.assertEqual(rados_stats(a)["errors"] + rados_stats(b)["errors"], 0)

    def test_wiped_node_gets_its_keys_back(self):
        c = self.cluster()
        a = self.node(c, name="A")
        data = {"d/k%d" % i: pattern("w%d" % i, 3 * MiB + i) for i in range(4)}
        os.makedirs(a.path("d"))
        for k, v in data.items():
            write_synced(a.path(k), v)
        a.stop()  # and its directory goes, DATA_DIR included: a new node id next
        self.assertFalse(os.path.exists(a.data))
        a2 = self.node(c, name="A-again")
        for k, v in data.items():
            self.assertEqual(read_file(a2.path(k)), v, k)
        s = rados_stats(a2)
        self.assertEqual(s["hits"], len(data))
        self.assertEqual(s["bytes_read"], sum(map(len, data.values())))

    def test_cluster_down_and_back(self):
        c = self.cluster()
        a = self.node(c, sync=False, name="A")
        b = self.node(c, name="B")
        write_file(a.path("k1"), b"one")
        write_file(a.path("only-remote"), pattern("r", 100000))
        kvfstest.wait_until(lambda: rados_stats(a)["backlog"] == 0, what="A's backlog sent")
        c.osd_stop()
        # local keys are served
        self.assertEqual(read_file(a.path("k1")), b"one")
        # a key only the cluster has: EIO within the timeout
        t0 = time.monotonic()
        self.assertErrno(errno.EIO, os.stat, b.path("only-remote"))
        took = time.monotonic() - t0
        print("  EIO after %.2fs" % took)
        self.assertLess(took, 2 * TIMEOUT_S + 5)  # bounded: never a hang
        # A learns the same way: its first lookup that needs the cluster (k1's check, if
        # its TTL ran out while the OSD stopped, or the new name) waits for the timeout;
        # from then on it answers from its own store, so new keys can be made
        if rados_stats(a)["healthy"]:
            self.assertErrno(errno.EIO, os.stat, a.path("k2"))
        self.assertFalse(rados_stats(a)["healthy"])
        self.assertErrno(errno.ENOENT, os.stat, a.path("k2"))
        # puts are kept and queued
        write_file(a.path("k2"), pattern("k2", 3 * MiB))
        write_file(a.path("k3"), b"three")
        kvfstest.wait_until(lambda: rados_stats(a)["backlog"] >= 2, what="A's backlog")
        self.assertEqual(read_file(a.path("k2")), pattern("k2", 3 * MiB))
        self.assertFalse(rados_stats(a)["healthy"])
        self.assertIn("does not answer", a.log_text())
        c.osd_start()
        kvfstest.wait_until(lambda: rados_stats(a)["backlog"] == 0, timeout=30,
                            what="A's backlog flushed")
        kvfstest.wait_until(lambda: rados_stats(b)["healthy"], timeout=15,
                            what="B healthy again")
        self.assertEqual(read_file(b.path("k2")), pattern("k2", 3 * MiB))
        self.assertEqual(read_file(b.path("k3")), b"three")
        self.assertEqual(read_file(b.path("only-remote")), pattern("r", 100000))
        self.assertGreater(rados_stats(a)["timeouts"], 0)

    def test_queue_survives_restarts(self):
        c = self.cluster()
        data = tempfile.mkdtemp(prefix="kvfs-it-queue-", dir="/tmp")
        self.addCleanup(shutil.rmtree, data, True)
        a = self.node(c, sync=False, name="A", data=data)
        os.makedirs(a.path("d"))
        write_file(a.path("d/gone"), b"deleted while the cluster was down")
        write_file(a.path("d/moved"), b"renamed while the cluster was down")
        kvfstest.wait_until(lambda: rados_stats(a)["backlog"] == 0, what="A's backlog sent")
        self.assertEqual(rados_stats(a)["replayed"], 0)
        c.osd_stop()
        if rados_stats(a)["healthy"]:  # learnt by the first lookup that needs the cluster
            self.assertErrno(errno.EIO, os.stat, a.path("d/k1"))
        write_file(a.path("d/k1"), pattern("k1", 3 * MiB))
        kvfstest.wait_until(lambda: rados_stats(a)["backlog"] >= 1, what="A's backlog")
        a.stop()  # a clean stop: what could not be sent is kept
        self.assertIn("kept in rados.log for the next start", a.log_text())
        # again, the cluster still down; this time A is killed
        a = self.node(c, sync=False, name="A2", data=data)
        self.assertEqual(rados_stats(a)["replayed"], 1)
        # its first attempt to send times out: from then on it answers from its own store
        kvfstest.wait_until(lambda: not rados_stats(a)["healthy"], timeout=3 * TIMEOUT_S + 5,
                            what="A2 unhealthy")
        self.assertEqual(read_file(a.path("d/k1")), pattern("k1", 3 * MiB))
        write_file(a.path("d/k2"), b"two")
        os.unlink(a.path("d/gone"))
        os.rename(a.path("d/moved"), a.path("d/there"))
        os.mkdir(a.path("e"), 0o751)
        write_file(a.path("e/k3"), pattern("k3", 100000))
        write_file(a.path("d/k2"), b"two, overwritten")
        fsync_path(a.path("d/k2"))
        kvfstest.wait_until(lambda: rados_stats(a)["backlog"] >= 7, what="A's backlog")
        a.signal(signal.SIGKILL)
        self.assertEqual(a.wait_exit(), -signal.SIGKILL)
        a.cleanup()
        c.osd_start()
        a = self.node(c, sync=False, name="A3", data=data)
        self.assertEqual(rados_stats(a)["replayed"], 7)
        kvfstest.wait_until(lambda: rados_stats(a)["backlog"] == 0, timeout=30,
                            what="A's logged changes sent")
        self.assertEqual(rados_stats(a)["errors"], 0)
        b = self.node(c, name="B")  # a node that was never told: it reads the cluster
        self.assertEqual(read_file(b.path("d/k1")), pattern("k1", 3 * MiB))
        self.assertEqual(read_file(b.path("d/k2")), b"two, overwritten")
        self.assertEqual(read_file(b.path("d/there")), b"renamed while the cluster was down")
        self.assertErrno(errno.ENOENT, os.stat, b.path("d/gone"))
        self.assertErrno(errno.ENOENT, os.stat, b.path("d/moved"))
        self.assertEqual(read_file(b.path("e/k3")), pattern("k3", 100000))
        self.assertEqual(os.stat(b.path("e")).st_mode & 0o7777, 0o751)
        # sent: the next start has nothing to send again
        a.stop()
        a = self.node(c, sync=False, name="A4", data=data)
        self.assertEqual(rados_stats(a)["replayed"], 0)
        # a delete queued while the cluster is down loses to a key made elsewhere since
        c.osd_stop()
        if rados_stats(a)["healthy"]:
            self.assertErrno(errno.EIO, os.stat, a.path("d/new"))
        m0 = os.stat(a.path("d/k1")).st_mtime  # k1 was written long before this delete
        os.unlink(a.path("d/k1"))
        kvfstest.wait_until(lambda: rados_stats(a)["backlog"] >= 1, what="A's delete queued")
        a.stop()
        c.osd_start()
        b2 = self.node(c, name="B2")
        fd = os.open(b2.path("d/k1"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, b"made on B2 after A's delete")
        # newer than A's k1 (so it replaces it) but older than A's delete: a rule by mtime
        # would let the delete take it, the rule by version does not
        os.utime(fd, (m0 + 0.5, m0 + 0.5))
        os.close(fd)  # --rados-sync: published
        a = self.node(c, sync=False, name="A5", data=data)
        self.assertEqual(rados_stats(a)["replayed"], 1)
        kvfstest.wait_until(lambda: rados_stats(a)["backlog"] == 0, timeout=30,
                            what="A's delete sent")
        self.assertEqual(read_file(a.path("d/k1")), b"made on B2 after A's delete")
        b.stop()
        b = self.node(c, name="B3")
        self.assertEqual(read_file(b.path("d/k1")), b"made on B2 after A's delete")

    def test_copies_across_restart(self):
        c = self.cluster()
        data = tempfile.mkdtemp(prefix="kvfs-it-copies-", dir="/tmp")
        self.addCleanup(shutil.rmtree, data, True)
        a = self.node(c, name="A")
        b = self.node(c, name="B", data=data)
        write_synced(a.path("fetched"), b"made on A")
        write_synced(a.path("replaced"), b"old")
        write_synced(b.path("mine"), b"published by B")
        self.assertEqual(read_file(b.path("fetched")), b"made on A")  # copies on B
        self.assertEqual(read_file(b.path("replaced")), b"old")
        b.stop()
        # a key made on B's DATA_DIR while its tier is off: B's own, never dropped
        off = self.mount(["--mem-size=64M"], name="B-off", data=data)
        write_file(off.path("offline"), b"made without the tier")
        off.stop()
        # meanwhile A deletes two of the keys B holds and overwrites the third
        self.assertEqual(read_file(a.path("mine")), b"published by B")
        os.unlink(a.path("fetched"))
        os.unlink(a.path("mine"))
        write_synced(a.path("replaced"), b"new")
        b = self.node(c, name="B2", data=data)
        self.assertErrno(errno.ENOENT, os.stat, b.path("fetched"))
        self.assertErrno(errno.ENOENT, os.stat, b.path("mine"))
        self.assertEqual(read_file(b.path("replaced")), b"new")
        self.assertEqual(read_file(b.path("offline")), b"made without the tier")
        self.assertEqual(sorted(n for n in os.listdir(b.mnt) if not n.startswith(".")),
                         ["offline", "replaced"])

    def test_kill9_mid_put_then_gc(self):
        c = self.cluster()
        a = self.node(c, sync=False, name="A", env={"KVFS_TEST_RADOS_PUBLISH_PAUSE_MS": "60000"})
        b = self.node(c, name="B")
        write_file(a.path("kept"), pattern("kept", 3 * MiB))
        kvfstest.wait_until(lambda: rados_stats(a)["objects_written"] == 2,
                            what="the first put's objects")
        # the first put waits in its pause: kill A with the second one queued behind
        write_file(a.path("big"), pattern("big", 20 * MiB))
        a.signal(signal.SIGKILL)
        self.assertEqual(a.wait_exit(), -signal.SIGKILL)
        a.cleanup()
        # B sees neither key: the first put's objects are there, its entry is not
        self.assertErrno(errno.ENOENT, os.stat, b.path("kept"))
        self.assertErrno(errno.ENOENT, os.stat, b.path("big"))
        orphans = self.data_objects(c)
        self.assertEqual(len(orphans), 2)
        # a key published by B stays through the gc
        write_synced(b.path("live"), pattern("live", 5 * MiB))
        live = [o for o in self.data_objects(c) if o not in orphans]
        self.assertEqual(len(live), 3)
        gc = [kvfstest.KVFS, "--rados-gc", "--rados-pool=" + c.pool, "--rados-conf=" + c.conf,
              "--rados-namespace=" + self._testMethodName, "--rados-timeout=%ds" % TIMEOUT_S]
        # within the grace period nothing goes
        r = subprocess.run(gc, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        print("  " + r.stdout.decode().strip())
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("0 orphans removed, 2 orphans younger", r.stdout.decode())
        r = subprocess.run(gc + ["--rados-gc-grace=0"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60)
        print("  " + r.stdout.decode().strip())
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("3 in use, 2 orphans removed", r.stdout.decode())
        self.assertEqual(self.data_objects(c), live)
        self.assertEqual(read_file(b.path("live")), pattern("live", 5 * MiB))
        # bad input: gc without a pool is refused, and so is a bad interval
        r = subprocess.run([kvfstest.KVFS, "--rados-gc-interval=soon", "d", "m"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
        self.assertEqual(r.returncode, 2, r.stdout)
        r = subprocess.run([kvfstest.KVFS, "--rados-gc"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=20)
        self.assertEqual(r.returncode, 2, r.stdout)

    def test_background_sweep(self):
        """A daemon sweeps the pool itself every --rados-gc-interval: the
        orphans a node killed mid-put left go once older than the grace
        period; objects in use stay."""
        c = self.cluster()
        a = self.node(c, sync=False, name="A", env={"KVFS_TEST_RADOS_PUBLISH_PAUSE_MS": "60000"})
        write_file(a.path("orphan"), pattern("orphan", 3 * MiB))
        kvfstest.wait_until(lambda: rados_stats(a)["objects_written"] == 2,
                            what="the put's objects")
        a.signal(signal.SIGKILL)
        self.assertEqual(a.wait_exit(), -signal.SIGKILL)
        a.cleanup()
        b = self.node(c, name="B", extra=["--rados-gc-interval=500ms", "--rados-gc-grace=1s"])
        self.assertEqual(b.config()["rados_gc_interval_ms"], "500.000")
        write_synced(b.path("live"), pattern("live", 3 * MiB))
        kvfstest.wait_until(lambda: rados_stats(b)["gc_removed"] == 2, timeout=30,
                            what="the orphans swept")
        self.assertEqual(len(self.data_objects(c)), 2)  # live's two objects
        self.assertGreaterEqual(rados_stats(b)["gc_sweeps"], 1)
        self.assertEqual(read_file(b.path("live")), pattern("live", 3 * MiB))
        self.assertErrno(errno.ENOENT, os.stat, b.path("orphan"))


if __name__ == "__main__":
    kvfstest.main(skip_if=cephtest.ceph_problem)
