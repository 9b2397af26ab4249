"""When does a remote KV hit beat recompute? (pure)

A remote hit only helps when storage delivers a prefix's KV bytes faster than the
accelerator recomputes them (the seed's lesson). Per serving group (model, parallelism,
accelerator) and context length this predicts the cold prefill time from the model's FLOPs
(geometry.prefill_flops: 2 per parameter per token plus causal attention's quadratic term)
against the device's dense bf16 peak times a stated efficiency, and the **break-even
bandwidth**: the GET throughput per serving host above which reading the KV is faster than
computing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deploy_kit.config.models import HostConfig
from deploy_kit.core import compat
from deploy_kit.core.geometry import ModelGeometry, bytes_per_token, kv_dtype_bytes, prefill_flops
from deploy_kit.plan.serving import accelerator_of

# Dense bf16 peak per device, TFLOPS (no sparsity): compat.yaml `accelerator_models`, the one
# table of accelerator models (with their device memory and each figure's source). `cpu` is
# an order of magnitude, not a datasheet figure: measure it (bench/gpu-prefill.py) and set
# vllm_prefill_tflops.
PEAK_TFLOPS = {name: m.bf16_tflops for name, m in compat.accelerator_models().items()}
# the share of the peak a long prefill reaches (model FLOPs utilisation); stated, not
# measured here: vllm_prefill_tflops replaces peak x efficiency with a measured figure
EFFICIENCY = 0.5
CONTEXTS = (4096, 8192, 16384, 32768, 65536, 131072)


@dataclass
class BreakEvenRow:
    context_tokens: int
    kv_bytes: int
    predicted_prefill_s: float | None
    storage_s: float  # the KV bytes at the assumed GET bandwidth per serving host
    breakeven_storage_gbps: float | None  # Gbit/s per serving host; None: no FLOP model
    remote_wins: bool | None  # at the assumed bandwidth


@dataclass
class ServingGroupPlan:
    model: str
    accelerator: str
    device: str
    tensor_parallel: int
    effective_tflops: float  # per device, what the prediction divides by
    tflops_source: str
    storage_gbps: float  # the assumed GET bandwidth per serving host
    hosts: list[str]
    rows: list[BreakEvenRow] = field(default_factory=list)
    note: str = ""
    # the prompt length from which a remote hit beats recompute (breakeven_tokens)
    breakeven_tokens: int | None = None
    # host -> the min_retrieve_tokens its lmcache.yaml gets (in-process hosts only)
    min_retrieve_tokens: dict[str, int] = field(default_factory=dict)
    # host -> the break-even not rendered because an input is a guess (unmeasured_inputs)
    retrieve_advice: dict[str, int] = field(default_factory=dict)
    unmeasured: list[str] = field(default_factory=list)


def device_of(c: HostConfig) -> str:
    return c.vllm_accelerator_model or compat.default_accelerator_model(c.vllm_accelerator
                                                                        or "cuda")


def effective_tflops(c: HostConfig) -> tuple[float, str]:
    if c.vllm_prefill_tflops is not None:
        return c.vllm_prefill_tflops, "measured (vllm_prefill_tflops)"
    device = device_of(c)
    return PEAK_TFLOPS[device] * EFFICIENCY, f"{device} peak {PEAK_TFLOPS[device]:g} x {EFFICIENCY}"


def group_plan(model: str, geometry: ModelGeometry, c: HostConfig, hosts: list[str],
               contexts: tuple[int, ...] = CONTEXTS) -> ServingGroupPlan:
    """One serving group's rows. Tensor parallelism splits one prefill over TP devices;
    pipeline stages do not shorten a single prefill, so they are not counted."""
    tflops, source = effective_tflops(c)
    per_token = bytes_per_token(geometry, kv_dtype_bytes(geometry, c.vllm_kv_cache_dtype))
    gbps = c.deploykit_storage_gbps
    plan = ServingGroupPlan(model=model, accelerator=accelerator_of(c),
                            device=device_of(c), tensor_parallel=c.vllm_tensor_parallel_size,
                            effective_tflops=tflops, tflops_source=source, storage_gbps=gbps,
                            hosts=sorted(hosts))
    for tokens in contexts:
        kv = per_token * tokens
        storage_s = kv * 8 / (gbps * 1e9)
        flops = prefill_flops(geometry, tokens)
        if flops is None:
            plan.rows.append(BreakEvenRow(tokens, kv, None, storage_s, None, None))
            continue
        prefill_s = flops / (tflops * 1e12 * c.vllm_tensor_parallel_size)
        breakeven = kv * 8 / prefill_s / 1e9
        plan.rows.append(BreakEvenRow(tokens, kv, prefill_s, storage_s, breakeven,
                                      storage_s < prefill_s))
    plan.breakeven_tokens = breakeven_tokens(geometry, c)
    if any(r.predicted_prefill_s is None for r in plan.rows):
        plan.note = ("no FLOP model for this geometry (its config.json lacks hidden_size or "
                     "intermediate_size, or it is MLA): prefill time not predicted")
    return plan


def losing_contexts(group: ServingGroupPlan, measured_gbps: float) -> list[int]:
    """The context lengths at which a host reading at `measured_gbps` loses to recompute."""
    return [r.context_tokens for r in group.rows
            if r.breakeven_storage_gbps is not None and measured_gbps < r.breakeven_storage_gbps]


# the longest prompt the search considers (tokens): no model serves more
MAX_TOKENS = 1 << 24


def breakeven_tokens(geometry: ModelGeometry, c: HostConfig) -> int | None:
    """The shortest prompt whose KV one serving host reads from storage (at
    deploykit_storage_gbps) faster than it recomputes it: 0 when every length wins,
    MAX_TOKENS when none does, None without a FLOP model. Recompute grows faster than
    linearly (attention's quadratic term) and reading linearly, so the lengths that win
    are one interval upwards: a bisection finds its start."""
    tflops, _ = effective_tflops(c)
    per_token = bytes_per_token(geometry, kv_dtype_bytes(geometry, c.vllm_kv_cache_dtype))
    rate = tflops * 1e12 * c.vllm_tensor_parallel_size

    def wins(tokens: int) -> bool:
        flops = prefill_flops(geometry, tokens)
        assert flops is not None
        return per_token * tokens * 8 / (c.deploykit_storage_gbps * 1e9) < flops / rate

    if prefill_flops(geometry, 1) is None:
        return None
    if wins(1):
        return 0
    if not wins(MAX_TOKENS):
        return MAX_TOKENS
    lo, hi = 1, MAX_TOKENS  # lo loses, hi wins
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if wins(mid) else (mid, hi)
    return hi


def _retrieve_applies(c: HostConfig) -> bool:
    """An in-process host whose LMCache reads min_retrieve_tokens."""
    if c.lmcache_server:
        return False  # LMCacheMPConnector (server topology) never reads it (0.5.6)
    try:
        return "min_retrieve_tokens" in compat.lmcache_top_level_keys(c.lmcache_version)
    except ValueError:
        return False


def unmeasured_inputs(c: HostConfig) -> list[str]:
    """The break-even inputs this host states but never measured: a guessed break-even is
    not rendered (with the guessed 50 % MFU and 25 Gbit/s it was 87,296 tokens on Gaudi3,
    so the seed's own 20K-token RAG prompts recomputed on the hosts where the seed measured
    its biggest wins)."""
    missing = []
    if "deploykit_storage_gbps" not in c.model_fields_set:
        missing.append("deploykit_storage_gbps (`deploykit bench storage`)")
    if c.vllm_prefill_tflops is None:
        missing.append("vllm_prefill_tflops (bench/gpu-prefill.py)")
    return missing


def retrieve_advice(c: HostConfig, geometry: ModelGeometry | None) -> int | None:
    """The serving group's break-even rounded up to whole chunks: what min_retrieve_tokens
    would be from this host's inputs, measured or not; None without a FLOP model, when
    every hit wins, or on a CPU (its peak is an order of magnitude, compat.yaml)."""
    if geometry is None or (c.vllm_accelerator == "cpu" and c.vllm_prefill_tflops is None):
        return None
    tokens = breakeven_tokens(geometry, c)
    if not tokens:
        return None
    chunk = c.lmcache_chunk_size
    return -(-tokens // chunk) * chunk


def min_retrieve_tokens(c: HostConfig, geometry: ModelGeometry | None) -> int | None:
    """LMCache's min_retrieve_tokens for an in-process host: a hit of fewer new tokens is
    recomputed (lmcache 0.5.6 integration/vllm/vllm_v1_adapter.py:1457-1461: it still counts
    for skipping the re-store). The setting, else the break-even (retrieve_advice) when both
    of its inputs were measured; None: not rendered (LMCache's default 0 reads every hit),
    and `plan` shows the advice."""
    if not _retrieve_applies(c):
        return None
    if c.lmcache_min_retrieve_tokens is not None:
        return c.lmcache_min_retrieve_tokens or None
    if unmeasured_inputs(c):
        return None
    return retrieve_advice(c, geometry)


def unrendered_advice(c: HostConfig, geometry: ModelGeometry | None) -> int | None:
    """The break-even `plan` shows for a host whose min_retrieve_tokens is not rendered
    because an input is a guess."""
    if not _retrieve_applies(c) or c.lmcache_min_retrieve_tokens is not None or \
            not unmeasured_inputs(c):
        return None
    return retrieve_advice(c, geometry)
