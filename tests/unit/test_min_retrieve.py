"""min_retrieve_tokens from each serving group's break-even, and the
compat-checked passthrough for LMCache's other top-level keys (lmcache_top_level_config)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from deploy_kit.config.models import HostConfig
from deploy_kit.core import compat
from deploy_kit.core.errors import InventoryError, Problem
from deploy_kit.core.geometry import find_preset
from deploy_kit.ops.site import open_site
from deploy_kit.plan import breakeven
from deploy_kit.plan.plan import build_plan
from deploy_kit.render.files import render_site
from tests.conftest import REPO, InventoryFactory

QWEN32 = find_preset("Qwen/Qwen3-32B")
INPROCESS = {"lmcache_topology": "inprocess", "vllm_model": "Qwen/Qwen3-32B",
             "vllm_tensor_parallel_size": 2}
LMCACHE = "/etc/deploykit/lmcache.yaml"


def _config(make_inventory: InventoryFactory, host: str = "gpu1", **vllm: Any) -> dict[str, Any]:
    tree = render_site(open_site(str(make_inventory(vllm=INPROCESS | vllm))))
    return dict(yaml.safe_load(tree[host][LMCACHE].content))


def _problems(make_inventory: InventoryFactory, **vllm: Any) -> list[Problem]:
    try:
        open_site(str(make_inventory(vllm=INPROCESS | vllm)))
    except InventoryError as exc:
        return exc.problems
    return []


def test_breakeven_tokens_is_where_the_plan_table_turns() -> None:
    assert QWEN32 is not None
    c = HostConfig.model_validate({"vllm_accelerator": "cuda", "vllm_accelerator_model": "h100",
                                   "vllm_tensor_parallel_size": 2})
    tokens = breakeven.breakeven_tokens(QWEN32, c)
    assert tokens is not None and 16384 < tokens < 32768  # plan: 16K slower, 32K faster
    rows = breakeven.group_plan("q", QWEN32, c, ["h"], contexts=(tokens - 1, tokens)).rows
    assert [r.remote_wins for r in rows] == [False, True]
    # twice the bandwidth: a shorter prompt already wins; a slow link: a longer one
    fast = breakeven.breakeven_tokens(QWEN32, c.model_copy(update={"deploykit_storage_gbps": 50}))
    slow = breakeven.breakeven_tokens(QWEN32, c.model_copy(update={"deploykit_storage_gbps": 10}))
    assert fast is not None and slow is not None and fast < tokens < slow
    assert breakeven.breakeven_tokens(
        QWEN32, c.model_copy(update={"deploykit_storage_gbps": 10_000})) == 0


# both inputs of the break-even measured (bench storage, bench/gpu-prefill.py)
MEASURED = {"deploykit_storage_gbps": 25.0, "vllm_prefill_tflops": 494.5}


def test_in_process_gpu_hosts_get_the_groups_breakeven_in_whole_chunks(
        make_inventory: InventoryFactory) -> None:
    cfg = _config(make_inventory, lmcache_chunk_size=256, **MEASURED)
    tokens = cfg["min_retrieve_tokens"]
    assert tokens % 256 == 0 and 16384 < tokens < 32768 + 256
    assert "min_retrieve_tokens" not in cfg.get("extra_config", {})  # LMCache reads it on top
    # a host that recomputes twice as fast breaks even later: its own value
    faster = _config(make_inventory, lmcache_chunk_size=256,
                     **(MEASURED | {"vllm_prefill_tflops": 989.0}))["min_retrieve_tokens"]
    assert faster > tokens


@pytest.mark.parametrize("measured", [{}, {"deploykit_storage_gbps": 25.0},
                                      {"vllm_prefill_tflops": 494.5}])
def test_a_breakeven_from_a_guess_is_not_rendered_and_plan_shows_it(
        make_inventory: InventoryFactory, measured: dict[str, float]) -> None:
    """With a guessed input (the 50 % MFU, the 25 Gbit/s default) LMCache keeps its own 0:
    the guess gave Gaudi3 87,296 tokens, over the seed's 20K-token RAG prompts."""
    assert "min_retrieve_tokens" not in _config(make_inventory, **measured)
    site = open_site(str(make_inventory(vllm=INPROCESS | measured)))
    [group] = [g for g in build_plan(site).serving_groups if "gpu1" in g.hosts]
    assert not group.min_retrieve_tokens
    assert 16384 < group.retrieve_advice["gpu1"] < 32768 + 256
    assert len(group.unmeasured) == 2 - len(measured)


def test_an_explicit_value_wins_and_zero_reads_every_hit(
        make_inventory: InventoryFactory) -> None:
    assert _config(make_inventory, lmcache_min_retrieve_tokens=1024)["min_retrieve_tokens"] == 1024
    assert "min_retrieve_tokens" not in _config(make_inventory, lmcache_min_retrieve_tokens=0)


