"""When does a remote KV hit beat recompute? The FLOP model, the break-even
bandwidth per serving group, `plan --json`'s fields, and `bench storage`'s verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy_kit.bench.storage import breakeven_line, breakeven_verdict
from deploy_kit.config.models import HostConfig
from deploy_kit.core.geometry import bytes_per_token, find_preset, from_hf_config, prefill_flops
from deploy_kit.plan import breakeven
from tests.cli import run_cli
from tests.conftest import REPO

QWEN32 = find_preset("Qwen/Qwen3-32B")


def test_prefill_flops_is_linear_in_parameters_plus_causal_attention() -> None:
    assert QWEN32 is not None
    # 31.2 B non-embedding parameters (Qwen's own figure for Qwen3-32B)
    assert round(QWEN32.prefill_params / 1e9, 1) == 31.2
    tokens = 4096
    linear = 2 * QWEN32.prefill_params * tokens
    quadratic = 2 * 64 * tokens**2 * 64 * 128
    assert prefill_flops(QWEN32, tokens) == pytest.approx(linear + quadratic)
    # at 128K attention's quadratic term outweighs the parameters
    long = prefill_flops(QWEN32, 131072)
    assert long is not None and long > 2 * 2 * QWEN32.prefill_params * 131072


def test_config_json_gives_dense_and_moe_counts_and_mla_none(tmp_path: Path) -> None:
    dense = tmp_path / "dense.json"
    dense.write_text(json.dumps({"num_hidden_layers": 64, "hidden_size": 5120,
                                 "num_attention_heads": 64, "num_key_value_heads": 8,
                                 "head_dim": 128, "intermediate_size": 25600}))
    assert from_hf_config(dense).prefill_params == QWEN32.prefill_params  # type: ignore[union-attr]
    moe = tmp_path / "moe.json"  # Qwen3-30B-A3B: 8 of 128 experts of 768 per token
    moe.write_text(json.dumps({"num_hidden_layers": 48, "hidden_size": 2048,
                               "num_attention_heads": 32, "num_key_value_heads": 4,
                               "head_dim": 128, "intermediate_size": 6144,
                               "moe_intermediate_size": 768, "num_experts_per_tok": 8}))
    geometry = from_hf_config(moe)
    assert 2.5e9 < geometry.prefill_params < 3.5e9  # "A3B": about 3 B active
    mla = tmp_path / "mla.json"
    mla.write_text(json.dumps({"num_hidden_layers": 4, "kv_lora_rank": 512,
                               "qk_rope_head_dim": 64, "hidden_size": 7168}))
    assert prefill_flops(from_hf_config(mla), 4096) is None


def test_break_even_is_kv_bits_over_predicted_prefill() -> None:
    assert QWEN32 is not None
    c = HostConfig(vllm_accelerator="cuda", vllm_tensor_parallel_size=2,
                   deploykit_storage_gbps=25)
    group = breakeven.group_plan("Qwen/Qwen3-32B", QWEN32, c, ["b", "a"])
    assert group.device == "h100" and group.hosts == ["a", "b"]
    assert group.effective_tflops == 989.0 * breakeven.EFFICIENCY
    assert [r.context_tokens for r in group.rows] == list(breakeven.CONTEXTS)
    for row in group.rows:
        assert row.kv_bytes == row.context_tokens * bytes_per_token(QWEN32, 2)
        assert row.predicted_prefill_s is not None and row.breakeven_storage_gbps is not None
        expected = prefill_flops(QWEN32, row.context_tokens) / (494.5e12 * 2)  # type: ignore[operator]
        assert row.predicted_prefill_s == pytest.approx(expected)
        assert row.breakeven_storage_gbps == pytest.approx(
            row.kv_bytes * 8 / row.predicted_prefill_s / 1e9)
        assert row.remote_wins == (row.storage_s < row.predicted_prefill_s)
    # the quadratic term makes long contexts cheaper to fetch than to compute
    breakevens = [r.breakeven_storage_gbps for r in group.rows]
    assert breakevens == sorted(breakevens, reverse=True)
    assert not group.rows[0].remote_wins and group.rows[-1].remote_wins


def test_device_tp_and_a_measured_figure_change_the_prediction() -> None:
    assert QWEN32 is not None
    base = breakeven.group_plan("m", QWEN32, HostConfig(vllm_accelerator="cuda"), ["a"])
    tp4 = breakeven.group_plan("m", QWEN32, HostConfig(vllm_accelerator="cuda",
                                                       vllm_tensor_parallel_size=4), ["a"])
    assert tp4.rows[0].predicted_prefill_s == pytest.approx(
        base.rows[0].predicted_prefill_s / 4)  # type: ignore[operator]
    mi300 = breakeven.group_plan("m", QWEN32, HostConfig(vllm_accelerator="rocm"), ["a"])
    assert mi300.device == "mi300x" and mi300.rows[0].predicted_prefill_s < \
        base.rows[0].predicted_prefill_s  # type: ignore[operator]
    h200 = breakeven.group_plan("m", QWEN32, HostConfig(vllm_accelerator="cuda",
                                                        vllm_accelerator_model="h200"), ["a"])
    assert h200.device == "h200"
    measured = breakeven.group_plan("m", QWEN32, HostConfig(vllm_accelerator="cpu",
                                                            vllm_prefill_tflops=1.5), ["a"])
    assert measured.effective_tflops == 1.5 and "measured" in measured.tflops_source
    assert breakeven.losing_contexts(base, 1000.0) == []
    assert breakeven.losing_contexts(base, 0.001) == list(breakeven.CONTEXTS)


def test_plan_json_carries_the_three_fields_for_every_serving_group() -> None:
    result = run_cli("plan", "-i", "example", "--json", cwd=REPO)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    groups = plan["serving_groups"]
    assert {g["device"] for g in groups} == {"h100", "mi300x", "gaudi3"}
    served = sorted(h for g in groups for h in g["hosts"])
    assert served == sorted(h for m in plan["models"] for h in m["hosts"])
    for group in groups:
        assert [r["context_tokens"] for r in group["rows"]] == list(breakeven.CONTEXTS)
        for row in group["rows"]:
            assert row["kv_bytes"] > 0 and row["predicted_prefill_s"] > 0
            assert row["breakeven_storage_gbps"] > 0


def test_bench_storage_says_where_remote_loses() -> None:
    assert QWEN32 is not None
    group = breakeven.group_plan("Qwen/Qwen3-32B", QWEN32,
                                 HostConfig(vllm_accelerator="cuda",
                                            vllm_tensor_parallel_size=2), ["gpu1"])
    rows = [{"op": "GET", "client": "awscrt", "gb_per_s": 2.5},  # 20 Gbit/s
            {"op": "GET", "client": "boto3", "gb_per_s": 9.0},  # not LMCache's client
            {"op": "PUT", "client": "awscrt", "gb_per_s": 9.0}]
    verdict = breakeven_verdict([group], rows, "gpu1")
    assert verdict is not None and verdict["measured_gbps"] == 20.0
    assert verdict["losing_contexts"] == [4096, 8192, 16384, 32768]
    line = breakeven_line(verdict)
    assert line is not None and line.startswith("WARN") and "4K, 8K, 16K, 32K" in line
    fast = breakeven_verdict([group], [{"op": "GET", "client": "awscrt", "gb_per_s": 10.0}],
                             "gpu1")
    assert "beats recompute at every" in (breakeven_line(fast) or "")
    assert breakeven_verdict([group], [], "gpu1") is None


def test_verify_reads_only_this_sites_bench_storage_result(tmp_path: Path) -> None:
    from deploy_kit.core.envelope import dumps
    from deploy_kit.verify.gather import storage_measurement

    path = tmp_path / "storage.json"
    assert storage_measurement(path, "lab") is None  # no measurement yet
    path.write_text(dumps("bench-storage", 1, "lab", {
        "measured_from": "lab3", "breakeven": {"measured_gbps": 3.5, "losing_contexts": []}}))
    found = storage_measurement(path, "lab")
    assert found is not None and (found.measured_from, found.measured_gbps) == ("lab3", 3.5)
    assert storage_measurement(path, "prod") is None  # another site's figure says nothing
    path.write_text("{not json")
    assert storage_measurement(path, "lab") is None


def _gpu_prefill_module():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_prefill", REPO / "bench" / "gpu-prefill.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_calibration_script_counts_flops_as_the_planner_does() -> None:
    """bench/gpu-prefill.py runs without deploykit on a GPU host: its FLOP count must be
    the planner's, or its TFLOPS would not mean what vllm_prefill_tflops means."""
    script = _gpu_prefill_module()
    assert QWEN32 is not None
    for tokens in (4096, 131072):
        assert script.prefill_flops(64, 5120, 64, 8, 128, 25600, tokens) == \
            pytest.approx(prefill_flops(QWEN32, tokens))
    with pytest.raises(SystemExit) as refused:  # before torch is imported
        script.main(["--layers", "2", "--hidden", "64", "--heads", "6", "--kv-heads", "4",
                     "--head-dim", "8", "--intermediate", "128"])
    assert refused.value.code == 2


def test_requests_per_chunk_follow_awscrt_multipart() -> None:
    """A 32 MiB per-rank object (Qwen3-32B, TP 2) is CreateMultipartUpload +
    4 parts of 8 MiB + Complete to store, and 4 ranged GETs to read; 2 MiB is one of each."""
    from deploy_kit.plan.sizing import AWSCRT_PART_BYTES, s3_requests

    assert AWSCRT_PART_BYTES == 8 * 2**20
    assert s3_requests(32 * 2**20) == s3_requests(32 * 2**20 - 1) == \
        type(s3_requests(1))(put=6, get=4)
    assert (s3_requests(2 * 2**20).put, s3_requests(2 * 2**20).get) == (1, 1)
    assert (s3_requests(8 * 2**20).put, s3_requests(8 * 2**20 + 1).put) == (1, 4)
    plan = json.loads(run_cli("plan", "-i", "example", "--json", cwd=REPO).stdout)
    model = plan["models"][0]
    assert model["object_bytes"] == 32 * 2**20 and model["objects_per_chunk"] == 2
    assert (model["s3_put_requests_per_chunk"], model["s3_get_requests_per_chunk"]) == (12, 8)
