"""The serving hosts' devices and memory: TP against the KV heads, the rope override, the
model and one request's KV within device memory, instances within the devices, and the
LMCache server's L1 holding one request."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.config import fit
from deploy_kit.config.instances import DEVICE_ENV, instance_count, instances, workers
from deploy_kit.config.rulebook import DATA_PARALLEL as _DATA_PARALLEL
from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.site import Site
from deploy_kit.core import compat
from deploy_kit.core.errors import Problem

RULES, rule = collector()


@rule
def rope_override_complete(site: Site) -> Iterator[Problem]:
    """Under transformers 5 a rope override replaces all rope parameters: rope_theta is needed."""
    for host in site.group("vllm"):
        c = host.config
        try:
            table = compat.vllm(c.vllm_version)
        except ValueError:
            continue
        if not c.vllm_rope_scaling or table.rope_override != "rope_parameters":
            continue
        known = "rope_theta" in c.vllm_rope_scaling or (
            host.geometry is not None and host.geometry.rope_theta)
        if not known:
            yield Problem(_src(site, host, "vllm_rope_scaling"), "vllm_rope_scaling.rope_theta",
                          f"the rope_theta of {c.vllm_model} is unknown on {host.name}; vLLM "
                          f"{c.vllm_version} would drop it with this override",
                          "add rope_theta (from the model's config.json) to vllm_rope_scaling, "
                          "or set vllm_model_config")


@rule
def tensor_parallel_fits_kv_heads(site: Site) -> Iterator[Problem]:
    """vLLM needs KV heads divisible by TP (or TP by KV heads); the sizing assumes it."""
    for host in site.group("vllm"):
        g, tp = host.geometry, host.config.vllm_tensor_parallel_size
        if g is None or g.mla or tp == 1:
            continue
        if g.num_kv_heads % tp and tp % g.num_kv_heads:
            ok = [n for n in range(1, 65) if g.num_kv_heads % n == 0 or n % g.num_kv_heads == 0]
            yield Problem(_src(site, host, "vllm_tensor_parallel_size"),
                          "vllm_tensor_parallel_size",
                          f"TP {tp} does not divide the model's {g.num_kv_heads} KV heads "
                          "(vLLM refuses to start)",
                          f"use one of {', '.join(map(str, ok[:8]))}", hosts=(host.name,))


def _gib(n: float) -> str:
    return f"{n / fit.GIB:.1f} GiB"


@rule
def memory_fits(site: Site) -> Iterator[Problem]:
    """Weights/(TP x PP) + one max-length request's KV + headroom must fit utilisation x
    device memory on every device, or vLLM refuses to start (its KV check at start-up)."""
    for host in site.group("vllm"):
        c = host.config
        if host.geometry is None or c.vllm_accelerator in (None, "cpu"):
            continue
        try:
            result = fit.device_fit(c, host.geometry)
        except ValueError:  # TP does not fit the heads: tensor_parallel_fits_kv_heads
            continue
        if isinstance(result, str) or result.fits:
            continue
        graphs = f" + {result.graph_reserved:.0%} for HPU graphs" if result.graph_reserved \
            else ""
        if result.graph_bytes:
            source = "vllm_cuda_graph_gib" if c.vllm_cuda_graph_gib is not None else "estimated"
            graphs += f" + CUDA graphs {_gib(result.graph_bytes)} ({source})"
        key = "vllm_gpu_memory_utilization"
        yield Problem(
            _src(site, host, key), key,
            f"{c.vllm_model} TP {c.vllm_tensor_parallel_size} on {result.device}: weights "
            f"{_gib(result.weights_bytes)} + one {result.max_model_len}-token request's KV "
            f"{_gib(result.request_bytes)} + headroom {_gib(result.headroom_bytes)}{graphs} "
            f"per device > {result.utilisation:g} x {_gib(result.hbm_bytes)} = "
            f"{_gib(result.budget_bytes)} (vLLM refuses to start)",
            ", or ".join(fit.fixes(c, host.geometry, result)), hosts=(host.name,))


@rule
def instances_fit_devices(site: Site) -> Iterator[Problem]:
    """Instances x TP x PP within the host's devices; several instances need a device count
    (else they would share devices); data parallelism and device variables are deploykit's
    (instances and their device sets), not extra args."""
    for host in site.group("vllm"):
        c = host.config
        count = instance_count(c)
        devices = c.vllm_accelerator_count
        if devices is not None and workers(c) > devices:
            # no instance count fits: the parallelism itself is what to change
            yield Problem(_src(site, host, "vllm_tensor_parallel_size"),
                          "vllm_tensor_parallel_size",
                          f"one instance with TP {c.vllm_tensor_parallel_size} x PP "
                          f"{c.vllm_pipeline_parallel_size} needs {workers(c)} devices, "
                          f"{host.name} has vllm_accelerator_count {devices}",
                          f"make vllm_tensor_parallel_size x vllm_pipeline_parallel_size at "
                          f"most {devices}, or raise vllm_accelerator_count if the host has "
                          "more devices", hosts=(host.name,))
        elif devices is not None and count * workers(c) > devices:
            yield Problem(_src(site, host, "vllm_instances"), "vllm_instances",
                          f"{count} instances x TP {c.vllm_tensor_parallel_size} x PP "
                          f"{c.vllm_pipeline_parallel_size} need {count * workers(c)} devices, "
                          f"{host.name} has vllm_accelerator_count {devices}",
                          f"use at most {devices // workers(c)} instances", hosts=(host.name,))
        gpu = c.vllm_accelerator in DEVICE_ENV
        if gpu and count > 1 and c.vllm_accelerator_count is None:
            yield Problem(_src(site, host, "vllm_instances"), "vllm_instances",
                          f"{count} instances on {host.name} without vllm_accelerator_count: "
                          "every instance would see every device",
                          "set vllm_accelerator_count (devices per host)", hosts=(host.name,))
        for word in c.vllm_extra_args:
            if _DATA_PARALLEL.match(word):
                yield Problem(_src(site, host, "vllm_extra_args"), "vllm_extra_args",
                              f"{word.split('=')[0]} runs data parallelism inside one vLLM, "
                              "which deploykit's units, ports and plan do not see",
                              "remove it: use vllm_accelerator_count / vllm_instances "
                              "(one instance per TP x PP devices)", hosts=(host.name,))
                break
        renders_devices = any(i.devices for i in instances(host.name, c))
        for name in sorted(set(c.vllm_extra_env) & set(DEVICE_ENV.values())):
            if renders_devices:
                yield Problem(_src(site, host, "vllm_extra_env"), f"vllm_extra_env.{name}",
                              "deploykit gives each instance its own device set in this "
                              "variable; this value would override it",
                              "remove it: set vllm_accelerator_count / vllm_instances",
                              hosts=(host.name,))


@rule
def server_l1_holds_request(site: Site) -> Iterator[Problem]:
    """The LMCache server stages every hit in its L1: less than one max-length request
    (all ranks of one instance) cannot pass a full-length prefix through."""
    for host in site.group("vllm"):
        c = host.config
        if not c.lmcache_server or host.geometry is None:
            continue
        length = fit.max_model_len(c, host.geometry)
        if length is None:
            continue
        try:
            need = fit.request_kv_bytes(c, host.geometry, length[0])
        except ValueError:
            continue
        explicit = "lmcache_server_l1_size_gb" in host.sources
        l1 = c.lmcache_server_l1_size_gb
        if explicit and l1 is not None and l1 * fit.GIB < need:
            yield Problem(_src(site, host, "lmcache_server_l1_size_gb"),
                          "lmcache_server_l1_size_gb",
                          f"{l1:g} GiB < one {length[0]}-token request's KV {_gib(need)} "
                          f"(every rank of one instance) on {host.name}",
                          f"use at least {-(-need // fit.GIB)} (x {instance_count(c)} "
                          "instances for one request each), or unset it (plan computes it)",
                          hosts=(host.name,))
        elif c.vllm_host_memory_gb is not None and need > c.vllm_host_memory_gb * fit.GIB / 2:
            yield Problem(_src(site, host, "vllm_host_memory_gb"), "vllm_host_memory_gb",
                          f"half of {c.vllm_host_memory_gb:g} GiB cannot hold one "
                          f"{length[0]}-token request's KV {_gib(need)} in the server's L1",
                          "lower vllm_max_model_len, or use hosts with more memory",
                          hosts=(host.name,))

