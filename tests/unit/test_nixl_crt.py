"""NIXL OBJ's S3 CRT client: crtMinLimit from the chunk object size,
throughput_target_gbps from deploykit_storage_gbps, and lmcache_extra_config merging NIXL's
backend params key by key, with deploykit's own params still refused there."""

from __future__ import annotations

from typing import Any

import yaml

from deploy_kit.core.errors import InventoryError, Problem
from deploy_kit.ops.site import open_site
from deploy_kit.render.files import render_site
from deploy_kit.render.lmcache import CRT_MIN_PART_BYTES, crt_min_limit, object_bytes
from tests.conftest import InventoryFactory

NIXL = {"lmcache_mode": "nixl", "lmcache_topology": "inprocess"}
MIB = 1024**2


def _params(make_inventory: InventoryFactory, **vllm: Any) -> dict[str, str]:
    tree = render_site(open_site(str(make_inventory(vllm=NIXL | vllm))))
    lm = yaml.safe_load(tree["gpu1"]["/etc/deploykit/lmcache.yaml"].content)
    params: dict[str, str] = lm["extra_config"]["nixl_backend_params"]
    assert all(isinstance(v, str) for v in params.values())  # NIXL's map is string-valued
    return params


def _problems(make_inventory: InventoryFactory, **vllm: Any) -> list[Problem]:
    try:
        open_site(str(make_inventory(vllm=NIXL | vllm)))
    except InventoryError as exc:
        return exc.problems
    return []


def test_large_objects_go_through_the_crt_client_in_8_mib_parts(
        make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(vllm=NIXL)))
    host = site.hosts["gpu1"]
    size = object_bytes(host.config, host.geometry)
    assert size is not None and size >= CRT_MIN_PART_BYTES  # the default model's chunk
    params = _params(make_inventory, deploykit_storage_gbps=100)
    limit = int(params["crtMinLimit"])
    assert CRT_MIN_PART_BYTES <= limit <= size and limit == min(size, 8 * MIB)
    assert params["throughput_target_gbps"] == "100"


def test_a_small_object_keeps_the_plain_client(make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(vllm=NIXL | {"lmcache_chunk_size": 16,
                                                      "vllm_block_size": 16})))
    host = site.hosts["gpu1"]
    size = object_bytes(host.config, host.geometry)
    assert size is not None and size < CRT_MIN_PART_BYTES
    assert crt_min_limit(host.config, host.geometry) is None
    params = _params(make_inventory, lmcache_chunk_size=16, vllm_block_size=16)
    assert "crtMinLimit" not in params and "throughput_target_gbps" not in params


def test_fractional_bandwidth_is_whole_gbps(make_inventory: InventoryFactory) -> None:
    assert _params(make_inventory, deploykit_storage_gbps=0.3)["throughput_target_gbps"] == "1"
    assert _params(make_inventory, deploykit_storage_gbps=12.6)["throughput_target_gbps"] == "13"


def test_zero_turns_the_crt_client_off(make_inventory: InventoryFactory) -> None:
    params = _params(make_inventory, lmcache_nixl_crt_min_limit=0)
    assert "crtMinLimit" not in params


def test_an_explicit_limit_is_checked_against_5_mib_and_the_object(
        make_inventory: InventoryFactory) -> None:
    assert _params(make_inventory, lmcache_nixl_crt_min_limit=6 * MIB)["crtMinLimit"] == \
        str(6 * MIB)
    low = _problems(make_inventory, lmcache_nixl_crt_min_limit=MIB)
    assert {p.key for p in low} == {"lmcache_nixl_crt_min_limit"}
    assert all("5 MiB" in p.message for p in low)
    high = _problems(make_inventory, lmcache_nixl_crt_min_limit=2**39)
    assert {p.key for p in high} == {"lmcache_nixl_crt_min_limit"}
    assert {p.hosts for p in high} == {("gpu1",), ("gpu2",)}
    assert all("above the chunk object size" in p.message for p in high)


def test_extra_nixl_params_merge_into_the_rendered_ones(
        make_inventory: InventoryFactory) -> None:
    params = _params(make_inventory, lmcache_extra_config={
        "nixl_backend_params": {"num_threads": 8, "use_virtual_addressing": False}})
    assert params["num_threads"] == "8" and params["use_virtual_addressing"] == "false"
    # the rendered ones survive the merge (a shallow merge would have dropped them)
    assert params["endpoint_override"].startswith("http") and params["bucket"] == "lmcache"
    assert "crtMinLimit" in params


def test_deploykit_nixl_params_are_refused_in_the_passthrough(
        make_inventory: InventoryFactory) -> None:
    found = _problems(make_inventory, lmcache_extra_config={
        "nixl_backend_params": {"bucket": "other", "crtMinLimit": "6000000",
                                "throughput_target_gbps": "40", "num_threads": "8"}})
    by_key = {p.key: p for p in found}
    assert set(by_key) == {"lmcache_extra_config.nixl_backend_params.bucket",
                           "lmcache_extra_config.nixl_backend_params.crtMinLimit",
                           "lmcache_extra_config.nixl_backend_params.throughput_target_gbps"}
    assert "lmcache_nixl_crt_min_limit" in by_key[
        "lmcache_extra_config.nixl_backend_params.crtMinLimit"].fix
    assert "deploykit_storage_gbps" in by_key[
        "lmcache_extra_config.nixl_backend_params.throughput_target_gbps"].fix


def test_the_nixl_golden_site_renders_the_crt_client() -> None:
    tree = render_site(open_site("tests/golden/nixl-obj/inventory"))
    for host in ("gpu1", "hpu1"):
        lm = yaml.safe_load(tree[host]["/etc/deploykit/lmcache.yaml"].content)
        assert int(lm["extra_config"]["nixl_backend_params"]["crtMinLimit"]) >= 5 * MIB
