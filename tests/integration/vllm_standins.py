# SPDX-License-Identifier: MIT
"""Stand-ins for the vLLM objects a KV connector is handed, following vLLM's
own definitions field by field (client/python/vllm-interface.md names the
file and commit each was read from): the scheduler's SchedulerOutput,
NewRequestData and CachedRequestData, the Request with its block hashes
(hash_block_tokens over the parent hash, the block's token ids and the
extra keys: LoRA name, multimodal identifiers, cache_salt, prompt-embedding
digests; NONE_HASH seeded from PYTHONHASHSEED as init_none_hash does),
KVCacheBlocks, and the KV-cache config (KVCacheConfig, KVCacheGroupSpec,
FullAttentionSpec, KVCacheTensor). Fields a connector never reads keep
their place and their defaults, so a connector that reads one by mistake
sees what vLLM would give it.
"""

import enum
import hashlib
import os
import pickle
from dataclasses import dataclass, field
from types import SimpleNamespace as NS

# --- vllm/v1/core/kv_cache_utils.py ---------------------------------------


def sha256(obj):
    """vllm.utils.hashing.sha256: SHA-256 of the pickled object."""
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def none_hash(hash_fn=sha256):
    """init_none_hash: the seed of every chain; random per process without PYTHONHASHSEED."""
    seed = os.environ.get("PYTHONHASHSEED")
    return os.urandom(32) if seed is None else hash_fn(seed)


def hash_block_tokens(hash_fn, parent, token_ids, extra_keys=None):
    return hash_fn((parent or none_hash(hash_fn), tuple(token_ids), extra_keys))


def extra_keys(request, start, end):
    """generate_block_hash_extra_keys: LoRA name, the multimodal inputs that
    overlap [start, end) (identifier, offset in the block), cache_salt on
    the first block, a digest of the prompt embeddings of the block."""
    keys = []
    if request.lora_request is not None:
        keys.append(request.lora_request.lora_name)
    for f in request.mm_features or ():
        if f.mm_position.offset < end and start < f.mm_position.offset + f.mm_position.length:
            keys.append((f.identifier, f.mm_position.offset - start))
    if start == 0 and request.cache_salt:
        keys.append(request.cache_salt)
    if request.prompt_embeds is not None:  # a float32 tensor of (tokens, hidden)
        keys.append(hashlib.sha256(request.prompt_embeds[start:end].numpy().tobytes()).digest())
    return tuple(keys) or None


def get_request_block_hasher(hash_block_size, hash_fn=sha256):
    def hasher(request):
        hashes = []
        parent = request.block_hashes[-1] if request.block_hashes else None
        start = len(request.block_hashes) * hash_block_size
        while start + hash_block_size <= request.num_tokens:
            end = start + hash_block_size
            parent = hash_block_tokens(hash_fn, parent, request.all_token_ids[start:end],
                                       extra_keys(request, start, end))
            hashes.append(parent)
            start = end
        return hashes
    return hasher


# --- vllm/v1/request.py ----------------------------------------------------


class RequestStatus(enum.IntEnum):
    WAITING = enum.auto()
    WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR = enum.auto()
    WAITING_FOR_REMOTE_KVS = enum.auto()
    WAITING_FOR_STREAMING_REQ = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_STOPPED = enum.auto()


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str = ""


@dataclass
class PlaceholderRange:
    offset: int
    length: int


@dataclass
class MultiModalFeatureSpec:
    data: object
    modality: str
    identifier: str
    mm_position: PlaceholderRange


