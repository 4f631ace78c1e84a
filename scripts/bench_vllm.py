# SPDX-License-Identifier: MIT
"""The vLLM connector's benchmarks (scripts/bench.sh vllm), on a mounted
kvfs: the connector's real code (kvfs.vllm), torch CPU tensors in vLLM's
layout and the stand-ins of tests/integration/vllm_standins.py, each figure
next to a baseline measured in the same run:

1. decode steps that each fill (and save) a block of 8 requests, next to the
   same steps with saving turned off: the saves run behind the step;
2. loading a 32-layer, 1,000-block prefix through the connector, next to
   kvfs-bench --scenario=get moving the same bytes (the same block count,
   layers and bytes per layer) into shared memory, and into its own pages
   (--region=proc) as the connector's CPU tensors are;
3. the lookup of a 4,000-block prompt (p50, p99).

Usage: bench_vllm.py MNT KVFS_BENCH (PYTHONPATH: client/python and
tests/integration; PYTHONHASHSEED set).
"""

import json
import os
import subprocess
import sys
import time

import torch

import vllm_standins as V
from kvfs import vllm as kc

LAYERS, BS, H, D = 32, 16, 4, 64  # a block of every layer: 32 x 16 x 4 x 128 x 2 = 512 KiB
NAMES = ["model.layers.%d.self_attn.attn" % i for i in range(LAYERS)]


def engine(mnt, num_blocks, tag):
    conf = V.vllm_config(mnt, model="bench/" + tag, block_size=BS)
    spec = V.FullAttentionSpec(block_size=BS, num_kv_heads=H, head_size=D, dtype=torch.bfloat16)
    kcc = V.kv_cache_config(num_blocks, NAMES, spec)
    sched = kc.KvfsConnector(conf, kc.KVConnectorRole.SCHEDULER, kcc)
    worker = kc.KvfsConnector(conf, kc.KVConnectorRole.WORKER, kcc)
    raw = torch.ones(LAYERS, num_blocks, BS, H, 2 * D, dtype=torch.bfloat16)
    worker.register_kv_caches({n: raw[i].permute(0, 2, 1, 3) for i, n in enumerate(NAMES)})
    return sched, worker, raw


def step(sched, worker, out, compute):
    worker.bind_connector_metadata(sched.build_connector_meta(out))
    worker.start_load_kv(None)
    compute()
    worker.wait_for_save()
    worker.get_finished(set())
    worker.clear_connector_metadata()


def decode(mnt, save, steps=48, nreq=8):
    """Seconds of `steps` decode steps of nreq requests, each step filling
    one block per request (a step of BS tokens each: a chunk of decode)."""
    sched, worker, raw = engine(mnt, nreq * (steps + 2), "decode-%d" % save)
    if not save:
        worker.wait_for_save = lambda: None
    hasher = V.get_request_block_hasher(BS)
    reqs = [V.Request("r%d" % i, [i * 100000 + t for t in range(BS + 1)], block_hasher=hasher)
            for i in range(nreq)]
    blocks = {r.request_id: [i * (steps + 2), i * (steps + 2) + 1] for i, r in enumerate(reqs)}
    for r in reqs:
        sched.get_num_new_matched_tokens(r, 0)
        sched.update_state_after_alloc(r, V.kv_blocks(blocks[r.request_id]), 0)
    step(sched, worker, V.scheduler_output(
        new=[V.NewRequestData.from_request(r, (blocks[r.request_id],)) for r in reqs],
        num_scheduled={r.request_id: r.num_prompt_tokens for r in reqs}), lambda: None)
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
        step(sched, worker, out, lambda: [work @ work for _ in range(20)])  # the "forward"
        for r in reqs:
            r.num_computed_tokens += BS
    elapsed = time.monotonic() - t0
    worker.shutdown()  # the saves land
    sched.shutdown()
    return elapsed, worker.stats()["saved_blocks"]


def load(mnt, nblocks=1000):
    """Seconds of one load of an nblocks-block prefix through the connector."""
    sched, worker, raw = engine(mnt, nblocks + 1, "load")
    r = V.Request("p", list(range(nblocks * BS + 1)), block_hasher=V.get_request_block_hasher(BS))
    ids = list(range(nblocks + 1))
    sched.get_num_new_matched_tokens(r, 0)
    sched.update_state_after_alloc(r, V.kv_blocks(ids), 0)
    step(sched, worker, V.scheduler_output(new=[V.NewRequestData.from_request(r, (ids,))],
                                           num_scheduled={"p": nblocks * BS + 1}), lambda: None)
    worker.shutdown()
    sched.shutdown()
    sched, worker, raw = engine(mnt, nblocks + 1, "load")
    r2 = V.Request("q", list(r.all_token_ids), block_hasher=V.get_request_block_hasher(BS))
    matched, _ = sched.get_num_new_matched_tokens(r2, 0)
    assert matched == nblocks * BS, matched
    sched.update_state_after_alloc(r2, V.kv_blocks(ids), matched)
    meta = sched.build_connector_meta(V.scheduler_output(
        new=[V.NewRequestData.from_request(r2, (ids,))], num_scheduled={"q": 1}))
    worker.bind_connector_metadata(meta)
    t0 = time.monotonic()
    worker.start_load_kv(None)
    elapsed = time.monotonic() - t0
    assert not worker.get_block_ids_with_load_errors()
    worker.shutdown()
    lookups = []
    for _ in range(30):
        t = time.monotonic()
        sched.get_num_new_matched_tokens(r2, 0)
        lookups.append(time.monotonic() - t)
    sched.shutdown()
    return elapsed, lookups


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


def main():
    mnt, bench = sys.argv[1], sys.argv[2]
    block = LAYERS * BS * H * 2 * D * 2
    res = {}
    off, _ = decode(mnt, False)
    on, saved = decode(mnt, True)
    res["decode"] = {"steps_s_saving": round(on, 3), "steps_s_not_saving": round(off, 3),
                     "ratio": round(on / off, 3), "blocks_saved": saved}
    secs, _ = load(mnt)
    nbytes = 1000 * block
    args = [bench, "--layers=%d" % LAYERS, "--layer-bytes=%d" % (block // LAYERS),
            "--blocks=1000", "--requests=1", os.path.join(mnt, "kvfs-bench")]
    os.makedirs(args[-1], exist_ok=True)
    subprocess.run(args[:1] + ["--scenario=write"] + args[1:], stdout=subprocess.DEVNULL,
                   check=True)
    mine = nbytes / secs / 2**20
    res["load"] = {"connector_mib_s": round(mine, 1), "bytes": nbytes}
    # the same bytes into shared memory, and into the process's own pages as
    # the connector's CPU tensors are (HOST_PROC: process_vm_writev)
    for region in ("shm", "proc"):
        r = subprocess.run(args[:1] + ["--scenario=get", "--json", "--region=" + region] +
                           args[1:], stdout=subprocess.PIPE, check=True)
        get = json.loads(r.stdout)["scenarios"][0]
        res["load"]["kvfs_bench_get_%s_mib_s" % region] = get["mib_s"]
        res["load"]["ratio_to_%s" % region] = round(mine / get["mib_s"], 3)
    p50, p99 = lookup(mnt)
    res["lookup_4000_blocks_ms"] = {"p50": round(p50 * 1000, 3), "p99": round(p99 * 1000, 3)}
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
