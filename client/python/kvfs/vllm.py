# SPDX-License-Identifier: MIT
"""
kvfs.vllm — a vLLM v1 KV connector that keeps KV-cache blocks in kvfs.

vLLM hands the connector nothing but its KV-cache tensors (one per layer)
and block ids; kvfs moves the bytes itself. The worker registers every
layer's tensor once (device memory: kvfs' CUDA backend; CPU memory: the
host path) and one *layout* over all of them, so "block 17" means the
concatenation of block 17's K and V slices of every layer. A save is then
one batch put of (key, block id) pairs and a load one batch get: the daemon
copies device -> DRAM and DRAM (or SSD) -> device on its own streams.

Keys are `<model>/tp<N>-bs<B>-<kv dtype>/<tp rank>/<block hash>`: the hash
of a full block chains the hash of the block before it with the block's
token ids (SHA-256, so every process and every node names a prefix the same
way), the model name with "/" spelt "--"; the shape component keeps
deployments whose blocks differ (tensor-parallel size, block size, KV
dtype) from reading each other's bytes. A prompt's cached prefix is the leading run of hits of
one batch lookup over its block hashes, for every tensor-parallel rank.

Enable it in vLLM once the kvfs Python package is installed (pip install
./client/python, or the python3-kvfs package):

    vllm serve MODEL --kv-transfer-config '{
        "kv_connector": "KvfsConnector",
        "kv_connector_module_path": "kvfs.vllm",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"kvfs_path": "/mnt/kvfs"}}'

kv_connector_extra_config: kvfs_path (a directory in a kvfs mount,
required), model (the key prefix; default: the served model's name).

The flow, as vLLM calls it:
  scheduler  get_num_new_matched_tokens(request, num_computed_tokens)
               -> batch lookup of the prompt's block hashes (all ranks);
                  the tokens of the leading hits past num_computed_tokens
             update_state_after_alloc(request, blocks, num_external_tokens)
               -> remembers which block ids the hits load into
             build_connector_meta(scheduler_output)
               -> per step: the loads, and the saves of every block that
                  this step's forward pass completes (prompt or generated
                  tokens, not loaded from kvfs) for the workers
             request_finished(request, block_ids) -> (False, None): saves
               end inside the step, the blocks may be freed at once
  worker     register_kv_caches(kv_caches) -> regions and one layout
             start_load_kv(forward_context) -> one batch get of every load
             wait_for_layer_load(layer) -> nothing left (loaded above)
             save_kv_layer(layer, ...) -> notes the layer is written
             wait_for_save() -> synchronises the device, one batch put
             get_finished(ids) -> (None, None): nothing asynchronous

Saves follow a request through every step: each chunk of a chunked
prefill, and decode steps, save the blocks they fill (the scheduler keeps
the request's block ids across steps, new ones appended, all of them
replaced when it resumes from preemption; speculative tokens not yet
accepted do not count). Loads and saves are synchronous within the step (no
async loading, nothing held after request_finished).

Standard library and the kvfs Python module only. vLLM itself is imported
when present; without it (tests) minimal stand-ins of its base classes
take their place.
"""

import enum
import errno
import hashlib
import logging
from dataclasses import dataclass, field

import kvfs

log = logging.getLogger("kvfs.vllm")

try:  # the real base classes when vLLM is installed
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # noqa: F401
        KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole)
except ImportError:  # stand-ins with the same names and the methods used here
    class KVConnectorRole(enum.Enum):
        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata:
        pass

    class KVConnectorBase_V1:
        def __init__(self, vllm_config, role, kv_cache_config=None):
            self._vllm_config = vllm_config
            self._role = role
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


