# SPDX-License-Identifier: MIT
"""The vLLM KV connector (kvfs.vllm) end to end on a real mount, driven in
the order vLLM's scheduler and worker call it, with stand-ins that follow
vLLM's own types field by field (vllm_standins.py: SchedulerOutput,
NewRequestData, CachedRequestData, Request with its block hashes,
KVCacheBlocks, KVCacheConfig) and real torch tensors laid out as vLLM lays
them now (one buffer per KV-cache group, each layer a [B, H, N, C] view of
it in the LBNHC order: not contiguous):

- a prompt whose first 40 of 64 blocks another engine saved (chunked
  prefill, then decode steps that fill blocks) gets 40 blocks' tokens
  matched, and the load fills exactly those blocks of every layer, every
  other byte untouched; blocks held already are not saved again;
- hits load asynchronously: get_num_new_matched_tokens answers
  load-async, the steps go on while the daemon's get is held, and
  get_finished reports the request (once) when its blocks are in memory;
- a request preempted after its first 5 blocks while their save is held:
  the next step gives its blocks to another request, and waits for the
  save before it runs (a step allocating no such block does not wait); it
  resumes into other blocks (resumed_req_ids: its block ids replaced),
  saves the other 7 from the new blocks, and another engine loads all 12
  byte-exact;
- MLA (one latent vector per token, [B, 1, N, 576] views) saves and loads
  byte-exact, under keys of its own;
- keys come from vLLM's block hashes: the same tokens under another LoRA
  adapter, cache_salt or image match nothing; a prompt given as
  embeddings (no token ids) saves and loads;
- two tensor-parallel ranks and two pipeline stages: a block is a hit only
  once every (tp, pp) rank saved it, and their keys differ; each worker
  reads its ranks from vLLM's parallel state (get_tp_group(),
  get_pp_group());
- without PYTHONHASHSEED the connector refuses to start, naming it;
- saves land in the background: with the daemon's put held, the step
  returns, request_finished asks vLLM to hold the blocks and get_finished
  reports the request only once the put landed (once); a preemption waits
  for the saves in flight before its blocks are reused;
- KV events: once the worker reports a finished request's saves landed,
  take_events gives one BlockStored of its blocks (vLLM's hashes, their
  tokens, the LoRA adapter, medium KVFS), once;
- stats: hits, misses, blocks and bytes loaded and saved, batch latencies,
  each reported once by get_kv_connector_stats, rebuilt, aggregated and
  reduced as vLLM's logger does, and served through prometheus_client as
  vllm:kvfs_* counters and histograms;
- layer by layer (kvfs_load "layer"): each layer's block a key of its
  own, under keys an asynchronous engine never matches; a hit loads in
  the request's first step, started before its forward, one get per layer
  in the forward's order, and each layer's attention finds its blocks
  there (with a daemon slow to answer); a block missing one layer is
  reported by id and saved again; other kvfs_load values, and layer by
  layer with two KV-cache groups, are refused;
- cross-layer blocks (one tensor of every layer, blocks outermost, as
  vLLM allocated them): a block is one range, and its keys load byte for
  byte into per-layer tensors of the same backend;
- the daemon killed between steps: no call raises, lookups match nothing,
  saves and loads are counted as failed and the loads' blocks reported to
  vLLM; after a remount the same connector hits again;
- layouts whose block dimension is not the first (FlashAttention's
  (2, nb, bs, H, D) and CPU attention's (2, nb, H, bs, D) before mid-2026,
  kernel blocks of half the scheduler's as (2, 2nb, bs/2, H, D)): one
  engine saves, another loads, every byte of every block checked; a block
  dimension that is absent or not clear is refused, naming the layer;
- block size, cache dtype, layout (before vLLM named it:
  VLLM_KV_CACHE_LAYOUT, the attention backend) and hash function each
  change the keys; a "builtin" prefix_caching_hash_algo is refused;
- a daemon stopped (SIGSTOP) costs a lookup kvfs_timeout, answered as a
  miss, and hits return after SIGCONT; a step's fence gives up on held
  saves after kvfs_timeout, and their keys are removed once they land; an
  exception that is not an OSError fails one load, not the connector; a
  failing batch does not hang the queue's waiters;
- a kvfs_path not in kvfs is refused at start; after an unmount every
  call is a miss; a full mount (ENOSPC) fails saves, counted, and the
  request finishes;
- requires_kv_delivery is False, reset_cache answers None and keeps the
  blocks, shutdown releases the daemon's regions, and each allocation is
  registered once (one for views of one buffer, one per layer otherwise).
"""

import errno
import hashlib
import os
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
import vllm_standins as V  # noqa: E402

try:
    import torch
except ImportError:  # scripts/deps.sh installs python3-torch
    torch = None

LAYERS, NUM_BLOCKS, BS, H, D = 4, 96, 16, 2, 8
LAYER_NAMES = ["model.layers.%d.self_attn.attn" % i for i in range(LAYERS)]


def spec():
    return V.FullAttentionSpec(block_size=BS, num_kv_heads=H, head_size=D, dtype=torch.bfloat16)


def kv_caches():
    """One buffer for the group; each layer a [B, H, N, 2D] view in LBNHC order."""
    raw = torch.zeros(LAYERS, NUM_BLOCKS, BS, H, 2 * D, dtype=torch.bfloat16)
    return raw, {n: raw[i].permute(0, 2, 1, 3) for i, n in enumerate(LAYER_NAMES)}


def mla_spec():
    return V.MLAAttentionSpec(block_size=BS, num_kv_heads=1, head_size=576,
                              dtype=torch.bfloat16, head_size_v=0)


def mla_caches():
    """MLA: one latent vector per token; each layer a [B, 1, N, 576] view."""
    raw = torch.zeros(LAYERS, NUM_BLOCKS, BS, 576, dtype=torch.bfloat16)
    return raw, {n: raw[i].unsqueeze(1) for i, n in enumerate(LAYER_NAMES)}


def content(h, layer, shape=(H, BS, 2 * D)):
    """What the 'model' computes for the block whose hash is h, in a layer."""
    g = torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(h).digest()[:7], "big")
                                      + layer)
    return torch.randint(0, 200, shape, generator=g).to(torch.bfloat16)


