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
required); model (the key prefix; default: the served model's name).
client/python/vllm-interface.md is the vLLM interface this follows, read
from vLLM's source (0.2x to 0.33: both shapes of CachedRequestData, the
connector constructor with and without kv_cache_config).

Keys. A block's key is built from vLLM's own block hash
(request.block_hashes), which already folds in the LoRA adapter,
multimodal inputs, cache_salt and prompt embeddings, so requests that
differ in any of them never share a block:

    <model>/<spec>/r<tp rank>.<pp rank>/<block hash, hex>

where <spec> names what a block's bytes depend on: block size, KV-cache
group 0's head count, head size, dtype and layout, and the tensor- and
pipeline-parallel sizes. vLLM seeds its hash chain with random bytes per
process unless PYTHONHASHSEED is set (init_none_hash): then no other
process, restart or node could find a block, so the connector refuses to
start without it. A prompt's cached prefix is the leading run of blocks
every (tp, pp) rank holds.

Memory. The worker derives from each layer tensor's shape and strides
where block b lies (kvfs.blocks: any layout, views included; a kernel
block size that divides the scheduler's), registers each allocation once
(vLLM backs a group's layers with one buffer) and one kvfs layout over
every layer: a key is block b of every layer, moved by the daemon with one
batch put or get.

Failures never reach vLLM. A daemon that is gone, a mount that is not
there, ENOSPC or any other error from kvfs is logged once per kind,
counted (stats()), and answered as a miss: the lookup matches nothing, a
load that failed names its blocks in get_block_ids_with_load_errors (vLLM
recomputes them), a save that failed is dropped. The connector opens the
mount again, and registers its memory again, at the next use, so a
remounted kvfs serves hits again without restarting the engine.

Loads run inside the step (start_load_kv). Saves do not hold it up:
wait_for_save hands the step's batch put to a thread of the connector's
(on a device, after a CUDA event recorded behind the step's forward) and
returns; request_finished asks vLLM to hold a request's blocks while its
saves may be in flight, and get_finished reports it once they all landed.
Blocks of preempted requests are about to be reused: handle_preemptions
(or, in vLLM before it, wait_for_save) waits for the saves in flight.

Events. Once every worker reports a finished request's saves landed
(finished_sending), take_events gives vLLM a BlockStored of its saved
blocks (vLLM's block hashes, their tokens, medium "KVFS").

Stats. get_kv_connector_stats reports what was counted since the last call
(COUNTERS, and the seconds of each batch load and save); vLLM logs them and,
through build_prom_metrics, serves them at /metrics as vllm:kvfs_<counter>
counters and vllm:kvfs_load_seconds / vllm:kvfs_save_seconds histograms.
"""

import errno
import logging
import math
import os
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


@dataclass
class ReqMeta:
    """One request's work for the workers in one step: load or save
    keys[i] <-> block_ids[i] (hashes: the block hashes, hex)."""
    req_id: str
    hashes: list
    block_ids: list
    load: bool


@dataclass
class KvfsConnectorMetadata(KVConnectorMetadata):
    requests: list = field(default_factory=list)
    preempted: set = field(default_factory=set)  # their blocks go: saves of them must land


@dataclass
class _Track:
    """A request the scheduler side follows from step to step."""
    request: object  # vLLM's Request: block_hashes grows as it generates
    block_ids: list = field(default_factory=list)
    stored: int = 0  # leading blocks kvfs holds: saved, loaded or matched
    saving: bool = False  # saves were scheduled: its blocks are freed once they landed
    saved: list = field(default_factory=list)  # block indexes saved, for the KV events


def _group0(ids):
    """The block ids of the first KV-cache group (vLLM passes a tuple per group)."""
    if ids and isinstance(ids[0], (list, tuple)):
        return list(ids[0])
    return list(ids or ())


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


def _spec(vllm_config, kv_cache_config):
    """What a block's bytes depend on, as a key component."""
    cache = vllm_config.cache_config
    par = vllm_config.parallel_config
    parts = ["bs%d" % cache.block_size]
    groups = getattr(kv_cache_config, "kv_cache_groups", None) or []
    if groups:
        s = groups[0].kv_cache_spec
        parts.append("%s-h%s-d%s-%s" % (type(s).__name__, getattr(s, "num_kv_heads", "-"),
                                        getattr(s, "head_size", "-"),
                                        str(getattr(s, "dtype", "")).replace("torch.", "")))
    parts.append(str(getattr(cache, "cache_dtype", "auto")))
    layout = getattr(kv_cache_config, "kv_cache_layout", None) or \
        getattr(cache, "kv_cache_layout", None)
    if layout:
        parts.append(str(layout))
    parts.append("tp%d" % getattr(par, "tensor_parallel_size", 1))
    parts.append("pp%d" % getattr(par, "pipeline_parallel_size", 1))
    return "-".join(parts)


def _hash_block_size(vllm_config, kv_cache_config):
    """The tokens per entry of request.block_hashes: the block size, or with
    several KV-cache groups of different block sizes their greatest common
    divisor (vLLM's hash block size)."""
    sizes = {g.kv_cache_spec.block_size for g in
             getattr(kv_cache_config, "kv_cache_groups", None) or []}
    return math.gcd(*sizes) if len(sizes) > 1 else vllm_config.cache_config.block_size


def _check_hash_seed():
    if os.environ.get("PYTHONHASHSEED") is None:
        raise ConfigError(
            "kvfs connector: PYTHONHASHSEED is not set, so vLLM seeds its block hashes with "
            "random bytes in every process (init_none_hash) and no other process, restart "
            "or node could find a stored block: start vLLM with PYTHONHASHSEED set, the same "
            "value on every node")


class KvfsConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role, kv_cache_config=None):
        try:
            super().__init__(vllm_config, role, kv_cache_config)
        except TypeError:  # vLLM before kv_cache_config was passed to connectors
            super().__init__(vllm_config, role)
        _check_hash_seed()
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
        self.tp_rank = _rank(extra, "tp_rank", "get_tp_group")
        self.pp_rank = _rank(extra, "pp_rank", "get_pp_group")
        par = vllm_config.parallel_config
        self.tp_size = int(getattr(par, "tensor_parallel_size", 1))
        self.pp_size = int(getattr(par, "pipeline_parallel_size", 1))
        self.num_blocks = getattr(kv_cache_config, "num_blocks", None)
        self.prefix = "%s/%s" % (str(model).replace("/", "--"), _spec(vllm_config,
                                                                      kv_cache_config))
        # _lock guards _client, _layout, _stale, _logged, _stats and _report: the
        # scheduler's or worker's thread and the saves' thread both use them
        self._lock = threading.Lock()
        self._client = None
        self._stale = []  # clients of a mount that failed: closed at shutdown, as the
        # saves' thread may still be inside a call on one
        self._logged = set()
        # scheduler side
        self._tracks = {}  # req_id -> _Track, from the first question to request_finished
        self._loads = {}  # req_id -> ReqMeta to send with the next step
        self._computed = {}  # req_id -> tokens vLLM had locally when it asked
        self._landing = {}  # req_id -> _Track of a finished request whose saves may fly
        self._events = []  # BlockStored for take_events
        # worker side
        self._kv_caches = None  # layer name -> tensor, kept to register again
        self._layout = None
        self._load_errors = set()
        self._block_bytes = 0
        # saves in flight (wait_for_save, _save_loop): _saves_lock guards them all
        self._saves_lock = threading.Lock()
        self._saves_cv = threading.Condition(self._saves_lock)
        self._queue = []  # (names, block ids, request ids, CUDA event), oldest first
        self._saves_queued = self._saves_done = 0
        self._saver = None
        self._saving = {}  # request id -> its save batches in flight
        self._saved = set()  # requests that had saves (reported once finished)
        self._finishing = set()  # finished, saves still in flight
        self._finished = set()  # finished, saves landed: for get_finished
        self._stats = dict.fromkeys(COUNTERS, 0)  # since the start
        self._report = KvfsConnectorStats()  # since the last get_kv_connector_stats

    # ---------------- kvfs, and its failures ----------------

    def key(self, h, tp_rank=None, pp_rank=None):
        return "%s/r%d.%d/%s" % (self.prefix, self.tp_rank if tp_rank is None else tp_rank,
                                 self.pp_rank if pp_rank is None else pp_rank, h)

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
        kind = (what, getattr(e, "errno", None))
        with self._lock:
            first = kind not in self._logged
            self._logged.add(kind)
            if self._client is not None:
                self._stale.append(self._client)
            self._client = self._layout = None
        if first:
            log.warning("kvfs connector: %s failed (%s); counted as a miss from now on, "
                        "logged once", what, e)

    def _close_all(self):
        with self._lock:
            clients = self._stale + ([self._client] if self._client is not None else [])
            self._client, self._layout, self._stale = None, None, []
        for client in clients:
            try:
                client.close()
            except OSError:
                pass

    def _open(self):
        """(client, layout): opened, and the worker's memory registered, if needed."""
        with self._lock:
            if self._client is None:
                client = kvfs.Client(self.path)
                if self._kv_caches is not None:
                    try:
                        self._layout = self._register(client, self._kv_caches)
                    except BaseException:
                        client.close()
                        raise
                self._client = client
            return self._client, self._layout

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
            t = self._tracks[request.request_id] = _Track(request)
        t.request = request
        return t

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        """Tokens past num_computed_tokens that every rank holds in kvfs, and
        whether they load asynchronously (never: loads finish in start_load_kv)."""
        # The last prompt token is always computed: only blocks before it count.
        prompt = getattr(request, "num_prompt_tokens", None)
        if prompt is None:
            prompt = len(request.prompt_token_ids or ())
        hashes = self._hashes(request, max(0, (prompt - 1) // self.block_size))
        hit = len(hashes)
        try:
            client = self._open()[0]
            for tp in range(self.tp_size):
                for pp in range(self.pp_size):
                    if hit:
                        hit = min(hit, client.lookup([self.key(h, tp, pp)
                                                      for h in hashes[:hit]]).prefix)
        except OSError as e:
            self._failed("lookup", e)
            hit = 0
        self._count("lookups")
        self._count("hit_blocks", hit)
        self._count("missed_blocks", len(hashes) - hit)
        t = self._track(request)
        t.stored = max(t.stored, hit)  # held already: never saved again
        self._computed[request.request_id] = num_computed_tokens
        return max(0, hit * self.block_size - num_computed_tokens), False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        if num_external_tokens <= 0:
            return
        block_ids = blocks.get_block_ids()[0]
        local = self._computed.pop(request.request_id, request.num_computed_tokens)
        first = local // self.block_size
        last = (local + num_external_tokens) // self.block_size
        self._loads[request.request_id] = ReqMeta(
            request.request_id, self._hashes(request, last)[first:],
            list(block_ids[first:last]), True)
        t = self._track(request)
        t.stored = max(t.stored, last)

    def _saves(self, t, req_id, computed, out):
        """The ReqMeta saving the blocks of t that a step leaves computed
        (computed: tokens before it), or None. Draft tokens of speculative
        decoding not yet accepted do not count."""
        spec = len((getattr(out, "scheduled_spec_decode_tokens", None) or {}).get(req_id, ()))
        after = computed + out.num_scheduled_tokens.get(req_id, 0) - spec
        done = min(after // self.block_size, len(t.block_ids))
        hashes = self._hashes(t.request, done)
        done = min(done, len(hashes))
        if done <= t.stored:
            return None
        rm = ReqMeta(req_id, hashes[t.stored:done], t.block_ids[t.stored:done], False)
        t.saved.extend(range(t.stored, done))
        t.stored = done
        return rm

    def build_connector_meta(self, scheduler_output):
        meta = KvfsConnectorMetadata()
        meta.requests.extend(self._loads.values())
        self._loads = {}
        steps = []
        for new in scheduler_output.scheduled_new_reqs:
            t = self._tracks.get(new.req_id)
            if t is None:  # never asked about: nothing to save without its block hashes
                continue
            t.block_ids = _group0(new.block_ids)
            steps.append((t, new.req_id, new.num_computed_tokens))
        for rid, ids, resumed, computed in _cached_reqs(scheduler_output):
            t = self._tracks.get(rid)
            if t is None:
                continue
            t.block_ids = _group0(ids) if resumed else t.block_ids + _group0(ids)
            steps.append((t, rid, computed))
        for t, rid, computed in steps:
            rm = self._saves(t, rid, computed, scheduler_output)
            if rm:
                t.saving = True
                meta.requests.append(rm)
        meta.preempted = set(getattr(scheduler_output, "preempted_req_ids", None) or ())
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

    def update_connector_output(self, connector_output):
        """Requests whose saves landed on every worker (finished_sending):
        their blocks are in kvfs, told to vLLM's KV events (take_events)."""
        for rid in getattr(connector_output, "finished_sending", None) or ():
            t = self._landing.pop(rid, None)
            if t is not None and t.saved:
                self._events.append(self._stored(t))

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
        """vLLM's prefix-cache reset: kvfs keeps its blocks (remove them with
        rm -r or kvfs remove_prefix); nothing here to reset."""
        return True

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
        """Registers each allocation once and one layout of every layer's
        block runs; returns the layout."""
        regions, segs = {}, []
        for name, t in kv_caches.items():
            view = t
            if self.num_blocks and t.shape[0] != self.num_blocks and \
                    t.shape[0] % self.num_blocks == 0:  # kernel blocks: k per scheduler block
                view = t.unflatten(0, (self.num_blocks, -1))
            g = kvblocks.geometry(view, 0, name, max_runs=kvfs.LAYOUT_MAX_SEGS)
            addr, nbytes = kvblocks.allocation(t)
            if addr not in regions:
                regions[addr] = self._region(client, t, addr, nbytes)
            for off, length in g.runs:
                segs.append((regions[addr], t.data_ptr() - addr + off, g.block_stride, length))
        if len(segs) > kvfs.LAYOUT_MAX_SEGS:
            raise ConfigError("kvfs connector: a block of every layer is %d ranges; a kvfs "
                              "layout holds %d" % (len(segs), kvfs.LAYOUT_MAX_SEGS))
        self._block_bytes = sum(length for _, _, _, length in segs)
        return client.layout(segs)

    @staticmethod
    def _region(client, t, addr, nbytes):
        if getattr(t, "is_cuda", False):
            return client.register_device(addr, nbytes)
        import ctypes
        return client.register((ctypes.c_char * nbytes).from_address(addr))

    def register_kv_caches(self, kv_caches):
        """kv_caches: layer name -> tensor, in any layout (kvfs.blocks): one
        that cannot be addressed is refused here, naming the layer, its
        shape and strides."""
        client = kvfs.Client(self.path)
        try:
            layout = self._register(client, kv_caches)
        except BaseException:
            client.close()
            raise
        with self._lock:
            if self._client is not None:
                self._stale.append(self._client)
            self._kv_caches, self._client, self._layout = dict(kv_caches), client, layout

    def _work(self, load):
        """(keys, block ids) of this step's loads or saves."""
        meta = self._get_connector_metadata()
        names, ids = [], []
        for rm in meta.requests if meta else ():
            if rm.load == load:
                names += [self.key(h) for h in rm.hashes]
                ids += rm.block_ids
        return names, ids

    def start_load_kv(self, forward_context, **kwargs):
        names, ids = self._work(True)
        if not names:
            return
        t0 = time.monotonic()
        try:
            client, layout = self._open()
            results = client.get(names, layout=layout, blocks=ids).results
        except OSError as e:
            self._failed("load", e)
            results = [-errno.EIO] * len(names)
        self._timed("load_seconds", time.monotonic() - t0)
        failed = {b for b, r in zip(ids, results) if r < 0}
        self._count("loaded_blocks", len(names) - len(failed))
        self._count("loaded_bytes", (len(names) - len(failed)) * self._block_bytes)
        self._count("failed_loads", len(failed))
        # A block evicted since the lookup, or any error: its memory holds
        # garbage, and vLLM recomputes what get_block_ids_with_load_errors names.
        self._load_errors |= failed

    def get_block_ids_with_load_errors(self):
        """Block ids whose load failed since the last call (vLLM recomputes them)."""
        failed, self._load_errors = self._load_errors, set()
        return failed

    def wait_for_layer_load(self, layer_name):
        return  # start_load_kv loaded every layer of every block

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        return  # one layout spans all layers: the whole block is saved in wait_for_save

    def handle_preemptions(self, arg=None):
        """Preempted requests' blocks are about to be reused: their saves in
        flight land first (vLLM passes the step's metadata; before February
        2026, the set of preempted request ids)."""
        if arg and getattr(arg, "preempted", arg):
            self.drain()

    def wait_for_save(self):
        """Starts the step's saves and returns: they land in the background,
        in the order they were made, and get_finished reports each finished
        request once its saves landed (vLLM holds its blocks until then)."""
        meta = self._get_connector_metadata()
        if meta is not None and meta.preempted:
            self.drain()  # before vLLM 0.15 no handle_preemptions: here, before reuse
        names, ids, reqs = [], [], set()
        for rm in meta.requests if meta else ():
            if not rm.load:
                names += [self.key(h) for h in rm.hashes]
                ids += rm.block_ids
                reqs.add(rm.req_id)
        if not names:
            return
        event = None
        if any(getattr(t, "is_cuda", False) for t in self._kv_caches.values()):
            import torch  # the put waits for what the step's forward wrote
            event = torch.cuda.Event()
            event.record()
        with self._saves_lock:
            self._saved |= reqs
            for rid in reqs:
                self._saving[rid] = self._saving.get(rid, 0) + 1
            self._saves_queued += 1
            self._queue.append((names, ids, reqs, event))
            if self._saver is None:
                self._saver = threading.Thread(target=self._save_loop, name="kvfs-saves",
                                               daemon=True)
                self._saver.start()
            self._saves_cv.notify_all()

    def _save_loop(self):
        while True:
            with self._saves_lock:
                while not self._queue:
                    self._saves_cv.wait()
                names, ids, reqs, event = self._queue[0]
            if names is None:
                return
            self._save(names, ids, event)
            with self._saves_lock:
                self._queue.pop(0)
                self._saves_done += 1
                for rid in reqs:
                    self._saving[rid] -= 1
                    if not self._saving[rid]:
                        del self._saving[rid]
                        if rid in self._finishing:
                            self._finishing.discard(rid)
                            self._finished.add(rid)
                self._saves_cv.notify_all()

    def _save(self, names, ids, event):
        t0 = time.monotonic()
        try:
            if event is not None:
                event.synchronize()
            client, layout = self._open()
            results = client.put(names, layout=layout, blocks=ids,
                                 flags=kvfs.PUT_MKDIR | kvfs.PUT_NOREPLACE).results
        except OSError as e:
            self._failed("save", e)
            results = [-errno.EIO] * len(names)
        self._timed("save_seconds", time.monotonic() - t0)
        stored = sum(1 for r in results if r >= 0 or r == -errno.EEXIST)  # already there
        self._count("saved_blocks", stored)
        self._count("saved_bytes", sum(self._block_bytes for r in results if r >= 0))
        self._count("failed_saves", len(names) - stored)

    def drain(self):
        """Waits until every save started so far has landed."""
        with self._saves_lock:
            target = self._saves_queued
            while self._saves_done < target:
                self._saves_cv.wait()

    def get_finished(self, finished_req_ids):
        """(requests finished whose saves have all landed, None): each is
        reported once, by every worker, as vLLM's scheduler waits for."""
        with self._saves_lock:
            for rid in finished_req_ids or ():
                if rid in self._saving:
                    self._finishing.add(rid)
                elif rid in self._saved:
                    self._finished.add(rid)
            done, self._finished = self._finished, set()
            self._saved -= done
        return done or None, None

    def shutdown(self):
        """Lands the saves in flight, then lets go of the mount and every
        region registered through it."""
        with self._saves_lock:
            saver, self._saver = self._saver, None
            if saver is not None:
                self._saves_queued += 1
                self._queue.append((None, None, None, None))
                self._saves_cv.notify_all()
        if saver is not None:
            saver.join()
        self._close_all()

    close = shutdown
