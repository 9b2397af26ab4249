"""The pure core: memory that fits, instances, accelerator-correct stacks, the
server's L1 and one key format per sharing group. Each case fails on the numbers."""

from __future__ import annotations

import copy
import typing

import pytest

from deploy_kit.config import fit
from deploy_kit.config.models import AcceleratorModelName, HostConfig
from deploy_kit.config.rules_ports import ports_in_use
from deploy_kit.core import compat
from deploy_kit.core.errors import InventoryError
from deploy_kit.core.geometry import find_preset, kv_bytes_per_token_per_device, presets
from deploy_kit.ops.site import open_site
from deploy_kit.plan.plan import build_plan
from tests.conftest import BASE_HOSTS, REPO, InventoryFactory
from tests.unit.test_validation import problems

EXAMPLE = REPO / "inventory" / "example"
QWEN = presets()["Qwen/Qwen3-32B"]
SEED = {"vllm_tensor_parallel_size": 2, "vllm_gpu_memory_utilization": 0.55,
        "vllm_max_model_len": 131072}


def one_host(**host_vars: object) -> dict:
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["vllm"]["hosts"] = {
        "h1": {"ansible_host": "10.0.1.1", **host_vars}}
    return hosts


# --- 1. memory that fits --------------------------------------------------------------------

def test_the_accelerator_model_list_is_the_table() -> None:
    assert set(typing.get_args(AcceleratorModelName)) == set(compat.accelerator_models())
    for name in ("h100", "h200", "b200", "mi300x", "mi325x", "gaudi3"):
        assert compat.accelerator_models()[name].hbm_gib


def test_seed_settings_on_h100_are_refused_with_the_numbers(
        make_inventory: InventoryFactory) -> None:
    found = problems(make_inventory, one_host(vllm_accelerator="cuda"), vllm=SEED)
    [p] = [p for p in found if p.key == "vllm_gpu_memory_utilization"]
    # vLLM 0.32 (the CUDA default) takes its CUDA graphs out of the budget too: 64 layers
    # x 0.02 GiB estimated (compat.yaml vllm_memory)
    assert "weights 30.5 GiB + one 131072-token request's KV 16.0 GiB + headroom 2.0 GiB + " \
        "CUDA graphs 1.3 GiB (estimated)" in p.message
    assert "> 0.55 x 79.6 GiB = 43.8 GiB" in p.message
    assert p.fix == ("raise vllm_gpu_memory_utilization to 0.63, or vllm_tensor_parallel_size "
                     "to 4, or lower vllm_max_model_len to 81664")


def _fit(**settings: object) -> fit.DeviceFit:
    c = HostConfig.model_validate({"vllm_accelerator": "cuda", "vllm_model": "Qwen/Qwen3-32B",
                                   "vllm_tensor_parallel_size": 2, **settings})
    result = fit.device_fit(c, QWEN)
    assert isinstance(result, fit.DeviceFit)
    return result


def test_cuda_graphs_come_out_of_the_budget_where_vllm_counts_them() -> None:
    gib = 1024**3
    plain = _fit()
    assert plain.graph_bytes == int(64 * 0.02 * gib)  # every layer on the device, TP 2
    assert _fit(vllm_pipeline_parallel_size=2, vllm_accelerator_count=8).graph_bytes == \
        int(32 * 0.02 * gib)  # half the layers per stage
    assert _fit(vllm_cuda_graph_gib=3.0).graph_bytes == 3 * gib  # measured wins
    assert _fit(vllm_enforce_eager=True).graph_bytes == 0  # no graphs captured
    # vLLM 0.10 captured after the KV cache (before v0.21): outside the budget
    assert _fit(vllm_version="0.10.2").graph_bytes == 0
    # the reserve is what the KV cache loses, token for token
    lost = _fit(vllm_enforce_eager=True).kv_capacity_tokens - plain.kv_capacity_tokens
    assert abs(lost - plain.graph_bytes / plain.kv_per_token) <= 1  # 10,486 tokens
    gaudi = HostConfig.model_validate({"vllm_accelerator": "gaudi3", "vllm_version": "0.26.0",
                                       "vllm_tensor_parallel_size": 2})
    result = fit.device_fit(gaudi, QWEN)
    assert isinstance(result, fit.DeviceFit) and result.graph_bytes == 0  # HPU: a fraction
    assert result.graph_reserved == 0.1


