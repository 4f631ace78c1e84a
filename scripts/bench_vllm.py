# SPDX-License-Identifier: MIT
"""The vLLM connector's benchmarks (scripts/bench.sh vllm), on a mounted
kvfs: the connector's real code (kvfs.vllm), torch CPU tensors in vLLM's
layout and the stand-ins of tests/integration/vllm_standins.py, each figure
next to a baseline measured in the same run:

1. decode steps that each fill (and save) a block of 8 requests, next to the
   same steps with saving turned off: the saves run behind the step
   (DECODE_ROUNDS rounds in turn, medians);
2. loading a 32-layer, 1,000-block prefix through the connector (from
   start_load_kv to get_finished reporting it), next to kvfs-bench
   --scenario=get moving the same bytes (the same block count, layers and
   bytes per layer) into shared memory, and into its own pages
   (--region=proc) as the connector's CPU tensors are: LOAD_ROUNDS rounds,
   each a load through the connector and then each kvfs-bench get, and the
   medians compared (one load of 500 MiB is ~0.15 s: a single sample next
   to another moves by a third on a shared machine);
3. the lookup of a 4,000-block prompt (p50, p99);
4. the three ways a hit can load, in turn, OVERLAP_ROUNDS times (medians):
   8 requests decode (a forward of 32 layers) while a 9th arrives with a
   500-block hit; the connector loads it in the background (the engine
   keeps stepping, the request runs once get_finished reports it: "async",
   the default), the same with the step that starts the load waiting for
   it ("sync", as a synchronous load stalls a step), and layer by layer
   (kvfs_load "layer": the request runs in the step it arrives, its load
   started before that forward and each layer waiting for its own
   blocks): the decode steps' time over the loop, the longest step (the
   stall), and the 9th request's time from arrival to the end of its first
   step (its first token), each as a ratio to "async".

Usage: bench_vllm.py MNT KVFS_BENCH (PYTHONPATH: client/python and
tests/integration; PYTHONHASHSEED set).
"""

import json
import os
import statistics
import subprocess
import sys
import time

import torch

import vllm_standins as V
from kvfs import vllm as kc

LAYERS, BS, H, D = 32, 16, 4, 64  # a block of every layer: 32 x 16 x 4 x 128 x 2 = 512 KiB
LOAD_ROUNDS = 7  # loads through the connector, each next to a kvfs-bench get: medians
OVERLAP_ROUNDS = 3  # the three ways of loading, in turn: medians
DECODE_ROUNDS = 3  # decode steps saving and not, in turn: medians
NAMES = ["model.layers.%d.self_attn.attn" % i for i in range(LAYERS)]


def engine(mnt, num_blocks, tag, load=None):
    conf = V.vllm_config(mnt, model="bench/" + tag, block_size=BS, load=load)
    spec = V.FullAttentionSpec(block_size=BS, num_kv_heads=H, head_size=D, dtype=torch.bfloat16)
    kcc = V.kv_cache_config(num_blocks, NAMES, spec)
    sched = kc.KvfsConnector(conf, kc.KVConnectorRole.SCHEDULER, kcc)
    worker = kc.KvfsConnector(conf, kc.KVConnectorRole.WORKER, kcc)
    raw = torch.ones(LAYERS, num_blocks, BS, H, 2 * D, dtype=torch.bfloat16)
    worker.register_kv_caches({n: raw[i].permute(0, 2, 1, 3) for i, n in enumerate(NAMES)})
    return sched, worker, raw


def step(sched, worker, out, compute, sync_load=False):
    """One engine step in vLLM's order; returns the requests whose loads
    were reported done. compute(worker): the forward. sync_load: the step
    waits for its loads."""
    meta = sched.build_connector_meta(out)
    worker.handle_preemptions(meta)
    worker.bind_connector_metadata(meta)
    if out.has_sync_kv_loads:  # loads the forward needs: started before it
        worker.start_load_kv(None)
    compute(worker)
    if not out.has_sync_kv_loads:
        worker.start_load_kv(None)
    if sync_load:
        worker._loads_q.wait()
    worker.wait_for_save()
    res = worker.get_transfer_results(set())
    worker.clear_connector_metadata()
    sched.update_connector_output(V.KVConnectorOutput(finished_sending=res.finished_sending,
                                                      finished_recving=res.finished_recving,
                                                      invalid_block_ids=worker.
                                                      get_block_ids_with_load_errors()))
    return res.finished_recving


