# SPDX-License-Identifier: MIT
"""The vLLM connector (kvfs.vllm) with vLLM's hybrid KV-cache manager
(SupportsHMA) on a real mount: a model with a full-attention group and a
sliding-window group (layers 0 and 2, layers 1 and 3, each pair backed by
one buffer that both groups' views alias, as vLLM lays them out), driven
as vLLM's scheduler drives it, with its allocation rules: one pool of
block ids for every group, block 0 its null block, a sliding-window
group's blocks out of the window freed at each allocation (null in the
request's table) and handed to the next allocation.

- a prompt prefilled in chunks saves every block of both groups while it
  is in the window; another engine matches all of it and loads the
  full-attention group's blocks and only the window of the sliding-window
  group (the blocks vLLM allocates), byte-exact, nothing else touched;
- a sliding-window block freed and reallocated while its save is held:
  the step that reuses it waits for the save first;
- lookups need only the window: a sliding-window block out of it may be
  gone; one in it, or a full-attention block, shortens the hit to the
  longest prefix whose windows are whole;
- a load that fails with several groups is reported by request
  (failed_recving), never by block id (vLLM refuses block ids then), and
  the request's blocks are saved again;
- a model with a group of state (Mamba) runs with the connector idle; a
  group vLLM marks not transferable is left out.
"""

import hashlib
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402
import vllm_standins as V  # noqa: E402

try:
    import torch
except ImportError:  # scripts/deps.sh installs python3-torch
    torch = None

NUM_BLOCKS, BS, H, D = 64, 16, 2, 8
WINDOW = 3 * BS  # tokens: vLLM keeps cdiv(WINDOW - 1, BS) = 3 blocks before a hit's end
NAMES = ["model.layers.%d.self_attn.attn" % i for i in range(4)]
GROUPS = ([NAMES[0], NAMES[2]], [NAMES[1], NAMES[3]])  # full attention, sliding window


def specs():
    full = V.FullAttentionSpec(block_size=BS, num_kv_heads=H, head_size=D, dtype=torch.bfloat16)
    window = V.SlidingWindowSpec(block_size=BS, num_kv_heads=H, head_size=D,
                                 dtype=torch.bfloat16, sliding_window=WINDOW)
    return [(GROUPS[0], full), (GROUPS[1], window)]


def content(h, layer):
    g = torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(h).digest()[:7], "big")
                                      + layer)
    return torch.randint(0, 200, (H, BS, 2 * D), generator=g).to(torch.bfloat16)


def request(rid, tokens):
    return V.Request(rid, tokens, block_hasher=V.get_request_block_hasher(BS))


