# SPDX-License-Identifier: MIT
"""The vLLM KV connector (kvfs.vllm, client/python/kvfs/vllm.py) end to end on a
real mount, through the host path: HOST_PROC regions stand in for the GPU
tensors (the connector registers device tensors with register_device and
CPU ones with register; everything else is the same code), and minimal
stand-ins for the vLLM objects it touches (config, request, allocated
blocks, scheduler output) replace vLLM, which is not installed here.

- a first connector pair (scheduler + worker) sees no hit for a 40-block
  prompt, saves its 40 blocks of 8 layers (K and V apart, distinct bytes
  per layer, block and side) in wait_for_save;
- a second pair, with its own tensors and other block ids, is told 40 x
  block_size matched tokens for a 64-block prompt that starts with those 40
  blocks (and 40 x block_size - num_computed_tokens when some are computed
  locally); its load fills exactly those 40 blocks of every layer with the
  first pair's bytes, and no other block of any layer changes; it saves the
  24 new blocks;
- a third scheduler then matches all 64 blocks, the keys are
  <model>/<tp rank>/<hash>, and a tensor-parallel size of 2 matches nothing
  (rank 1 saved nothing);
- a request followed over many steps saves each block when a step fills
  it: three chunks of a chunked prefill, a preemption (its blocks replaced,
  the saved prefix loaded back), decode steps until generated tokens fill
  a block (speculative tokens not counted); another connector then loads
  prompt and generated blocks with the right bytes.
"""

import hashlib
import os
import sys
from types import SimpleNamespace as NS

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402

LAYERS, NUM_BLOCKS, BLOCK_SIZE, BLK = 8, 100, 16, 256  # BLK: bytes of one block of K (or V)
SENTINEL = 0xEE
KEY_DIR = ("org--tiny-llm", "tp1-bs16-auto", "0")  # <model>/<shape>/<tp rank>