class Request:
    """vllm.v1.request.Request: the constructor's parameters in order, and
    the attributes a connector may read."""

    def __init__(self, request_id, prompt_token_ids, sampling_params=None, pooling_params=None,
                 client_index=0, arrival_time=None, prompt_embeds=None, prompt_is_token_ids=None,
                 mm_features=None, lora_request=None, cache_salt=None, priority=0,
                 trace_headers=None, block_hasher=None, resumable=False):
        self.request_id = request_id
        self.client_index = client_index
        self.priority = priority
        self.sampling_params = sampling_params
        self.pooling_params = pooling_params
        self.lora_request = lora_request
        self.arrival_time = arrival_time
        self.status = RequestStatus.WAITING
        self.kv_transfer_params = None
        self.prompt_token_ids = prompt_token_ids
        self.prompt_embeds = prompt_embeds
        self.prompt_is_token_ids = prompt_is_token_ids
        self.num_prompt_tokens = len(prompt_token_ids) if prompt_token_ids is not None \
            else len(prompt_embeds)
        self._output_token_ids = []
        self._all_token_ids = list(prompt_token_ids) if prompt_token_ids is not None \
            else [0] * self.num_prompt_tokens
        self.spec_token_ids = []
        self.num_computed_tokens = 0
        self.cache_salt = cache_salt
        self.mm_features = mm_features or []
        self.num_preemptions = 0
        self.block_hashes = []
        self._block_hasher = block_hasher
        self.skip_reading_prefix_cache = False
        self.update_block_hashes()

    @property
    def all_token_ids(self):
        return tuple(self._all_token_ids)

    @property
    def output_token_ids(self):
        return tuple(self._output_token_ids)

    @property
    def num_tokens(self):
        return len(self._all_token_ids)

    def append_output_token_ids(self, token_ids):
        token_ids = [token_ids] if isinstance(token_ids, int) else list(token_ids)
        self._output_token_ids.extend(token_ids)
        self._all_token_ids.extend(token_ids)
        self.update_block_hashes()

    def update_block_hashes(self):
        if self._block_hasher is not None:
            self.block_hashes.extend(self._block_hasher(self))


# --- vllm/v1/core/kv_cache_manager.py, kv_cache_utils.py -------------------


@dataclass
class KVCacheBlock:
    block_id: int
    ref_cnt: int = 0
    _block_hash: bytes = None
    is_null: bool = False


@dataclass
class KVCacheBlocks:
    blocks: tuple  # blocks[i][j]: the i-th KV-cache group's j-th block

    def get_block_ids(self, allow_none=False):
        if allow_none and all(len(g) == 0 for g in self.blocks):
            return None
        return tuple([b.block_id for b in g] for g in self.blocks)


NULL_BLOCK = KVCacheBlock(0, is_null=True)  # BlockPool.null_block: the pool's first block


def kv_blocks(*groups):
    """KVCacheBlocks of block ids, one list per group; id 0 is the null block
    (a sliding-window group's blocks out of the window)."""
    return KVCacheBlocks(tuple([NULL_BLOCK if i == 0 else KVCacheBlock(i) for i in ids]
                               for ids in groups))


# --- vllm/v1/kv_cache_interface.py -----------------------------------------


@dataclass(frozen=True)
class FullAttentionSpec:
    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: object
    head_size_v: int = None
    sliding_window: int = None


@dataclass(frozen=True)
class MLAAttentionSpec(FullAttentionSpec):
    cache_dtype_str: str = None


@dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec:
    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: object
    head_size_v: int = None
    sliding_window: int
    extra_retained_tokens: int = 0


@dataclass(frozen=True)
class MambaSpec:
    block_size: int
    shapes: tuple
    dtypes: tuple
    page_size_padded: int = None
    mamba_type: str = "mamba2"
    mamba_cache_mode: str = "none"
    num_speculative_blocks: int = 0


@dataclass
class KVCacheTensor:
    size: int
    layers: list
    layer_stride: int
    block_stride: int
    offset: int = 0


@dataclass
class KVCacheGroupSpec:
    layer_names: list
    kv_cache_spec: object
    is_eagle_group: bool = False
    enable_kv_transfer: bool = True


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: list
    kv_cache_groups: list
    prefix_cache_retention_interval: int = None
    kv_cache_layout: str = None


# --- vllm/v1/core/sched/output.py ------------------------------------------


