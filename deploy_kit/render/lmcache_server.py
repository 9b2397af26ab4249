"""The standalone LMCache server (`lmcache_topology: server`): argv, environment and unit.

vLLM's LMCacheMPConnector hands KV blocks to this process, which keeps an L1 in DRAM and
writes full chunks to its L2 adapter (the site's S3 bucket). Flags and adapter fields are
LMCache 0.5.6's (`lmcache server --help`; lmcache/v1/distributed/l2_adapters/*.py).
"""

from __future__ import annotations

import json
from typing import Any

from deploy_kit.config import names
from deploy_kit.config.fit import l1_gb
from deploy_kit.config.instances import instances
from deploy_kit.config.models import HostConfig
from deploy_kit.render import lmcache_quota, templating
from deploy_kit.render.lmcache_quota import SaltQuota
from deploy_kit.render.templating import exec_lines, exec_start, render_template

UNIT_PATH = names.LMCACHE_SERVER_UNIT_PATH
MQ_HOST = "127.0.0.1"  # vLLM runs beside the server: nothing else may reach its queue


env_path = names.lmcache_server_env_path


def l2_adapter(c: HostConfig, quota: SaltQuota | None = None) -> dict[str, Any] | None:
    """The L2 tier: the bucket through its virtual-hosted name (the adapter signs and routes
    on that Host header only), or a local directory in disk mode; none in dram mode. With a
    team's quota, it evicts per cache_salt (render/lmcache_quota.py)."""
    if c.lmcache_mode == "s3":
        adapter: dict[str, Any] = {
            "type": "s3", "s3_endpoint": names.remote_url(c),
            "s3_region": c.deploykit_s3_region, "disable_tls": not c.deploykit_s3_tls,
            # RGW speaks HTTP/1.1; the adapter's default (true) would try ALPN h2
            "s3_prefer_http2": c.lmcache_s3_prefer_http2,
            "s3_num_io_threads": c.lmcache_s3_num_io_threads}
        if c.lmcache_l2_encryption:
            adapter["serde"] = serde(c)
        if quota is not None:
            adapter["eviction"] = lmcache_quota.eviction()
        return adapter
    if c.lmcache_mode == "disk":
        return {"type": "fs", "base_path": c.lmcache_disk_path}
    return None


def serde(c: HostConfig) -> dict[str, Any]:
    """AES-GCM around every chunk the adapter stores and loads (LMCache 0.5.6
    v1/distributed/serde/aesgcm.py:136-177): a key per cache_salt, derived by HKDF-SHA256
    from the whole content of the master key file (read as bytes at start, :162-163). Only
    the file's path is rendered; the key reaches the host through Ansible alone."""
    return {"type": "aesgcm", "key_provider": "hkdf",
            "aes_bits": c.lmcache_l2_encryption_aes_bits,
            "master_key_path": names.lmcache_l2_master_key_path(c)}


def server_argv(c: HostConfig, quota: SaltQuota | None = None) -> list[str]:
    # --l1-size-gb alone is refused: the server wants an eviction policy with it
    argv = [f"{c.vllm_venv}/bin/lmcache", "server",
            "--host", MQ_HOST, "--port", str(c.lmcache_server_port),
            "--http-host", MQ_HOST, "--http-port", str(c.lmcache_server_http_port),
            "--prometheus-port", str(c.lmcache_server_metrics_port),
            "--chunk-size", str(c.lmcache_chunk_size),
            # the chunk-key hash (upstream's default is blake3): the one fleet-wide setting
            "--hash-algorithm", c.lmcache_pre_caching_hash_algorithm,
            "--l1-size-gb", _gb(l1_gb(c)),
            "--l1-init-size-gb", _gb(min(l1_gb(c), 1.0)),
            "--eviction-policy", c.lmcache_server_eviction_policy,
            "--max-workers", str(c.lmcache_server_max_workers)]
    adapter = l2_adapter(c, quota)
    if adapter is not None:
        argv += ["--l2-adapter", json.dumps(adapter, separators=(",", ":"), sort_keys=True)]
    return argv


def _gb(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def connector_extra(c: HostConfig) -> dict[str, Any]:
    """vLLM's side. Without lmcache_driven, vLLM picks engine_driven, which this server has no
    handler for, and dies after 300 s waiting for register_kv_caches (measured)."""
    return {"lmcache.mp.host": f"tcp://{MQ_HOST}", "lmcache.mp.port": c.lmcache_server_port,
            "lmcache.mp.mp_transfer_mode": "lmcache_driven",
            "lmcache.mp.mq_timeout": c.lmcache_server_mq_timeout,
            # "must match the MP server's --hash-algorithm" (0.5.6 ExtraConfigDefault): the
            # chunk hashes vLLM's KV events name are the server's object keys
            "lmcache.mp.hash_algorithm": c.lmcache_pre_caching_hash_algorithm}


def server_env(c: HostConfig) -> dict[str, str]:
    env = {"PYTHONHASHSEED": str(c.vllm_python_hash_seed), "LMCACHE_TRACK_USAGE": "false",
           "DO_NOT_TRACK": "1"}
    if c.lmcache_mode == "s3":  # the adapter resolves keys through boto3's profile chain
        env |= {"AWS_PROFILE": names.aws_profile(c),
                "AWS_SHARED_CREDENTIALS_FILE": names.credentials_path(c),
                "AWS_CONFIG_FILE": names.aws_config_path(c)}
    return env


def render_env_file(c: HostConfig) -> str:
    return templating.render_env_file(server_env(c))


def render_unit(c: HostConfig, quota: SaltQuota | None = None) -> str:
    """quota: the host's team's (lmcache_quota.salt_quota), set at every start."""
    set_quota = None if quota is None else exec_start(exec_lines(
        lmcache_quota.set_quota_argv(c.lmcache_server_http_port, quota), head=1))
    return render_template("lmcache-server.service.j2", user=c.vllm_user, env_file=env_path(c),
                           exec_start=exec_start(exec_lines(server_argv(c, quota), head=2)),
                           set_quota=set_quota,
                           mode=c.lmcache_mode,
                           http_port=c.lmcache_server_http_port,
                           vllm_units=[f"{i.unit}.service" for i in instances("", c)])
