"""The per-host serving plan (plan/serving.py): the topology, accelerator, instances, ports
and paths of a serving host, decided once, on the golden sites; and the guard that keeps the
topology from being re-decided by string comparisons elsewhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from deploy_kit.ops.rundir import SETTINGS_PATH, role_tree
from deploy_kit.ops.site import open_site
from deploy_kit.plan.serving import ServingHost, serving_host
from tests.conftest import REPO

GOLDEN = REPO / "tests" / "golden"
CPU_SERVER = GOLDEN / "cpu-server" / "inventory"
EXAMPLE = REPO / "inventory" / "example"
NIXL = GOLDEN / "nixl-obj" / "inventory"


def plan_of(inventory: Path, host: str) -> ServingHost:
    return serving_host(open_site(str(inventory)).hosts[host])


def rendered(case: str, host: str) -> set[str]:
    """The paths a golden case renders for a host (absolute paths on the host)."""
    root = GOLDEN / case / "expected" / host
    return {"/" + str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_a_cpu_server_host() -> None:
    plan = plan_of(CPU_SERVER, "cpu1")
    assert plan.serves and plan.has_server and not plan.inprocess
    assert plan.is_cpu and not plan.needs_device and plan.device_env is None
    # the server keeps every vLLM's /dev/shm KV segment: its restart restarts them
    assert plan.restarts_with_server
    assert [(i.unit, i.port, i.devices) for i in plan.instances] == [("vllm", 8000, ())]
    assert plan.ports == [8000] and plan.lmcache_server_ports == [6555]
    assert plan.lmcache_units == ["lmcache-server"]
    assert plan.lmcache_env_paths == ["/etc/deploykit/vllm.env",
                                      "/etc/deploykit/lmcache-server.env"]
    files = rendered("cpu-server", "cpu1")
    assert {plan.lmcache_server_env_path, "/etc/systemd/system/lmcache-server.service",
            "/etc/systemd/system/vllm.service"} <= files
    assert plan.lmcache_config_path not in files  # no lmcache.yaml: the server holds LMCache


def test_a_cuda_inprocess_host() -> None:
    plan = plan_of(NIXL, "gpu1")
    assert plan.serves and plan.inprocess and not plan.has_server
    assert plan.accelerator == "cuda" and plan.needs_device
    assert plan.device_env == "CUDA_VISIBLE_DEVICES"
    assert not plan.restarts_with_server
    # one engine over all eight GPUs (TP 8): it sees every device, no device set
    assert [(i.unit, i.port, i.devices, i.name) for i in plan.instances] == \
        [("vllm", 8000, (), "gpu1")]
    assert plan.lmcache_units == ["vllm"] and plan.lmcache_server_ports == []
    assert plan.lmcache_env_paths == ["/etc/deploykit/vllm.env"]
    files = rendered("nixl-obj", "gpu1")
    assert plan.lmcache_config_path in files
    assert plan.lmcache_server_env_path not in files


def test_a_multi_instance_host() -> None:
    plan = plan_of(EXAMPLE, "gaudi3-1")  # 8 Gaudi3 at TP 2: four engines, in-process
    assert plan.inprocess and plan.accelerator == "gaudi3"
    assert [(i.unit, i.port, i.devices) for i in plan.instances] == [
        ("vllm", 8000, (0, 1)), ("vllm-1", 8001, (2, 3)), ("vllm-2", 8002, (4, 5)),
        ("vllm-3", 8003, (6, 7))]
    assert plan.instance_units == {"gaudi3-1/0": "vllm", "gaudi3-1/1": "vllm-1",
                                   "gaudi3-1/2": "vllm-2", "gaudi3-1/3": "vllm-3"}
    # in process, every engine holds LMCache (and its S3 breaker)
    assert plan.lmcache_units == ["vllm", "vllm-1", "vllm-2", "vllm-3"]
    files = rendered("example", "gaudi3-1")
    for entry in plan.instance_files():
        assert {entry["env_file"], entry["unit_file"]} <= files
    assert plan.device_env == "HABANA_VISIBLE_MODULES"
    # the H100 hosts: four engines too, beside one LMCache server that holds the breaker
    h100 = plan_of(EXAMPLE, "gpu-h100-1")
    assert not h100.inprocess and len(h100.instances) == 4
    assert h100.lmcache_units == ["lmcache-server"]


def test_a_host_that_does_not_serve() -> None:
    plan = plan_of(EXAMPLE, "rgw1")
    assert not plan.serves and plan.instance_files() == []


@pytest.mark.parametrize(("inventory", "host"), [(CPU_SERVER, "cpu1"), (EXAMPLE, "gpu-h100-1"),
                                                 (NIXL, "gpu1"), (EXAMPLE, "rgw1")])
def test_settings_json_carries_the_plan(inventory: Path, host: str) -> None:
    """The roles branch on settings.json's names; they hold the plan's answers."""
    site = open_site(str(inventory))
    settings = json.loads(role_tree(site)[host][SETTINGS_PATH].content)
    plan = serving_host(site.hosts[host])
    assert settings["_lmcache_server"] is plan.has_server
    assert settings["_vllm_restart_with_server"] is plan.restarts_with_server
    assert settings["_vllm_instances"] == plan.instance_files()
    assert settings["_vllm_instance_units"] == plan.instance_units
    assert settings["_lmcache_breaker_units"] == (plan.lmcache_units if plan.serves else [])
    assert settings["_vllm_needs_device"] is plan.needs_device


# A raw comparison of the topology string: `lmcache_topology == "server"`, `!= "inprocess"`,
# `in (...)`. plan/ decides it; config/ reads HostConfig.lmcache_server, whose body is one.
TOPOLOGY_TEST = re.compile(r"lmcache_topology (==|!=|in) |lmcache_topology\b.*(==|!=) ")
# What may still compare it outside plan/: the HostConfig property, and the rule that checks
# the value against compat.yaml's supported topologies (a membership, not a server test).
TOPOLOGY_ALLOWED = 2
# The heal agent's renderer is being rewritten separately; it is counted on its own.
NOT_COUNTED = {"deploy_kit/render/self_heal.py"}


def raw_comparisons(pattern: re.Pattern[str], skip: set[str]) -> list[str]:
    found = []
    for path in sorted((REPO / "deploy_kit").rglob("*.py")):
        relative = str(path.relative_to(REPO))
        if relative.startswith("deploy_kit/plan/") or relative in skip:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                found.append(f"{relative}:{number}: {line.strip()}")
    return found


def test_the_topology_is_decided_once() -> None:
    found = raw_comparisons(TOPOLOGY_TEST, NOT_COUNTED)
    assert len(found) <= TOPOLOGY_ALLOWED, (
        "lmcache_topology compared as a string outside plan/ (read plan/serving.py's "
        "ServingHost, or HostConfig.lmcache_server in config/):\n" + "\n".join(found))


# `vllm_accelerator == "cpu"`, `or "cuda"`: above config/ (which sits below the plan), the
# plan's accelerator, is_cpu and device_env answer these.
ACCELERATOR_TEST = re.compile(r'vllm_accelerator (==|!=|in) |vllm_accelerator or "cuda"')
ACCELERATOR_ALLOWED_ABOVE_CONFIG = 1  # cli/site_cmds.py's wheel recipes


def test_the_accelerator_is_read_from_the_plan_above_config() -> None:
    found = [f for f in raw_comparisons(ACCELERATOR_TEST, set())
             if not f.startswith("deploy_kit/config/")]
    assert len(found) <= ACCELERATOR_ALLOWED_ABOVE_CONFIG, "\n".join(found)
