"""Does one vLLM instance fit its devices? (pure)

Per device: the weights' share (all weights / (TP x PP)), one `vllm_max_model_len`
request's KV (its layers and KV heads, geometry.kv_bytes_per_token_per_device) and vLLM's
in-budget headroom must fit utilisation x device memory, or vLLM refuses to start. The
numbers come from compat.yaml (`accelerator_models`, `vllm_memory`) and models.yaml.
The same arithmetic sizes the LMCache server's L1: one max-length request of every rank of
one instance, times the host's instances.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from deploy_kit.config.instances import instance_count, workers
from deploy_kit.config.models import HostConfig
from deploy_kit.config.site import Site
from deploy_kit.core import compat
from deploy_kit.core.geometry import (
    ModelGeometry,
    bytes_per_token,
    kv_bytes_per_token_per_device,
    kv_dtype_bytes,
    weight_bytes,
)

GIB = 1024**3


def device_model(c: HostConfig) -> compat.AcceleratorModel:
    name = c.vllm_accelerator_model or compat.default_accelerator_model(
        c.vllm_accelerator or "cuda")
    return compat.accelerator_models()[name]


def utilisation(c: HostConfig) -> tuple[float, str]:
    """--gpu-memory-utilization as vLLM will use it, and where it comes from."""
    if c.vllm_gpu_memory_utilization is not None:
        return c.vllm_gpu_memory_utilization, "vllm_gpu_memory_utilization"
    return (compat.vllm(c.vllm_version).default_gpu_memory_utilization,
            f"vLLM {c.vllm_version}'s default")


def max_model_len(c: HostConfig, geometry: ModelGeometry) -> tuple[int, str] | None:
    """The context of one request: --max-model-len, else the model's (scaled by a rope
    override's factor, as vLLM derives it); None when neither is known."""
    if c.vllm_max_model_len is not None:
        return c.vllm_max_model_len, "vllm_max_model_len"
    if not geometry.max_context:
        return None
    factor = (c.vllm_rope_scaling or {}).get("factor")
    if isinstance(factor, int | float) and not isinstance(factor, bool) and factor > 1:
        return int(geometry.max_context * factor), "the model's context x the rope factor"
    return geometry.max_context, "the model's context (vllm_max_model_len unset)"


def request_kv_bytes(c: HostConfig, geometry: ModelGeometry, tokens: int) -> int:
    """KV of one `tokens`-long request over every rank of one instance (what LMCache stores:
    MLA keeps one copy, heads replicated over TP are stored by each rank)."""
    per_device = kv_bytes_per_token_per_device(
        geometry, tensor_parallel=c.vllm_tensor_parallel_size,
        pipeline_parallel=c.vllm_pipeline_parallel_size,
        dtype_bytes=kv_dtype_bytes(geometry, c.vllm_kv_cache_dtype))
    if geometry.mla:
        return bytes_per_token(geometry, kv_dtype_bytes(geometry, c.vllm_kv_cache_dtype)) \
            * tokens
    return per_device * tokens * workers(c)


@dataclass(frozen=True)
class DeviceFit:
    """One device of one instance: what vLLM must hold there and what the budget allows."""

    device: str
    hbm_bytes: int
    utilisation: float
    utilisation_source: str
    weights_bytes: int  # this device's share
    headroom_bytes: int
    graph_bytes: int  # the CUDA/HIP graph pool vLLM takes out of the budget (graph_bytes())
    graph_reserved: float  # share of the KV budget kept for graphs (vllm-gaudi)
    kv_per_token: int  # bytes per token on this device
    max_model_len: int
    max_model_len_source: str
    instances: int  # on the host

    @property
    def budget_bytes(self) -> int:
        return int(self.utilisation * self.hbm_bytes)

    @property
    def kv_budget_bytes(self) -> int:
        free = self.budget_bytes - self.weights_bytes - self.headroom_bytes - self.graph_bytes
        return max(0, int(free * (1 - self.graph_reserved)))

    @property
    def request_bytes(self) -> int:
        """One max-length request's KV on this device."""
        return self.kv_per_token * self.max_model_len

    @property
    def kv_capacity_tokens(self) -> int:
        return self.kv_budget_bytes // self.kv_per_token

    @property
    def requests_fit(self) -> int:
        return self.kv_capacity_tokens // self.max_model_len

    @property
    def fits(self) -> bool:
        return self.requests_fit >= 1

    def utilisation_needed(self) -> float:
        need = self.weights_bytes + self.headroom_bytes + self.graph_bytes + \
            self.request_bytes / (1 - self.graph_reserved)
        return need / self.hbm_bytes


