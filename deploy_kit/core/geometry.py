"""KV-cache geometry of a model and the LMCache object sizes that follow from it."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from deploy_kit.core import trusted_yaml

DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1,
               "fp8_e4m3": 1, "fp8_e5m2": 1}

# LMCache's dtype names in object keys (lmcache/utils.py).
LMCACHE_DTYPE_NAMES = {"bfloat16": "bfloat16", "float16": "half", "half": "half",
                       "float32": "float", "float": "float", "fp8": "fp8_e4m3fn",
                       "fp8_e4m3": "fp8_e4m3fn", "fp8_e5m2": "fp8_e5m2"}


@dataclass(frozen=True)
class ModelGeometry:
    """What decides the KV bytes a model stores per token."""

    num_layers: int
    dtype: str = "bfloat16"
    num_kv_heads: int = 0
    head_dim: int = 0
    mla: bool = False
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    # 0: unknown; needed for a complete rope override, not part of the KV geometry
    rope_theta: float = field(default=0.0, compare=False)
    # What a prefill computes (the planner's FLOP model), not part of the KV geometry either.
    # prefill_params: the parameters each token passes through (non-embedding, active
    # experts only); attention_dim: the width of QK^T and AV per layer (heads x head dim).
    # 0: unknown, and the planner says so instead of guessing.
    prefill_params: int = field(default=0, compare=False)
    attention_dim: int = field(default=0, compare=False)
    # What the weights take in device memory (the HBM fit rule): every parameter vLLM loads
    # (embeddings and all experts included) and the dtype they are stored in when it is not
    # `dtype` (fp8 checkpoints). 0 / "": unknown, and the fit rule is skipped with a note.
    params: int = field(default=0, compare=False)
    weight_dtype: str = field(default="", compare=False)
    # the context vLLM serves when --max-model-len is unset (config.json
    # max_position_embeddings); 0: unknown
    max_context: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {self.dtype!r} (known: {', '.join(DTYPE_BYTES)})")
        if self.num_layers <= 0:
            raise ValueError("num_layers must be positive")
        if self.mla and self.kv_lora_rank + self.qk_rope_head_dim <= 0:
            raise ValueError("an MLA model needs kv_lora_rank and qk_rope_head_dim")
        if not self.mla and (self.num_kv_heads <= 0 or self.head_dim <= 0):
            raise ValueError("num_kv_heads and head_dim must be positive")
        if self.weight_dtype and self.weight_dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown weight_dtype {self.weight_dtype!r}")


@dataclass(frozen=True)
class ChunkLayout:
    """How one LMCache chunk of a model lands in the object store."""

    bytes_per_token: int  # all ranks together, i.e. what the model's KV costs per token
    object_bytes: int  # one S3 object (one TP/PP rank's share of one chunk)
    objects_per_chunk: int
    chunk_tokens: int

    @property
    def chunk_bytes(self) -> int:
        """Bytes in the bucket per chunk (all objects of the chunk)."""
        return self.object_bytes * self.objects_per_chunk


def kv_dtype_bytes(geometry: ModelGeometry, kv_cache_dtype: str) -> int:
    """vLLM's --kv-cache-dtype 'auto' keeps the model dtype; fp8 variants are one byte."""
    if kv_cache_dtype == "auto":
        return DTYPE_BYTES[geometry.dtype]
    return DTYPE_BYTES[kv_cache_dtype]


def bytes_per_token(geometry: ModelGeometry, dtype_bytes: int) -> int:
    """2 (K and V) x layers x KV heads x head dim x dtype size; MLA stores one latent."""
    if geometry.mla:
        latent = geometry.kv_lora_rank + geometry.qk_rope_head_dim
        return geometry.num_layers * latent * dtype_bytes
    return 2 * geometry.num_layers * geometry.num_kv_heads * geometry.head_dim * dtype_bytes


# What LMCache's aesgcm serde adds to each stored object: a version byte, the 12-byte IV
# and the 16-byte GCM tag (lmcache 0.5.6 v1/distributed/serde/aesgcm.py:31-36, 87-93)
AESGCM_FRAME_BYTES = 1 + 12 + 16