def layered(work):
    """A forward of LAYERS layers, each waiting for its layer's load (a
    no-op but layer by layer) before its share of the work."""
    def forward(worker):
        for name in NAMES:
            worker.wait_for_layer_load(name)
            work @ work
    return forward


def decode(mnt, save, steps=48, nreq=8):
    """Seconds of `steps` decode steps of nreq requests, each step filling
    one block per request (a step of BS tokens each: a chunk of decode)."""
    sched, worker, raw = engine(mnt, nreq * (steps + 2) + 1, "decode-%d" % save)
    if not save:
        worker.wait_for_save = lambda: None
    hasher = V.get_request_block_hasher(BS)
    reqs = [V.Request("r%d" % i, [i * 100000 + t for t in range(BS + 1)], block_hasher=hasher)
            for i in range(nreq)]
    blocks = {r.request_id: [i * (steps + 2) + 1, i * (steps + 2) + 2]  # 0: the null block
              for i, r in enumerate(reqs)}
    for r in reqs:
        sched.get_num_new_matched_tokens(r, 0)
        sched.update_state_after_alloc(r, V.kv_blocks(blocks[r.request_id]), 0)
    step(sched, worker, V.scheduler_output(
        new=[V.NewRequestData.from_request(r, (blocks[r.request_id],)) for r in reqs],
        num_scheduled={r.request_id: r.num_prompt_tokens for r in reqs}), lambda w: None)
    for r in reqs:
        r.num_computed_tokens = r.num_prompt_tokens
    work = torch.ones(256, 256)
    t0 = time.monotonic()
    for s in range(steps):
        new = []
        for r in reqs:
            r.append_output_token_ids(list(range(7, 7 + BS)))
            nb = blocks[r.request_id][-1] + 1
            blocks[r.request_id].append(nb)
            new.append((r, nb))
        out = V.scheduler_output(cached=V.CachedRequestData(
            [r.request_id for r in reqs], set(), [[] for _ in reqs], {},
            [([nb],) for _, nb in new], [r.num_computed_tokens for r in reqs], [s] * nreq),
            num_scheduled={r.request_id: BS for r in reqs})
        step(sched, worker, out, lambda w: [work @ work for _ in range(20)])  # the "forward"
        for r in reqs:
            r.num_computed_tokens += BS
    elapsed = time.monotonic() - t0
    worker.shutdown()  # the saves land
    sched.shutdown()
    return elapsed, worker.stats()["saved_blocks"]


def load(mnt, rounds, nblocks=1000):
    """Seconds of each load of an nblocks-block prefix through the connector,
    one engine loading it anew each round; rounds(i) runs between loads
    (the baselines, interleaved with the loads so that both see the same
    machine)."""
    sched, worker, raw = engine(mnt, nblocks + 2, "load")
    r = V.Request("p", list(range(nblocks * BS + 1)), block_hasher=V.get_request_block_hasher(BS))
    ids = list(range(1, nblocks + 2))  # block 0 is vLLM's null block
    sched.get_num_new_matched_tokens(r, 0)
    sched.update_state_after_alloc(r, V.kv_blocks(ids), 0)
    step(sched, worker, V.scheduler_output(new=[V.NewRequestData.from_request(r, (ids,))],
                                           num_scheduled={"p": nblocks * BS + 1}), lambda w: None)
    worker.shutdown()
    sched.shutdown()
    sched, worker, raw = engine(mnt, nblocks + 2, "load")
    times, i = [], 0
    while True:
        r2 = V.Request("q%d" % i, list(r.all_token_ids),
                       block_hasher=V.get_request_block_hasher(BS))
        matched, _ = sched.get_num_new_matched_tokens(r2, 0)
        assert matched == nblocks * BS, matched
        sched.update_state_after_alloc(r2, V.kv_blocks(ids), matched)
        meta = sched.build_connector_meta(V.scheduler_output())
        worker.bind_connector_metadata(meta)
        t0 = time.monotonic()
        worker.start_load_kv(None)
        while not worker.get_finished(set())[1]:  # as vLLM asks, each step
            time.sleep(0.0005)
        times.append(time.monotonic() - t0)
        worker.clear_connector_metadata()
        sched.update_connector_output(V.KVConnectorOutput(finished_recving={r2.request_id}))
        sched.request_finished(r2, ids)
        assert not worker.get_block_ids_with_load_errors()
        assert worker.stats()["loaded_blocks"] == nblocks * (i + 1)
        if not rounds(i):
            break
        i += 1
    worker.shutdown()
    sched.shutdown()
    return times


