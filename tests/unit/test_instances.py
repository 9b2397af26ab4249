"""vLLM instances per host: each its own unit, port and device set, in every rendered file."""

from __future__ import annotations

import json
from pathlib import Path

from deploy_kit.ops.rundir import SETTINGS_PATH, role_tree
from deploy_kit.ops.site import open_site
from deploy_kit.render.files import render_site
from deploy_kit.verify.probes.serving_probe import exec_argv
from tests.conftest import CPU_TWO_INSTANCES, InventoryFactory


def _argv_port(unit: str) -> int:
    words = exec_argv(unit)  # what verify reads
    return int(words[words.index("--port") + 1])


def _env(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines()
             if "=" in line and not line.startswith("#"))
    return {k: v.strip('"') for k, v in pairs}


def test_an_eight_gpu_host_at_tp2_renders_four_instances(make_inventory: InventoryFactory
                                                           ) -> None:
    site = open_site(str(make_inventory(vllm={
        "vllm_tensor_parallel_size": 2, "vllm_accelerator_count": 8,
        "vllm_model": "Qwen/Qwen3-8B", "lmcache_topology": "server"})))
    files = render_site(site)["gpu1"]
    units = {p: f.content for p, f in files.items()
             if "/systemd/system/vllm" in p and "vllm-front" not in p}
    assert set(units) == {f"/etc/systemd/system/{u}.service"
                          for u in ("vllm", "vllm-1", "vllm-2", "vllm-3")}
    # vLLM listens on loopback; the serving front holds the public ports and forwards
    ports = sorted(_argv_port(text) for text in units.values())
    assert ports == [18000, 18001, 18002, 18003]
    assert all("--host 127.0.0.1 " in text for text in units.values())
    front = files["/etc/haproxy/vllm-front.cfg"].content
    for public, loopback in zip((8000, 8001, 8002, 8003), ports, strict=True):
        assert f"    bind :{public}\n" in front
        assert f"    server vllm 127.0.0.1:{loopback}\n" in front
    envs = [_env(files[f"/etc/deploykit/{u}.env"].content)
            for u in ("vllm", "vllm-1", "vllm-2", "vllm-3")]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1", "2,3", "4,5", "6,7"]
    # the ROCm host sees its devices through HIP's variable
    rocm = render_site(site)["gpu2"]
    assert _env(rocm["/etc/deploykit/vllm-3.env"].content)["HIP_VISIBLE_DEVICES"] == "6,7"
    # each unit reads its own env file, and none requires the server on a GPU host: the
    # server outlives engine restarts there (its L1 keeps the host's prefixes)
    for unit, text in units.items():
        name = unit.rsplit("/", 1)[1].removesuffix(".service")
        assert f"EnvironmentFile=/etc/deploykit/{name}.env" in text
        assert "Requires=lmcache-server.service" not in text
        assert "Wants=lmcache-server.service" in text
    server = files["/etc/systemd/system/lmcache-server.service"].content
    assert "Before=vllm.service vllm-1.service vllm-2.service vllm-3.service" in server


def test_roles_get_every_instance_and_the_record_watches_every_unit(
        make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(vllm={
        "vllm_tensor_parallel_size": 4, "vllm_accelerator_count": 8,
        "lmcache_topology": "inprocess"})))  # cuda's unset default is the server
    settings = json.loads(role_tree(site)["gpu1"][SETTINGS_PATH].content)
    assert [(i["name"], i["unit"], i["port"], i["env_file"], i["unit_file"])
            for i in settings["_vllm_instances"]] == [
        ("gpu1/0", "vllm", 8000, "/etc/deploykit/vllm.env", "/etc/systemd/system/vllm.service"),
        ("gpu1/1", "vllm-1", 8001, "/etc/deploykit/vllm-1.env",
         "/etc/systemd/system/vllm-1.service")]
    assert settings["_vllm_restart_with_server"] is False
    assert {"vllm", "vllm-1"} <= set(settings["_deploykit_converged"]["units"])
    # in-process: every instance holds its own LMCache, and so its own S3 breaker
    assert settings["_lmcache_breaker_units"] == ["vllm", "vllm-1"]


def test_one_engine_hosts_keep_their_names_and_see_every_device(
        make_inventory: InventoryFactory) -> None:
    """An upgrade must not rename a running host's unit (the old one would keep the port)."""
    site = open_site(str(make_inventory(vllm={"vllm_tensor_parallel_size": 2})))
    files = render_site(site)["gpu1"]
    assert [p for p in files if "/systemd/system/vllm" in p] == [
        "/etc/systemd/system/vllm.service", "/etc/systemd/system/vllm-front.service"]
    assert "CUDA_VISIBLE_DEVICES" not in files["/etc/deploykit/vllm.env"].content
    settings = json.loads(role_tree(site)["gpu1"][SETTINGS_PATH].content)
    assert [i["name"] for i in settings["_vllm_instances"]] == ["gpu1"]


def test_cpu_instances_share_the_cores_and_restart_with_their_server(
        make_inventory: InventoryFactory) -> None:
    hosts = CPU_TWO_INSTANCES
    site = open_site(str(make_inventory(hosts)))
    files = render_site(site)["cpu1"]
    for unit in ("vllm", "vllm-1"):
        text = files[f"/etc/systemd/system/{unit}.service"].content
        assert "Requires=lmcache-server.service" in text
        # a stop removes only segments whose worker is gone, never the other instance's
        assert "rm -f /dev/shm/lmcache_kv_*'" not in text and "/proc/$$p" in text
        env = _env(files[f"/etc/deploykit/{unit}.env"].content)
        assert not {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"} & set(env)


def test_a_local_model_is_asked_for_by_the_name_vllm_serves_it_under(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    """The sibling and other-host requests name the model without asking /v1/models first:
    a staged local model is served by its directory's name, never by its controller path."""
    from deploy_kit.transport.openai import model_name
    from deploykit_lab.model import model_config

    model = tmp_path / "models" / "llama-lab"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(model_config()))
    site = open_site(str(make_inventory(vllm={"vllm_model": str(model)})))
    assert model_name(site.hosts["gpu1"]) == "llama-lab"
