# SPDX-License-Identifier: MIT
"""
kvfs.vllm — a vLLM v1 KV connector that keeps KV-cache blocks in kvfs.

Enable it once the kvfs package is installed (pip install ./client/python):

    PYTHONHASHSEED=0 vllm serve MODEL --kv-transfer-config '{
        "kv_connector": "KvfsConnector",
        "kv_connector_module_path": "kvfs.vllm",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"kvfs_path": "/mnt/kvfs"}}'

kv_connector_extra_config: kvfs_path (a directory in a kvfs mount,
required, refused at start when it is not in one); model (the key prefix;
default: the served model's name); kvfs_load ("async", the default, or
"layer": how hits load, below); kvfs_timeout (seconds a lookup, or a
step's wait for saves, waits for kvfs; default 5).
client/python/vllm-interface.md is the vLLM interface this follows, read
from vLLM's source (0.2x to 0.33: both shapes of CachedRequestData, the
connector constructor with and without kv_cache_config).

Keys. A block's key is built from vLLM's own block hash
(request.block_hashes), which already folds in the LoRA adapter,
multimodal inputs, cache_salt and prompt embeddings, so requests that
differ in any of them never share a block:

    <model>/<spec>/<group>/r<tp rank>.<pp rank>/<block hash, hex>

where <spec> names what every block's bytes depend on, as vLLM's config
says it, since the scheduler (which looks keys up) sees no tensor: block
size, cache dtype, layout (kv_cache_layout; before vLLM had it,
VLLM_KV_CACHE_LAYOUT and the attention backend), the hash function
(prefix_caching_hash_algo), the tensor- and pipeline-parallel sizes; and
<group> the KV-cache group (its index, kind, head count, head size and
dtype). vLLM seeds its hash chain with random bytes per process unless
PYTHONHASHSEED is set (init_none_hash): then no other process, restart or
node could find a block, so the connector refuses to start without it, and
with a hash function another process may not reproduce ("builtin").

Hybrid models (SupportsHMA). Each KV-cache group's blocks are keys of their
own. A prompt's cached prefix is the longest run of n blocks such that on
every (tp, pp) rank each full-attention group holds blocks [0, n) and each
sliding-window group the blocks vLLM keeps before n (its window); a load
fills the blocks vLLM allocated, never its null block. Blocks that leave a
sliding window, like a preempted request's, go back to vLLM's pool at once
and may be given to another request while a save still reads them: before
a step writes the blocks its scheduling allocated, the worker waits for
the saves reading any of them (handle_preemptions; vLLM's
OffloadingConnector fences its stores the same way). A model with a group
of state (Mamba) runs with the connector idle (vLLM's scheduler does not
take external tokens for Mamba's aligned caching), as do groups vLLM marks
not transferable (enable_kv_transfer).

Memory. The worker derives from each layer tensor's shape and strides
where block b lies (kvfs.blocks: any layout, views included; a kernel
block size that divides the scheduler's). Its block dimension is the one
of num_blocks (or of k * num_blocks: k kernel blocks to a scheduler block),
wherever it is: first, or behind K/V as in (2, num_blocks, ...), which
FlashAttention and CPU attention used before mid-2026 (_block_dim). It
registers each allocation once
(vLLM backs a group's layers with one buffer) and, per group, one kvfs
layout over the group's layers: a key is block b of every layer of its
group, moved by the daemon with one batch put or get per group. Ranges
that meet are one layout segment, so a block-outermost cache (vLLM's
cross-layer blocks, prefer_cross_layer_blocks and
register_cross_layers_kv_cache where vLLM has them; the BLHNC and BLNHC
layouts after) moves each block as one run.

Failures never reach vLLM. A daemon that is gone, a mount that is not
there, ENOSPC or any other error from kvfs (or not from kvfs: any
exception in a load or save) is logged once per kind, counted (stats()),
and answered as a miss: the lookup matches nothing, a load that failed
names its blocks in get_block_ids_with_load_errors (vLLM recomputes them),
a save that failed is dropped. The connector opens the mount again, and
registers its memory again, at the next use, so a remounted kvfs serves
hits again without restarting the engine. Nothing waits for kvfs longer
than kvfs_timeout: a lookup runs on a thread of its own (_Caller) and one
that does not answer in time (a daemon stopped) is a miss, the client it
is stuck in never used again; a step's fence (below) gives up on its saves
after kvfs_timeout and has their keys removed once they land. reset_cache
answers None ("not failed"): kvfs is shared and outlives the engine, so
nothing is removed.

Neither loads nor saves hold up a step. A hit is loaded asynchronously:
get_num_new_matched_tokens answers (tokens, True), vLLM parks the request,
start_load_kv hands the step's batch get to the connector's loads thread
and returns, and get_finished reports the request once its blocks are in
memory (scheduled at the next step; a failed load also names its blocks,
get_block_ids_with_load_errors, or with several groups its request,
failed_recving). wait_for_save hands the step's batch put to the saves
thread (on a device, after a CUDA event recorded behind the step's
forward) and returns; request_finished asks vLLM to hold a request's
blocks while its saves may be in flight, and get_finished reports it once
they all landed. scripts/bench.sh vllm measures both against a step that
waits for its load.

Events. Once every worker reports a finished request's saves landed
(finished_sending), take_events gives vLLM a BlockStored of its saved
blocks (vLLM's block hashes, their tokens, medium "KVFS").

Layer by layer (kvfs_load: "layer"), the alternative measured against the
asynchronous loads (scripts/bench.sh vllm) and not the default: each
layer's block is a key of its own (<block hash>/<layer>, under a <spec>
ending in "-layerwise", so the two never share keys), a hit is loaded
in the step that schedules the request (get_num_new_matched_tokens answers
(tokens, False); vLLM starts the load before the forward), one batch get
per layer in the forward's order, and wait_for_layer_load returns once
its layer is in memory, so the forward of the first layers overlaps the
loads of the later ones. A save puts the layers last to first, so a
block whose first layer is there was saved whole; lookups ask for it. It
needs vLLM's kv_cache_config and one KV-cache group (a failed load is
reported by block id, which several groups' blocks share).

Stats. get_kv_connector_stats reports what was counted since the last call
(COUNTERS, and the seconds of each batch load and save); vLLM logs them and,
through build_prom_metrics, serves them at /metrics as vllm:kvfs_<counter>
counters and vllm:kvfs_load_seconds / vllm:kvfs_save_seconds histograms.
"""

import errno
import logging
import math
import os
import queue
import threading
import time
from dataclasses import dataclass, field

import kvfs
from kvfs import blocks as kvblocks

log = logging.getLogger("kvfs.vllm")

try:  # the real base classes when vLLM is installed
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # noqa: F401
        KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole)
except ImportError:  # stand-ins with the same names and the members used here
    import enum

    class KVConnectorRole(enum.Enum):
        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata:
        pass

    class KVConnectorBase_V1:
        def __init__(self, vllm_config, role, kv_cache_config=None):
            self._vllm_config = vllm_config
            self._role = role
            self._kv_cache_config = kv_cache_config
            self._connector_metadata = None

        @property
        def role(self):
            return self._role

        def bind_connector_metadata(self, connector_metadata):
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self):
            self._connector_metadata = None

        def _get_connector_metadata(self):
            return self._connector_metadata

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA
except ImportError:  # vLLM without the hybrid manager's hook, or none at all
    class SupportsHMA:
        pass

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorTransferResults
except ImportError:  # vLLM before September 2026 (get_finished only), or none at all
    @dataclass
    class KVConnectorTransferResults:
        finished_sending: set = field(default_factory=set)
        finished_recving: set = field(default_factory=set)
        failed_recving: set = field(default_factory=set)
        prefix_replay_checkpoints: dict = field(default_factory=dict)


