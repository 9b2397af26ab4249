"""bench/gpu-proof.py on a machine without a GPU: its dry run renders the one-host inventory
through deploykit, prints what it would run, and writes a result document from a fake
measurement; its precondition check refuses a Python without vLLM in one line."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

from deploy_kit.core.geometry import find_preset, from_hf_config

REPO = Path(__file__).resolve().parents[2]


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_proof", REPO / "bench/gpu-proof.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_proof"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


gp = load()


@pytest.fixture(scope="module")
def dry(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, Path]:
    out = tmp_path_factory.mktemp("gpu-proof")
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = gp.main(["--dry-run", "--out", str(out)])
    assert code == 0
    text = printed.getvalue()
    shown = json.loads(text[:text.index("\n}\n") + 2])  # the JSON, then the table
    return shown, json.loads((out / "gpu-proof.json").read_text()), out


def test_dry_run_prints_deploykits_rendered_units(dry: tuple[dict, dict, Path]) -> None:
    shown, _, out = dry
    venv = Path(sys.executable).absolute().parent
    argv, server = shown["vllm"]["argv"], shown["lmcache_server"]["argv"]
    assert argv[:3] == [f"{venv}/vllm", "serve", str(out / "work/models/qwen3-8b-random")]
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert argv[argv.index("--port") + 1] == "18000"
    assert argv[argv.index("--max-model-len") + 1] == str(32768 + 256)
    transfer = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert transfer["kv_connector"] == "LMCacheMPConnector"
    extra = transfer["kv_connector_extra_config"]
    assert extra["lmcache.mp.port"] == int(server[server.index("--port") + 1]) == 18001
    assert server[:2] == [f"{venv}/lmcache", "server"]
    assert server[server.index("--l1-size-gb") + 1] == "32"
    assert "--l2-adapter" not in server  # dram mode: no S3, no disk
    assert shown["vllm"]["env"]["PYTHONHASHSEED"] == shown["lmcache_server"]["env"][
        "PYTHONHASHSEED"]
    assert shown["vllm"]["env"]["HF_HUB_OFFLINE"] == "1"
    assert {p["tokens"] for p in shown["prompts"].values()} == {4096, 16384, 32768}


def test_dry_run_result_follows_the_schema(dry: tuple[dict, dict, Path]) -> None:
    _, doc, out = dry
    assert gp.schema_problems(doc) == []
    assert doc["status"] == "dry-run" and doc["exit_code"] == 0 and doc["error"] is None
    assert [(r["context_tokens"], r["repeat"]) for r in doc["rows"]] == [
        (n, r) for n in (4096, 16384, 32768) for r in (0, 1)]
    assert doc["planner"]["device"] == "h100"
    row = doc["rows"][0]
    assert row["cold_vs_predicted"] == pytest.approx(1.25)
    assert row["hit_speedup"] == pytest.approx(10.0)
    assert row["restart_hit_tokens"] == 4095
    assert "made up" in doc["notes"][0]
    assert "medians of 2" in (out / "gpu-proof.txt").read_text()


def test_predictions_are_the_planners(dry: tuple[dict, dict, Path]) -> None:
    """breakeven's cold prefill: the geometry's FLOPs at H100 peak x 0.5, TP 1."""
    _, doc, _ = dry
    geometry = find_preset("Qwen/Qwen3-8B")
    assert geometry is not None
    for row in doc["summary"]:
        n = row["context_tokens"]
        flops = 2 * geometry.prefill_params * n + 2 * geometry.num_layers * n * n * 4096
        assert row["predicted_prefill_s"] == pytest.approx(flops / (989e12 * 0.5))


@pytest.mark.parametrize(("name", "preset"), [("qwen3-8b", "Qwen/Qwen3-8B"),
                                              ("qwen3-32b", "Qwen/Qwen3-32B")])
def test_built_model_has_the_real_geometry(tmp_path: Path, name: str, preset: str) -> None:
    built = from_hf_config(gp.build_model_dir(tmp_path, name) / "config.json")
    real = find_preset(preset)
    assert built == real  # the KV geometry
    assert real is not None and (built.prefill_params, built.attention_dim) == (
        real.prefill_params, real.attention_dim)


def test_tokenizer_covers_the_vocabulary() -> None:
    tok = gp.tokenizer_json(151936)
    vocab = tok["model"]["vocab"]
    assert len(vocab) == 151936 and sorted(vocab.values()) == list(range(151936))
    assert [t["id"] for t in tok["added_tokens"]] == [0, 1, 2]


def test_prompts_are_exact_fresh_and_in_range() -> None:
    table = gp.prompts("n", [512, 1024], 2)
    gp.check_prompts(table, 151936)
    assert table == gp.prompts("n", [512, 1024], 2)  # reproducible
    assert table[(512, 0)] != gp.prompts("m", [512], 1)[(512, 0)]
    with pytest.raises(ValueError, match="share their first"):
        gp.check_prompts({(512, 0): table[(512, 0)], (1024, 0): table[(512, 0)] * 2}, 151936)
    with pytest.raises(ValueError, match="has 511 ids"):
        gp.check_prompts({(512, 0): table[(512, 0)][:511]}, 151936)
    with pytest.raises(ValueError, match="outside"):
        gp.check_prompts({(512, 0): table[(512, 0)]}, 2000)


def test_schema_problems_name_the_bad_field(dry: tuple[dict, dict, Path]) -> None:
    _, doc, _ = dry
    bad = json.loads(json.dumps(doc))
    bad["rows"][0]["cold_ttft_s"] = "slow"
    del bad["units"]["vllm"]
    bad["schema"] = "other/1"
    problems = gp.schema_problems(bad)
    assert any("rows[0].cold_ttft_s" in p for p in problems)
    assert any("units.vllm" in p for p in problems)
    assert any("not deploykit-gpu-proof/1" in p for p in problems)


def test_disk_mode_gives_the_server_an_fs_l2(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert gp.main(["--dry-run", "--lmcache-mode", "disk", "--lengths", "4096",
                    "--repeats", "1", "--port", "19000", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "gpu-proof.json").read_text())
    server = doc["units"]["lmcache_server"]["argv"]
    adapter = json.loads(server[server.index("--l2-adapter") + 1])
    assert adapter == {"type": "fs", "base_path": str(tmp_path.absolute() / "work/lmcache-l2")}
    assert (tmp_path / "work/lmcache-l2").is_dir()
    assert server[server.index("--port") + 1] == "19001"


def test_a_python_without_vllm_fails_in_one_line(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The precondition: this test's own Python has deploykit but no vLLM."""
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("this Python has vLLM")
    code = gp.main(["--python", sys.executable, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == gp.EXIT_PRECONDITION
    assert err.count("\n") == 1 and err.startswith("gpu-proof: ") and "cannot import" in err
    doc = json.loads((tmp_path / "gpu-proof.json").read_text())
    assert doc["status"] == "failed" and doc["exit_code"] == 3 and doc["rows"] == []


def test_lengths_beyond_the_models_positions_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        gp.main(["--dry-run", "--lengths", "65536", "--out", str(tmp_path)])
    assert exc.value.code == 2


def free_base() -> int:
    """Four consecutive free loopback ports."""
    rng = random.Random()
    for _ in range(50):
        base = rng.randrange(20000, 40000)
        if all(gp.port_free(base + i) for i in range(4)):
            return base
    raise AssertionError("no four free ports")


def test_protocol_against_fake_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The real path (start, readiness, cold, vLLM's own hit, vLLM restart with the server
    kept, LMCache hit, stop) with stand-ins for `vllm serve` and `lmcache server` in a fake
    venv: the orchestration is tested here, vLLM and LMCache are not."""
    fakes = Path(__file__).parent / "gpu_proof_fakes"
    bin_dir = tmp_path / "venv/bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    for name in ("vllm", "lmcache"):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec {sys.executable} {fakes}/fake_{name}.py "$@"\n')
        script.chmod(0o755)
    monkeypatch.setattr(gp, "probe", lambda python: {"vllm": "0.34.0", "lmcache": "0.5.6",
                                                      "device": "fake"})
    base, out = free_base(), tmp_path / "out"
    code = gp.main(["--python", str(bin_dir / "python"), "--lengths", "512,1024",
                    "--repeats", "1", "--port", str(base), "--settle-s", "0",
                    "--budget-s", "120", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    doc = json.loads((out / "gpu-proof.json").read_text())
    assert gp.schema_problems(doc) == [] and doc["status"] == "ok"
    assert doc["units"]["vllm"]["argv"][0] == str(bin_dir / "vllm")
    assert set(doc["startup_s"]) == {"lmcache_server", "vllm_first", "vllm_restart"}
    assert [(r["context_tokens"], r["restart_hit_tokens"]) for r in doc["rows"]] == [
        (512, 511), (1024, 1023)]
    assert all(r["cold_ttft_s"] and r["vllm_prefix_hit_ttft_s"] for r in doc["rows"])
    assert doc["requests"]["cold/512/0"]["external_hits"] == 0
    assert doc["requests"]["vllm_prefix_hit/512/0"]["local_hits"] == 511
    # the server kept its L1 across the vLLM restart: 1 warm-up + 2 prompts, then 1 more
    assert doc["lmcache_status"]["lmcache_status_before_restart"] == {"l1_keys": 3}
    assert doc["lmcache_status"]["lmcache_status_end"] == {"l1_keys": 4}
    assert all(gp.port_free(base + i) for i in range(4))  # both stopped
    assert "restart" in (out / "gpu-proof.txt").read_text()
    assert (out / "logs/vllm.log").read_text().count("# ") == 2  # started twice