def lookup(mnt, nblocks=4000):
    """p50 and p99 seconds of the lookup of an nblocks-block prompt that kvfs
    holds whole (its keys put with one-page values: a lookup reads names)."""
    sched, worker, raw = engine(mnt, 8, "lookup")
    r = V.Request("l", list(range(nblocks * BS + 1)), block_hasher=V.get_request_block_hasher(BS))
    client = sched._open()[0]
    names = [sched.key(bytes(h).hex()) for h in r.block_hashes]
    assert client.put_buffers([(n, b"x" * 4096) for n in names],
                              flags=kc.kvfs.PUT_MKDIR).ok == nblocks
    times = []
    for _ in range(50):
        t = time.monotonic()
        assert sched.get_num_new_matched_tokens(r, 0)[0] == nblocks * BS
        times.append(time.monotonic() - t)
    worker.shutdown()
    sched.shutdown()
    times.sort()
    return times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.99))]


def overlap(mnt, mode, nreq=8, hit=500, steps=40, arrive=5):
    """(seconds of `steps` decode steps of nreq requests, the longest step,
    seconds from the arrival of a request with a `hit`-block prefix in kvfs
    to the end of its first step), its load asynchronous ("async"),
    waited for by the step that starts it ("sync"), or layer by layer
    within its first step ("layer")."""
    nb = hit + 2 + nreq * 2
    sched, worker, raw = engine(mnt, nb, "overlap", load="layer" if mode == "layer" else None)
    hasher = V.get_request_block_hasher(BS)
    tokens = list(range(1, hit * BS + 2))
    if not sched.get_num_new_matched_tokens(V.Request("seed", tokens, block_hasher=hasher), 0)[0]:
        seed = V.Request("seed", tokens, block_hasher=hasher)  # put the prefix in kvfs once
        ids = list(range(1, hit + 2))
        sched.update_state_after_alloc(seed, V.kv_blocks(ids), 0)
        step(sched, worker, V.scheduler_output(new=[V.NewRequestData.from_request(
            seed, (ids,))], num_scheduled={"seed": len(tokens)}), lambda w: None)
        worker.drain()
        sched.request_finished(seed, ids)
    reqs = [V.Request("d%d" % i, [i * 7919 + t for t in range(3)], block_hasher=hasher)
            for i in range(nreq)]
    for i, r in enumerate(reqs):
        sched.get_num_new_matched_tokens(r, 0)
        sched.update_state_after_alloc(r, V.kv_blocks([hit + 2 + i]), 0)
    step(sched, worker, V.scheduler_output(
        new=[V.NewRequestData.from_request(r, ([hit + 2 + i],)) for i, r in enumerate(reqs)],
        num_scheduled={r.request_id: 3 for r in reqs}), lambda w: None)
    for r in reqs:
        r.num_computed_tokens = 3
    torch.set_num_threads(1)  # the "GPU": one core, the other for the daemon and the connector
    forward = layered(torch.ones(128, 128))  # 32 layers: ~4 matmuls of 256 x 256 a step
    new = V.Request("new", tokens, block_hasher=hasher)
    arrived = first = None
    ready = False  # the new request may run this step
    decode_s, longest = 0.0, 0.0
    for s in range(steps):
        new_reqs, sched_new, sync = [], {}, False
        if s == arrive:
            arrived = time.monotonic()
            matched, load_async = sched.get_num_new_matched_tokens(new, 0)
            assert matched == hit * BS and load_async is (mode != "layer"), (matched, load_async)
            sched.update_state_after_alloc(new, V.kv_blocks(list(range(1, hit + 2))), matched)
            ready = sync = mode == "layer"  # it runs now, its load before the forward
        running = ready and first is None
        if running:
            new.num_computed_tokens = hit * BS
            new_reqs = [V.NewRequestData.from_request(new, (list(range(1, hit + 2)),))]
            sched_new = {"new": 1}
        out = V.scheduler_output(new=new_reqs, cached=V.CachedRequestData(
            [r.request_id for r in reqs], set(), [[] for _ in reqs], {}, [None] * nreq,
            [r.num_computed_tokens for r in reqs], [s] * nreq),
            num_scheduled=dict({r.request_id: 1 for r in reqs}, **sched_new), sync_loads=sync)
        t0 = time.monotonic()
        got = step(sched, worker, out, forward, sync_load=mode == "sync")
        decode_s += time.monotonic() - t0
        longest = max(longest, time.monotonic() - t0)
        if running:
            first = time.monotonic() - arrived
        ready = ready or "new" in (got or ())
        for r in reqs:
            r.num_computed_tokens += 1
    assert first is not None, "the loaded request never ran"
    assert not worker.stats()["failed_loads"]
    worker.shutdown()
    sched.shutdown()
    return decode_s, longest, first