def chunk_layout(geometry: ModelGeometry, *, chunk_tokens: int, tensor_parallel: int,
                 pipeline_parallel: int = 1, dtype_bytes: int = 2,
                 frame_bytes: int = 0) -> ChunkLayout:
    """One object per TP x PP rank; MLA models store a single object from rank 0.

    Each rank holds max(1, kv_heads // tp) heads (heads are replicated when TP > heads) and
    num_layers // pp layers, matching LMCacheMetadata.get_shapes(). `frame_bytes`: what an
    encrypting serde adds to each object (AESGCM_FRAME_BYTES; 0: stored as is).
    """
    if tensor_parallel < 1 or pipeline_parallel < 1:
        raise ValueError("tensor and pipeline parallel sizes must be >= 1")
    total = bytes_per_token(geometry, dtype_bytes)
    if geometry.mla:
        per_object_token = total
        objects = 1
    else:
        if geometry.num_kv_heads % tensor_parallel and tensor_parallel % geometry.num_kv_heads:
            raise ValueError(f"TP {tensor_parallel} does not divide {geometry.num_kv_heads} "
                             "KV heads (vLLM refuses it; no sizing is possible)")
        heads_per_rank = max(1, geometry.num_kv_heads // tensor_parallel)
        layers_per_stage = -(-geometry.num_layers // pipeline_parallel)
        per_object_token = 2 * layers_per_stage * heads_per_rank * geometry.head_dim * dtype_bytes
        objects = tensor_parallel * pipeline_parallel
    return ChunkLayout(bytes_per_token=total,
                       object_bytes=per_object_token * chunk_tokens + frame_bytes,
                       objects_per_chunk=objects, chunk_tokens=chunk_tokens)


def weight_bytes(geometry: ModelGeometry, vllm_dtype: str = "auto") -> int | None:
    """Bytes of all weights (every device together); None when the parameter count is
    unknown. A quantised checkpoint keeps its weight_dtype; otherwise --dtype (when it names
    a float type) or the model's dtype."""
    if geometry.params <= 0:
        return None
    dtype = geometry.weight_dtype or (vllm_dtype if vllm_dtype in DTYPE_BYTES
                                      else geometry.dtype)
    return geometry.params * DTYPE_BYTES[dtype]


def kv_bytes_per_token_per_device(geometry: ModelGeometry, *, tensor_parallel: int,
                                  pipeline_parallel: int = 1, dtype_bytes: int = 2) -> int:
    """The KV one device holds per token: its pipeline stage's layers and its share of the
    KV heads (one head at least: vLLM replicates heads when TP exceeds them). MLA's latent
    is not split over TP: every rank keeps all of it."""
    layers = -(-geometry.num_layers // pipeline_parallel)
    if geometry.mla:
        return layers * (geometry.kv_lora_rank + geometry.qk_rope_head_dim) * dtype_bytes
    heads = max(1, geometry.num_kv_heads // tensor_parallel)
    return 2 * layers * heads * geometry.head_dim * dtype_bytes


def prefill_flops(geometry: ModelGeometry, tokens: int) -> float | None:
    """FLOPs of one cold prefill of `tokens`: 2 per parameter per token, plus causal
    attention's quadratic term (QK^T and AV over half the T x T matrix: 2 T^2 d per layer).
    None when the geometry does not carry its parameter count."""
    if geometry.prefill_params <= 0 or geometry.attention_dim <= 0:
        return None
    return (2.0 * geometry.prefill_params * tokens
            + 2.0 * geometry.num_layers * tokens * tokens * geometry.attention_dim)


def dense_prefill_params(layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int,
                         mlp_width: int) -> int:
    """Per-token parameters of a decoder of gated-MLP layers: Q, K, V and O projections plus
    gate, up and down (`mlp_width`: the intermediate size, or the active experts' sum)."""
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    return layers * (attention + 3 * hidden * mlp_width)


@cache
def presets() -> dict[str, ModelGeometry]:
    text = resources.files("deploy_kit").joinpath("data/models.yaml").read_text()
    raw: dict[str, dict[str, Any]] = trusted_yaml.load(text)
    return {name: ModelGeometry(**fields) for name, fields in raw.items()}


def find_preset(model: str) -> ModelGeometry | None:
    """Match the model string exactly, then by its last path part (local paths, mirrors)."""
    table = presets()
    if model in table:
        return table[model]
    tail = model.rstrip("/").rsplit("/", 1)[-1].lower()
    for name, geometry in table.items():
        if name.rsplit("/", 1)[-1].lower() == tail:
            return geometry
    return None


_HF_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}


# Far above any published model (405B: 126 layers, 8 KV heads of 128; DeepSeek-V3: rank
# 512), far below what would make the sizing arithmetic meaningless.
GEOMETRY_BOUNDS = {"num_hidden_layers": 4096, "num_attention_heads": 16384,
                   "num_key_value_heads": 16384, "head_dim": 16384, "hidden_size": 1 << 20,
                   "kv_lora_rank": 1 << 16, "qk_rope_head_dim": 16384}


def _positive(data: dict[str, Any], key: str, default: Any = None) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{key} is {value!r}, not a positive integer")
    if value > GEOMETRY_BOUNDS[key]:
        raise ValueError(f"{key} is {value}, beyond any model (at most {GEOMETRY_BOUNDS[key]})")
    return value


def from_hf_config(path: Path) -> ModelGeometry:
    """Geometry from a Hugging Face config.json (the text_config of multimodal models).

    The read is bounded (a regular file of at most 16 MiB: a FIFO or device is refused at
    once) and every field is type-checked, so a bad file raises ValueError, nothing else."""
    from deploy_kit.safe_read import MAX_JSON_BYTES, check_structure, read_text

    try:
        data: Any = json.loads(read_text(path, MAX_JSON_BYTES))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    why = check_structure(data)
    if why:
        raise ValueError(f"the JSON {why}")
    if not isinstance(data, dict):
        raise ValueError(f"the JSON is a {type(data).__name__}, not an object")
    text = data.get("text_config", data)
    data = text if isinstance(text, dict) else data
    dtype = _HF_DTYPES.get(str(data.get("torch_dtype") or data.get("dtype") or "bfloat16"),
                           "bfloat16")
    layers = _positive(data, "num_hidden_layers")
    # transformers 4 writes rope_theta at the top level, transformers 5 inside rope_parameters
    rope_raw = data.get("rope_parameters")
    rope: dict[str, Any] = rope_raw if isinstance(rope_raw, dict) else {}
    try:
        theta = float(data.get("rope_theta") or rope.get("rope_theta") or 0.0)
    except (TypeError, ValueError, OverflowError):
        raise ValueError("rope_theta is not a number") from None
    if not math.isfinite(theta) or theta < 0:
        raise ValueError(f"rope_theta is {theta}, not a finite, non-negative number")
    if data.get("kv_lora_rank"):
        return ModelGeometry(num_layers=layers, dtype=dtype, mla=True,
                             kv_lora_rank=_positive(data, "kv_lora_rank"),
                             qk_rope_head_dim=_positive(data, "qk_rope_head_dim", 1)
                             if "qk_rope_head_dim" in data else 0, rope_theta=theta)
    heads = _positive(data, "num_attention_heads")
    kv_heads = _positive(data, "num_key_value_heads", heads) \
        if data.get("num_key_value_heads") is not None else heads
    if data.get("head_dim") is not None:
        head_dim = _positive(data, "head_dim")
    else:
        head_dim = _positive(data, "hidden_size") // heads
    if kv_heads > heads or heads % kv_heads:
        raise ValueError(f"num_key_value_heads {kv_heads} does not divide "
                         f"num_attention_heads {heads}")
    params = _prefill_params(data, layers, heads, kv_heads, head_dim)
    return ModelGeometry(num_layers=layers, dtype=dtype, num_kv_heads=kv_heads,
                         head_dim=head_dim, rope_theta=theta, prefill_params=params,
                         attention_dim=heads * head_dim if params else 0,
                         params=_total_params(data, params),
                         max_context=_count(data.get("max_position_embeddings")))


def _count(value: Any) -> int:
    """A non-negative int from config.json, else 0 (no guess from a bool, float or text)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _total_params(data: dict[str, Any], prefill_params: int) -> int:
    """All weights of a dense, unquantised model: the per-token parameters plus the
    embeddings (twice when the LM head is not tied); norms are left out (under 0.01 %).
    0 for a MoE model (prefill_params counts only the active experts), a quantised
    checkpoint (its bytes per weight are not the dtype's) or a missing vocab_size: the fit
    rule then says it cannot judge instead of guessing."""
    vocab = _count(data.get("vocab_size"))
    if not prefill_params or not vocab or data.get("num_experts_per_tok") or \
            data.get("quantization_config"):
        return 0
    embeddings = vocab * _count(data.get("hidden_size"))
    return prefill_params + embeddings * (1 if data.get("tie_word_embeddings") else 2)


def _prefill_params(data: dict[str, Any], layers: int, heads: int, kv_heads: int,
                    head_dim: int) -> int:
    """The planner's parameter count from config.json (0 when a field it needs is absent
    or odd: the planner then reports no prediction rather than a wrong one). MoE configs
    (Qwen3-MoE, Mixtral) count the experts a token passes through."""
    try:
        hidden = _positive(data, "hidden_size")
        experts = _count(data.get("num_experts_per_tok"))
        if experts:
            width = _count(data.get("moe_intermediate_size") or data.get("intermediate_size"))
            mlp = experts * width + _count(data.get("shared_expert_intermediate_size") or 0)
        else:
            mlp = _count(data.get("intermediate_size"))
        if not 0 < mlp <= 1 << 24:
            return 0
    except ValueError:
        return 0
    return dense_prefill_params(layers, hidden, heads, kv_heads, head_dim, mlp)