try:
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (  # noqa: F401
        KVConnectorPromMetrics, KVConnectorStats)
except ImportError:  # the same shapes (vllm-interface.md, section 2c)
    @dataclass
    class KVConnectorStats:
        data: dict = field(default_factory=dict)

    class KVConnectorPromMetrics:
        def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
            by_name = {t.__name__: cls for t, cls in metric_types.items()}
            self._kv_transfer_config = vllm_config.kv_transfer_config
            self._gauge_cls = by_name.get("Gauge")
            self._counter_cls = by_name.get("Counter")
            self._histogram_cls = by_name.get("Histogram")
            self._labelnames = labelnames
            self.per_engine_labelvalues = per_engine_labelvalues

        def make_per_engine(self, metric):
            return {idx: metric.labels(*values)
                    for idx, values in self.per_engine_labelvalues.items()}


try:
    from vllm.distributed.kv_events import BlockStored
except ImportError:  # the same fields (vllm-interface.md, section 3g)
    @dataclass
    class BlockStored:
        block_hashes: list
        parent_block_hash: object
        token_ids: list
        block_size: int
        lora_id: object
        medium: object
        lora_name: object
        extra_keys: list = None
        group_idx: int = None

MEDIUM = "KVFS"  # BlockStored.medium of what the connector saved


# The connector's counters (stats(), and vLLM's /metrics as vllm:kvfs_<name>),
# and its latencies, in seconds per batch.
COUNTERS = {
    "lookups": "Prefix lookups (one batch per rank)",
    "hit_blocks": "Blocks matched by lookups",
    "missed_blocks": "Full prompt blocks lookups did not match",
    "loaded_blocks": "Blocks loaded from kvfs",
    "loaded_bytes": "Bytes loaded from kvfs",
    "saved_blocks": "Blocks saved to kvfs (or held there already)",
    "saved_bytes": "Bytes saved to kvfs",
    "failed_loads": "Blocks whose load failed (recomputed by vLLM)",
    "failed_saves": "Blocks whose save failed (a future miss)",
    "errors": "Calls to kvfs that failed whole (daemon gone, unmounted, ...)",
}
LATENCIES = {"load_seconds": "Seconds of one batch load", "save_seconds": "Seconds of one batch save"}


class KvfsConnectorStats(KVConnectorStats):
    """What the connector counted since the last report: the COUNTERS, and
    a list of seconds per LATENCIES name. Plain data, so vLLM carries it
    between processes."""

    def reset(self):
        self.data = {}

    def aggregate(self, other):
        for k, v in (other.data or {}).items():
            self.data[k] = self.data.get(k, [] if isinstance(v, list) else 0) + v
        return self

    def reduce(self):
        out = {k: self.data.get(k, 0) for k in COUNTERS}
        for k in LATENCIES:
            v = self.data.get(k) or []
            out[k.replace("_seconds", "_ms_avg")] = round(1000 * sum(v) / len(v), 3) if v else 0
        return out

    def is_empty(self):
        return not any(self.data.values())

    def to_dict(self):
        return self.data


class KvfsPromMetrics(KVConnectorPromMetrics):
    """vllm:kvfs_<counter> counters and vllm:kvfs_<latency> histograms, per engine."""

    BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]

    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self.counters = {k: self.make_per_engine(self._counter_cls(
            name="vllm:kvfs_" + k, documentation=doc, labelnames=labelnames))
            for k, doc in COUNTERS.items()}
        self.histograms = {k: self.make_per_engine(self._histogram_cls(
            name="vllm:kvfs_" + k, documentation=doc, buckets=self.BUCKETS,
            labelnames=labelnames)) for k, doc in LATENCIES.items()}

    def observe(self, transfer_stats_data, engine_idx=0):
        for k, v in (transfer_stats_data or {}).items():
            if k in self.counters and v:
                self.counters[k][engine_idx].inc(v)
            elif k in self.histograms:
                for x in v:
                    self.histograms[k][engine_idx].observe(x)


class ConfigError(ValueError):
    """A configuration the connector refuses at start, in one message."""


DEFAULT_TIMEOUT = 5.0  # kvfs_timeout: seconds a lookup, or a step's fence, waits for kvfs

NULL_BLOCK = 0  # vLLM's null block (BlockPool.null_block, the pool's first block): a
# sliding-window group's blocks out of the window are it, and hold nothing


@dataclass
class ReqMeta:
    """One request's work for the workers in one step: load or save the
    blocks `items`, each (group index, block hash hex, block id)."""
    req_id: str
    items: list
    load: bool


@dataclass
class KvfsConnectorMetadata(KVConnectorMetadata):
    requests: list = field(default_factory=list)
    # block ids the step's scheduling allocated: a save in flight may still
    # read one (freed by a preemption or a sliding window since), so the
    # worker waits for such saves before the step writes them
    allocated: set = field(default_factory=set)


@dataclass
class _Group:
    """A KV-cache group the connector moves: its blocks are keys of their own."""
    idx: int  # in kv_cache_config.kv_cache_groups
    name: str  # key component: the group and what its bytes depend on
    layers: object  # its layer names, or None: every layer (vLLM without kv_cache_config)
    window: int = 0  # sliding window, tokens (0: full attention, every block kept)
    hit_blocks: int = 0  # blocks before a hit's end that vLLM keeps (0: all of them)


@dataclass
class _Track:
    """A request the scheduler side follows from step to step."""
    request: object  # vLLM's Request: block_hashes grows as it generates
    block_ids: list = field(default_factory=list)  # per KV-cache group
    stored: int = 0  # leading blocks kvfs holds: saved, loaded or matched
    saving: bool = False  # saves were scheduled: its blocks are freed once they landed
    saved: list = field(default_factory=list)  # block indexes saved, for the KV events
    loading: tuple = None  # (first block, its group-0 block ids) of the load in flight


def _by_group(ids, n):
    """Block ids as a list per KV-cache group (vLLM passes a tuple of lists;
    before the hybrid manager, one list)."""
    if ids is None:
        return [[] for _ in range(n)]
    if ids and isinstance(ids[0], (list, tuple)):
        return [list(g) for g in ids] + [[] for _ in range(n - len(ids))]
    return [list(ids)] + [[] for _ in range(n - 1)]


def _cached_reqs(out):
    """(req_id, new block ids or None, resumed from preemption, tokens computed
    before the step) of each running request a step schedules, in the shapes
    vLLM has used: one object of parallel lists (resumed_req_ids, or earlier
    resumed_from_preemption), or a list of one object per request."""
    c = getattr(out, "scheduled_cached_reqs", None)
    if c is None:
        return
    if hasattr(c, "req_ids"):
        resumed = getattr(c, "resumed_req_ids", None)
        flags = getattr(c, "resumed_from_preemption", None)
        for i, rid in enumerate(c.req_ids):
            r = rid in resumed if resumed is not None else bool(flags and flags[i])
            yield rid, c.new_block_ids[i], r, c.num_computed_tokens[i]
    else:
        for d in c:
            yield d.req_id, d.new_block_ids, d.resumed_from_preemption, d.num_computed_tokens


def _extra(vllm_config):
    return getattr(vllm_config.kv_transfer_config, "kv_connector_extra_config", None) or {}