@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: list
    mm_features: list
    sampling_params: object
    pooling_params: object
    block_ids: tuple  # one list per KV-cache group
    num_computed_tokens: int
    lora_request: object
    prompt_embeds: object = None
    prompt_is_token_ids: list = None
    prefill_token_ids: list = None

    @classmethod
    def from_request(cls, request, block_ids):
        return cls(request.request_id, request.prompt_token_ids, request.mm_features,
                   request.sampling_params, request.pooling_params, block_ids,
                   request.num_computed_tokens, request.lora_request, request.prompt_embeds)


@dataclass
class CachedRequestData:
    req_ids: list
    resumed_req_ids: set
    new_token_ids: list
    all_token_ids: dict
    new_block_ids: list  # per request: tuple of lists (one per group), or None
    num_computed_tokens: list
    num_output_tokens: list

    @classmethod
    def make_empty(cls):
        return cls([], set(), [], {}, [], [], [])


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict
    total_num_scheduled_tokens: int
    scheduled_spec_decode_tokens: dict
    scheduled_encoder_inputs: dict
    num_common_prefix_blocks: list
    finished_req_ids: set
    free_encoder_mm_hashes: list
    scheduled_encoder_input_stats: object = None
    preempted_req_ids: set = None
    has_structured_output_requests: bool = False
    pending_structured_output_tokens: bool = False
    num_invalid_spec_tokens: dict = None
    kv_connector_metadata: object = None
    has_sync_kv_loads: bool = False


def scheduler_output(new=(), cached=None, num_scheduled=None, spec=None, finished=(),
                     preempted=(), sync_loads=False):
    """sync_loads: a request the step schedules has a load the connector
    answered (n, False) for (vLLM starts the loads before the forward)."""
    num_scheduled = dict(num_scheduled or {})
    return SchedulerOutput(list(new), cached or CachedRequestData.make_empty(), num_scheduled,
                           sum(num_scheduled.values()), dict(spec or {}), {}, [0],
                           set(finished), [], preempted_req_ids=set(preempted),
                           has_sync_kv_loads=sync_loads)


# --- vllm/v1/outputs.py -----------------------------------------------------


@dataclass
class KVConnectorOutput:
    finished_sending: set = None
    finished_recving: set = None
    kv_connector_stats: object = None
    kv_cache_events: object = None
    kv_connector_worker_meta: object = None
    invalid_block_ids: set = frozenset()
    failed_recving: set = frozenset()
    expected_finished_count: int = 0
    prefix_replay_checkpoints: dict = field(default_factory=dict)


# --- the vllm_config a connector reads -------------------------------------


def vllm_config(kvfs_path, model="org/tiny-llm", block_size=16, tp_size=1, pp_size=1,
                tp_rank=0, pp_rank=0, cache_dtype="auto", hybrid=False, load=None):
    extra = {"kvfs_path": kvfs_path, "tp_rank": tp_rank, "pp_rank": pp_rank}
    if load is not None:
        extra["kvfs_load"] = load
    return NS(kv_transfer_config=NS(kv_connector="KvfsConnector",
                                    kv_connector_module_path="kvfs.vllm", kv_role="kv_both",
                                    kv_connector_extra_config=extra, is_kv_producer=True),
              model_config=NS(model=model),
              cache_config=NS(block_size=block_size, cache_dtype=cache_dtype,
                              prefix_caching_hash_algo="sha256"),
              parallel_config=NS(tensor_parallel_size=tp_size, pipeline_parallel_size=pp_size),
              scheduler_config=NS(disable_hybrid_kv_cache_manager=not hybrid))


def kv_cache_config(num_blocks, layers, spec, layout="LBNHC", groups=()):
    """One group of `layers` and `spec`, or `groups`: (layers, spec) each."""
    groups = groups or [(layers, spec)]
    return KVCacheConfig(num_blocks, [], [KVCacheGroupSpec(list(n), s) for n, s in groups],
                         kv_cache_layout=layout)