class HashChain:
    """The block hashes of a token sequence, extended as it grows: block b's
    hash is SHA-256 over block b-1's and block b's token ids (hex, 16 bytes)."""

    def __init__(self, block_size):
        self.block_size = block_size
        self.hashes = []
        self._parent = b""

    def extend(self, token_ids, blocks):
        """Hashes the full blocks of token_ids up to `blocks` not hashed yet."""
        bs = self.block_size
        for b in range(len(self.hashes), min(blocks, len(token_ids) // bs)):
            h = hashlib.sha256(self._parent)
            h.update(b"".join(int(t).to_bytes(4, "little", signed=False)
                              for t in token_ids[b * bs:(b + 1) * bs]))
            self._parent = h.digest()
            self.hashes.append(self._parent[:16].hex())
        return self.hashes


def block_hashes(token_ids, block_size, limit=None):
    """Chained SHA-256 of each full block of token_ids (at most `limit`), hex."""
    n = len(token_ids) // block_size
    return list(HashChain(block_size).extend(token_ids, n if limit is None else min(n, limit)))


@dataclass
class SimpleRequest:
    """What the connector reads of a request it was never asked about."""
    request_id: str
    prompt_token_ids: list


@dataclass
class _Track:
    """A request the scheduler side follows from step to step."""
    request: object    # vLLM's Request: its token ids grow as it generates
    chain: HashChain
    block_ids: list = field(default_factory=list)
    stored: int = 0    # leading blocks kvfs holds: saved, loaded or matched


def _group0(ids):
    """The block ids of the first KV-cache group (vLLM passes a tuple per group)."""
    if ids and isinstance(ids[0], (list, tuple)):
        return list(ids[0])
    return list(ids or ())


def _cached_reqs(out):
    """(req_id, new block ids or None, resumed from preemption, tokens computed
    before the step) of each running request a step schedules, in the two
    shapes vLLM has used: one object of parallel lists (resumed_req_ids, or
    earlier resumed_from_preemption), or a list of one object per request."""
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


@dataclass
class ReqMeta:
    """One request's work for the workers in one step: load or save
    hashes[i] <-> block_ids[i]."""
    req_id: str
    hashes: list
    block_ids: list
    load: bool


@dataclass
class KvfsConnectorMetadata(KVConnectorMetadata):
    requests: list = field(default_factory=list)


def _extra(vllm_config):
    return getattr(vllm_config.kv_transfer_config, "kv_connector_extra_config", None) or {}


def _tp(vllm_config):
    """(this process's tensor-parallel rank, the tensor-parallel size)."""
    size = getattr(vllm_config.parallel_config, "tensor_parallel_size", 1)
    rank = _extra(vllm_config).get("tp_rank")
    if rank is None:
        try:
            from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
            rank = get_tensor_model_parallel_rank()
        except Exception:
            rank = 0
    return int(rank), int(size)


class KvfsConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role, kv_cache_config=None):
        try:
            super().__init__(vllm_config, role, kv_cache_config)
        except TypeError:  # vLLM before kv_cache_config was passed to connectors
            super().__init__(vllm_config, role)
        extra = _extra(vllm_config)
        path = extra.get("kvfs_path")
        if not path:
            raise ValueError("kvfs connector: kv_connector_extra_config needs kvfs_path")
        model = extra.get("model") or vllm_config.model_config.model
        self.model = str(model).replace("/", "--")
        self.block_size = vllm_config.cache_config.block_size
        self.rank, self.tp_size = _tp(vllm_config)
        self.shape = "tp%d-bs%d-%s" % (self.tp_size, self.block_size,
                                       getattr(vllm_config.cache_config, "cache_dtype", "auto"))
        self.client = kvfs.Client(path)
        # scheduler side
        self._tracks = {}     # req_id -> _Track, from the first question to request_finished
        self._loads = {}      # req_id -> ReqMeta to send with the next step
        # req_id -> tokens vLLM had computed locally (its prefix cache) when it
        # asked: update_state_after_alloc runs before request.num_computed_tokens is set
        self._computed = {}
        # worker side
        self._layout = None
        self._regions = []
        self._layers = []
        self._on_device = False
        self._pending_saves = []
        self._load_errors = set()  # block ids whose load failed, for vLLM to recompute
        self.stats = {"lookups": 0, "hit_blocks": 0, "loaded_blocks": 0, "saved_blocks": 0,
                      "failed_blocks": 0}

    def key(self, h, rank=None):
        return "%s/%s/%d/%s" % (self.model, self.shape, self.rank if rank is None else rank, h)

    # ---------------- scheduler side ----------------

    def _track(self, request):
        t = self._tracks.get(request.request_id)
        if t is None:
            t = _Track(request, HashChain(self.block_size))
            self._tracks[request.request_id] = t
        return t

    @staticmethod
    def _tokens(request):
        """The request's token ids so far: the prompt and what it generated."""
        ids = getattr(request, "all_token_ids", None)
        return request.prompt_token_ids if ids is None else ids

    def _prompt_hashes(self, request):
        t = self._track(request)
        return t.chain.extend(request.prompt_token_ids,
                              len(request.prompt_token_ids) // self.block_size)

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        """Tokens past num_computed_tokens that kvfs holds, and whether they
        load asynchronously (never: loads finish in start_load_kv)."""
        hashes = self._prompt_hashes(request)
        # The last prompt token is always computed: only blocks before it count.
        n = min(len(hashes), (len(request.prompt_token_ids) - 1) // self.block_size)
        hit = n
        for rank in range(self.tp_size):
            if hit == 0:
                break
            names = [self.key(h, rank) for h in hashes[:hit]]
            hit = min(hit, self.client.lookup(names).prefix)
        self.stats["lookups"] += 1
        self.stats["hit_blocks"] += hit
        t = self._track(request)
        t.request = request
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
        hashes = self._prompt_hashes(request)
        self._loads[request.request_id] = ReqMeta(
            request.request_id, hashes[first:last], list(block_ids[first:last]), True)
        t = self._track(request)
        t.stored = max(t.stored, last)

    def _saves(self, t, req_id, computed, out):
        """The ReqMeta saving the blocks of t that a step leaves computed
        (computed: tokens before it), or None."""
        spec = len((getattr(out, "scheduled_spec_decode_tokens", None) or {}).get(req_id, ()))
        after = computed + out.num_scheduled_tokens.get(req_id, 0) - spec
        done = min(after // self.block_size, len(t.block_ids))
        hashes = t.chain.extend(self._tokens(t.request), done)
        done = min(done, len(hashes))
        if done <= t.stored:
            return None
        rm = ReqMeta(req_id, hashes[t.stored:done], t.block_ids[t.stored:done], False)
        t.stored = done
        return rm

    def build_connector_meta(self, scheduler_output):
        meta = KvfsConnectorMetadata()
        meta.requests.extend(self._loads.values())
        self._loads = {}
        steps = []
        for new in scheduler_output.scheduled_new_reqs:
            t = self._tracks.get(new.req_id)
            if t is None:  # never asked about (no connector question): its prompt alone
                t = self._track(SimpleRequest(new.req_id, new.prompt_token_ids))
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
                meta.requests.append(rm)
        return meta

    def request_finished(self, request, block_ids):
        self._tracks.pop(request.request_id, None)
        self._loads.pop(request.request_id, None)
        self._computed.pop(request.request_id, None)
        return False, None

    # ---------------- worker side ----------------

    def _register(self, t):
        if getattr(t, "is_cuda", False):
            self._on_device = True
            return self.client.register_device(t.data_ptr(), t.nbytes)
        buf = t.numpy() if hasattr(t, "numpy") else t  # a CPU torch tensor, or a buffer
        return self.client.register(buf)

    def register_kv_caches(self, kv_caches):
        """kv_caches: layer name -> tensor of shape (2, num_blocks, ...): K
        then V, block-major, as vLLM's FlashAttention backend lays them out.
        Registers each tensor once and one layout over all of them."""
        segs = []
        for name, t in kv_caches.items():
            # Other layouts ((num_blocks, 2, ...) of FlashInfer, MLA's single
            # tensor) would be saved and loaded as garbage: refuse them.
            if t.shape[0] != 2 or not getattr(t, "is_contiguous", lambda: True)():
                raise ValueError("kvfs connector: %s has shape %s; a contiguous "
                                 "(2, num_blocks, ...) K/V tensor is needed"
                                 % (name, tuple(t.shape)))
            num_blocks = t.shape[1]
            half = t.nbytes // 2
            blk = half // num_blocks
            r = self._register(t)
            self._regions.append(r)
            self._layers.append(name)
            segs.append((r, 0, blk, blk))        # K of block b
            segs.append((r, half, blk, blk))     # V of block b
        self._layout = self.client.layout(segs)

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        names, blocks = [], []
        for rm in meta.requests if meta else ():
            if rm.load:
                names += [self.key(h) for h in rm.hashes]
                blocks += rm.block_ids
        if not names:
            return
        r = self.client.get(names, layout=self._layout, blocks=blocks)
        self.stats["loaded_blocks"] += r.ok
        self.stats["failed_blocks"] += len(names) - r.ok
        if r.ok != len(names):
            # A block evicted since the lookup, or stored with another shape:
            # its memory holds garbage. vLLM recomputes the blocks
            # get_block_ids_with_load_errors names.
            self._load_errors.update(b for b, res in zip(blocks, r.results) if res < 0)
            log.warning("kvfs connector: %d of %d blocks failed to load",
                        len(names) - r.ok, len(names))

    def get_block_ids_with_load_errors(self):
        """Block ids whose load failed since the last call (vLLM recomputes them)."""
        failed, self._load_errors = self._load_errors, set()
        return failed

    def wait_for_layer_load(self, layer_name):
        return  # start_load_kv loaded every layer of every block

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        return  # one layout spans all layers: the whole block is saved in wait_for_save

    def wait_for_save(self):
        meta = self._get_connector_metadata()
        names, blocks = [], []
        for rm in meta.requests if meta else ():
            if not rm.load:
                names += [self.key(h) for h in rm.hashes]
                blocks += rm.block_ids
        if not names:
            return
        if self._on_device:  # the put contract: the producing stream is synchronised
            import torch
            torch.cuda.current_stream().synchronize()
        r = self.client.put(names, layout=self._layout, blocks=blocks,
                            flags=kvfs.PUT_MKDIR | kvfs.PUT_NOREPLACE)
        stored = sum(1 for x in r.results if x >= 0 or x == -errno.EEXIST)  # already there
        self.stats["saved_blocks"] += stored
        self.stats["failed_blocks"] += len(names) - stored

    def get_finished(self, finished_req_ids):
        return None, None

    def close(self):
        self.client.close()
