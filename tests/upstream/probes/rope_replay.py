"""Runs inside a transformers venv (no vLLM there): vLLM's override sequence, its own
functions exec'd from the sdist. stdin: {"config_py", "utils_py", "cases": [{"name",
"model_type", "config", "hf_overrides"}]}; stdout: one JSON line, the rope parameters each
case ends with.

The sequence is vllm/transformers_utils/config.py get_config(): `config.update(
hf_overrides_kw)`, then `patch_rope_parameters(config)` and on `config.get_text_config()`
(0.26.0 :794-803, 0.34.0 :1034-1043; the test asserts that order in the file it reads)."""

from __future__ import annotations

import ast
import json
import logging
import sys
import types
from typing import Any

import transformers
from transformers import CONFIG_MAPPING

FUNCTIONS = ("is_rope_parameters_nested", "patch_legacy_rope_type", "patch_rope_parameters")


class _Logger(logging.LoggerAdapter):  # vLLM's logger has warning_once / info_once
    def warning_once(self, *args: Any, **kwargs: Any) -> None:
        self.warning(*args, **kwargs)

    def info_once(self, *args: Any, **kwargs: Any) -> None:
        self.info(*args, **kwargs)


def _load(path: str, names: tuple[str, ...], namespace: dict[str, Any]) -> None:
    with open(path) as handle:
        tree = ast.parse(handle.read())
    wanted = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    missing = set(names) - {n.name for n in wanted}
    if missing:
        raise SystemExit(f"{path} has no {sorted(missing)}")
    exec(compile(ast.Module(body=wanted, type_ignores=[]), path, "exec"), namespace)


def main() -> None:
    payload = json.load(sys.stdin)
    logger = _Logger(logging.getLogger("vllm"), {})
    base = getattr(transformers, "PreTrainedConfig", None) or transformers.PretrainedConfig
    utils: dict[str, Any] = {"Any": Any, "logger": logger}
    _load(payload["utils_py"], ("getattr_iter",), utils)
    stub = types.ModuleType("vllm.config.utils")
    stub.getattr_iter = utils["getattr_iter"]  # type: ignore[attr-defined]
    for name in ("vllm", "vllm.config"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["vllm.config.utils"] = stub
    namespace: dict[str, Any] = {"Any": Any, "logger": logger, "PretrainedConfig": base,
                                 "PreTrainedConfig": base}
    try:
        from transformers.configuration_utils import ALLOWED_LAYER_TYPES
        namespace["ALLOWED_LAYER_TYPES"] = ALLOWED_LAYER_TYPES
    except ImportError:
        pass
    _load(payload["config_py"], FUNCTIONS, namespace)
    patch = namespace["patch_rope_parameters"]
    out = {}
    for case in payload["cases"]:
        config = CONFIG_MAPPING[case["model_type"]].from_dict(case["config"])
        config.update(case["hf_overrides"])
        patch(config)
        patch(config.get_text_config())
        out[case["name"]] = {"rope_parameters": getattr(config, "rope_parameters", None),
                             "rope_theta": getattr(config, "rope_theta", None),
                             "class": type(config).__name__}
    print(json.dumps({"transformers": transformers.__version__, "cases": out}, default=str))


if __name__ == "__main__":
    main()
