"""vLLM argv, environment and systemd unit per accelerator, for the pinned vLLM version."""

from __future__ import annotations

import json
from typing import Any

from deploy_kit import compat
from deploy_kit.config.site import Host
from deploy_kit.render import names
from deploy_kit.render.templating import render_template

ACCELERATOR_ENV: dict[str, dict[str, str]] = {
    "cuda": {},
    # AMD's tuning guide for vLLM on MI300X
    "rocm": {"HIP_FORCE_DEV_KERNARG": "1", "TORCH_BLAS_PREFER_HIPBLASLT": "1"},
    # from the reference deployment on Gaudi3 (vllm-gaudi plugin)
    "gaudi3": {"PT_HPU_GPU_MIGRATION": "1", "VLLM_USE_V1": "1", "VLLM_SKIP_WARMUP": "True",
               "VLLM_EXPONENTIAL_BUCKETING": "False"},
}


def _compact_json(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def kv_transfer_config(host: Host) -> dict[str, Any]:
    c = host.config
    return {"kv_connector": c.vllm_kv_connector, "kv_role": c.vllm_kv_role,
            **c.vllm_kv_transfer_extra}


def vllm_argv(host: Host) -> list[str]:
    c = host.config
    table = compat.vllm(c.vllm_version)
    argv = [f"{c.vllm_venv}/bin/vllm", "serve", c.vllm_model,
            "--host", "0.0.0.0", "--port", str(c.vllm_port),
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
            argv += ["--hf-overrides", _compact_json({"rope_scaling": c.vllm_rope_scaling})]
    argv += ["--kv-transfer-config", _compact_json(kv_transfer_config(host))]
    return argv + list(c.vllm_extra_args)


def vllm_env(host: Host) -> dict[str, str]:
    c = host.config
    env = {"LMCACHE_CONFIG_FILE": names.lmcache_config_path(c),
           "PYTHONHASHSEED": str(c.vllm_python_hash_seed),
           "LMCACHE_TRACK_USAGE": "false", "DO_NOT_TRACK": "1"}
    if c.lmcache_mode in ("s3", "nixl"):
        env |= {"AWS_PROFILE": names.aws_profile(c),
                "AWS_SHARED_CREDENTIALS_FILE": names.credentials_path(c),
                "AWS_CONFIG_FILE": names.aws_config_path(c)}
    env |= ACCELERATOR_ENV[c.vllm_accelerator or "cuda"]
    env |= c.vllm_extra_env
    return env


def render_env_file(host: Host) -> str:
    return render_template("vllm.env.j2", env=vllm_env(host))


def exec_lines(argv: list[str]) -> list[list[str]]:
    """Group argv for a readable unit: the command, then one `--flag value` per line."""
    lines: list[list[str]] = [argv[:3]]
    for word in argv[3:]:
        if word.startswith("-") or not lines[-1][0].startswith("-") or len(lines[-1]) > 1:
            lines.append([word])
        else:
            lines[-1].append(word)
    return lines


def render_unit(host: Host) -> str:
    c = host.config
    return render_template("vllm.service.j2", model=c.vllm_model, mode=c.lmcache_mode,
                           user=c.vllm_user, env_file=names.vllm_env_path(c),
                           exec_lines=exec_lines(vllm_argv(host)))
