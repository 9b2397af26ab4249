"""One serving host's shape, decided once from its validated settings: where LMCache runs
(inside vLLM, or as its own `lmcache server` unit), what accelerator vLLM runs on, its
instances (ports, device sets) and the names and paths of what it runs.

Render, verify, status, bench and the run directory's settings.json read these answers
instead of comparing `lmcache_topology` or `vllm_accelerator` strings each on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deploy_kit.config import names
from deploy_kit.config.instances import DEVICE_ENV, Instance, instances
from deploy_kit.config.models import HostConfig
from deploy_kit.config.site import Host
from deploy_kit.core import compat

# vllm_accelerator unset: the runtime vLLM's own default wheels target
DEFAULT_ACCELERATOR = "cuda"
# lmcache_topology's value for a standalone `lmcache server` unit (else "inprocess")
SERVER_TOPOLOGY = "server"


def server_topology(topology: str) -> bool:
    """Whether a topology value (a host's setting, or one verify read back) means a
    standalone LMCache server."""
    return topology == SERVER_TOPOLOGY


@dataclass(frozen=True)
class ServingHost:
    """What one host serves, and how (frozen: every reader sees the same answers)."""

    name: str
    config: HostConfig
    serves: bool  # in the vllm group
    has_server: bool  # lmcache_topology server: a standalone `lmcache server` unit
    accelerator: str  # vllm_accelerator, DEFAULT_ACCELERATOR when unset
    instances: tuple[Instance, ...]  # config/instances.py: one unit, port, device set each

    @property
    def inprocess(self) -> bool:
        """LMCache runs inside each vLLM (LMCacheConnectorV1, lmcache.yaml)."""
        return not self.has_server

    @property
    def is_cpu(self) -> bool:
        return self.accelerator == "cpu"

    @property
    def needs_device(self) -> bool:
        """CPU hosts run vLLM on their cores: no accelerator device to look for."""
        return not self.is_cpu

    @property
    def device_env(self) -> str | None:
        """The variable the runtime picks its devices by (none on CPU)."""
        return DEVICE_ENV.get(self.accelerator)

    @property
    def restarts_with_server(self) -> bool:
        """Whether the instances' units require the LMCache server (a server restart restarts
        them). Only CPU hosts: there the server keeps the /dev/shm KV segment of every vLLM it
        served until it restarts itself, so vLLM restarts alone leaked one segment each
        (VLLM_CPU_KVCACHE_SPACE GiB). On GPU hosts the server outlives engine restarts, which
        is what the server topology is for: its L1 still holds the host's prefixes
        afterwards."""
        return self.has_server and self.is_cpu

    @property
    def ports(self) -> list[int]:
        return [i.port for i in self.instances]

    @property
    def instance_units(self) -> dict[str, str]:
        """Instance name -> unit (`vllm`, `vllm-1`, ...)."""
        return {i.name: i.unit for i in self.instances}

    @property
    def lmcache_units(self) -> list[str]:
        """The units whose processes run LMCache (and hold its S3 circuit breaker): the
        LMCache server, or every in-process vLLM instance."""
        return [names.LMCACHE_SERVER_UNIT] if self.has_server \
            else list(self.instance_units.values())

    @property
    def lmcache_server_ports(self) -> list[int]:
        """The ports the LMCache server listens on (none in process)."""
        return [self.config.lmcache_server_port] if self.has_server else []

    # paths on the host
    @property
    def lmcache_config_path(self) -> str:
        return names.lmcache_config_path(self.config)

    @property
    def lmcache_server_env_path(self) -> str:
        return names.lmcache_server_env_path(self.config)

    @property
    def lmcache_env_paths(self) -> list[str]:
        """Where LMCache's process environment is written: instance 0's vllm.env, and the
        LMCache server's env where it runs."""
        return [names.vllm_env_path(self.config)] + \
            ([self.lmcache_server_env_path] if self.has_server else [])

    @property
    def secret_env_path(self) -> str:
        return names.vllm_secret_env_path(self.config)

    @property
    def api_keys_path(self) -> str:
        return names.vllm_api_keys_path(self.config)

    def instance_files(self) -> list[dict[str, Any]]:
        """settings.json `_vllm_instances`: unit, public and loopback port, env file and unit
        file each (none outside the vllm group)."""
        if not self.serves:
            return []
        return [{"index": i.index, "name": i.name, "unit": i.unit, "port": i.port,
                 "loopback_port": i.loopback_port,
                 "env_file": names.vllm_env_path(self.config, i.unit),
                 "unit_file": names.vllm_unit_path(i.unit)} for i in self.instances]

    def shape_settings(self) -> dict[str, Any]:
        """settings.json's names for the serving shape (the roles branch on these)."""
        return {
            "_lmcache_aws_profile": names.aws_profile(self.config),
            "_lmcache_server": self.has_server,
            # the vLLM instances (config/instances.py): unit, port, env file and unit file
            "_vllm_instances": self.instance_files(),
            # CPU: the instances' units require the LMCache server, so its restart restarts
            # them
            "_vllm_restart_with_server": self.restarts_with_server,
        }

    def install_settings(self) -> dict[str, Any] | None:
        """settings.json's names for what the pinned vLLM installs here (compat.yaml), and
        from where; None when compat.yaml does not know the vLLM version (validate says so)."""
        c = self.config
        try:
            table = compat.vllm(c.vllm_version)
        except ValueError:
            return None
        accelerator = self.accelerator
        return {
            "_vllm_packages": table.packages(accelerator, c.vllm_version),
            "_vllm_wheelhouse_required": table.needs_wheelhouse(accelerator),
            "_vllm_groups": table.groups_for(accelerator),
            "_serving_env_system_packages": (table.system_packages or {}).get(accelerator, []),
            "_lmcache_packages": lmcache_packages(c),
            "_vllm_has_api_key": c.vllm_uses_api_key,
            # a local model directory on the controller, staged by the serving role
            "_vllm_model_is_local": c.model_is_local,
            "_vllm_model_on_host": c.model_path_on_host,
            "_vllm_needs_device": self.needs_device,
        }


def lmcache_packages(c: HostConfig) -> list[str]:
    """What the serving role pip-installs for LMCache: `nixl` mode adds the extra and the
    pinned NIXL (compat.yaml `nixl_packages`: an unpinned extra backtracks to a release pip
    can meet)."""
    if c.lmcache_mode != "nixl":
        return [f"lmcache=={c.lmcache_version}"]
    try:
        pins = list(compat.lmcache(c.lmcache_version).nixl_packages)
    except ValueError:
        pins = []
    return [f"lmcache[nixl]=={c.lmcache_version}", *pins]


def accelerator_of(c: HostConfig) -> str:
    return c.vllm_accelerator or DEFAULT_ACCELERATOR


def serving_host(host: Host) -> ServingHost:
    c = host.config
    return ServingHost(name=host.name, config=c, serves="vllm" in host.groups,
                       has_server=c.lmcache_server, accelerator=accelerator_of(c),
                       instances=tuple(instances(host.name, c)))