def test_the_same_settings_fit_mi300x_and_gaudi3(make_inventory: InventoryFactory) -> None:
    for host in ({"vllm_accelerator": "rocm"},
                 {"vllm_accelerator": "gaudi3", "vllm_version": "0.26.0"}):
        assert not [p for p in problems(make_inventory, one_host(**host), vllm=SEED)
                    if p.key == "vllm_gpu_memory_utilization"]


def test_the_shipped_example_validates_and_every_device_fits() -> None:
    plan = build_plan(open_site(str(EXAMPLE)))
    assert {h.host: h.instances for h in plan.hosts} == {
        "gaudi3-1": 4, "gpu-h100-1": 4, "gpu-h100-2": 4, "gpu-mi300x-1": 4}
    for host in plan.hosts:
        assert host.requests_fit is not None and host.requests_fit >= 1, host
        assert host.max_model_len == 131072


def test_kv_per_device_splits_heads_replicates_them_and_keeps_mla_whole() -> None:
    assert kv_bytes_per_token_per_device(QWEN, tensor_parallel=2) == 262144 // 2
    # 8 KV heads over TP 16: each rank still holds one whole head (replicated)
    assert kv_bytes_per_token_per_device(QWEN, tensor_parallel=16) == 262144 // 8
    assert kv_bytes_per_token_per_device(QWEN, tensor_parallel=2, pipeline_parallel=2) == \
        262144 // 4
    v3 = presets()["deepseek-ai/DeepSeek-V3"]
    assert kv_bytes_per_token_per_device(v3, tensor_parallel=8) == 61 * 576 * 2


def test_unknown_size_skips_the_rule_with_a_note() -> None:
    c = HostConfig(vllm_accelerator="cuda", vllm_max_model_len=4096)
    no_params = QWEN.__class__(num_layers=64, num_kv_heads=8, head_dim=128)
    assert "parameter count unknown" in str(fit.device_fit(c, no_params))
    assert "no device memory" in str(fit.device_fit(
        HostConfig(vllm_accelerator="cpu"), QWEN))


def test_an_accelerator_model_must_run_on_the_accelerator(
        make_inventory: InventoryFactory) -> None:
    [p] = [p for p in problems(make_inventory, one_host(
        vllm_accelerator="rocm", vllm_accelerator_model="h100")) if p.key.startswith("vllm_acc")]
    assert p.message == "h100 runs cuda, but the host's vllm_accelerator is rocm"
    assert "mi300x, mi325x" in p.fix


# --- 2. instances ---------------------------------------------------------------------------

@pytest.mark.parametrize(("settings", "key", "text"), [
    ({"vllm_accelerator_count": 8, "vllm_instances": 5, "vllm_tensor_parallel_size": 2},
     "vllm_instances", "5 instances x TP 2 x PP 1 need 10 devices"),
    ({"vllm_instances": 2}, "vllm_instances", "without vllm_accelerator_count"),
    ({"vllm_extra_args": ["--data-parallel-size", "4"]}, "vllm_extra_args",
     "--data-parallel-size runs data parallelism"),
    ({"vllm_extra_args": ["-dp", "2"]}, "vllm_extra_args", "-dp runs"),
    ({"vllm_extra_args": ["--data-parallel-size-local=2"]}, "vllm_extra_args",
     "--data-parallel-size-local runs"),
    ({"vllm_accelerator_count": 8, "vllm_extra_env": {"CUDA_VISIBLE_DEVICES": "0"}},
     "vllm_extra_env.CUDA_VISIBLE_DEVICES", "its own device set"),
    ({"vllm_accelerator_count": 8, "lmcache_server_port": 8002}, "lmcache_server_port",
     "port 8002 is also used by vllm_port"),
])
def test_instance_rules(make_inventory: InventoryFactory, settings: dict, key: str,
                        text: str) -> None:
    found = problems(make_inventory, one_host(vllm_accelerator="cuda", vllm_max_model_len=8192,
                                              lmcache_topology="server", **settings))
    assert any(p.key == key and text in p.message for p in found), found
    if key == "vllm_extra_args":
        assert any("vllm_accelerator_count / vllm_instances" in p.fix for p in found)


