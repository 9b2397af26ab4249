"""transformers and vLLM's override sequence give each rendered unit a complete rope
configuration: for every row whose vLLM requires transformers 5, the lowest transformers it
allows (requirements/common.txt) builds the model's config, applies the rendered
--hf-overrides as vLLM does (config.update, then vLLM's own patch_rope_parameters, exec'd
from the row's sdist: probes/rope_replay.py), and must end with the model's rope_theta and
the rendered scaling. transformers 4 rows render --rope-scaling (compat `rope_scaling_flag`),
another path, which this check does not replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deploy_kit.core import compat
from tests.upstream import renders, venvs, vllm_source
from tests.upstream.conftest import need, record, row_renders
from tests.upstream.test_vllm_args import flag_value

ROWS = renders.rows()
CONFIG_PY = "vllm/transformers_utils/config.py"
UTILS_PY = "vllm/config/utils.py"
# model name prefix -> transformers model_type (config.json's), for the models the renders use
MODEL_TYPES = {"Qwen/Qwen3-": "qwen3", "Qwen/Qwen2.5-": "qwen2", "meta-llama/Llama-3": "llama"}


def model_config(render: renders.ServingRender) -> dict[str, Any]:
    """The model's config.json as far as rope needs it, from deploykit's models.yaml."""
    name = render.host.config.vllm_model
    geometry = render.host.geometry
    assert geometry is not None and geometry.rope_theta, f"{name}: no rope_theta in models.yaml"
    model_type = next((t for prefix, t in MODEL_TYPES.items() if name.startswith(prefix)), None)
    assert model_type, f"{name}: no transformers model_type known to this tier"
    return {"model_type": model_type, "num_hidden_layers": geometry.num_layers,
            "num_key_value_heads": geometry.num_kv_heads, "head_dim": geometry.head_dim,
            "num_attention_heads": geometry.attention_dim // geometry.head_dim,
            "hidden_size": geometry.attention_dim, "max_position_embeddings":
            geometry.max_context, "rope_theta": geometry.rope_theta, "rope_scaling": None}


def override_sequence_in(source: Path) -> None:
    """The order the replay copies: vLLM applies hf_overrides, then patches rope."""
    text = (source / CONFIG_PY).read_text()
    update, patch = text.find("config.update(hf_overrides_kw)"), \
        text.find("patch_rope_parameters(config)")
    assert 0 <= update < patch, f"{source.name}: {CONFIG_PY} no longer overrides, then patches"


@pytest.mark.parametrize(("row", "accelerator"), ROWS, ids=[f"{r}-{a}" for r, a in ROWS])
def test_rope_parameters_complete(serving_renders: tuple[renders.ServingRender, ...],
                                  row: str, accelerator: str) -> None:
    found = row_renders(serving_renders, row, accelerator)
    failures, notes = [], []
    for version in sorted({r.vllm_version for r in found}):
        source = need(vllm_source.sdist, version)
        spec = vllm_source.requirement(source, "common.txt", "transformers")
        lowest = vllm_source.lowest_allowed(spec)
        if int(lowest.split(".")[0]) < 5:
            # transformers 4: deploykit must use the row's --rope-scaling flag, not overrides
            assert compat.vllm(version).rope_scaling_flag, \
                f"vLLM {version} allows transformers {lowest} but renders --hf-overrides"
            notes.append(f"n/a: vLLM {version} allows transformers {spec} (4.x, --rope-scaling)")
            continue
        override_sequence_in(source)
        cases = {}
        for render in (r for r in found if r.vllm_version == version):
            for unit, argv in render.vllm_argvs().items():
                raw = flag_value(argv, "--hf-overrides")
                if raw is not None:
                    cases[f"{render.name}{unit}"] = (render, json.loads(raw))
        assert cases, f"no vLLM {version} unit renders --hf-overrides: nothing to replay"
        venv = need(venvs.transformers, lowest)
        answer = venvs.probe(venv, "rope_replay.py", {
            "config_py": str(source / CONFIG_PY), "utils_py": str(source / UTILS_PY),
            "cases": [{"name": name, **{k: v for k, v in model_config(render).items()
                                        if k == "model_type"},
                       "config": model_config(render), "hf_overrides": overrides}
                      for name, (render, overrides) in cases.items()]})
        assert isinstance(answer, dict) and answer["transformers"] == lowest
        for name, result in answer["cases"].items():
            render, _ = cases[name]
            params = result["rope_parameters"] or {}
            wanted = render.host.config.vllm_rope_scaling or {}
            expect = {"rope_theta": render.host.geometry.rope_theta,  # type: ignore[union-attr]
                      "rope_type": wanted.get("rope_type", wanted.get("type")),
                      "factor": wanted.get("factor")}
            wrong = {k: params.get(k) for k, v in expect.items()
                     if v is not None and params.get(k) != v}
            if wrong:
                failures.append(f"{name} (vLLM {version}, transformers {lowest}): "
                                f"rope_parameters {params} — wrong {wrong}")
        notes.append(f"transformers {lowest} [{version}]")
    record(f"{row}-{accelerator}", "rope",
           ("pass " + "; ".join(notes)) if not failures else f"FAIL: {failures[0]}")
    assert not failures, "\n".join(failures)