class FakeTensor(bytearray):
    """A CPU 'tensor' of shape (2, NUM_BLOCKS, ...): K blocks then V blocks."""

    def __init__(self):
        super().__init__(bytes([SENTINEL]) * (2 * NUM_BLOCKS * BLK))
        self.shape = (2, NUM_BLOCKS, BLOCK_SIZE, BLK // BLOCK_SIZE)
        self.nbytes = len(self)
        self.is_cuda = False

    def block(self, side, b):
        off = side * NUM_BLOCKS * BLK + b * BLK
        return bytes(self[off:off + BLK])

    def fill(self, side, b, data):
        off = side * NUM_BLOCKS * BLK + b * BLK
        self[off:off + BLK] = data


def content(layer, side, logical):
    """What the 'model' computes for logical block `logical` of a layer's K (0) or V (1)."""
    seed = ("%d/%d/%d" % (layer, side, logical)).encode()
    return b"".join(hashlib.sha256(seed + bytes([i])).digest() for i in range(BLK // 32))


def config(mnt, tp_size=1, tp_rank=0):
    return NS(kv_transfer_config=NS(kv_connector_extra_config={"kvfs_path": mnt,
                                                               "tp_rank": tp_rank}),
              model_config=NS(model="org/tiny-llm"),
              cache_config=NS(block_size=BLOCK_SIZE),
              parallel_config=NS(tensor_parallel_size=tp_size))


class Blocks:
    def __init__(self, ids):
        self.ids = list(ids)

    def get_block_ids(self):
        return (self.ids,)


def request(rid, tokens, computed=0):
    return NS(request_id=rid, prompt_token_ids=tokens, num_computed_tokens=computed)


def step(sched, req, block_ids, external):
    """The scheduler's side of one prefill step of `req`; returns the metadata."""
    sched.update_state_after_alloc(req, Blocks(block_ids), external)
    computed = req.num_computed_tokens + external
    new = NS(req_id=req.request_id, prompt_token_ids=req.prompt_token_ids,
             block_ids=(list(block_ids),), num_computed_tokens=computed)
    out = NS(scheduled_new_reqs=[new],
             num_scheduled_tokens={req.request_id: len(req.prompt_token_ids) - computed})
    return sched.build_connector_meta(out)


def forward(worker, meta, tensors, compute):
    """The worker's side of a step: load, 'compute' blocks (logical -> physical), save."""
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(NS())
    for layer, name in enumerate(tensors):
        worker.wait_for_layer_load(name)
        for logical, phys in compute:
            for side in (0, 1):
                tensors[name].fill(side, phys, content(layer, side, logical))
        worker.save_kv_layer(name, tensors[name], None)
    worker.wait_for_save()
    worker.clear_connector_metadata()


class Connector(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=256M",)

    def pair(self, **kw):
        kvfstest.client()
        from kvfs import vllm as kc
        sched = kc.KvfsConnector(config(self.m.mnt, **kw), kc.KVConnectorRole.SCHEDULER)
        worker = kc.KvfsConnector(config(self.m.mnt, **kw), kc.KVConnectorRole.WORKER)
        self.addCleanup(sched.close)
        self.addCleanup(worker.close)
        tensors = {"model.layers.%d.self_attn" % i: FakeTensor() for i in range(LAYERS)}
        worker.register_kv_caches(tensors)
        return sched, worker, tensors

    def test_prefix_load_save_and_share(self):
        tokens_a = list(range(1000, 1000 + 40 * BLOCK_SIZE))
        tokens_b = tokens_a + list(range(7000, 7000 + 24 * BLOCK_SIZE))

        # First pair: nothing stored yet; its 40-block prompt is computed and saved.
        sched, worker, ta = self.pair()
        req = request("a", tokens_a)
        self.assertEqual(sched.get_num_new_matched_tokens(req, 0), (0, False))
        blocks_a = [99 - i for i in range(40)]
        meta = step(sched, req, blocks_a, 0)
        self.assertEqual([(r.load, len(r.block_ids)) for r in meta.requests], [(False, 40)])
        forward(worker, meta, ta, list(enumerate(blocks_a)))
        self.assertEqual(worker.stats["saved_blocks"], 40)
        self.assertEqual(worker.stats["failed_blocks"], 0)
        self.assertEqual(sched.request_finished(req, blocks_a), (False, None))
        keys = sorted(os.listdir(self.m.path(*KEY_DIR)))
        self.assertEqual(len(keys), 40)
        self.assertEqual(os.stat(self.m.path(*KEY_DIR, keys[0])).st_size, LAYERS * 2 * BLK)

        # Second pair: 40 of the 64 blocks hit; they load into other block ids.
        sched2, worker2, tb = self.pair()
        req = request("b", tokens_b)
        self.assertEqual(sched2.get_num_new_matched_tokens(req, 0), (40 * BLOCK_SIZE, False))
        self.assertEqual(sched2.get_num_new_matched_tokens(request("b2", tokens_b, 5 * 16),
                                                           5 * BLOCK_SIZE),
                         (35 * BLOCK_SIZE, False))
        blocks_b = [3 + 2 * i for i in range(40)] + [4 + 2 * i for i in range(24)]
        meta = step(sched2, req, blocks_b, 40 * BLOCK_SIZE)
        self.assertEqual(sorted((r.load, len(r.block_ids)) for r in meta.requests),
                         [(False, 24), (True, 40)])
        worker2.bind_connector_metadata(meta)
        worker2.start_load_kv(NS())
        worker2.clear_connector_metadata()
        self.assertEqual(worker2.stats["loaded_blocks"], 40)
        loaded = dict((phys, logical) for logical, phys in enumerate(blocks_b[:40]))
        for layer, name in enumerate(tb):
            for side in (0, 1):
                for b in range(NUM_BLOCKS):
                    got = tb[name].block(side, b)
                    if b in loaded:
                        self.assertEqual(got, content(layer, side, loaded[b]),
                                         (name, side, b))
                    else:
                        self.assertEqual(got, bytes([SENTINEL]) * BLK, (name, side, b))
        # ... and its step computes and saves the 24 new blocks.
        forward(worker2, meta, tb, [(40 + i, blocks_b[40 + i]) for i in range(24)])
        self.assertEqual(worker2.stats["saved_blocks"], 24)
        self.assertEqual(len(os.listdir(self.m.path(*KEY_DIR))), 64)

        # A third scheduler sees all 64 blocks (the last prompt token is always computed).
        sched3, _, _ = self.pair()
        longer = request("c", tokens_b + [1, 2, 3, 4, 5])
        self.assertEqual(sched3.get_num_new_matched_tokens(longer, 0),
                         (64 * BLOCK_SIZE, False))
        self.assertEqual(sched3.get_num_new_matched_tokens(request("c2", tokens_b), 0),
                         (63 * BLOCK_SIZE, False))
        # Tensor parallelism: rank 1 saved nothing, so no block is complete for TP=2.
        sched4, _, _ = self.pair(tp_size=2)
        self.assertEqual(sched4.get_num_new_matched_tokens(longer, 0), (0, False))

    def test_chunked_prefill_preemption_and_decode(self):
        tokens = list(range(3000, 3000 + 48 * BLOCK_SIZE + 5))
        sched, worker, t = self.pair()
        req = request("r", tokens)
        req.all_token_ids = list(tokens)
        self.assertEqual(sched.get_num_new_matched_tokens(req, 0), (0, False))
        sched.update_state_after_alloc(req, Blocks(range(16)), 0)
        saved = {}  # logical block -> physical block it was saved from

        def run(out, compute):
            meta = sched.build_connector_meta(out)
            for rm in meta.requests:
                if not rm.load:
                    first = len(saved)
                    for i, phys in enumerate(rm.block_ids):
                        saved[first + i] = phys
            forward(worker, meta, t, compute)
            return meta

        def cached(ids, resumed, computed, scheduled, spec=()):
            return NS(scheduled_new_reqs=[],
                      scheduled_cached_reqs=NS(req_ids=["r"], resumed_req_ids=resumed,
                                               new_block_ids=[(list(ids),)],
                                               num_computed_tokens=[computed]),
                      num_scheduled_tokens={"r": scheduled},
                      scheduled_spec_decode_tokens={"r": list(spec)} if spec else {})

        # chunk 1: 16 blocks
        new = NS(req_id="r", prompt_token_ids=tokens, block_ids=(list(range(16)),),
                 num_computed_tokens=0)
        run(NS(scheduled_new_reqs=[new], scheduled_cached_reqs=NS(
            req_ids=[], resumed_req_ids=set(), new_block_ids=[], num_computed_tokens=[]),
            num_scheduled_tokens={"r": 16 * BLOCK_SIZE}), [(b, b) for b in range(16)])
        self.assertEqual(sorted(saved), list(range(16)))
        # preempted, then resumed: 16 blocks load back into new ids, chunk 2 computes 16 more
        ids = [50 + i for i in range(32)]
        self.assertEqual(sched.get_num_new_matched_tokens(req, 0), (16 * BLOCK_SIZE, False))
        sched.update_state_after_alloc(req, Blocks(ids), 16 * BLOCK_SIZE)
        meta = run(cached(ids, {"r"}, 16 * BLOCK_SIZE, 16 * BLOCK_SIZE),
                   [(16 + i, ids[16 + i]) for i in range(16)])
        self.assertEqual([(r.load, r.block_ids) for r in meta.requests],
                         [(True, ids[:16]), (False, ids[16:32])])
        # chunk 3: the prompt's last 16 full blocks and its partial one
        more = [82 + i for i in range(17)]
        ids += more
        run(cached(more, set(), 32 * BLOCK_SIZE, 16 * BLOCK_SIZE + 5),
            [(32 + i, ids[32 + i]) for i in range(16)])
        self.assertEqual(len(saved), 48)
        # decode: one token a step; block 48 fills at 784 computed tokens
        computed = len(tokens)
        for k in range(11):
            req.all_token_ids.append(9000 + k)  # sampled in the step before
            spec = [1, 2] if k == 9 else ()  # drafts not yet accepted: not computed KV
            meta = run(cached([], set(), computed, 1 + len(spec), spec),
                       [(48, ids[48])] if k == 10 else [])
            computed += 1
            self.assertEqual(len(saved), 48 if k < 10 else 49, k)
        self.assertEqual(saved[48], ids[48])
        self.assertEqual(worker.stats["saved_blocks"], 49)
        self.assertEqual(worker.stats["failed_blocks"], 0)
        sched.request_finished(req, ids)

        # Another pair matches prompt and generated blocks and loads their bytes.
        sched2, worker2, t2 = self.pair()
        seq = request("s", req.all_token_ids + [7])
        self.assertEqual(sched2.get_num_new_matched_tokens(seq, 0), (49 * BLOCK_SIZE, False))
        dst = [i + 1 for i in range(49)]
        sched2.update_state_after_alloc(seq, Blocks(dst), 49 * BLOCK_SIZE)
        meta = sched2.build_connector_meta(NS(scheduled_new_reqs=[], num_scheduled_tokens={}))
        worker2.bind_connector_metadata(meta)
        worker2.start_load_kv(NS())
        worker2.clear_connector_metadata()
        self.assertEqual(worker2.stats["loaded_blocks"], 49)
        for layer, name in enumerate(t2):
            for logical, phys in enumerate(dst):
                for side in (0, 1):
                    self.assertEqual(t2[name].block(side, phys), content(layer, side, logical),
                                     (name, logical, side))


    def test_scheduler_output_shapes(self):
        """Running requests as the versions of vLLM pass them: parallel lists
        with resumed_req_ids (None: no new block) or resumed_from_preemption,
        or one object per request."""
        kvfstest.client()
        from kvfs import vllm as kc
        want = [("a", [1], False, 3), ("b", [], True, 4)]
        cols = NS(req_ids=["a", "b"], resumed_req_ids={"b"}, new_block_ids=[([1],), None],
                  num_computed_tokens=[3, 4])
        older = NS(req_ids=["a", "b"], resumed_from_preemption=[False, True],
                   new_block_ids=[([1],), ([],)], num_computed_tokens=[3, 4])
        per_req = [NS(req_id="a", resumed_from_preemption=False, new_block_ids=([1],),
                      num_computed_tokens=3),
                   NS(req_id="b", resumed_from_preemption=True, new_block_ids=[],
                      num_computed_tokens=4)]
        for c in (cols, older, per_req):
            got = [(r, kc._group0(ids), res, n) for r, ids, res, n in
                   kc._cached_reqs(NS(scheduled_cached_reqs=c))]
            self.assertEqual(got, want, c)
        self.assertEqual(list(kc._cached_reqs(NS())), [])

    def test_local_hit_load_errors_and_layouts(self):
        """vLLM asks with its local prefix-cache hit, then allocates before it
        sets request.num_computed_tokens: loads start after the local hit. A
        block that fails to load is reported for recomputation. A KV layout
        other than (2, num_blocks, ...) is refused."""
        kvfstest.client()
        from kvfs import vllm as kc
        tokens = list(range(500, 500 + 40 * BLOCK_SIZE))
        sched, worker, t = self.pair()
        req = request("s", tokens)
        sched.get_num_new_matched_tokens(req, 0)
        ids = list(range(40))
        forward(worker, step(sched, req, ids, 0), t, list(enumerate(ids)))
        self.assertEqual(worker.stats["saved_blocks"], 40)

        sched2, worker2, _ = self.pair()
        req = request("l", tokens + [1])  # as vLLM passes it: num_computed_tokens still 0
        self.assertEqual(sched2.get_num_new_matched_tokens(req, 5 * BLOCK_SIZE),
                         (35 * BLOCK_SIZE, False))
        ids2 = [60 + i for i in range(41)]
        sched2.update_state_after_alloc(req, Blocks(ids2), 35 * BLOCK_SIZE)
        meta = sched2.build_connector_meta(NS(scheduled_new_reqs=[], num_scheduled_tokens={}))
        hashes = kc.block_hashes(tokens, BLOCK_SIZE)
        self.assertEqual([(r.load, r.block_ids, r.hashes) for r in meta.requests],
                         [(True, ids2[5:40], hashes[5:40])])
        os.unlink(self.m.path(*KEY_DIR, hashes[10]))  # gone since the lookup
        worker2.bind_connector_metadata(meta)
        worker2.start_load_kv(NS())
        worker2.clear_connector_metadata()
        self.assertEqual(worker2.stats["loaded_blocks"], 34)
        self.assertEqual(worker2.get_block_ids_with_load_errors(), {ids2[10]})
        self.assertEqual(worker2.get_block_ids_with_load_errors(), set())

        other = kc.KvfsConnector(config(self.m.mnt), kc.KVConnectorRole.WORKER)
        self.addCleanup(other.close)
        flashinfer = FakeTensor()
        flashinfer.shape = (NUM_BLOCKS, 2, BLOCK_SIZE, BLK // BLOCK_SIZE)
        with self.assertRaises(ValueError):
            other.register_kv_caches({"model.layers.0.self_attn": flashinfer})


if __name__ == "__main__":
    kvfstest.main()