def test_parallelism_wider_than_the_host_names_the_parallelism_not_the_instances(
        make_inventory: InventoryFactory) -> None:
    found = problems(make_inventory, one_host(
        vllm_accelerator="cuda", vllm_max_model_len=8192, vllm_accelerator_count=4,
        vllm_tensor_parallel_size=4, vllm_pipeline_parallel_size=2))
    [p] = [p for p in found if p.key in ("vllm_instances", "vllm_tensor_parallel_size")]
    assert p.key == "vllm_tensor_parallel_size"
    assert "one instance with TP 4 x PP 2 needs 8 devices" in p.message
    assert "at most 4" in p.fix and "instances" not in p.fix


def test_four_instances_claim_four_ports(make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(one_host(
        vllm_accelerator="cuda", vllm_accelerator_count=8, vllm_tensor_parallel_size=2,
        vllm_max_model_len=8192))))
    ports = ports_in_use(site.hosts["h1"])
    assert [p for p, key in ports.items() if key == "vllm_port"] == [8000, 8001, 8002, 8003]


# --- 3. accelerator-correct stacks ----------------------------------------------------------

def test_gaudi3_with_vllm_034_is_refused_naming_the_plugin(
        make_inventory: InventoryFactory) -> None:
    found = problems(make_inventory, one_host(vllm_accelerator="gaudi3",
                                              vllm_version="0.34.0"))
    [p] = [p for p in found if p.key == "vllm_version"]
    assert "no vllm-gaudi release" in p.message and "v0.26.0" in p.message
    assert "0.26.x" in p.fix


def test_gaudi3_with_the_server_topology_is_refused(make_inventory: InventoryFactory) -> None:
    found = problems(make_inventory, one_host(vllm_accelerator="gaudi3", vllm_version="0.26.0",
                                              lmcache_topology="server"))
    [p] = [p for p in found if p.key == "lmcache_topology"]
    assert "no lmcache_driven MP transfer" in p.message and "hpu" in p.message
    assert p.fix == "set lmcache_topology: inprocess"


def test_topology_defaults_follow_the_accelerator() -> None:
    assert HostConfig(vllm_accelerator="cuda").lmcache_topology == "server"
    assert HostConfig(vllm_accelerator="rocm").lmcache_topology == "server"
    assert HostConfig(vllm_accelerator="gaudi3", vllm_version="0.26.0").lmcache_topology == \
        "inprocess"
    assert HostConfig(vllm_accelerator="cuda", lmcache_mode="nixl").lmcache_topology == \
        "inprocess"
    assert HostConfig(vllm_accelerator="cuda", vllm_version="0.10.2").lmcache_topology == \
        "inprocess"  # no LMCacheMPConnector in vLLM 0.10
    assert HostConfig(vllm_accelerator="cuda", lmcache_topology="inprocess"
                      ).lmcache_topology == "inprocess"


def test_the_cuda_default_is_the_vllm_whose_torch_pypis_lmcache_was_built_for() -> None:
    assert compat.lmcache("0.5.6").build_torch == "2.13"
    assert compat.vllm("0.34.0").torch == "2.14" and compat.vllm("0.32.0").torch == "2.13"
    site = open_site(str(EXAMPLE))
    assert {n: h.config.vllm_version for n, h in site.hosts.items() if "vllm" in h.groups} \
        == {"gpu-h100-1": "0.32.0", "gpu-h100-2": "0.32.0", "gpu-mi300x-1": "0.34.0",
            "gaudi3-1": "0.26.0"}
    # no torch warning left for the example: CUDA pairs, ROCm and Gaudi3 bring their wheels
    assert not any("torch" in w for w in build_plan(site).warnings)


def test_pypis_lmcache_under_a_torch_it_breaks_on_is_refused_naming_both_ways_out(
        make_inventory: InventoryFactory) -> None:
    found = problems(make_inventory, one_host(vllm_accelerator="cuda", vllm_version="0.34.0",
                                              vllm_model="Qwen/Qwen3-8B"))
    [p] = [p for p in found if p.key == "vllm_version"]
    assert "torch 2.14, which lacks _ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb" \
        in p.message and "slow pure-torch fallback" in p.message
    assert p.fix == ("set vllm_version 0.32.0 (torch 2.13), or set lmcache_wheel_dir to an "
                     "LMCache 0.5.6 built against torch 2.14")
    # a site's own LMCache build is the way out on 0.34
    assert not [p for p in problems(make_inventory, one_host(
        vllm_accelerator="cuda", vllm_version="0.34.0", vllm_model="Qwen/Qwen3-8B",
        lmcache_wheel_dir="/srv/wheelhouse/lmcache")) if p.key == "vllm_version"]