def test_server_topology_and_old_lmcache_render_none(make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(vllm=INPROCESS | {"lmcache_topology": "server"})))
    assert all(breakeven.min_retrieve_tokens(h.config, h.geometry) is None
               for h in site.group("vllm"))
    found = _problems(make_inventory, lmcache_topology="server", lmcache_min_retrieve_tokens=512)
    assert {p.key for p in found} == {"lmcache_min_retrieve_tokens"}
    assert "min_retrieve_tokens" not in compat.lmcache_top_level_keys("0.3.13")
    assert "min_retrieve_tokens" in compat.lmcache_top_level_keys("0.3.14")
    assert "min_retrieve_tokens" in compat.lmcache_top_level_keys("0.4.3")  # 0.4.1's list
    assert "min_retrieve_tokens" in compat.lmcache_top_level_keys("0.5.6")


def test_cpu_hosts_need_a_measured_prefill_rate() -> None:
    assert QWEN32 is not None
    c = HostConfig.model_validate({"vllm_accelerator": "cpu", "lmcache_topology": "inprocess",
                                   "vllm_tensor_parallel_size": 2, "lmcache_version": "0.4.7"})
    assert breakeven.min_retrieve_tokens(c, QWEN32) is None
    # a CPU recomputes so slowly that every hit wins: nothing to skip (break-even 0)
    slow = c.model_copy(update={"vllm_prefill_tflops": 2.0})
    assert breakeven.breakeven_tokens(QWEN32, slow) == 0
    assert breakeven.min_retrieve_tokens(slow, QWEN32) is None
    fast = c.model_copy(update={"vllm_prefill_tflops": 900.0})
    assert breakeven.min_retrieve_tokens(fast, QWEN32) is None  # the bandwidth is a guess
    measured = HostConfig.model_validate({**fast.model_dump(exclude_unset=True),
                                          "deploykit_storage_gbps": 25.0})
    assert (breakeven.min_retrieve_tokens(measured, QWEN32) or 0) > 0


def test_the_example_renders_none_above_the_seeds_rag_prompt_and_plan_advises() -> None:
    """The example measures neither input: its in-process host (Gaudi3; the CUDA/ROCm hosts
    run the LMCache server, which has no min_retrieve_tokens) skips no hit, so the seed's
    ~20K-token RAG prefixes read from S3; plan shows its break-even as advice."""
    site = open_site(str(REPO / "inventory" / "example"))
    tree = render_site(site)
    inprocess = [h for h in site.group("vllm") if not h.config.lmcache_server]
    assert [h.name for h in inprocess] == ["gaudi3-1"]
    for host in inprocess:
        cfg = yaml.safe_load(tree[host.name][LMCACHE].content)
        assert cfg.get("min_retrieve_tokens", 0) <= 20_000, host.name
    plan = build_plan(site)
    advice = {h: t for g in plan.serving_groups for h, t in g.retrieve_advice.items()}
    assert advice == {"gaudi3-1": 87_296}


@pytest.mark.parametrize(("extra", "key", "text"), [
    ({"lookup_timeout_ms": 500, "chunk_size": 512}, "lmcache_top_level_config.chunk_size",
     "lmcache_chunk_size"),
    ({"min_retrieve_tokens": 4}, "lmcache_top_level_config.min_retrieve_tokens",
     "lmcache_min_retrieve_tokens"),
    ({"lookup_timeout_msec": 500}, "lmcache_top_level_config.lookup_timeout_msec",
     "not a key of LMCache 0.5.6"),
    ({"extra_config": {"x": 1}}, "lmcache_top_level_config.extra_config", "own setting"),
])
def test_the_top_level_passthrough_refuses_owned_and_unknown_keys(
        make_inventory: InventoryFactory, extra: dict[str, Any], key: str, text: str) -> None:
    found = _problems(make_inventory, lmcache_top_level_config=extra)
    assert key in {p.key for p in found}
    assert all(text in f"{p.message} {p.fix}" for p in found if p.key == key)


def test_the_top_level_passthrough_reaches_lmcache_yaml(make_inventory: InventoryFactory) -> None:
    cfg = _config(make_inventory, lmcache_top_level_config={"lookup_timeout_ms": 500,
                                                            "enable_kv_events": True})
    assert cfg["lookup_timeout_ms"] == 500 and cfg["enable_kv_events"] is True
    # enable_kv_events: 0.3.15 and later (not in 0.3.10's config.py)
    old = _problems(make_inventory, lmcache_version="0.3.10",
                    lmcache_top_level_config={"enable_kv_events": True})
    assert "lmcache_top_level_config.enable_kv_events" in {p.key for p in old}


def test_verify_probes_carry_more_than_min_retrieve_tokens(
        make_inventory: InventoryFactory) -> None:
    """LMCache reports no external hit below min_retrieve_tokens: verify's cache-hit probes
    would read 0 on a healthy in-process host unless their prefix is at least that long."""
    from deploy_kit.verify.probes.cache_probe import hit_tokens

    site = open_site(str(make_inventory(vllm=INPROCESS | MEASURED)))
    hosts = site.group("vllm")
    for host in hosts:
        floor = breakeven.min_retrieve_tokens(host.config, host.geometry) or 0
        assert hit_tokens(host) >= floor > 0
        assert hit_tokens(host) % host.config.lmcache_chunk_size == 0
    assert hit_tokens(*hosts) == max(hit_tokens(h) for h in hosts)
    server = open_site(str(make_inventory(vllm={"lmcache_topology": "server"})))
    gpu = server.hosts["gpu1"]
    assert hit_tokens(gpu) == 2 * gpu.config.lmcache_chunk_size  # nothing skipped there