def _rank(extra, key, group):
    """This process's tensor- or pipeline-parallel rank: from
    kv_connector_extra_config, else vLLM's parallel state (get_tp_group(),
    get_pp_group(): rank_in_group), else 0 (a scheduler, which names every
    rank's keys itself)."""
    if extra.get(key) is not None:
        return int(extra[key])
    try:
        from vllm.distributed import parallel_state
        return int(getattr(parallel_state, group)().rank_in_group)
    except Exception:
        return 0


# vLLM's prefix_caching_hash_algo values whose hashes are the same in every
# process given the same PYTHONHASHSEED (vllm/utils/hashing.py): "builtin",
# Python's hash(), is not (it varies between builds and versions of Python)
STABLE_HASH_ALGOS = frozenset({"sha256", "sha256_cbor", "sha256_cbor_64bit", "sha256_msgpack",
                               "xxhash", "xxhash_cbor", "xxhash_msgpack"})


def _hash_algo(vllm_config):
    """vLLM's block hash function's name ("sha256" where vLLM has no choice)."""
    return str(getattr(vllm_config.cache_config, "prefix_caching_hash_algo", None) or "sha256")


def _layout_name(vllm_config, kv_cache_config):
    """What decides the byte order of a block, as vLLM's config names it:
    its kv_cache_layout (vLLM from August 2026), else VLLM_KV_CACHE_LAYOUT
    and the attention backend (earlier releases: each backend its own shape,
    NHD or HND per that variable), or None where nothing names it."""
    cache = vllm_config.cache_config
    layout = getattr(kv_cache_config, "kv_cache_layout", None) or \
        getattr(cache, "kv_cache_layout", None)
    if layout:
        return str(getattr(layout, "name", layout))
    parts = []
    env = os.environ.get("VLLM_KV_CACHE_LAYOUT")
    if env:
        parts.append(env)
    backend = getattr(getattr(vllm_config, "attention_config", None), "backend", None) or \
        os.environ.get("VLLM_ATTENTION_BACKEND")
    if backend:
        parts.append(str(getattr(backend, "name", backend)))
    return ".".join(parts) or None


def _spec(vllm_config, kv_cache_config):
    """What every block's bytes depend on, as a key component: block size,
    cache dtype, layout (as _layout_name), hash function, parallel sizes."""
    cache = vllm_config.cache_config
    par = vllm_config.parallel_config
    parts = ["bs%d" % cache.block_size, str(getattr(cache, "cache_dtype", "auto"))]
    layout = _layout_name(vllm_config, kv_cache_config)
    if layout:
        parts.append(layout.replace("/", "_").replace("-", "_"))
    parts.append(_hash_algo(vllm_config))
    parts.append("tp%d" % getattr(par, "tensor_parallel_size", 1))
    parts.append("pp%d" % getattr(par, "pipeline_parallel_size", 1))
    return "-".join(parts)


def _group_name(idx, s):
    return "g%d-%s-h%s-d%s-%s" % (idx, type(s).__name__, getattr(s, "num_kv_heads", "-"),
                                  getattr(s, "head_size", "-"),
                                  str(getattr(s, "dtype", "")).replace("torch.", ""))