def graph_bytes(c: HostConfig, geometry: ModelGeometry) -> int:
    """The CUDA/HIP graph pool per device that vLLM counts inside its budget (compat.yaml
    `cudagraph_in_budget`): the measured vllm_cuda_graph_gib, else the per-layer estimate
    for the layers on one device; 0 with --enforce-eager, on Gaudi (graph_reserved_fraction)
    and CPU, and on rows that capture outside the budget."""
    runtime = c.vllm_accelerator or "cuda"
    if runtime not in ("cuda", "rocm") or c.vllm_enforce_eager:
        return 0
    try:
        if not compat.vllm(c.vllm_version).cudagraph_in_budget:
            return 0
    except ValueError:
        return 0
    if c.vllm_cuda_graph_gib is not None:
        return int(c.vllm_cuda_graph_gib * GIB)
    layers = -(-geometry.num_layers // c.vllm_pipeline_parallel_size)
    return int(layers * compat.vllm_memory().cuda_graph_gib_per_layer * GIB)


def device_fit(c: HostConfig, geometry: ModelGeometry) -> DeviceFit | str:
    """The fit of one device, or why it cannot be judged (a note for `plan`)."""
    model = device_model(c)
    if model.hbm_gib is None:
        return f"{model.name}: no device memory (KV lives in host RAM)"
    weights = weight_bytes(geometry, c.vllm_dtype)
    if weights is None:
        return (f"{c.vllm_model}: parameter count unknown (models.yaml `params`, or a "
                "config.json deploykit can count): device memory not checked")
    length = max_model_len(c, geometry)
    if length is None:
        return (f"{c.vllm_model}: context unknown (set vllm_max_model_len): one request's "
                "KV not checked")
    memory = compat.vllm_memory()
    runtime = c.vllm_accelerator or "cuda"
    try:
        util, util_source = utilisation(c)
    except ValueError:  # unsupported vllm_version: versions_supported reports it
        return f"vLLM {c.vllm_version} unknown: device memory not checked"
    return DeviceFit(
        device=model.name, hbm_bytes=int(model.hbm_gib * GIB), utilisation=util,
        utilisation_source=util_source, weights_bytes=-(-weights // workers(c)),
        headroom_bytes=int(memory.headroom_gib * GIB), graph_bytes=graph_bytes(c, geometry),
        graph_reserved=memory.graph_reserved_fraction.get(runtime, 0.0),
        kv_per_token=kv_bytes_per_token_per_device(
            geometry, tensor_parallel=c.vllm_tensor_parallel_size,
            pipeline_parallel=c.vllm_pipeline_parallel_size,
            dtype_bytes=kv_dtype_bytes(geometry, c.vllm_kv_cache_dtype)),
        max_model_len=length[0], max_model_len_source=length[1], instances=instance_count(c))


def _tp_fits(c: HostConfig, geometry: ModelGeometry) -> int | None:
    """The smallest larger TP vLLM accepts for the model that fits, within the host's
    devices when they are counted."""
    tp = c.vllm_tensor_parallel_size * 2
    while tp <= 64:
        heads_ok = geometry.mla or geometry.num_kv_heads % tp == 0 or \
            tp % geometry.num_kv_heads == 0
        devices_ok = c.vllm_accelerator_count is None or \
            tp * c.vllm_pipeline_parallel_size <= c.vllm_accelerator_count
        if heads_ok and devices_ok:
            fit = device_fit(c.model_copy(update={"vllm_tensor_parallel_size": tp}), geometry)
            if isinstance(fit, DeviceFit) and fit.fits:
                return tp
        tp *= 2
    return None


def fixes(c: HostConfig, geometry: ModelGeometry, fit: DeviceFit) -> list[str]:
    """The three ways out: more of the device, more devices per instance, shorter context."""
    out = []
    needed = fit.utilisation_needed()
    if needed <= 0.98:
        out.append(f"raise vllm_gpu_memory_utilization to {-(-needed * 100 // 1) / 100:.2f}")
    tp = _tp_fits(c, geometry)
    if tp is not None:
        out.append(f"vllm_tensor_parallel_size to {tp}")
    chunk = c.lmcache_chunk_size
    context = fit.kv_capacity_tokens // chunk * chunk
    if context >= chunk:
        out.append(f"lower vllm_max_model_len to {context}")
    return out or ["use a device with more memory or a smaller model"]


def server_l1_bytes(c: HostConfig, geometry: ModelGeometry) -> int | None:
    """The LMCache server's L1 by default: one max-length request of every instance on the
    host (each instance's ranks together); None when the context is unknown."""
    length = max_model_len(c, geometry)
    if length is None:
        return None
    return request_kv_bytes(c, geometry, length[0]) * instance_count(c)


def server_l1_gb(c: HostConfig, geometry: ModelGeometry) -> float | None:
    """lmcache_server_l1_size_gb when unset: server_l1_bytes in whole GiB (at least 1), at
    most half of vllm_host_memory_gb (the rest: the OS, vLLM's own processes, page cache);
    None when the context is unknown."""
    want = server_l1_bytes(c, geometry)
    if want is None:
        return None
    gib = max(1, -(-want // GIB))
    if c.vllm_host_memory_gb is not None:
        gib = min(gib, max(1, int(c.vllm_host_memory_gb / 2)))
    return float(gib)


# the L1 when neither the inventory nor the site's sizing set one (a model whose context
# deploykit cannot tell; `plan` warns): LMCache's own small default
FALLBACK_L1_GB = 1.0


def l1_gb(c: HostConfig) -> float:
    """The server's L1 in GiB as rendered: set, or computed when the site was read."""
    return c.lmcache_server_l1_size_gb or FALLBACK_L1_GB


def with_server_l1(site: Site) -> Site:
    """The site with each server host's unset L1 sized (server_l1_gb), so every reader of
    the setting (render, verify, plan) sees the one computed value. open_site applies it."""
    hosts = {}
    for name, host in site.hosts.items():
        c = host.config
        if host.geometry is not None and c.lmcache_server and \
                c.lmcache_server_l1_size_gb is None and "vllm" in host.groups:
            c = c.model_copy(update={"lmcache_server_l1_size_gb":
                                     server_l1_gb(c, host.geometry)})
        hosts[name] = dataclasses.replace(host, config=c)
    return dataclasses.replace(site, hosts=hosts)