class HybridEngine:
    """A hybrid model's connector pair, KV cache and vLLM's block allocation."""

    def __init__(self, test, mnt):
        from kvfs import vllm as kc
        self.kc = kc
        conf = V.vllm_config(mnt, block_size=BS, hybrid=True)
        kcc = V.kv_cache_config(NUM_BLOCKS, None, None, groups=specs())
        self.sched = kc.KvfsConnector(conf, kc.KVConnectorRole.SCHEDULER, kcc)
        self.worker = kc.KvfsConnector(conf, kc.KVConnectorRole.WORKER, kcc)
        test.addCleanup(self.sched.shutdown)
        test.addCleanup(self.worker.shutdown)
        # two buffers; layer i of each group is a view of buffer i (they alias)
        self.raw = torch.zeros(2, NUM_BLOCKS, BS, H, 2 * D, dtype=torch.bfloat16)
        self.caches = {n: self.raw[i // 2].permute(0, 2, 1, 3) for i, n in enumerate(NAMES)}
        self.worker.register_kv_caches(self.caches)
        self.free = list(range(1, NUM_BLOCKS))  # block 0 is the null block
        self.blocks = {}  # req id -> [full-attention ids, sliding-window ids]
        self.freed = []  # sliding-window blocks freed, in order

    def alloc(self, rid, computed, upto):
        """allocate_slots: blocks for tokens [0, upto) of both groups, the
        sliding-window group's blocks before the window of `computed`
        tokens freed (null), as remove_skipped_blocks does; returns the
        ids new to the request, per group."""
        mine = self.blocks.setdefault(rid, [[], []])
        skipped = max(0, computed - WINDOW + 1) // BS
        for j in range(min(skipped, len(mine[1]))):
            if mine[1][j]:
                self.free.insert(0, mine[1][j])  # the next allocation takes it first
                self.freed.append(mine[1][j])
                mine[1][j] = 0
        new = [[], []]
        for g in range(2):
            while len(mine[g]) < -(-upto // BS):
                b = 0 if g == 1 and len(mine[g]) < skipped else self.free.pop(0)
                mine[g].append(b)
                new[g].append(b)
        return new

    def step(self, meta, compute=()):
        """The worker's side of a step (vLLM's order), compute: (req, block)
        pairs written to both groups' layers; returns the KVConnectorOutput."""
        w = self.worker
        w.handle_preemptions(meta)
        w.bind_connector_metadata(meta)
        for req, j in compute:
            for g in range(2):
                b = self.blocks[req.request_id][g][j]
                assert b, (req.request_id, g, j)
                for name in GROUPS[g]:
                    self.caches[name][b] = content(req.block_hashes[j], NAMES.index(name))
        w.start_load_kv(None)
        w.wait_for_save()
        res = w.get_transfer_results(set())
        out = V.KVConnectorOutput(finished_sending=res.finished_sending or None,
                                  finished_recving=res.finished_recving or None,
                                  invalid_block_ids=w.get_block_ids_with_load_errors(),
                                  failed_recving=res.failed_recving)
        w.clear_connector_metadata()
        self.sched.update_connector_output(out)
        return out

    def idle(self):
        return self.step(self.sched.build_connector_meta(V.scheduler_output()))

    def prefill(self, req, chunk, hold=None):
        """Prefills req in chunks; a hit is loaded first (async). hold(meta)
        is called with the second step's metadata before it runs.
        Returns (matched tokens, the load's KVConnectorOutput or None)."""
        rid = req.request_id
        matched, load_async = self.sched.get_num_new_matched_tokens(req, 0)
        assert load_async is (matched > 0)
        loaded = None
        if matched:  # blocks for the hit; the request waits for its load
            self.alloc(rid, matched, matched)
            self.sched.update_state_after_alloc(req, V.kv_blocks(*self.blocks[rid]), matched)
            self.step(self.sched.build_connector_meta(V.scheduler_output()))
            self.worker.drain()
            loaded = self.idle()
            assert loaded.finished_recving == {rid}, loaded
        req.num_computed_tokens = matched
        first = True
        while req.num_computed_tokens < req.num_prompt_tokens:
            c = req.num_computed_tokens
            n = min(chunk, req.num_prompt_tokens - c)
            new = self.alloc(rid, c, c + n)
            if first:
                if not matched:
                    self.sched.update_state_after_alloc(req, V.kv_blocks(*self.blocks[rid]), 0)
                out = V.scheduler_output(new=[V.NewRequestData.from_request(
                    req, tuple(list(g) for g in self.blocks[rid]))], num_scheduled={rid: n})
            else:
                out = V.scheduler_output(cached=V.CachedRequestData(
                    [rid], set(), [[]], {}, [tuple(new)], [c], [0]), num_scheduled={rid: n})
            meta = self.sched.build_connector_meta(out)
            if hold and not first:
                hold(meta)
                hold = None
            self.step(meta, [(req, j) for j in range(c // BS, min((c + n) // BS,
                                                                  len(req.block_hashes)))
                             if j >= matched // BS])
            req.num_computed_tokens += n
            first = False
        return matched, loaded

    def layer(self, name, b):
        return self.caches[name][b]


class HybridTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=256M",)

    def setUp(self):
        os.environ.setdefault("PYTHONHASHSEED", "0")
        kvfstest.client()
        super().setUp()

    def saved_prompt(self):
        """Engine A prefills 12 blocks (+1 token) in chunks of 4 blocks and finishes."""
        a = HybridEngine(self, self.m.mnt)
        r = request("a", list(range(100, 100 + 12 * BS + 1)))
        self.assertEqual(a.prefill(r, 4 * BS), (0, None))
        self.assertEqual(a.sched.request_finished_all_groups(r, tuple(a.blocks["a"])),
                         (True, None))
        a.worker.drain()
        self.assertEqual(a.worker.stats()["saved_blocks"], 24)  # 12 of each group
        return a, r

    def test_sliding_window_saves_and_loads(self):
        from kvfs import vllm as kc
        self.assertTrue(issubclass(kc.KvfsConnector, kc.SupportsHMA))
        _, r = self.saved_prompt()
        b = HybridEngine(self, self.m.mnt)
        sentinel = torch.full_like(b.raw, 7)
        b.raw.copy_(sentinel)
        r2 = request("b", list(r.all_token_ids))
        matched, loaded = b.prefill(r2, 4 * BS)
        self.assertEqual(matched, 12 * BS)
        self.assertEqual((loaded.invalid_block_ids, loaded.failed_recving), (set(), set()))
        full, window = b.blocks["b"]
        self.assertEqual(window[:9], [0] * 9)  # out of the window of 12 blocks: null
        self.assertEqual(b.worker.stats()["loaded_blocks"], 12 + 3)
        want = {}  # block id -> (hash, group) it must hold
        for j in range(12):
            want[full[j]] = (r.block_hashes[j], 0)
        for j in range(9, 12):
            want[window[j]] = (r.block_hashes[j], 1)
        for i, name in enumerate(NAMES):
            for blk in range(NUM_BLOCKS):
                got = b.layer(name, blk)
                h_g = want.get(blk)
                if blk == full[12] or blk == window[12]:
                    continue  # the last block: computed by the prefill step itself
                if h_g and NAMES[i] in GROUPS[h_g[1]]:
                    self.assertTrue(torch.equal(got, content(h_g[0], i)), (name, blk))
                elif not h_g:
                    self.assertTrue(torch.equal(got, sentinel[i // 2, blk].permute(1, 0, 2)),
                                    (name, blk))

    def test_window_block_reused_waits_for_its_save(self):
        a = HybridEngine(self, self.m.mnt)
        gate, puts = threading.Event(), []
        client = a.worker._open()[0]
        real = client.put

        def held(*args, **kw):
            puts.append(1)
            gate.wait(60)
            return real(*args, **kw)
        client.put = held
        self.addCleanup(gate.set)
        waited = []

        def hold(meta):
            # the step frees sliding-window block 0 of the first chunk and
            # hands it out again while the first chunk's save is held
            th = threading.Thread(target=a.worker.handle_preemptions, args=(meta,))
            th.start()
            th.join(0.5)
            waited.append(th.is_alive())
            gate.set()
            th.join()
            waited.append(a.worker.stats()["saved_blocks"])
        r = request("w", list(range(5, 5 + 8 * BS + 1)))

        def check(meta):  # the second chunk's step: window block 0 went back, came out again
            self.assertEqual(len(a.freed), 1)
            self.assertIn(a.freed[0], meta.allocated)
            self.assertIn(a.freed[0], a.blocks["w"][0] + a.blocks["w"][1])
            hold(meta)
        a.prefill(r, 4 * BS, hold=check)
        self.assertEqual(a.blocks["w"][1][0], 0)  # null now
        self.assertEqual(waited, [True, 8])  # waited, and the held save (4 + 4) landed first

    def test_lookup_needs_only_the_window(self):
        a, r = self.saved_prompt()
        client = a.sched._open()[0]
        full, window = a.sched.groups

        def gone(g, j):
            self.assertEqual(client.remove([a.sched.key(bytes(r.block_hashes[j]).hex(), g)])
                             .ok, 1)

        def hit():
            res = a.sched.get_num_new_matched_tokens(request("probe", list(r.all_token_ids)), 0)
            a.sched.request_finished(request("probe", []), [])
            return res[0] // BS
        gone(window, 2)  # out of the window of a 12-block hit
        self.assertEqual(hit(), 12)
        gone(window, 10)  # in it: the longest hit whose window is whole ends at 10
        self.assertEqual(hit(), 10)
        gone(full, 5)  # 5 blocks, but its window (2, 3, 4) lacks 2: 2 blocks
        self.assertEqual(hit(), 2)

    def test_failed_load_by_request(self):
        a, r = self.saved_prompt()
        b = HybridEngine(self, self.m.mnt)
        r2 = request("f", list(r.all_token_ids))
        matched, _ = b.sched.get_num_new_matched_tokens(r2, 0)
        self.assertEqual(matched, 12 * BS)
        b.alloc("f", matched, r2.num_prompt_tokens)
        b.sched.update_state_after_alloc(r2, V.kv_blocks(*b.blocks["f"]), matched)
        client = a.sched._open()[0]
        full = a.sched.groups[0]
        self.assertEqual(client.remove([a.sched.key(bytes(r.block_hashes[3]).hex(), full)]).ok, 1)
        b.step(b.sched.build_connector_meta(V.scheduler_output()))
        b.worker.drain()
        out = b.idle()
        self.assertEqual((out.finished_recving, out.failed_recving, out.invalid_block_ids),
                         ({"f"}, {"f"}, set()))
        self.assertEqual(b.worker.stats()["failed_loads"], 1)
        # vLLM recomputes it from the start: its blocks are saved again
        r2.num_computed_tokens = 0
        meta = b.sched.build_connector_meta(V.scheduler_output(
            new=[V.NewRequestData.from_request(r2, tuple(b.blocks["f"]))],
            num_scheduled={"f": 4 * BS}))
        self.assertEqual(sorted(j for rm in meta.requests for _, _, j in rm.items
                                if not rm.load), sorted(b.blocks["f"][0][:4]))

    def test_mamba_idle_and_untransferable_groups(self):
        from kvfs import vllm as kc
        conf = V.vllm_config(self.m.mnt, block_size=BS, hybrid=True)
        full = specs()[0]
        mamba = V.MambaSpec(block_size=BS, shapes=((4, 8),), dtypes=(torch.float32,))
        kcc = V.kv_cache_config(NUM_BLOCKS, None, None,
                                groups=[full, ([NAMES[1]], mamba)])
        with self.assertLogs("kvfs.vllm", "WARNING") as logs:
            c = kc.KvfsConnector(conf, kc.KVConnectorRole.SCHEDULER, kcc)
        self.addCleanup(c.shutdown)
        self.assertIn("MambaSpec", "".join(logs.output))
        _, r = self.saved_prompt()
        probe = request("m", list(r.all_token_ids))
        self.assertEqual(c.get_num_new_matched_tokens(probe, 0), (0, False))
        c.update_state_after_alloc(probe, V.kv_blocks(list(range(1, 14)), [0] * 13), 0)
        meta = c.build_connector_meta(V.scheduler_output(
            new=[V.NewRequestData.from_request(probe, (list(range(1, 14)), [0] * 13))],
            num_scheduled={"m": 13 * BS}))
        self.assertEqual(meta.requests, [])
        self.assertEqual(c.request_finished_all_groups(probe, ([], [])), (False, None))
        kcc.kv_cache_groups[1] = V.KVCacheGroupSpec([NAMES[1]], specs()[1][1],
                                                    enable_kv_transfer=False)
        c2 = kc.KvfsConnector(conf, kc.KVConnectorRole.SCHEDULER, kcc)
        self.addCleanup(c2.shutdown)
        self.assertEqual([g.idx for g in c2.groups], [0])
        self.assertEqual(c2.get_num_new_matched_tokens(probe, 0), (12 * BS, True))


if __name__ == "__main__":
    kvfstest.main(skip_if=lambda: None if torch else "python3-torch is not installed")