def test_an_unmeasured_torch_pairing_stays_a_plan_warning(
        make_inventory: InventoryFactory) -> None:
    """torch 2.7 (vLLM 0.10.0/0.10.1) was never checked against LMCache 0.5.6's wheel: a
    warning, not a refusal (compat.yaml build_torch_breaks names only measured breaks)."""
    site = open_site(str(make_inventory(one_host(
        vllm_accelerator="cuda", vllm_version="0.10.1", vllm_model="Qwen/Qwen3-8B"))))
    warnings = build_plan(site).warnings
    assert any("built against torch 2.13, vLLM 0.10.1 pins torch 2.7" in w and
               "not checked for this pair" in w for w in warnings), warnings


# --- 4. the server's L1 ---------------------------------------------------------------------

def test_server_l1_of_a_64k_qwen3_32b_h100_host_holds_one_request(
        make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(one_host(
        vllm_accelerator="cuda", vllm_tensor_parallel_size=2, vllm_max_model_len=65536))))
    c = site.hosts["h1"].config
    assert c.lmcache_topology == "server" and c.lmcache_server_l1_size_gb == 16.0
    plan = build_plan(site)
    [host] = plan.hosts
    assert host.lmcache_server_l1_bytes == 16 * fit.GIB and host.pinned_dram_bytes == 0
    from deploy_kit.render.lmcache_server import server_argv

    argv = server_argv(c)
    assert argv[argv.index("--l1-size-gb") + 1] == "16"
    assert float(argv[argv.index("--l1-init-size-gb") + 1]) <= 16


def test_server_l1_counts_instances_and_is_bounded_by_host_memory() -> None:
    geometry = find_preset("Qwen/Qwen3-32B")
    assert geometry is not None
    c = HostConfig(vllm_accelerator="cuda", vllm_tensor_parallel_size=2,
                   vllm_max_model_len=65536, vllm_accelerator_count=8)
    assert fit.server_l1_gb(c, geometry) == 64.0
    assert fit.server_l1_gb(c.model_copy(update={"vllm_host_memory_gb": 96}), geometry) == 48.0


def test_an_explicit_l1_below_one_request_is_refused(make_inventory: InventoryFactory) -> None:
    found = problems(make_inventory, one_host(
        vllm_accelerator="cuda", vllm_tensor_parallel_size=2, vllm_max_model_len=65536,
        lmcache_server_l1_size_gb=1))
    [p] = [p for p in found if p.key == "lmcache_server_l1_size_gb"]
    assert "1 GiB < one 65536-token request's KV 16.0 GiB" in p.message
    assert p.fix.startswith("use at least 16")


# --- 5. one key format per sharing group ----------------------------------------------------

def test_one_inprocess_host_among_server_hosts_of_a_bucket_is_refused(tmp_path: object
                                                                     ) -> None:
    import shutil
    from pathlib import Path

    root = Path(str(tmp_path)) / "example"
    shutil.copytree(EXAMPLE, root)
    hosts = (root / "hosts.yml").read_text().replace(
        "gpu-h100-2: {ansible_host: 10.67.68.12}",
        "gpu-h100-2: {ansible_host: 10.67.68.12, lmcache_topology: inprocess}")
    (root / "hosts.yml").write_text(hosts)
    with pytest.raises(InventoryError) as exc:
        open_site(str(root))
    [p] = [p for p in exc.value.problems if p.key == "lmcache_topology"]
    assert p.message == "gpu-h100-2 has 'inprocess', others have 'server'"
    assert "in bucket 'lmcache'" in p.fix


def test_two_lmcache_series_in_one_group_are_refused(make_inventory: InventoryFactory) -> None:
    assert problems(make_inventory) == []
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["vllm"]["hosts"]["gpu2"]["lmcache_version"] = "0.4.2"
    found = problems(make_inventory, hosts)
    [p] = [p for p in found if p.key == "lmcache_version"]
    assert "runs LMCache 0.4.x, others 0.5.x" in p.message