def main():
    mnt, bench = sys.argv[1], sys.argv[2]
    block = LAYERS * BS * H * 2 * D * 2
    res = {}
    ons, offs = [], []
    for _ in range(DECODE_ROUNDS):  # interleaved; one 7 s sample moves by 15% here
        offs.append(decode(mnt, False)[0])
        on, saved = decode(mnt, True)
        ons.append(on)
    on, off = statistics.median(ons), statistics.median(offs)
    res["decode"] = {"steps_s_saving": round(on, 3), "steps_s_not_saving": round(off, 3),
                     "ratio": round(on / off, 3), "blocks_saved": saved,
                     "rounds": DECODE_ROUNDS}
    nbytes = 1000 * block
    args = [bench, "--layers=%d" % LAYERS, "--layer-bytes=%d" % (block // LAYERS),
            "--blocks=1000", "--requests=1", os.path.join(mnt, "kvfs-bench")]
    os.makedirs(args[-1], exist_ok=True)
    subprocess.run(args[:1] + ["--scenario=write"] + args[1:], stdout=subprocess.DEVNULL,
                   check=True)
    # the same bytes into shared memory, and into the process's own pages as
    # the connector's CPU tensors are (HOST_PROC: process_vm_writev); each
    # round a load through the connector, then each kvfs-bench get
    gets = {"shm": [], "proc": []}

    def rounds(i):
        for region in gets:
            r = subprocess.run(args[:1] + ["--scenario=get", "--json", "--region=" + region] +
                               args[1:], stdout=subprocess.PIPE, check=True)
            gets[region].append(json.loads(r.stdout)["scenarios"][0]["mib_s"])
        return i + 1 < LOAD_ROUNDS

    mine = statistics.median(nbytes / s / 2**20 for s in load(mnt, rounds))
    res["load"] = {"connector_mib_s": round(mine, 1), "bytes": nbytes, "rounds": LOAD_ROUNDS}
    for region, mib_s in gets.items():
        res["load"]["kvfs_bench_get_%s_mib_s" % region] = round(statistics.median(mib_s), 1)
        res["load"]["ratio_to_%s" % region] = round(mine / statistics.median(mib_s), 3)
    p50, p99 = lookup(mnt)
    res["lookup_4000_blocks_ms"] = {"p50": round(p50 * 1000, 3), "p99": round(p99 * 1000, 3)}
    modes = ("async", "sync", "layer")
    for mode in ("async", "layer"):
        overlap(mnt, mode)  # puts the prefix in kvfs (layer by layer: keys of its own)
    runs = {m: [] for m in modes}
    for _ in range(OVERLAP_ROUNDS):  # interleaved, medians
        for mode in modes:
            runs[mode].append(overlap(mnt, mode))
    res["loads"] = {}
    for i, what in enumerate(("decode_steps_s", "longest_step_s", "first_step_s")):
        mid = {m: statistics.median(r[i] for r in runs[m]) for m in modes}
        res["loads"][what] = {m: round(v, 4) for m, v in mid.items()}
        res["loads"][what]["layer_to_async"] = round(mid["layer"] / mid["async"], 3)
        res["loads"][what]["sync_to_async"] = round(mid["sync"] / mid["async"], 3)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