class Engine:
    """One engine's connector pair (scheduler and worker role), its KV cache
    and the scheduler's bookkeeping of block ids, driven step by step in the
    order vLLM calls the hooks (scheduler: build_connector_meta; worker:
    handle_preemptions, bind, the forward's layers, start_load_kv after the
    forward as vLLM does when no load is synchronous, wait_for_save,
    get_transfer_results, get_block_ids_with_load_errors, stats, clear;
    scheduler: update_connector_output)."""

    def __init__(self, test, mnt, mla=False, extra=None, **cfg):
        from kvfs import vllm as kc
        self.kc = kc
        conf = V.vllm_config(mnt, block_size=BS, **cfg)
        conf.kv_transfer_config.kv_connector_extra_config.update(extra or {})
        kcc = V.kv_cache_config(NUM_BLOCKS, LAYER_NAMES, mla_spec() if mla else spec())
        self.sched = kc.KvfsConnector(conf, kc.KVConnectorRole.SCHEDULER, kcc)
        self.worker = kc.KvfsConnector(conf, kc.KVConnectorRole.WORKER, kcc)
        test.addCleanup(self.sched.shutdown)
        test.addCleanup(self.worker.shutdown)
        self.raw, self.caches = mla_caches() if mla else kv_caches()
        self.shape = tuple(next(iter(self.caches.values())).shape[1:])
        self.block = lambda t, b: t[b]  # block b of a layer's tensor
        self.worker.register_kv_caches(self.caches)
        self.free = list(range(1, NUM_BLOCKS))  # block 0 is vLLM's null block
        self.blocks = {}  # req id -> block ids
        self.finished = set()  # finished_req_ids of the next step
        self.reports = []  # the worker's stats, each step's (KVConnectorOutput)

    def forward(self, meta, compute, sync_loads=False, on_layer=None):
        """The worker's side of a step: 'compute' (request, block index)
        pairs; returns the step's KVConnectorOutput, also handed to the
        scheduler side. sync_loads: the step's SchedulerOutput has
        has_sync_kv_loads (the loads start before the forward);
        on_layer(layer): called as the layer's attention would run, once
        wait_for_layer_load returned."""
        w = self.worker
        w.handle_preemptions(meta)
        w.bind_connector_metadata(meta)
        if sync_loads:
            w.start_load_kv(None)
        for layer, name in enumerate(LAYER_NAMES):
            w.wait_for_layer_load(name)
            if on_layer:
                on_layer(layer)
            for req, b in compute:
                self.block(self.caches[name], self.blocks[req.request_id][b]).copy_(
                    content(req.block_hashes[b], layer, self.shape))
            w.save_kv_layer(name, self.caches[name], None)
        if not sync_loads:
            w.start_load_kv(None)
        w.wait_for_save()
        res = w.get_transfer_results(self.finished)
        self.finished = set()
        out = V.KVConnectorOutput(finished_sending=res.finished_sending or None,
                                  finished_recving=res.finished_recving or None,
                                  invalid_block_ids=w.get_block_ids_with_load_errors(),
                                  failed_recving=res.failed_recving,
                                  kv_connector_stats=w.get_kv_connector_stats())
        if out.kv_connector_stats is not None:
            self.reports.append(out.kv_connector_stats)
        w.clear_connector_metadata()
        self.sched.update_connector_output(out)
        return out

    def idle_step(self):
        """A step scheduling nothing (its KVConnectorOutput)."""
        return self.forward(self.sched.build_connector_meta(V.scheduler_output()), [])

    def settle(self, out):
        """`out` merged with a later step's, once the transfers in flight are done."""
        self.worker.drain()
        late = self.idle_step()
        return V.KVConnectorOutput(
            finished_sending=(out.finished_sending or set()) | (late.finished_sending or set()),
            finished_recving=(out.finished_recving or set()) | (late.finished_recving or set()),
            invalid_block_ids=set(out.invalid_block_ids) | set(late.invalid_block_ids),
            failed_recving=set(out.failed_recving) | set(late.failed_recving))

    def load(self, req, matched):
        """The async load of a hit: vLLM parks the request while the load
        runs, steps go on, and schedules it once get_finished reports it.
        Returns the invalid block ids the worker reported."""
        self.sched.update_state_after_alloc(req, V.kv_blocks(self.blocks[req.request_id]),
                                            matched)
        out = self.settle(self.idle_step())  # the load starts; the step does not wait for it
        assert out.finished_recving == {req.request_id}, out.finished_recving
        return out.invalid_block_ids

    def prefill(self, req, chunk=None, on_layer=None):
        """Schedules req's prompt (in chunks of `chunk` tokens); returns the
        matched tokens and the load errors. A hit loads asynchronously, or
        (the connector answering load-async False) in the request's first
        step, before its forward (on_layer: see forward)."""
        matched, load_async = self.sched.get_num_new_matched_tokens(req, 0)
        layerwise = self.worker.layerwise
        assert load_async is (matched > 0 and not layerwise), (matched, load_async)
        need = -(-req.num_prompt_tokens // BS)
        ids = [self.free.pop(0) for _ in range(need)]
        self.blocks[req.request_id] = ids
        errors = set()
        if matched and not layerwise:
            errors = self.load(req, matched)
        else:
            self.sched.update_state_after_alloc(req, V.kv_blocks(ids), matched)
        req.num_computed_tokens = matched
        first = True
        while req.num_computed_tokens < req.num_prompt_tokens:
            n = min(chunk or req.num_prompt_tokens, req.num_prompt_tokens - req.num_computed_tokens)
            if first:
                out = V.scheduler_output(
                    new=[V.NewRequestData.from_request(req, (list(ids),))],
                    num_scheduled={req.request_id: n}, sync_loads=bool(matched and layerwise))
            else:
                out = V.scheduler_output(cached=V.CachedRequestData(
                    [req.request_id], set(), [[]], {}, [None], [req.num_computed_tokens], [0]),
                    num_scheduled={req.request_id: n})
            start, end = req.num_computed_tokens // BS, (req.num_computed_tokens + n) // BS
            res = self.forward(self.sched.build_connector_meta(out),
                               [(req, b) for b in range(start, min(end, len(req.block_hashes)))
                                if b >= matched // BS],
                               sync_loads=out.has_sync_kv_loads,
                               on_layer=on_layer if first else None)
            errors |= set(res.invalid_block_ids)
            req.num_computed_tokens += n
            first = False
        return matched, errors

    def decode(self, req, tokens):
        """Decode steps, one token each; a block that fills is saved."""
        for t in tokens:
            if req.num_tokens % BS == 0:
                new = [self.free.pop(0)]
                self.blocks[req.request_id].append(new[0])
            else:
                new = []
            req.append_output_token_ids(t)
            out = V.scheduler_output(cached=V.CachedRequestData(
                [req.request_id], set(), [[]], {}, [(new,)], [req.num_computed_tokens], [1]),
                num_scheduled={req.request_id: 1})
            b = req.num_computed_tokens // BS
            full = (req.num_computed_tokens + 1) % BS == 0
            self.forward(self.sched.build_connector_meta(out), [(req, b)] if full else [])
            req.num_computed_tokens += 1

    def finish(self, req):
        """request_finished, then the blocks freed once get_finished reports the saves landed."""
        delay, params = self.sched.request_finished(req, self.blocks[req.request_id])
        self.worker.drain()
        self.finished.add(req.request_id)
        done = self.idle_step().finished_sending or set()
        assert params is None and delay == (req.request_id in done), (delay, done)
        self.free += self.blocks.pop(req.request_id)


def request(rid, tokens, **kw):
    return V.Request(rid, tokens, block_hasher=V.get_request_block_hasher(BS), **kw)


class ConnectorTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=256M",)

    def setUp(self):
        os.environ.setdefault("PYTHONHASHSEED", "0")
        kvfstest.client()
        super().setUp()

    def layer_block(self, eng, layer, block_id):
        return eng.caches[LAYER_NAMES[layer]][block_id]

    def assert_blocks(self, eng, sentinel, ids, *runs):
        """Every block of every layer of eng: for each (request, a, b) of
        runs, ids[a:b] hold what the model computes for the request's
        blocks there; every other block still holds the sentinel."""
        for layer in range(LAYERS):
            for i in range(NUM_BLOCKS):
                want = sentinel[layer, i].permute(1, 0, 2)
                for req, a, b in runs:
                    if i in ids[a:b]:
                        want = content(req.block_hashes[ids.index(i)], layer)
                self.assertTrue(torch.equal(self.layer_block(eng, layer, i), want),
                                "layer %d block %d" % (layer, i))

    def test_prefix_load_save_and_share(self):
        a = Engine(self, self.m.mnt)
        tokens = list(range(1000, 1000 + 38 * BS + 5))
        r = request("a", tokens)
        self.assertEqual(a.prefill(r, chunk=7 * BS), (0, set()))  # nothing stored yet
        a.decode(r, range(5000, 5000 + 2 * BS - 5))  # fills blocks 38 and 39
        self.assertEqual(len(r.block_hashes), 40)
        self.assertEqual(a.sched.stats()["hit_blocks"], 0)
        a.finish(r)  # its saves land first
        self.assertEqual(a.worker.stats()["saved_blocks"], 40)

        b = Engine(self, self.m.mnt)
        sentinel = torch.full_like(b.raw, 7)
        b.raw.copy_(sentinel)
        r2 = request("b", list(r.all_token_ids) + list(range(9000, 9000 + 24 * BS)))
        matched, errors = b.prefill(r2)
        self.assertEqual((matched, errors), (40 * BS, set()))
        self.assert_blocks(b, sentinel, b.blocks["b"], (r, 0, 40), (r2, 40, 64))
        b.worker.drain()  # the saves land in the background
        self.assertEqual(b.worker.stats()["loaded_blocks"], 40)
        self.assertEqual(b.worker.stats()["saved_blocks"], 24)  # the 40 held are not saved again

    def hold_puts(self, eng):
        """The daemon is slow: the worker's puts wait for the returned gate."""
        import threading
        gate, puts = threading.Event(), []
        client = eng.worker._open()[0]
        real = client.put

        def held(*args, **kw):
            puts.append(threading.current_thread().name)
            gate.wait(60)
            return real(*args, **kw)
        client.put = held
        return gate, puts

    def fenced(self, eng, meta, gate):
        """True when handle_preemptions(meta) waits for the held saves (it
        returns once the gate opens, not before)."""
        import threading
        th = threading.Thread(target=eng.worker.handle_preemptions, args=(meta,))
        th.start()
        th.join(0.5)
        waited = th.is_alive()
        gate.set()
        th.join()
        return waited

    def test_preemption_and_resume(self):
        a = Engine(self, self.m.mnt)
        r = request("p", list(range(3, 3 + 12 * BS + 3)))
        self.assertEqual(a.sched.get_num_new_matched_tokens(r, 0), (0, False))
        old = [a.free.pop(0) for _ in range(13)]
        a.blocks["p"] = old
        a.sched.update_state_after_alloc(r, V.kv_blocks(old), 0)
        gate, _ = self.hold_puts(a)
        out = V.scheduler_output(new=[V.NewRequestData.from_request(r, (list(old),))],
                                 num_scheduled={"p": 5 * BS})
        a.forward(a.sched.build_connector_meta(out), [(r, b) for b in range(5)])
        # preempted while its saves are held: the next step gives its blocks
        # to another request, which writes over them; before the step runs,
        # the saves reading them land
        x = request("x", list(range(7, 7 + 4 * BS)))
        out = V.scheduler_output(new=[V.NewRequestData.from_request(x, (old[:4],))],
                                 num_scheduled={"x": 4 * BS}, preempted={"p"})
        meta = a.sched.build_connector_meta(out)
        self.assertTrue(self.fenced(a, meta, gate))
        self.assertEqual(a.worker.stats()["saved_blocks"], 5)
        # a step allocating no block a save reads does not wait
        gate2, _ = self.hold_puts(a)
        y = request("y", list(range(9, 9 + 2 * BS)))
        a.blocks["y"] = [a.free.pop(0), a.free.pop(0)]
        a.sched.get_num_new_matched_tokens(y, 0)
        a.sched.update_state_after_alloc(y, V.kv_blocks(a.blocks["y"]), 0)
        a.forward(a.sched.build_connector_meta(V.scheduler_output(
            new=[V.NewRequestData.from_request(y, (a.blocks["y"],))], num_scheduled={"y": 2 * BS})),
            [(y, 0), (y, 1)])
        other = V.scheduler_output(new=[V.NewRequestData.from_request(x, ([a.free[0]],))],
                                   num_scheduled={"x": 1})
        self.assertFalse(self.fenced(a, a.sched.build_connector_meta(other), gate2))
        a.worker.drain()
        a.raw.view(LAYERS, NUM_BLOCKS, -1)[:, old, :] = 0
        new = [a.free.pop() for _ in range(13)]
        a.blocks["p"] = new
        r.num_computed_tokens = 0  # recomputed from the start, into new blocks
        out = V.scheduler_output(cached=V.CachedRequestData(
            ["p"], {"p"}, [[]], {}, [(list(new),)], [0], [0]), num_scheduled={"p": 12 * BS + 3})
        meta = a.sched.build_connector_meta(out)
        self.assertEqual([len(m.items) for m in meta.requests], [7])  # 0-4 were saved
        a.forward(meta, [(r, b) for b in range(12)])
        a.worker.drain()
        b = Engine(self, self.m.mnt)
        r2 = request("q", list(r.all_token_ids))
        self.assertEqual(b.prefill(r2)[0], 12 * BS)
        for layer in range(LAYERS):
            for i, bid in enumerate(b.blocks["q"][:12]):
                self.assertTrue(torch.equal(self.layer_block(b, layer, bid),
                                            content(r.block_hashes[i], layer)), (layer, i))

    def test_saves_land_in_the_background(self):
        a = Engine(self, self.m.mnt)
        gate, puts = self.hold_puts(a)
        r = request("bg", list(range(3 * BS + 1)))
        a.prefill(r)  # wait_for_save returned with its put held
        self.assertEqual(a.worker.stats()["saved_blocks"], 0)
        self.assertEqual(a.sched.request_finished(r, a.blocks["bg"]), (True, None))
        self.assertEqual(a.worker.get_finished({"bg"}), (None, None))  # blocks still held
        gate.set()
        a.worker.drain()
        self.assertEqual(puts, ["kvfs-saves"])
        self.assertEqual(a.worker.stats()["saved_blocks"], 3)
        self.assertEqual(a.worker.get_finished(set()), ({"bg"}, None))  # now vLLM frees them
        self.assertEqual(a.worker.get_finished(set()), (None, None))  # reported once
        self.assertEqual(a.sched.get_num_new_matched_tokens(request("bg2", list(
            range(3 * BS + 1))), 0), (3 * BS, True))

    def test_mla(self):
        a = Engine(self, self.m.mnt, mla=True)
        r = request("mla", list(range(40, 40 + 5 * BS + 1)))
        a.prefill(r)
        a.finish(r)
        b = Engine(self, self.m.mnt, mla=True)
        b.raw.fill_(7)
        matched, errors = b.prefill(request("mla2", list(r.all_token_ids)))
        self.assertEqual((matched, errors), (5 * BS, set()))
        self.assertEqual(b.worker.stats()["loaded_bytes"], 5 * LAYERS * BS * 576 * 2)
        ids = b.blocks["mla2"]
        for layer in range(LAYERS):
            for i in range(NUM_BLOCKS):
                want = content(r.block_hashes[ids.index(i)], layer, (1, BS, 576)) \
                    if i in ids[:5] else torch.full((1, BS, 576), 7, dtype=torch.bfloat16)
                if i in ids[5:]:
                    continue  # the last block: computed by the prefill
                self.assertTrue(torch.equal(self.layer_block(b, layer, i), want), (layer, i))
        # an MLA model's keys are not a GQA model's
        self.assertNotEqual(a.worker.key("ab"), Engine(self, self.m.mnt).worker.key("ab"))

    def test_loads_land_in_the_background(self):
        import threading
        a = Engine(self, self.m.mnt)
        r = request("src", list(range(20, 20 + 6 * BS + 1)))
        a.prefill(r)
        a.finish(r)
        b = Engine(self, self.m.mnt)
        gate, gets = threading.Event(), []
        client = b.worker._open()[0]
        real = client.get

        def held(*args, **kw):  # the daemon is slow: this get waits for the gate
            gets.append(threading.current_thread().name)
            gate.wait(60)
            return real(*args, **kw)
        client.get = held
        r2 = request("dst", list(r.all_token_ids))
        self.assertEqual(b.sched.get_num_new_matched_tokens(r2, 0), (6 * BS, True))
        ids = b.blocks["dst"] = [b.free.pop(0) for _ in range(7)]
        b.sched.update_state_after_alloc(r2, V.kv_blocks(ids), 6 * BS)
        # steps go on while the load is held; the request is not reported
        for _ in range(3):
            self.assertIsNone(b.idle_step().finished_recving)
        self.assertEqual(b.worker.stats()["loaded_blocks"], 0)
        gate.set()
        b.worker.drain()
        self.assertEqual(gets, ["kvfs-loads"])
        self.assertEqual(b.idle_step().finished_recving, {"dst"})  # now vLLM schedules it
        self.assertIsNone(b.idle_step().finished_recving)  # reported once
        for layer in range(LAYERS):
            for i in range(6):
                self.assertTrue(torch.equal(self.layer_block(b, layer, ids[i]),
                                            content(r.block_hashes[i], layer)), (layer, i))

    def test_kv_events(self):
        from kvfs import vllm as kc
        a = Engine(self, self.m.mnt)
        lora = V.LoRARequest("adapter-7", 7)
        r = request("ev", list(range(500, 500 + 3 * BS + 4)), lora_request=lora)
        a.prefill(r)
        self.assertEqual(list(a.sched.take_events()), [])  # nothing landed yet
        self.assertEqual(a.sched.request_finished(r, a.blocks["ev"]), (True, None))
        a.worker.drain()
        done, _ = a.worker.get_finished({"ev"})
        a.sched.update_connector_output(V.KVConnectorOutput(finished_sending=done))
        events = list(a.sched.take_events())
        self.assertEqual(len(events), 1)
        e = events[0]
        self.assertIsInstance(e, kc.BlockStored)
        self.assertEqual((e.block_hashes, e.parent_block_hash), (r.block_hashes[:3], None))
        self.assertEqual(e.token_ids, list(r.all_token_ids[:3 * BS]))
        self.assertEqual((e.block_size, e.medium, e.lora_name, e.lora_id),
                         (BS, "KVFS", "adapter-7", 7))
        self.assertEqual(list(a.sched.take_events()), [])  # told once

    def test_stats_and_prometheus(self):
        import prometheus_client as pc
        from kvfs import vllm as kc
        a = Engine(self, self.m.mnt)
        self.assertIsNone(a.worker.get_kv_connector_stats())
        a.prefill(request("s", list(range(4 * BS + 1))))
        a.worker.drain()
        b = Engine(self, self.m.mnt)
        b.prefill(request("t", list(range(6 * BS + 1))))  # 4 hit, 2 missed
        b.worker.drain()
        block = LAYERS * BS * H * 2 * D * 2
        late = b.worker.get_kv_connector_stats()  # the last save's, if it landed after its step
        ws = kc.KvfsConnectorStats(data={})  # the steps' reports, as vLLM's aggregator adds them
        for r in b.reports + ([late] if late else []):
            ws.aggregate(r)
        ss = b.sched.get_kv_connector_stats()
        self.assertEqual({k: ss.data[k] for k in ("lookups", "hit_blocks", "missed_blocks")},
                         {"lookups": 1, "hit_blocks": 4, "missed_blocks": 2})
        self.assertEqual({k: ws.data[k] for k in ("loaded_blocks", "loaded_bytes", "saved_blocks",
                                                  "saved_bytes")},
                         {"loaded_blocks": 4, "loaded_bytes": 4 * block, "saved_blocks": 2,
                          "saved_bytes": 2 * block})
        self.assertEqual((len(ws.data["load_seconds"]), len(ws.data["save_seconds"])), (1, 1))
        self.assertIsNone(b.worker.get_kv_connector_stats())  # each count reported once
        # the logger's side: rebuilt from the dicts vLLM carried, aggregated, reduced
        agg = kc.KvfsConnector.build_kv_connector_stats(ws.to_dict()).aggregate(
            kc.KvfsConnector.build_kv_connector_stats(ss.to_dict()))
        red = agg.reduce()
        self.assertEqual((red["hit_blocks"], red["loaded_blocks"], red["saved_blocks"]), (4, 4, 2))
        self.assertGreater(red["load_ms_avg"], 0)
        # /metrics, through prometheus_client as vLLM's metric types wrap it
        reg = pc.CollectorRegistry()

        def in_reg(base):  # vLLM's metric types: prometheus_client's, on its registry
            return type(base.__name__, (base,), {"__init__": lambda self, *a, **kw:
                                                 base.__init__(self, *a, registry=reg, **kw)})
        types = {t: in_reg(t) for t in (pc.Gauge, pc.Counter, pc.Histogram)}
        prom = kc.KvfsConnector.build_prom_metrics(V.vllm_config(self.m.mnt), types,
                                                   ["model_name", "engine"], {0: ["tiny", "0"]})
        prom.observe(agg.to_dict(), 0)
        prom.observe(agg.to_dict(), 0)
        labels = {"model_name": "tiny", "engine": "0"}
        self.assertEqual(reg.get_sample_value("vllm:kvfs_hit_blocks_total", labels), 8)
        self.assertEqual(reg.get_sample_value("vllm:kvfs_loaded_bytes_total", labels), 8 * block)
        self.assertEqual(reg.get_sample_value("vllm:kvfs_load_seconds_count", labels), 2)
        self.assertEqual(reg.get_sample_value("vllm:kvfs_errors_total", labels), 0)

    def test_keys_follow_block_hashes(self):
        a = Engine(self, self.m.mnt)
        tokens = list(range(64 * BS + 1))
        base = request("base", tokens)
        a.prefill(base)
        a.finish(base)
        lora = V.LoRARequest("adapter-1", 1)
        image = V.MultiModalFeatureSpec(None, "image", "img-42", V.PlaceholderRange(100, 50))
        for kw, want in (({"lora_request": lora}, 0),  # in every block's hash
                         ({"cache_salt": "tenant-2"}, 0),  # in the first, so in the chain
                         ({"mm_features": [image]}, 6)):  # from the block holding token 100
            other = request("other", tokens, **kw)
            self.assertEqual(a.sched.get_num_new_matched_tokens(other, 0),
                             (want * BS, want > 0), kw)
            a.sched.request_finished(other, [])
        self.assertEqual(a.sched.get_num_new_matched_tokens(request("same", tokens), 0),
                         (64 * BS, True))
        # a prompt of embeddings, no token ids: its hashes make its keys
        emb = torch.arange(33 * BS * 4, dtype=torch.float32).view(33 * BS, 4)
        hasher = V.get_request_block_hasher(BS)
        self.assertEqual(a.prefill(V.Request("e1", None, prompt_embeds=emb,
                                             block_hasher=hasher)), (0, set()))
        a.worker.drain()
        e2 = V.Request("e2", None, prompt_embeds=emb.clone(), block_hasher=hasher)
        self.assertEqual(a.sched.get_num_new_matched_tokens(e2, 0), (32 * BS, True))
        e3 = V.Request("e3", None, prompt_embeds=emb + 1, block_hasher=hasher)
        self.assertEqual(a.sched.get_num_new_matched_tokens(e3, 0), (0, False))

    def test_tensor_and_pipeline_ranks(self):
        tokens = list(range(5 * BS + 1))
        ranks = [(tp, pp) for tp in range(2) for pp in range(2)]
        engines = {}
        for tp, pp in ranks:
            engines[tp, pp] = Engine(self, self.m.mnt, tp_size=2, pp_size=2, tp_rank=tp,
                                     pp_rank=pp)
        keys = {e.worker.key("ab") for e in engines.values()}
        self.assertEqual(len(keys), 4)
        for n, (tp, pp) in enumerate(ranks):
            r = request("r%d" % n, tokens)
            matched, _ = engines[tp, pp].prefill(r)
            engines[tp, pp].worker.drain()
            self.assertEqual(matched, 0, (tp, pp))  # not every rank had it before this one
        probe = request("probe", tokens)
        for e in engines.values():
            self.assertEqual(e.sched.get_num_new_matched_tokens(probe, 0), (5 * BS, True))

    def test_ranks_from_vllm_parallel_state(self):
        import types
        from kvfs import vllm as kc
        names = ("vllm", "vllm.distributed", "vllm.distributed.parallel_state")
        fake = {n: types.ModuleType(n) for n in names}
        ps = fake["vllm.distributed.parallel_state"]
        ps.get_tp_group = lambda: types.SimpleNamespace(rank_in_group=1)
        ps.get_pp_group = lambda: types.SimpleNamespace(rank_in_group=3)
        fake["vllm.distributed"].parallel_state = ps
        saved = {n: sys.modules.get(n) for n in names}
        sys.modules.update(fake)
        try:
            c = kc.KvfsConnector(V.vllm_config(self.m.mnt, tp_size=2, pp_size=4, tp_rank=None,
                                               pp_rank=None), kc.KVConnectorRole.WORKER,
                                 V.kv_cache_config(NUM_BLOCKS, LAYER_NAMES, spec()))
        finally:
            for n, m in saved.items():
                if m is None:
                    sys.modules.pop(n, None)
                else:
                    sys.modules[n] = m
        self.assertIn("-tp2-pp4/g0-", c.key("ab"))
        self.assertTrue(c.key("ab").endswith("/r1.3/ab"), c.key("ab"))

    def layer_file(self, eng, h, layer):
        """The bytes of a layer's block in kvfs, layer by layer, as (H, BS, 2D)."""
        with open(os.path.join(self.m.mnt, eng.worker.key(bytes(h).hex()), str(layer)),
                  "rb") as f:
            data = f.read()
        return torch.frombuffer(bytearray(data), dtype=torch.bfloat16).view(
            BS, H, 2 * D).permute(1, 0, 2)

    def test_layer_by_layer(self):
        a = Engine(self, self.m.mnt, load="layer")
        r = request("a", list(range(3000, 3000 + 12 * BS + 3)))
        self.assertEqual(a.prefill(r, chunk=5 * BS), (0, set()))
        a.finish(r)
        self.assertEqual(a.worker.stats()["saved_blocks"], 12)
        self.assertEqual(a.worker.stats()["saved_bytes"], 12 * LAYERS * BS * H * 2 * D * 2)
        # each layer's block is a key of its own, under a spec of its own
        key = a.worker.key(bytes(r.block_hashes[0]).hex())
        self.assertIn("-layerwise/", key)
        self.assertEqual(sorted(os.listdir(os.path.join(self.m.mnt, key))),
                         [str(layer) for layer in range(LAYERS)])
        for layer in range(LAYERS):
            self.assertTrue(torch.equal(self.layer_file(a, r.block_hashes[7], layer),
                                        content(r.block_hashes[7], layer)), layer)
        # an engine loading asynchronously never sees them
        c = Engine(self, self.m.mnt)
        self.assertEqual(c.sched.get_num_new_matched_tokens(request("c", r.all_token_ids), 0),
                         (0, False))

        b = Engine(self, self.m.mnt, load="layer")
        sentinel = torch.full_like(b.raw, 7)
        b.raw.copy_(sentinel)
        client = b.worker._open()[0]
        real, gets = client.get, []

        def slow(names, **kw):  # a slow daemon: a layer's blocks land 50 ms after it is asked
            gets.append(names[0].rsplit("/", 1)[1])
            time.sleep(0.05)
            return real(names, **kw)
        client.get = slow
        r2 = request("b", list(r.all_token_ids) + list(range(9000, 9000 + 4 * BS)))
        seen = []

        def on_layer(layer):  # the layer's attention runs: its loaded blocks must be there
            ids = b.blocks["b"]
            seen.append(all(torch.equal(self.layer_block(b, layer, ids[j]),
                                        content(r.block_hashes[j], layer)) for j in range(12)))
        self.assertEqual(b.prefill(r2, on_layer=on_layer), (12 * BS, set()))
        self.assertEqual(seen, [True] * LAYERS)
        self.assertEqual(gets, [str(layer) for layer in range(LAYERS)])  # the forward's order
        self.assert_blocks(b, sentinel, b.blocks["b"], (r, 0, 12), (r2, 12, 16))
        b.worker.drain()  # the saves of the 4 blocks computed land in the background
        st = b.worker.stats()
        self.assertEqual((st["loaded_blocks"], st["saved_blocks"], st["failed_loads"]),
                         (12, 4, 0))

    def test_layer_by_layer_load_error(self):
        a = Engine(self, self.m.mnt, load="layer")
        r = request("a", list(range(5000, 5000 + 8 * BS + 1)))
        a.prefill(r)
        a.finish(r)
        os.unlink(os.path.join(self.m.mnt, a.worker.key(bytes(r.block_hashes[5]).hex()), "2"))
        b = Engine(self, self.m.mnt, load="layer")
        r2 = request("b", list(r.all_token_ids))
        matched, errors = b.prefill(r2)
        # the block that lost a layer is reported by id, for vLLM to recompute; the rest loaded
        self.assertEqual((matched, errors), (8 * BS, {b.blocks["b"][5]}))
        st = b.worker.stats()
        self.assertEqual((st["loaded_blocks"], st["failed_loads"]), (7, 1))
        for layer in range(LAYERS):
            for j in (0, 4, 6, 7):
                self.assertTrue(torch.equal(self.layer_block(b, layer, b.blocks["b"][j]),
                                            content(r.block_hashes[j], layer)), (layer, j))
        self.assertEqual(b.sched._tracks["b"].stored, 5)  # from block 5 on: saved again

    def test_layer_by_layer_config(self):
        from kvfs import vllm as kc
        conf = V.vllm_config(self.m.mnt, load="sometimes")
        with self.assertRaises(kc.ConfigError) as e:
            kc.KvfsConnector(conf, kc.KVConnectorRole.WORKER,
                             V.kv_cache_config(NUM_BLOCKS, LAYER_NAMES, spec()))
        self.assertIn("kvfs_load", str(e.exception))
        two = V.kv_cache_config(NUM_BLOCKS, None, None, groups=[
            (LAYER_NAMES[:2], spec()), (LAYER_NAMES[2:], spec())])
        with self.assertRaises(kc.ConfigError) as e:
            kc.KvfsConnector(V.vllm_config(self.m.mnt, load="layer", hybrid=True),
                             kc.KVConnectorRole.WORKER, two)
        self.assertIn("one KV-cache group", str(e.exception))
        self.assertTrue(kc.KvfsConnector.requires_piecewise_for_cudagraph({"kvfs_load": "layer"}))
        self.assertFalse(kc.KvfsConnector.requires_piecewise_for_cudagraph({}))

    def test_cross_layer_blocks(self):
        """vLLM's cross-layer blocks as allocate_uniform_kv_caches made them
        (FlashAttention, blocks first, NHD: one contiguous (B, L, 2, N, H, D)
        tensor, each layer a (B, 2, N, H, D) view of it) save under the
        same keys, byte for byte, as per-layer tensors of that backend."""
        import kvfs
        segs = []
        real = kvfs.Client.layout

        def spy(client, segments):
            segs.append(list(segments))
            return real(client, segments)
        kvfs.Client.layout = spy
        self.addCleanup(setattr, kvfs.Client, "layout", real)
        a = Engine(self, self.m.mnt)
        self.assertTrue(a.worker.prefer_cross_layer_blocks)
        cross = torch.zeros(NUM_BLOCKS, LAYERS, 2, BS, H, D, dtype=torch.bfloat16)
        del segs[:]
        a.worker.register_cross_layers_kv_cache(cross, None)
        self.assertEqual([[s[2:] for s in lay] for lay in segs],
                         [[(LAYERS * 2 * BS * H * D * 2, LAYERS * 2 * BS * H * D * 2)]])
        a.raw, a.shape = cross, (2, BS, H, D)
        a.caches = {n: cross.permute(1, 0, 2, 3, 4, 5)[i] for i, n in enumerate(LAYER_NAMES)}
        r = request("a", list(range(7000, 7000 + 6 * BS + 1)))
        a.prefill(r)
        a.finish(r)
        self.assertEqual(a.worker.stats()["saved_blocks"], 6)

        b = Engine(self, self.m.mnt)
        mine = {n: torch.zeros(NUM_BLOCKS, 2, BS, H, D, dtype=torch.bfloat16)
                for n in LAYER_NAMES}  # an allocation per layer
        del segs[:]
        b.worker.register_kv_caches(mine)
        self.assertEqual(len(segs[0]), LAYERS)  # a range per layer
        b.caches, b.shape = mine, (2, BS, H, D)
        matched, errors = b.prefill(request("b", list(r.all_token_ids)))
        self.assertEqual((matched, errors), (6 * BS, set()))
        for layer, name in enumerate(LAYER_NAMES):
            for j in range(6):
                self.assertTrue(torch.equal(mine[name][b.blocks["b"][j]],
                                            content(r.block_hashes[j], layer, (2, BS, H, D))),
                                (layer, j))
        self.assertFalse(Engine(self, self.m.mnt, load="layer").worker.prefer_cross_layer_blocks)

    def test_refused_without_hash_seed(self):
        from kvfs import vllm as kc
        seed = os.environ.pop("PYTHONHASHSEED")
        try:
            with self.assertRaises(kc.ConfigError) as e:
                kc.KvfsConnector(V.vllm_config(self.m.mnt), kc.KVConnectorRole.SCHEDULER,
                                 V.kv_cache_config(NUM_BLOCKS, LAYER_NAMES, spec()))
            self.assertIn("PYTHONHASHSEED", str(e.exception))
        finally:
            os.environ["PYTHONHASHSEED"] = seed

    def test_unaddressable_layout_refused(self):
        a = Engine(self, self.m.mnt)
        name = "model.layers.0.self_attn.attn"
        bad = {name: torch.zeros(NUM_BLOCKS, H, BS, 4 * D)[:, :, :, ::2]}  # every other element
        with self.assertRaises(ValueError) as err:
            a.worker.register_kv_caches(bad)
        for part in (name, str(list(bad[name].shape)), str(list(bad[name].stride()))):
            self.assertIn(part, str(err.exception))

    def test_daemon_killed_and_back(self):
        root = tempfile.mkdtemp(prefix="kvfs-it-back-", dir="/tmp")
        self.addCleanup(shutil.rmtree, root, True)
        m1 = self.mount(root=root, name="first")
        a = Engine(self, m1.mnt)
        tokens = list(range(10 * BS + 1))
        a.prefill(request("a", tokens))
        a.worker.drain()
        fd = os.open(m1.mnt, os.O_RDONLY)  # durable before the kill (fsync of the root: syncfs)
        os.fsync(fd)
        os.close(fd)
        m1.signal(signal.SIGKILL)
        m1.wait_exit()
        # the mount is there, its daemon is not: every call answers, none raises
        self.assertEqual(a.sched.get_num_new_matched_tokens(request("b", tokens), 0), (0, False))
        h = request("c", tokens).block_hashes[2].hex()
        meta = a.kc.KvfsConnectorMetadata([a.kc.ReqMeta("x", [(0, h, 3)], True),
                                           a.kc.ReqMeta("x", [(0, h, 4)], False)])
        out = a.settle(a.forward(meta, []))
        self.assertEqual((out.finished_recving, out.invalid_block_ids), ({"x"}, {3}))  # recomputed
        st = a.worker.stats()
        self.assertEqual((st["failed_loads"], st["failed_saves"]), (1, 1))
        self.assertGreater(a.sched.stats()["errors"], 0)
        m1.cleanup()
        # a kvfs on the same data at the same path: the same connector uses it again
        m2 = self.mount(root=root, name="again")
        self.assertEqual(m2.mnt, m1.mnt)
        self.assertEqual(a.sched.get_num_new_matched_tokens(request("d", tokens), 0),
                         (10 * BS, True))
        before = a.worker.stats()["loaded_blocks"]
        out = a.settle(a.forward(a.kc.KvfsConnectorMetadata(
            [a.kc.ReqMeta("d", [(0, h, 5)], True)]), []))
        self.assertEqual((out.finished_recving, out.invalid_block_ids), ({"d"}, set()))
        self.assertEqual(a.worker.stats()["loaded_blocks"], before + 1)
        for layer in range(LAYERS):
            want = content(request("e", tokens).block_hashes[2], layer)
            self.assertTrue(torch.equal(self.layer_block(a, layer, 5), want), layer)
        a.sched.shutdown()  # the mount's handles go before it is unmounted
        a.worker.shutdown()


    # ---- layouts whose block dimension is not the first ----

    def other_layout(self, eng, make, block, shape):
        """Gives eng's worker per-layer tensors from make(), block b of a
        layer's tensor t being block(t, b) of shape `shape`."""
        eng.caches, eng.block, eng.shape = make(), block, shape
        eng.worker.register_kv_caches(eng.caches)

    def check_layout(self, make, block, shape):
        """One engine saves 6 blocks, another of the same layout loads them:
        every byte of every block is checked, loaded blocks equal, all
        others untouched."""
        a = Engine(self, self.m.mnt)
        self.other_layout(a, make, block, shape)
        r = request("a", list(range(400, 400 + 6 * BS + 1)))
        a.prefill(r)
        a.finish(r)
        self.assertEqual(a.worker.stats()["saved_blocks"], 6)
        b = Engine(self, self.m.mnt)
        self.other_layout(b, make, block, shape)
        for t in b.caches.values():
            t.fill_(7)
        before = {n: t.clone() for n, t in b.caches.items()}
        matched, errors = b.prefill(request("b", list(r.all_token_ids)))
        self.assertEqual((matched, errors), (6 * BS, set()))
        ids = b.blocks["b"]
        for layer, name in enumerate(LAYER_NAMES):
            for i in range(NUM_BLOCKS):  # the blocks cover every byte of the tensor
                want = content(r.block_hashes[ids.index(i)], layer, shape) if i in ids[:6] \
                    else block(before[name], i)
                self.assertTrue(torch.equal(block(b.caches[name], i), want),
                                "layer %d block %d" % (layer, i))

    def test_flash_attention_kv_first(self):
        """FlashAttention before May 2026: (2, num_blocks, block_size, H, D)."""
        self.check_layout(lambda: {n: torch.zeros(2, NUM_BLOCKS, BS, H, D, dtype=torch.bfloat16)
                                   for n in LAYER_NAMES},
                          lambda t, b: t[:, b], (2, BS, H, D))

    def test_cpu_attention_kv_first(self):
        """CPU attention before June 2026: (2, num_blocks, H, block_size, D)."""
        self.check_layout(lambda: {n: torch.zeros(2, NUM_BLOCKS, H, BS, D, dtype=torch.bfloat16)
                                   for n in LAYER_NAMES},
                          lambda t, b: t[:, b], (2, H, BS, D))

    def test_kernel_blocks_half_the_schedulers_kv_first(self):
        """Kernel blocks of BS/2 tokens, K/V first: (2, 2 * num_blocks, BS/2, H, D),
        scheduler block b being kernel blocks 2b and 2b + 1."""
        self.check_layout(lambda: {n: torch.zeros(2, 2 * NUM_BLOCKS, BS // 2, H, D,
                                                  dtype=torch.bfloat16) for n in LAYER_NAMES},
                          lambda t, b: t.unflatten(1, (NUM_BLOCKS, 2))[:, b],
                          (2, 2, BS // 2, H, D))

    def test_block_dimension_chosen_or_refused(self):
        from kvfs import vllm as kc
        a = Engine(self, self.m.mnt)

        def refused(t, *parts, num_blocks=NUM_BLOCKS):
            a.worker.num_blocks = num_blocks
            with self.assertRaises(kc.ConfigError) as e:
                a.worker.register_kv_caches({LAYER_NAMES[0]: t})
            for part in (LAYER_NAMES[0], str(list(t.shape)), str(list(t.stride()))) + parts:
                self.assertIn(part, str(e.exception))
        # no dimension of num_blocks blocks
        refused(torch.zeros(2, NUM_BLOCKS - 1, BS, H, D), "%d blocks" % NUM_BLOCKS)
        # two dimensions of it with the same stride: which one holds blocks is not clear
        refused(torch.zeros(NUM_BLOCKS, BS, D).as_strided((NUM_BLOCKS, NUM_BLOCKS, D),
                                                          (D, D, 1)), "could each be")
        # vLLM without kv_cache_config, a first dimension of 2: K/V, or 2 blocks?
        refused(torch.zeros(2, NUM_BLOCKS, BS, H, D), "kv_cache_config", num_blocks=None)
        a.worker.num_blocks = NUM_BLOCKS
        # a head size equal to num_blocks: the blocks are the outer dimension
        from kvfs.vllm import _block_dim
        self.assertEqual(_block_dim(torch.zeros(2, NUM_BLOCKS, BS, H, NUM_BLOCKS), NUM_BLOCKS,
                                    "x"), (1, 1))
        self.assertEqual(_block_dim(torch.zeros(2, 2 * NUM_BLOCKS, BS, H, D), NUM_BLOCKS, "x"),
                         (1, 2))
        self.assertEqual(_block_dim(torch.zeros(NUM_BLOCKS, BS, 576), None, "x"), (0, 1))

    # ---- keys: what the bytes depend on ----

    def test_spec_names_what_the_bytes_depend_on(self):
        from kvfs import vllm as kc

        def key(conf=None, layout="LBNHC", **kw):
            conf = conf or V.vllm_config(self.m.mnt, **kw)
            s = V.FullAttentionSpec(block_size=conf.cache_config.block_size, num_kv_heads=H,
                                    head_size=D, dtype=torch.bfloat16)
            return kc.KvfsConnector(conf, kc.KVConnectorRole.SCHEDULER,
                                    V.kv_cache_config(NUM_BLOCKS, LAYER_NAMES, s,
                                                      layout=layout)).key("ab")
        base = key()
        self.assertNotEqual(key(block_size=32), base)
        self.assertNotEqual(key(cache_dtype="fp8"), base)
        self.assertNotEqual(key(layout="LBHNC"), base)
        conf = V.vllm_config(self.m.mnt)
        conf.cache_config.prefix_caching_hash_algo = "xxhash_cbor"
        self.assertNotEqual(key(conf), base)
        self.assertEqual(key(), base)
        # vLLM before it named the layout: its VLLM_KV_CACHE_LAYOUT, its attention backend
        keys = set()
        for env, backend in ((None, None), ("NHD", None), ("HND", None), ("HND", "FLASHINFER")):
            conf = V.vllm_config(self.m.mnt)
            if backend:
                conf.attention_config = V.NS(backend=backend)
            old = os.environ.pop("VLLM_KV_CACHE_LAYOUT", None)
            if env:
                os.environ["VLLM_KV_CACHE_LAYOUT"] = env
            try:
                keys.add(key(conf, layout=None))
            finally:
                os.environ.pop("VLLM_KV_CACHE_LAYOUT", None)
                if old is not None:
                    os.environ["VLLM_KV_CACHE_LAYOUT"] = old
        self.assertEqual(len(keys), 4)

    def test_unstable_hash_algo_refused(self):
        from kvfs import vllm as kc
        conf = V.vllm_config(self.m.mnt)
        conf.cache_config.prefix_caching_hash_algo = "builtin"
        with self.assertRaises(kc.ConfigError) as e:
            kc.KvfsConnector(conf, kc.KVConnectorRole.SCHEDULER,
                             V.kv_cache_config(NUM_BLOCKS, LAYER_NAMES, spec()))
        self.assertIn("prefix_caching_hash_algo 'builtin'", str(e.exception))
        for algo in ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor"):
            conf.cache_config.prefix_caching_hash_algo = algo
            kc.KvfsConnector(conf, kc.KVConnectorRole.SCHEDULER,
                             V.kv_cache_config(NUM_BLOCKS, LAYER_NAMES, spec()))

    # ---- failures: hung daemon, exceptions, unmount, ENOSPC ----

    def bounded(self, fn, limit=5):
        """fn()'s result, failing (not hanging) when it takes over limit seconds."""
        import threading
        box = []
        th = threading.Thread(target=lambda: box.append(fn()), daemon=True)
        th.start()
        th.join(limit)
        self.assertFalse(th.is_alive(), "still waiting after %ds" % limit)
        self.assertEqual(len(box), 1, "it raised")
        return box[0]

    def test_stopped_daemon_costs_a_lookup_its_timeout(self):
        m1 = self.mount(name="stopped")
        a = Engine(self, m1.mnt, extra={"kvfs_timeout": 0.5})
        tokens = list(range(6 * BS + 1))
        a.prefill(request("a", tokens))
        a.worker.drain()
        self.assertEqual(a.sched.get_num_new_matched_tokens(request("b", tokens), 0),
                         (6 * BS, True))
        m1.signal(signal.SIGSTOP)

        def state():
            with open("/proc/%d/stat" % m1.proc.pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        try:
            kvfstest.wait_until(lambda: state() == "T", what="the daemon stopped")
            for rid in ("c", "d"):  # the stuck client, then opening the mount again
                self.assertEqual(self.bounded(lambda: a.sched.get_num_new_matched_tokens(
                    request(rid, tokens), 0), 3), (0, False))
            self.assertEqual(a.sched.stats()["errors"], 2)
        finally:
            m1.signal(signal.SIGCONT)
        self.assertEqual(a.sched.get_num_new_matched_tokens(request("e", tokens), 0),
                         (6 * BS, True))
        a.sched.shutdown()  # the mount's handles go before it is unmounted
        a.worker.shutdown()

    def test_fence_gives_up_after_its_timeout(self):
        """A preemption's fence waits for the saves reading its blocks at
        most kvfs_timeout; the saves it gave up on are removed once they
        land (they may hold what the step wrote over their blocks)."""
        a = Engine(self, self.m.mnt, extra={"kvfs_timeout": 0.5})
        r = request("p", list(range(3, 3 + 5 * BS + 1)))
        a.sched.get_num_new_matched_tokens(r, 0)
        old = a.blocks["p"] = [a.free.pop(0) for _ in range(6)]
        a.sched.update_state_after_alloc(r, V.kv_blocks(old), 0)
        gate, _ = self.hold_puts(a)
        out = V.scheduler_output(new=[V.NewRequestData.from_request(r, (list(old),))],
                                 num_scheduled={"p": 5 * BS + 1})
        a.forward(a.sched.build_connector_meta(out), [(r, b) for b in range(5)])
        x = request("x", list(range(7, 7 + 2 * BS)))
        out = V.scheduler_output(new=[V.NewRequestData.from_request(x, (old[:2],))],
                                 num_scheduled={"x": 2 * BS}, preempted={"p"})
        meta = a.sched.build_connector_meta(out)
        try:  # the step goes on, the put still held
            self.bounded(lambda: a.worker.handle_preemptions(meta), 3)
        finally:
            gate.set()
        a.worker.drain()
        st = a.worker.stats()
        self.assertEqual((st["failed_saves"], st["errors"]), (2, 1))  # blocks 0 and 1
        probe = request("q", list(r.all_token_ids))
        self.assertEqual(a.sched.get_num_new_matched_tokens(probe, 0), (0, False))
        names = [a.worker.key(bytes(h).hex()) for h in r.block_hashes[:5]]
        self.assertEqual([os.path.exists(os.path.join(self.m.mnt, n)) for n in names],
                         [False, False, True, True, True])

    def test_unexpected_exception_fails_the_load_only(self):
        a = Engine(self, self.m.mnt)
        r = request("src", list(range(20, 20 + 4 * BS + 1)))
        a.prefill(r)
        a.finish(r)
        b = Engine(self, self.m.mnt)
        client = b.worker._open()[0]

        def broken(*args, **kw):
            raise RuntimeError("not an OSError")
        client.get = broken
        r2 = request("dst", list(r.all_token_ids))
        self.assertEqual(b.sched.get_num_new_matched_tokens(r2, 0), (4 * BS, True))
        ids = b.blocks["dst"] = [b.free.pop(0) for _ in range(5)]
        # reported, recomputed by vLLM
        self.assertEqual(self.bounded(lambda: b.load(r2, 4 * BS)), set(ids[:4]))
        self.assertEqual(b.worker.stats()["failed_loads"], 4)
        # the loads' thread goes on: the next load (on a client opened again) lands
        r3 = request("dst2", list(r.all_token_ids))
        self.assertEqual(b.sched.get_num_new_matched_tokens(r3, 0), (4 * BS, True))
        b.blocks["dst2"] = [b.free.pop(0) for _ in range(5)]
        self.assertEqual(b.load(r3, 4 * BS), set())

    def test_queue_survives_a_failing_run(self):
        import threading
        from kvfs import vllm as kc
        ran = []

        def run(batch, seq):
            ran.append(batch)
            if batch == "bad":
                raise KeyError(batch)
        q = kc._Queue("test", run)
        q.put("bad")
        q.put("good")
        th = threading.Thread(target=q.wait)
        th.start()
        th.join(5)
        self.assertFalse(th.is_alive(), "waiters hang after a failed batch")
        self.assertEqual(ran, ["bad", "good"])
        self.assertFalse(q.wait(q.put("bad") + 1, timeout=0.1))  # never queued: times out
        q.stop()

    def test_not_kvfs_and_unmounted(self):
        from kvfs import vllm as kc
        plain = tempfile.mkdtemp(prefix="kvfs-it-plain-", dir="/tmp")
        self.addCleanup(shutil.rmtree, plain, True)
        w = kc.KvfsConnector(V.vllm_config(plain), kc.KVConnectorRole.WORKER,
                             V.kv_cache_config(NUM_BLOCKS, LAYER_NAMES, spec()))
        self.addCleanup(w.shutdown)
        with self.assertRaises(kc.ConfigError) as e:  # at engine start
            w.register_kv_caches(kv_caches()[1])
        self.assertIn("kvfs_path %s is not a kvfs mount" % plain, str(e.exception))
        # after the start, the mount goes away: nothing raises, every call a miss
        m1 = self.mount(name="unmounted")
        a = Engine(self, m1.mnt)
        tokens = list(range(4 * BS + 1))
        a.prefill(request("a", tokens))
        a.worker.drain()
        m1.cleanup()  # killed and lazily unmounted: the path is no kvfs any more
        self.assertEqual(a.sched.get_num_new_matched_tokens(request("b", tokens), 0), (0, False))
        h = request("c", tokens).block_hashes[1].hex()
        meta = a.kc.KvfsConnectorMetadata([a.kc.ReqMeta("x", [(0, h, 3)], True),
                                           a.kc.ReqMeta("x", [(0, h, 4)], False)])
        out = a.settle(a.forward(meta, []))
        self.assertEqual((out.finished_recving, out.invalid_block_ids), ({"x"}, {3}))
        st = a.worker.stats()
        self.assertEqual((st["failed_loads"], st["failed_saves"]), (1, 1))
        self.assertGreater(a.sched.stats()["errors"], 0)
        # and again, on a client that is gone for good
        self.assertEqual(a.sched.get_num_new_matched_tokens(request("d", tokens), 0), (0, False))

    def test_full_mount_fails_saves(self):
        m1 = self.mount(opts=["--mem-size=64M"] + kvfstest.dram_only_opts(), name="full")
        for size in (1 << 20, 64 << 10, 4 << 10):  # until not even a block fits
            for i in range(1000):
                try:
                    with open(m1.path("fill-%d-%d" % (size, i)), "wb") as f:
                        f.write(b"x" * size)
                except OSError as e:
                    self.assertEqual(e.errno, errno.ENOSPC)
                    break
        a = Engine(self, m1.mnt)
        r = request("a", list(range(3 * BS + 1)))
        a.prefill(r)
        a.finish(r)  # the request finishes: its blocks go back to vLLM
        st = a.worker.stats()
        self.assertEqual((st["saved_blocks"], st["failed_saves"]), (0, 3))
        self.assertEqual(a.sched.get_num_new_matched_tokens(request("b", r.all_token_ids), 0),
                         (0, False))
        a.sched.shutdown()
        a.worker.shutdown()

    # ---- hooks ----

    def test_hooks_delivery_reset_shutdown(self):
        def regions():
            return self.m.stats()["ioctl"]["regions"]
        before = regions()
        a = Engine(self, self.m.mnt)
        self.assertIs(a.sched.requires_kv_delivery, False)  # a cache: a lost save is a miss
        r = request("a", list(range(2 * BS + 1)))
        a.prefill(r)
        a.finish(r)
        self.assertIsNone(a.sched.reset_cache())  # not failed; kvfs keeps the blocks
        self.assertEqual(a.sched.get_num_new_matched_tokens(request("b", r.all_token_ids), 0),
                         (2 * BS, True))
        self.assertGreater(regions(), before)
        a.sched.shutdown()
        a.worker.shutdown()
        kvfstest.wait_until(lambda: regions() == before, what="regions released")

    def test_each_allocation_registered_once(self):
        import kvfs
        calls = []
        real = kvfs.Client.register

        def spy(client, obj, *args, **kw):
            calls.append(obj)
            return real(client, obj, *args, **kw)
        kvfs.Client.register = spy
        self.addCleanup(setattr, kvfs.Client, "register", real)
        Engine(self, self.m.mnt)  # every layer a view of one buffer
        self.assertEqual(len(calls), 1)
        del calls[:]
        a = Engine(self, self.m.mnt)
        del calls[:]
        a.worker.register_kv_caches({n: torch.zeros(NUM_BLOCKS, H, BS, 2 * D,
                                                    dtype=torch.bfloat16) for n in LAYER_NAMES})
        self.assertEqual(len(calls), LAYERS)  # an allocation per layer

if __name__ == "__main__":
    kvfstest.main(skip_if=lambda: None if torch else "python3-torch is not installed")