def _groups(vllm_config, kv_cache_config):
    """(the groups the connector moves, the number of KV-cache groups, why
    it moves none or None). Attention groups move: full attention (MLA too)
    every block, sliding-window groups the blocks vLLM keeps. A group of
    state (Mamba) is not blocks of KV that a prefix names: a model with one
    runs with the connector idle. Groups vLLM marks not transferable
    (enable_kv_transfer) are left out."""
    block_size = vllm_config.cache_config.block_size
    specs = getattr(kv_cache_config, "kv_cache_groups", None)
    if not specs:
        return [_Group(0, "g0", None)], 1, None
    groups = []
    for i, g in enumerate(specs):
        s = g.kv_cache_spec
        if not getattr(g, "enable_kv_transfer", True):
            continue
        if not hasattr(s, "head_size"):
            return [], len(specs), "KV-cache group %d is %s, state rather than blocks of KV" \
                % (i, type(s).__name__)
        if s.block_size != block_size:
            return [], len(specs), "KV-cache group %d has %d-token blocks, the scheduler %d" \
                % (i, s.block_size, block_size)
        window = getattr(s, "sliding_window", None) if "SlidingWindow" in type(s).__name__ \
            else None
        if window:
            extra = getattr(s, "extra_retained_tokens", 0) or 0
            groups.append(_Group(i, _group_name(i, s), list(g.layer_names), int(window),
                                 -(-(int(window) - 1 + extra) // block_size)))
        else:
            groups.append(_Group(i, _group_name(i, s), list(g.layer_names)))
    return groups, len(specs), None


def _hash_block_size(vllm_config, kv_cache_config):
    """The tokens per entry of request.block_hashes: the block size, or with
    several KV-cache groups of different block sizes their greatest common
    divisor (vLLM's hash block size)."""
    sizes = {g.kv_cache_spec.block_size for g in
             getattr(kv_cache_config, "kv_cache_groups", None) or []}
    return math.gcd(*sizes) if len(sizes) > 1 else vllm_config.cache_config.block_size


CROSS_LAYERS = "<every layer>"  # the name register_cross_layers_kv_cache's tensor goes by


def _merged(segs):
    """Layout segments with each one that starts where the one before it
    ends (same region, same block stride) folded into it: the same bytes in
    the same order, fewer ranges (a block-outermost cache: one)."""
    out = []
    for reg, base, stride, length in segs:
        if out and out[-1][0] is reg and out[-1][2] == stride and \
                out[-1][1] + out[-1][3] == base:
            out[-1] = (reg, out[-1][1], stride, out[-1][3] + length)
        else:
            out.append((reg, base, stride, length))
    return out


def _check_hashes(vllm_config):
    """Refuses a block hash no other process could reproduce."""
    if os.environ.get("PYTHONHASHSEED") is None:
        raise ConfigError(
            "kvfs connector: PYTHONHASHSEED is not set, so vLLM seeds its block hashes with "
            "random bytes in every process (init_none_hash) and no other process, restart "
            "or node could find a stored block: start vLLM with PYTHONHASHSEED set, the same "
            "value on every node")
    algo = _hash_algo(vllm_config)
    if algo not in STABLE_HASH_ALGOS:
        raise ConfigError(
            "kvfs connector: prefix_caching_hash_algo %r gives block hashes another process "
            "may not reproduce, so a stored block could be found by the wrong prompt or by "
            "none: use one of %s" % (algo, ", ".join(sorted(STABLE_HASH_ALGOS))))


def _block_dim(t, num_blocks, name):
    """(the dimension of `t` that indexes blocks, kernel blocks per
    scheduler block): the dimension of num_blocks, or of k * num_blocks (a
    kernel block size 1/k of the scheduler's). vLLM's layouts put it first
    or, behind K/V, second ((2, num_blocks, ...): FlashAttention before May
    2026, CPU attention before June 2026). Several dimensions of such a
    size (num_blocks equal to a head count, say): the one of the largest
    stride, as blocks are outermost in every layout vLLM has, unless that is
    not clear. Without num_blocks (vLLM without kv_cache_config): the first
    dimension, refused where it is 2 (K and V, or blocks: cannot tell)."""
    shape, strides = tuple(t.shape), tuple(t.stride())

    def refuse(why):
        return ConfigError("kvfs connector: layer %s: %s (shape %s, strides %s)"
                           % (name, why, list(shape), list(strides)))

    if not shape:
        raise refuse("no dimensions")
    if not num_blocks:
        if shape[0] == 2:
            raise refuse("its first dimension, 2, may be K and V or the blocks, and vLLM "
                         "gave no kv_cache_config to tell the number of blocks")
        return 0, 1
    found = [i for i, n in enumerate(shape) if n >= num_blocks and n % num_blocks == 0]
    if not found:
        raise refuse("no dimension of %d blocks, or a multiple of it" % num_blocks)
    if len(found) > 1:
        found.sort(key=lambda i: -strides[i])
        first, second = found[0], found[1]
        if strides[first] == strides[second] or shape[first] == 2:
            raise refuse("dimensions %s could each be the %d blocks" % (sorted(found),
                                                                        num_blocks))
    return found[0], shape[found[0]] // num_blocks


class _Queue:
    """Batches a thread of the connector's runs in order (saves, or loads):
    each has a sequence number; wait(n) returns once batch n has run."""

    def __init__(self, name, run):
        self._name, self._run = name, run
        self._cv = threading.Condition()  # guards every field below
        self._items = []  # (seq, batch), oldest first
        self._queued = self._done = 0
        self._thread = None

    def put(self, batch):
        with self._cv:
            self._queued += 1
            self._items.append((self._queued, batch))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._cv.notify_all()
            return self._queued

    def _loop(self):
        while True:
            with self._cv:
                while not self._items:
                    self._cv.wait()
                seq, batch = self._items[0]
            if batch is None:
                return
            try:
                self._run(batch, seq)
            except Exception:  # the run's own handler failed: waiters go on all the same
                log.exception("kvfs connector: %s: a batch failed unexpectedly", self._name)
            with self._cv:
                self._items.pop(0)
                self._done = seq
                self._cv.notify_all()

    def wait(self, seq=None, timeout=None):
        """Until batch seq (default: every batch queued so far) has run, or
        timeout seconds passed: returns whether it ran."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            target = self._queued if seq is None else seq
            while self._done < target and self._thread is not None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(left)
            return True

    def stop(self):
        """Runs what is queued, then ends the thread."""
        with self._cv:
            thread, self._thread = self._thread, None
            if thread is not None:
                self._items.append((None, None))
                self._cv.notify_all()
        if thread is not None:
            thread.join()


class _Caller:
    """Runs calls on a thread of its own and waits at most `timeout` seconds
    for each. A call that does not return in time (a daemon stopped, a mount
    hung) is left to its thread, which nothing uses again: the next call
    gets a new thread."""

    def __init__(self, name, timeout):
        self._name, self.timeout = name, timeout
        self._lock = threading.Lock()  # guards _jobs and _threads
        self._jobs = None  # the queue of the thread in use
        self._threads = []  # every thread started, stuck ones included

    def call(self, fn):
        """fn()'s result or exception; OSError(ETIMEDOUT) once time is up."""
        with self._lock:
            if self._jobs is None:
                self._jobs = queue.SimpleQueue()
                th = threading.Thread(target=self._loop, args=(self._jobs,), name=self._name,
                                      daemon=True)
                th.start()
                self._threads = [t for t in self._threads if t.is_alive()] + [th]
            jobs = self._jobs
        done, box = threading.Event(), []
        jobs.put((fn, box, done))
        if not done.wait(self.timeout):
            with self._lock:
                if self._jobs is jobs:
                    self._jobs = None
            jobs.put(None)  # its thread ends once the call stuck in it returns
            raise OSError(errno.ETIMEDOUT, "no answer from kvfs within %gs" % self.timeout)
        ok, value = box[0]
        if ok:
            return value
        raise value

    def stop(self, timeout):
        """Ends the threads, waiting at most `timeout` seconds for calls
        still stuck in them; returns whether none is left."""
        with self._lock:
            threads, jobs, self._jobs = self._threads, self._jobs, None
        if jobs is not None:
            jobs.put(None)
        deadline = time.monotonic() + timeout
        for th in threads:
            th.join(max(0, deadline - time.monotonic()))
        return not any(th.is_alive() for th in threads)

    @staticmethod
    def _loop(jobs):
        while True:
            job = jobs.get()
            if job is None:
                return
            fn, box, done = job
            try:
                box.append((True, fn()))
            except BaseException as e:
                box.append((False, e))
            done.set()


class KvfsConnector(KVConnectorBase_V1, SupportsHMA):
    def __init__(self, vllm_config, role, kv_cache_config=None):
        try:
            super().__init__(vllm_config, role, kv_cache_config)
        except TypeError:  # vLLM before kv_cache_config was passed to connectors
            super().__init__(vllm_config, role)
        _check_hashes(vllm_config)
        extra = _extra(vllm_config)
        self.path = extra.get("kvfs_path")
        if not self.path:
            raise ConfigError("kvfs connector: kv_connector_extra_config needs kvfs_path")
        model = extra.get("model") or vllm_config.model_config.model
        self.block_size = vllm_config.cache_config.block_size
        hbs = _hash_block_size(vllm_config, kv_cache_config)
        if self.block_size % hbs:
            raise ConfigError("kvfs connector: block size %d is not a multiple of the hash "
                              "block size %d" % (self.block_size, hbs))
        self.factor = self.block_size // hbs  # block hashes per block: the last one names it
        self.groups, self.num_groups, idle = _groups(vllm_config, kv_cache_config)
        if idle:
            log.warning("kvfs connector: idle for this model (%s): nothing is saved or loaded",
                        idle)
        self.tp_rank = _rank(extra, "tp_rank", "get_tp_group")
        self.pp_rank = _rank(extra, "pp_rank", "get_pp_group")
        par = vllm_config.parallel_config
        self.tp_size = int(getattr(par, "tensor_parallel_size", 1))
        self.pp_size = int(getattr(par, "pipeline_parallel_size", 1))
        self.num_blocks = getattr(kv_cache_config, "num_blocks", None)
        self._cache_config = vllm_config.cache_config  # num_gpu_blocks, once vLLM set it
        self.layerwise = extra.get("kvfs_load", "async") == "layer"
        try:
            self.timeout = float(extra.get("kvfs_timeout", DEFAULT_TIMEOUT))
        except (TypeError, ValueError):
            self.timeout = -1
        if not self.timeout > 0:
            raise ConfigError("kvfs connector: kvfs_timeout is seconds > 0, not %r"
                              % (extra.get("kvfs_timeout"),))
        self._lookups = _Caller("kvfs-lookup", self.timeout)
        if extra.get("kvfs_load", "async") not in ("async", "layer"):
            raise ConfigError("kvfs connector: kvfs_load is \"async\" or \"layer\", not %r"
                              % (extra["kvfs_load"],))
        if self.layerwise and (len(self.groups) > 1 or
                               any(g.layers is None for g in self.groups)):
            raise ConfigError("kvfs connector: kvfs_load \"layer\" needs one KV-cache group "
                              "and vLLM's kv_cache_config (this model has %d groups): use "
                              "\"async\"" % self.num_groups)
        self.prefix = "%s/%s%s" % (str(model).replace("/", "--"),
                                   _spec(vllm_config, kv_cache_config),
                                   "-layerwise" if self.layerwise else "")
        # _lock guards _client, _layouts, _stale, _logged, _closed, _stats and _report: the
        # scheduler's or worker's thread and the connector's threads all use them
        self._lock = threading.Lock()
        self._client = None
        self._stale = []  # clients of a mount that failed: closed at shutdown, as a
        # thread of the connector's may still be inside a call on one
        self._logged = set()
        self._closed = False  # shut down: a client opened after it is closed at once
        # scheduler side
        self._tracks = {}  # req_id -> _Track, from the first question to request_finished
        self._loads = {}  # req_id -> ReqMeta to send with the next step
        self._computed = {}  # req_id -> tokens vLLM had locally when it asked
        self._landing = {}  # req_id -> _Track of a finished request whose saves may fly
        self._events = []  # BlockStored for take_events
        self._allocated = set()  # load destinations since the last step, for its fence
        # worker side
        self._kv_caches = None  # layer name -> tensor, kept to register again
        self._layouts = None  # group index -> its layouts (_register)
        self._saves = _Queue("kvfs-saves", self._save)
        self._loads_q = _Queue("kvfs-loads", self._load)
        # _xfer_lock guards what the saves' and loads' threads report to the worker
        self._xfer_lock = threading.Lock()
        self._saving = {}  # request id -> its save batches in flight
        self._in_save = {}  # block id -> the last save batch reading it (one pool of
        # block ids serves every group)
        self._saved = set()  # requests that had saves (reported once finished)
        self._finishing = set()  # finished, saves still in flight
        self._finished = set()  # finished, saves landed: for get_finished
        self._recving = {}  # request id -> (group, block id) of its load in flight
        self._recved = set()  # loads done: for get_finished
        self._load_failed = {}  # request id -> block ids its load could not fill
        self._load_errors = set()  # block ids of failed loads get_finished reported
        self._overrun = {}  # block id -> the last save batch reading it that a step's
        # fence gave up waiting for: its keys are removed once it lands
        self._fenced = None  # the metadata whose allocated blocks _fence waited for
        self._layers_in = {}  # layerwise: layer name -> Event set once the step's load of
        # it is done (or failed); replaced by each start_load_kv, read by the forward
        self._layer_seq = 0  # layerwise: the loads' batch of the step
        self._stats = dict.fromkeys(COUNTERS, 0)  # since the start
        self._report = KvfsConnectorStats()  # since the last get_kv_connector_stats

    # ---------------- kvfs, and its failures ----------------

    def key(self, h, group=None, tp_rank=None, pp_rank=None):
        g = self.groups[0] if group is None else group
        return "%s/%s/r%d.%d/%s" % (self.prefix, g.name,
                                    self.tp_rank if tp_rank is None else tp_rank,
                                    self.pp_rank if pp_rank is None else pp_rank, h)

    def _probe(self, h, group, tp_rank, pp_rank):
        """The key a lookup asks for: the block's, or layer by layer its first
        layer's (saved last)."""
        return self.key(h, group, tp_rank, pp_rank) + ("/0" if self.layerwise else "")

    def _group(self, idx):
        return next(g for g in self.groups if g.idx == idx)

    def _count(self, name, n=1):
        with self._lock:
            self._stats[name] += n
            self._report.data[name] = self._report.data.get(name, 0) + n

    def _timed(self, name, seconds):
        with self._lock:
            self._report.data.setdefault(name, []).append(seconds)

    def _failed(self, what, e):
        """Counts a failure and logs the first of each kind; the mount is
        opened again at the next use (the daemon may have restarted)."""
        self._count("errors")
        kind = (what, getattr(e, "errno", None) or type(e).__name__)
        with self._lock:
            first = kind not in self._logged
            self._logged.add(kind)
            if self._client is not None:
                self._stale.append(self._client)
            self._client = self._layouts = None
        if first:
            log.warning("kvfs connector: %s failed (%s); counted as a miss from now on, "
                        "logged once", what, e)

    def _close_all(self):
        with self._lock:
            clients = self._stale + ([self._client] if self._client is not None else [])
            self._client, self._layouts, self._stale = None, None, []
            self._closed = True
        for client in clients:
            try:
                client.close()
            except OSError:
                pass

    def _open(self):
        """(client, layouts): opened, and the worker's memory registered, if
        needed. The opening runs outside _lock: on a hung mount it may never
        return, and nothing else may wait for it."""
        with self._lock:
            if self._client is not None:
                return self._client, self._layouts
            kv_caches = self._kv_caches
        client = kvfs.Client(self.path)
        try:
            layouts = self._register(client, kv_caches) if kv_caches is not None else None
        except BaseException:
            client.close()
            raise
        with self._lock:
            closed = self._closed
            if closed:
                pass
            elif self._client is None:
                self._client, self._layouts = client, layouts
            else:  # another thread opened it meanwhile
                self._stale.append(client)
            mine = self._client, self._layouts
        if closed:  # a call stuck past shutdown: its mount is let go
            client.close()
            raise OSError(errno.ESHUTDOWN, "the kvfs connector was shut down")
        return mine

    # ---------------- scheduler side ----------------

    @property
    def requires_kv_delivery(self):
        """A cache: a save dropped by preemption is only a future miss."""
        return False

    def _hashes(self, request, limit=None):
        """The hex hashes of the request's full blocks (at most limit)."""
        hs = getattr(request, "block_hashes", None) or []
        n = len(hs) // self.factor
        if limit is not None:
            n = min(n, limit)
        return [bytes(hs[(b + 1) * self.factor - 1]).hex() for b in range(n)]

    def _track(self, request):
        t = self._tracks.get(request.request_id)
        if t is None:
            t = self._tracks[request.request_id] = _Track(
                request, [[] for _ in range(self.num_groups)])
        t.request = request
        return t

    def _ranks(self):
        return [(tp, pp) for tp in range(self.tp_size) for pp in range(self.pp_size)]

    def _hit(self, client, hashes):
        """The leading blocks of `hashes` a prefix hit may cover: n such that,
        on every rank, each full-attention group holds blocks [0, n) and each
        sliding-window group the blocks vLLM keeps before n (its window)."""
        n = len(hashes)
        for g in self.groups:
            if not g.hit_blocks:
                for tp, pp in self._ranks():
                    if n:
                        n = min(n, client.lookup([self._probe(h, g, tp, pp)
                                                  for h in hashes[:n]]).prefix)
        present = {}  # (group, rank, block) -> held, as looked up
        while n:
            missing = -1  # the last block some window before n lacks
            for g in (g for g in self.groups if g.hit_blocks):
                for rank in self._ranks():
                    window = range(max(0, n - g.hit_blocks), n)
                    ask = [j for j in window if (g.idx, rank, j) not in present]
                    if ask:
                        res = client.lookup([self._probe(hashes[j], g, *rank)
                                             for j in ask])
                        for j, r in zip(ask, res.results):
                            present[g.idx, rank, j] = r >= 0
                    missing = max([missing] + [j for j in window if not present[g.idx, rank, j]])
            if missing < 0:
                break
            n = missing  # a hit ending at or before it leaves it out of every window
        return n

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        """(Tokens past num_computed_tokens that every rank holds in kvfs,
        True): the load runs in the background (get_finished reports it);
        layer by layer False: it runs in the step that schedules the request."""
        if not self.groups:
            return 0, False
        # The last prompt token is always computed: only blocks before it count.
        prompt = getattr(request, "num_prompt_tokens", None)
        if prompt is None:
            prompt = len(request.prompt_token_ids or ())
        hashes = self._hashes(request, max(0, (prompt - 1) // self.block_size))
        try:  # on its own thread: a hung daemon costs this step kvfs_timeout, no more
            hit = self._lookups.call(lambda: self._hit(self._open()[0], hashes)) \
                if hashes else 0
        except Exception as e:  # the client a call is stuck in is not used again
            self._failed("lookup", e)
            hit = 0
        self._count("lookups")
        self._count("hit_blocks", hit)
        self._count("missed_blocks", len(hashes) - hit)
        t = self._track(request)
        t.stored = max(t.stored, hit)  # held already: never saved again
        self._computed[request.request_id] = num_computed_tokens
        tokens = max(0, hit * self.block_size - num_computed_tokens)
        return tokens, tokens > 0 and not self.layerwise

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        if num_external_tokens <= 0:
            return
        local = self._computed.pop(request.request_id, request.num_computed_tokens)
        first = local // self.block_size
        last = (local + num_external_tokens) // self.block_size
        hashes = self._hashes(request, last)
        items = []
        for g in self.groups:
            group = blocks.blocks[g.idx]
            for j in range(first, min(last, len(group))):
                b = group[j]
                if not getattr(b, "is_null", False) and b.block_id != NULL_BLOCK:
                    items.append((g.idx, hashes[j], b.block_id))
        self._loads[request.request_id] = ReqMeta(request.request_id, items, True)
        self._allocated.update(b for _, _, b in items)
        t = self._track(request)
        t.stored = max(t.stored, last)
        t.loading = (first, [b.block_id for b in blocks.blocks[self.groups[0].idx][first:last]])

    def _save_items(self, t, req_id, computed, out):
        """The ReqMeta saving the blocks of t that a step leaves computed
        (computed: tokens before it), or None. Draft tokens of speculative
        decoding not yet accepted do not count."""
        spec = len((getattr(out, "scheduled_spec_decode_tokens", None) or {}).get(req_id, ()))
        after = computed + out.num_scheduled_tokens.get(req_id, 0) - spec
        done = min(after // self.block_size, len(t.block_ids[self.groups[0].idx]))
        hashes = self._hashes(t.request, done)
        done = min(done, len(hashes))
        if done <= t.stored:
            return None
        items = []
        for g in self.groups:
            ids = t.block_ids[g.idx]
            start = t.stored
            if g.window:  # blocks out of the window were freed, maybe given to another request
                start = max(start, max(0, computed - g.window + 1) // self.block_size)
            items += [(g.idx, hashes[j], ids[j]) for j in range(start, min(done, len(ids)))
                      if ids[j] != NULL_BLOCK]
        t.saved.extend(range(t.stored, done))
        t.stored = done
        return ReqMeta(req_id, items, False)

    def build_connector_meta(self, scheduler_output):
        meta = KvfsConnectorMetadata()
        meta.requests.extend(self._loads.values())
        meta.allocated, self._loads, self._allocated = self._allocated, {}, set()
        steps = []
        for new in scheduler_output.scheduled_new_reqs:
            ids = _by_group(new.block_ids, self.num_groups)
            meta.allocated.update(b for g in ids for b in g)
            t = self._tracks.get(new.req_id)
            if t is None:  # never asked about: nothing to save without its block hashes
                continue
            t.block_ids = ids
            steps.append((t, new.req_id, new.num_computed_tokens))
        for rid, ids, resumed, computed in _cached_reqs(scheduler_output):
            ids = _by_group(ids, self.num_groups)
            meta.allocated.update(b for g in ids for b in g)
            t = self._tracks.get(rid)
            if t is None:
                continue
            if resumed:
                t.block_ids = ids
            else:
                for mine, more in zip(t.block_ids, ids):
                    mine.extend(more)
            steps.append((t, rid, computed))
        meta.allocated.discard(NULL_BLOCK)
        for t, rid, computed in steps:
            rm = self._save_items(t, rid, computed, scheduler_output)
            if rm:
                t.saving = True
                meta.requests.append(rm)
        return meta

    def request_finished(self, request, block_ids):
        """(True, None) when saves of the request may still be in flight:
        vLLM frees its blocks once every worker reports it in get_finished."""
        t = self._tracks.pop(request.request_id, None)
        self._loads.pop(request.request_id, None)
        self._computed.pop(request.request_id, None)
        if t and t.saving:
            self._landing[request.request_id] = t  # until its saves landed: the events
        return bool(t and t.saving), None

    def request_finished_all_groups(self, request, block_ids):
        """SupportsHMA: request_finished, with the block ids of every group."""
        return self.request_finished(request, block_ids)

    def update_connector_output(self, connector_output):
        """Requests whose saves landed on every worker (finished_sending):
        their blocks are in kvfs, told to vLLM's KV events (take_events).
        A load that failed: its blocks are not held, to be saved again."""
        for rid in getattr(connector_output, "finished_sending", None) or ():
            t = self._landing.pop(rid, None)
            if t is not None and t.saved:
                self._events.append(self._stored(t))
        failed = set(getattr(connector_output, "failed_recving", None) or ())
        bad = set(getattr(connector_output, "invalid_block_ids", None) or ())
        for rid, t in self._tracks.items():
            if t.loading is None:
                continue
            if self.layerwise:  # loaded within its step: never in finished_recving
                if bad:
                    first, ids = t.loading
                    lost = [first + j for j, b in enumerate(ids) if b in bad]
                    if lost:
                        t.stored = min(t.stored, lost[0])
                continue
            if rid not in (getattr(connector_output, "finished_recving", None) or ()):
                continue
            first, ids = t.loading
            t.loading = None
            if rid in failed:
                t.stored = min(t.stored, first)
            elif bad:
                lost = [first + j for j, b in enumerate(ids) if b in bad]
                if lost:
                    t.stored = min(t.stored, lost[0])

    def _stored(self, t):
        r, bs = t.request, self.block_size
        tokens = list(getattr(r, "all_token_ids", None) or ())
        lora = getattr(r, "lora_request", None)
        first = t.saved[0]
        parent = bytes(r.block_hashes[first * self.factor - 1]) if first else None
        return BlockStored(
            block_hashes=[bytes(r.block_hashes[(b + 1) * self.factor - 1]) for b in t.saved],
            parent_block_hash=parent,
            token_ids=[x for b in t.saved for x in tokens[b * bs:(b + 1) * bs]],
            block_size=bs, lora_id=getattr(lora, "lora_int_id", None), medium=MEDIUM,
            lora_name=getattr(lora, "lora_name", None))

    def take_events(self):
        """BlockStored for the blocks of requests whose saves landed since the last call."""
        events, self._events = self._events, []
        return events

    def reset_cache(self):
        """vLLM's prefix-cache reset (reset_prefix_cache with
        reset_connector): None, as vLLM's base class answers, "not failed,
        nothing reset". kvfs is shared by every engine of the model and
        outlives this one, so the connector removes nothing: after new
        weights, give kv_connector_extra_config another "model" (a key
        prefix of its own) or remove the old one (rm -r MNT/<model>)."""
        with self._lock:
            first = "reset" not in self._logged
            self._logged.add("reset")
        if first:
            log.info("kvfs connector: reset_cache keeps the blocks in kvfs %s (shared, "
                     "persistent): see the kvfs.vllm module's notes", self.path)
        return None

    def stats(self):
        """The COUNTERS since the start."""
        return dict(self._stats)

    def get_kv_connector_stats(self):
        """What was counted since the last call (vLLM's logging and /metrics), or None."""
        with self._lock:
            if self._report.is_empty():
                return None
            report, self._report = self._report, KvfsConnectorStats()
        return report

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return KvfsConnectorStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return KvfsPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    # ---------------- worker side ----------------

    def _register(self, client, kv_caches):
        """Registers each allocation once and, per group, the layouts its
        blocks move by; returns {group index: [(layer name or None, layout,
        bytes of a block in it, key suffix)]}: one layout over the group's
        layers, or layer by layer one per layer (suffix /<its index>)."""
        regions, layouts = {}, {}
        num_blocks = self.num_blocks or getattr(self._cache_config, "num_gpu_blocks", None)
        for g in self.groups:
            layers = []  # (name, its block runs as layout segments)
            names = [CROSS_LAYERS] if CROSS_LAYERS in kv_caches else \
                [n for n in g.layers if n in kv_caches] if g.layers is not None \
                else list(kv_caches)
            for name in names:
                t = kv_caches[name]
                dim, k = _block_dim(t, num_blocks, name)
                # kernel blocks: k of them per scheduler block, consecutive
                view = t.unflatten(dim, (num_blocks, k)) if k > 1 else t
                geo = kvblocks.geometry(view, dim, name, max_runs=kvfs.LAYOUT_MAX_SEGS)
                addr, nbytes = kvblocks.allocation(t)
                if addr not in regions:
                    regions[addr] = self._region(client, t, addr, nbytes)
                layers.append((name, [(regions[addr], t.data_ptr() - addr + off,
                                       geo.block_stride, length) for off, length in geo.runs]))
            if not layers:
                continue
            if self.layerwise:
                layouts[g.idx] = [(name, client.layout(segs), sum(s[3] for s in segs),
                                   "/%d" % i) for i, (name, segs) in enumerate(layers)]
                continue
            segs = _merged([seg for _, mine in layers for seg in mine])
            if len(segs) > kvfs.LAYOUT_MAX_SEGS:
                raise ConfigError("kvfs connector: a block of every layer of KV-cache group %d "
                                  "is %d ranges; a kvfs layout holds %d"
                                  % (g.idx, len(segs), kvfs.LAYOUT_MAX_SEGS))
            layouts[g.idx] = [(None, client.layout(segs), sum(s[3] for s in segs), "")]
        return layouts

    @staticmethod
    def _region(client, t, addr, nbytes):
        if getattr(t, "is_cuda", False):
            return client.register_device(addr, nbytes)
        import ctypes
        return client.register((ctypes.c_char * nbytes).from_address(addr))

    @property
    def prefer_cross_layer_blocks(self):
        """vLLM from November 2025 to its layout refactor of 2026 (later:
        the block-outermost layouts BLHNC, BLNHC): one tensor whose block b
        holds every layer's, exactly one kvfs value. Not layer by layer."""
        return not self.layerwise

    def register_cross_layers_kv_cache(self, kv_cache, attn_backend=None):
        """Instead of register_kv_caches when prefer_cross_layer_blocks: the
        one tensor of every layer, blocks in its first dimension."""
        if self.layerwise:
            raise ConfigError("kvfs connector: kvfs_load \"layer\" moves each layer's blocks "
                              "and takes per-layer tensors, not one across layers")
        self.register_kv_caches({CROSS_LAYERS: kv_cache})

    def register_kv_caches(self, kv_caches):
        """kv_caches: layer name -> tensor, in any layout (kvfs.blocks): one
        that cannot be addressed is refused here, naming the layer, its
        shape and strides; so is a kvfs_path not in a kvfs mount."""
        try:
            client = kvfs.Client(self.path)
        except OSError as e:
            raise ConfigError("kvfs connector: kvfs_path %s is not a kvfs mount or a "
                              "directory in one (%s)" % (self.path, e)) from e
        try:
            layouts = self._register(client, kv_caches)
        except BaseException:
            client.close()
            raise
        with self._lock:
            if self._client is not None:
                self._stale.append(self._client)
            self._kv_caches, self._client, self._layouts = dict(kv_caches), client, layouts

    def _batch(self, load):
        """This step's loads or saves: ({request id: its (group, block id)s},
        {group: (names, block ids)})."""
        meta = self._connector_metadata
        reqs, by_group = {}, {}
        for rm in meta.requests if isinstance(meta, KvfsConnectorMetadata) else ():
            if rm.load != load:
                continue
            mine = reqs.setdefault(rm.req_id, set())
            for gi, h, b in rm.items:
                names, ids = by_group.setdefault(gi, ([], []))
                names.append(self.key(h, self._group(gi)))
                ids.append(b)
                mine.add((gi, b))
        return reqs, by_group

    _COUNT = {"load": ("loaded_blocks", "loaded_bytes", "failed_loads"),
              "save": ("saved_blocks", "saved_bytes", "failed_saves")}

    def _move(self, what, by_group, call, layer_done=None):
        """Runs call(client, layout, names, ids) per group, and layer by
        layer per layer in the forward's order (a save: the reverse),
        telling layer_done(name) after each; counts; returns the (group,
        block id)s that failed (a block fails when any of its layers does)."""
        blocks, nbytes, failures = self._COUNT[what]
        failed = set()
        for gi, (names, ids) in by_group.items():
            ok = [True] * len(names)
            moved = 0
            try:
                client, layouts = self._open()
                units = (layouts or {}).get(gi)
                if units is None:
                    raise OSError(errno.ENODEV, "no memory registered for KV-cache group %d" % gi)
                for layer, layout, size, suffix in (units if what == "load" else units[::-1]):
                    results = call(client, layout, [n + suffix for n in names], ids)
                    # a save finding the block there already stored it
                    for i, r in enumerate(results):
                        ok[i] = ok[i] and (r >= 0 or (what == "save" and r == -errno.EEXIST))
                    moved += size * sum(1 for r in results if r >= 0)
                    if layer_done is not None:
                        layer_done(layer)
            except Exception as e:  # OSError from kvfs; anything else is failed the same way
                self._failed(what, e)
                ok = [False] * len(names)
            self._count(blocks, sum(ok))
            self._count(nbytes, moved)
            self._count(failures, len(ok) - sum(ok))
            failed.update((gi, b) for b, good in zip(ids, ok) if not good)
        return failed

    def handle_preemptions(self, arg=None):
        """Before the step's forward (vLLM passes the step's metadata; before
        February 2026, the set of preempted request ids): the blocks the step
        allocated are read by no save in flight once this returns, though
        they may have been freed while one was (a preemption, a sliding
        window moving on)."""
        if isinstance(arg, KvfsConnectorMetadata):
            self._fence(arg)

    def _fence(self, meta):
        """Waits for the saves reading a block the step allocated, at most
        kvfs_timeout. Past it (a daemon stopped mid-put) the step goes on:
        holding vLLM's step loop for a cache is the worse evil. Such a save
        may then store what the step writes under the old block's hash, so
        once it lands its keys are removed again (_unsave): a miss later
        instead of wrong KV."""
        if meta is self._fenced or not meta.allocated:
            return
        self._fenced = meta
        with self._xfer_lock:
            seq = max((self._in_save.get(b, 0) for b in meta.allocated), default=0)
        if seq and not self._saves.wait(seq, self.timeout):
            with self._xfer_lock:
                for b in meta.allocated:
                    s = self._in_save.get(b, 0)
                    if s:
                        self._overrun[b] = max(self._overrun.get(b, 0), s)
            self._failed("save fence", OSError(errno.ETIMEDOUT, "saves in flight for %gs"
                                               % self.timeout))

    def _unsave(self, items):
        """Removes the keys of saves the fence gave up waiting for, each
        (group, key name): they may hold another request's KV."""
        self._count("failed_saves", len(items))
        try:
            client, layouts = self._open()
            suffixes = [u[3] for u in (layouts or {}).get(items[0][0], [(None, None, 0, "")])]
            client.remove([n + sfx for _, n in items for sfx in suffixes])
        except Exception as e:
            self._failed("removing a save overrun by its step", e)

    def start_load_kv(self, forward_context, **kwargs):
        """Hands the step's loads to the loads' thread and returns:
        get_finished reports each request once its blocks are in memory;
        layer by layer (vLLM calls this before the forward then),
        wait_for_layer_load returns once its layer is."""
        meta = self._connector_metadata
        if isinstance(meta, KvfsConnectorMetadata):
            self._fence(meta)  # vLLM before handle_preemptions: before the forward here
        reqs, by_group = self._batch(True)
        if self.layerwise:
            self._layers_in = {}
        if not reqs:
            return
        if self.layerwise:
            self._layers_in = {name: threading.Event() for name in self._kv_caches or ()}
            self._layer_seq = self._loads_q.put((reqs, by_group, self._layers_in))
            return
        with self._xfer_lock:
            for rid in reqs:
                self._recving[rid] = self._recving.get(rid, 0) + 1
        self._loads_q.put((reqs, by_group, None))

    def _load(self, batch, seq):
        reqs, by_group, layers_in = batch
        t0 = time.monotonic()
        failed = {(gi, b) for gi, (_, ids) in by_group.items() for b in ids}  # until moved
        try:
            failed = self._move("load", by_group, lambda c, layout, names, ids: c.get(
                names, layout=layout, blocks=ids).results,
                layers_in and (lambda name: layers_in[name].set() if name in layers_in else None))
        except Exception as e:  # not kvfs's (_move answers for it): the blocks are recomputed
            self._failed("load", e)
            self._count("failed_loads", len(failed))
        finally:
            for ev in (layers_in or {}).values():  # a load that failed is done too
                ev.set()
        self._timed("load_seconds", time.monotonic() - t0)
        if layers_in is not None:  # within the step: reported by block id, not by request
            with self._xfer_lock:
                self._load_errors.update(b for _, b in failed)
            return
        with self._xfer_lock:
            for rid, mine in reqs.items():
                if mine & failed:
                    self._load_failed.setdefault(rid, set()).update(b for _, b in mine & failed)
                self._recving[rid] -= 1
                if not self._recving[rid]:
                    del self._recving[rid]
                    self._recved.add(rid)

    def get_block_ids_with_load_errors(self):
        """Block ids of loads get_finished reported that failed (vLLM
        recomputes them). With several KV-cache groups, whose block ids
        overlap, failures go by request instead (get_transfer_results);
        layer by layer, the step's own load's, once it is done (the forward
        may not have waited for every layer)."""
        if self.layerwise:
            self._loads_q.wait(self._layer_seq)
        with self._xfer_lock:
            failed, self._load_errors = self._load_errors, set()
        return failed

    def wait_for_layer_load(self, layer_name):
        """Layer by layer: until the step's load of this layer is done.
        Otherwise a request runs once its load finished (get_finished):
        nothing to wait for."""
        ev = self._layers_in.get(layer_name)
        if ev is not None:
            ev.wait()

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config):
        """Layer by layer, the forward calls wait_for_layer_load between its
        layers: CUDA graphs must be piecewise."""
        return (extra_config or {}).get("kvfs_load") == "layer"

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        return  # one layout spans all layers: the whole block is saved in wait_for_save

    def wait_for_save(self):
        """Starts the step's saves and returns: they land in the background,
        in the order they were made, and get_finished reports each finished
        request once its saves landed (vLLM holds its blocks until then)."""
        reqs, by_group = self._batch(False)
        if not reqs:
            return
        event = None
        if any(getattr(t, "is_cuda", False) for t in self._kv_caches.values()):
            import torch  # the put waits for what the step's forward wrote
            event = torch.cuda.Event()
            event.record()
        with self._xfer_lock:
            self._saved.update(reqs)
            for rid in reqs:
                self._saving[rid] = self._saving.get(rid, 0) + 1
            seq = self._saves.put((reqs, by_group, event))
            for _, ids in by_group.values():
                for b in ids:
                    self._in_save[b] = seq

    def _save(self, batch, seq):
        reqs, by_group, event = batch
        t0 = time.monotonic()
        try:
            if event is not None:
                event.synchronize()
            self._move("save", by_group, lambda c, layout, names, ids: c.put(
                names, layout=layout, blocks=ids,
                flags=kvfs.PUT_MKDIR | kvfs.PUT_NOREPLACE).results)
        except Exception as e:  # not kvfs's (_move answers for it): nothing saved
            self._failed("save", e)
            self._count("failed_saves", sum(len(ids) for _, ids in by_group.values()))
        self._timed("save_seconds", time.monotonic() - t0)
        with self._xfer_lock:
            late = [(gi, names[i]) for gi, (names, ids) in by_group.items()
                    for i, b in enumerate(ids) if self._overrun.get(b, 0) >= seq]
        if late:
            self._unsave(late)
        with self._xfer_lock:
            for _, ids in by_group.values():
                for b in ids:
                    if self._in_save.get(b) == seq:  # no later save reads it
                        del self._in_save[b]
                    if self._overrun.get(b, 0) <= seq:
                        self._overrun.pop(b, None)
            for rid in reqs:
                self._saving[rid] -= 1
                if not self._saving[rid]:
                    del self._saving[rid]
                    if rid in self._finishing:
                        self._finishing.discard(rid)
                        self._finished.add(rid)

    def drain(self):
        """Waits until every save and load started so far has landed."""
        self._saves.wait()
        self._loads_q.wait()

    def get_finished(self, finished_req_ids):
        """(requests finished whose saves have all landed, requests whose
        loads are done): each is reported once, by every worker, as vLLM's
        scheduler waits for."""
        res = self.get_transfer_results(finished_req_ids)
        return res.finished_sending or None, res.finished_recving or None

    def get_transfer_results(self, finished_req_ids):
        """get_finished's sets, and the requests whose load failed
        (failed_recving): with one KV-cache group the failed blocks go to
        get_block_ids_with_load_errors instead (vLLM recomputes from the
        first of them rather than the whole prompt)."""
        with self._xfer_lock:
            for rid in finished_req_ids or ():
                if rid in self._saving:
                    self._finishing.add(rid)
                elif rid in self._saved:
                    self._finished.add(rid)
            sending, self._finished = self._finished, set()
            self._saved -= sending
            recving, self._recved = self._recved, set()
            failed = set()
            for rid in recving:
                blocks = self._load_failed.pop(rid, None)
                if blocks and self.num_groups > 1:
                    failed.add(rid)
                elif blocks:
                    self._load_errors |= blocks
        return KVConnectorTransferResults(finished_sending=sending, finished_recving=recving,
                                          failed_recving=failed)

    def shutdown(self):
        """Lands the saves and loads in flight, then lets go of the mount
        and every region registered through it."""
        self._saves.stop()
        self._loads_q.stop()
        if not self._lookups.stop(self.timeout):
            # a lookup still stuck in kvfs holds a client: closing it under the call
            # would free what the call uses, so the stale clients are left open
            log.warning("kvfs connector: a lookup is still stuck in kvfs at shutdown; "
                        "its mount handles are left open")
            with self._lock:
                self._stale = []
        self._close_all()

    close = shutdown
