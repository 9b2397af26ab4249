"""Runs inside the CPU stack's venv (LMCache 0.5.6): LMCache's own loaders on rendered files.
stdin: {"inprocess": {name: lmcache.yaml text}, "server": {name: argv}}; stdout: one JSON
line, name -> {"ok", "errors"}.

In-process: LMCacheEngineConfig.from_file, update_config_from_env and validate(), as
vLLM's connector loads LMCACHE_CONFIG_FILE (integration/vllm/utils.py
lmcache_get_or_create_config). LMCache only logs "Unknown configuration key" and deprecation
warnings (v1/config_base.py _resolve_config_aliases): here every WARNING LMCache logs while
loading is an error. extra_config is a free dict: each of its keys must be a string LMCache's
own code names (a typo there is ignored by LMCache at run time).

Server: `lmcache server`'s argv through LMCache's CLI parser (cli/main.py: register_commands,
parse_args), then the parse_args_to_* calls ServerCommand.execute makes before it starts the
HTTP server; each --l2-adapter's keys must be ones its config class's from_dict reads, or
that every adapter takes (parse_args_to_l2_adapters_config: affinity_tag, shared, eviction,
persist, serde). A "serde" is built through LMCache's serde factory: its keys must be ones
the factory reads (a misspelt optional key would only fall back to a default), and an
aesgcm serde is built from a key file as the role writes it (base64 text) and must derive
keys of its aes_bits."""

from __future__ import annotations

import argparse
import ast
import base64
import contextlib
import inspect
import io
import json
import logging
import os
import re
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import lmcache
from lmcache.v1.config import LMCacheEngineConfig

# What makes a logged warning a refusal of the file: an unknown or deprecated key, or one
# LMCache ignores. Other warnings describe this machine (no GPU: "LazyMemoryAllocator requires
# memory pinning ... Disabling l1-use-lazy") and come back as notes.
KEY_PROBLEM = re.compile(r"unknown|deprecat|ignor", re.IGNORECASE)


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {record.getMessage()}")


def capture() -> Capture:
    handler = Capture()
    for name in list(logging.Logger.manager.loggerDict):
        if name.startswith("lmcache"):
            logger = logging.getLogger(name)
            logger.addHandler(handler)
    logging.getLogger("lmcache").addHandler(handler)
    return handler


def string_literals(root: Path) -> set[str]:
    out: set[str] = set()
    for path in root.rglob("*.py"):
        try:
            tree = ast.parse(path.read_text())
        except (SyntaxError, UnicodeDecodeError):
            continue
        out.update(n.value for n in ast.walk(tree)
                   if isinstance(n, ast.Constant) and isinstance(n.value, str))
    return out


def load_inprocess(text: str, literals: set[str]) -> list[str]:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        handle.write(text)
    handler = capture()
    config = LMCacheEngineConfig.from_file(handle.name)
    config.update_config_from_env()
    config.validate()
    errors = [r for r in handler.records if KEY_PROBLEM.search(r)]
    extra = getattr(config, "extra_config", None) or {}
    errors += [f"extra_config key {k!r} is named nowhere in LMCache's code"
               for k in extra if k not in literals]
    return errors


def from_dict_keys(cls: type) -> set[str]:
    source = textwrap.dedent(inspect.getsource(cls.from_dict))
    return {n.value for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def get_keys(*functions: Any) -> set[str]:
    """The string keys each function reads with `<name>.get("key")`."""
    out: set[str] = set()
    for function in functions:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
        out |= {n.args[0].value for n in ast.walk(tree)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == "get" and n.args and isinstance(n.args[0], ast.Constant)
                and isinstance(n.args[0].value, str)}
    return out


def adapter_keys() -> set[str]:
    """The keys every adapter takes beside its own from_dict's."""
    from lmcache.v1.distributed.l2_adapters import config

    base = config.L2AdapterConfigBase
    return get_keys(config.parse_args_to_l2_adapters_config, base._parse_serde_config,
                    base._parse_eviction_config, base._parse_persist_config)


def serde_errors(adapter: dict[str, Any]) -> list[str]:
    """The adapter's serde through LMCache's own factory (v1/distributed/serde/factory.py)."""
    from lmcache.v1.distributed.l2_adapters.config import L2AdapterConfigBase
    from lmcache.v1.distributed.serde import SerdeConfig, create_serde_processor
    from lmcache.v1.distributed.serde.factory import _SERDE_FACTORY_REGISTRY

    config = L2AdapterConfigBase._parse_serde_config(adapter)
    if config is None:
        return []
    label = f"--l2-adapter {adapter['type']}: serde {config.type}"
    factory = _SERDE_FACTORY_REGISTRY.get(config.type)
    if factory is None:
        return [f"{label}: not a registered serde type"]
    errors = [f"{label}: key {k!r} is not read by its factory"
              for k in config.kwargs if k not in get_keys(factory)]
    kwargs = dict(config.kwargs)
    path = kwargs.get("master_key_path")
    if config.type == "aesgcm":
        if not (isinstance(path, str) and path.startswith("/")):
            return [*errors, f"{label}: master_key_path {path!r} is not an absolute path"]
        with tempfile.NamedTemporaryFile("wb", delete=False) as handle:
            handle.write(base64.b64encode(os.urandom(32)))  # what the role writes there
        kwargs["master_key_path"] = handle.name
    processor = create_serde_processor(SerdeConfig(type=config.type, kwargs=kwargs))
    if config.type == "aesgcm":
        bits = int(kwargs.get("aes_bits", 0))
        derived = len(processor._serializer._keys.get_key("salt"))
        if derived * 8 != bits:
            errors.append(f"{label}: derives {derived * 8}-bit keys, rendered aes_bits {bits}")
    return errors


def load_server(argv: list[str]) -> list[str]:
    from lmcache.cli.commands import register_commands
    from lmcache.v1.distributed.config import parse_args_to_config
    from lmcache.v1.distributed.l2_adapters.config import get_l2_adapter_config_class
    from lmcache.v1.mp_observability.config import parse_args_to_observability_config
    from lmcache.v1.multiprocess.config import (
        parse_args_to_coordinator_config,
        parse_args_to_http_frontend_config,
        parse_args_to_mp_server_config,
    )

    tokens = argv[1:]
    parser = argparse.ArgumentParser(prog="lmcache")
    register_commands(parser.add_subparsers(dest="command"), tokens)
    handler = capture()
    args = parser.parse_args(tokens)
    parse_args_to_http_frontend_config(args)
    parse_args_to_mp_server_config(args)
    parse_args_to_config(args)
    parse_args_to_observability_config(args)
    parse_args_to_coordinator_config(args)
    errors = [r for r in handler.records if KEY_PROBLEM.search(r)]
    for raw in getattr(args, "l2_adapter", None) or []:
        adapter = json.loads(raw)
        known = from_dict_keys(get_l2_adapter_config_class(adapter["type"])) | {"type"} | \
            adapter_keys()
        errors += [f"--l2-adapter {adapter['type']}: key {k!r} is not read by its from_dict"
                   for k in adapter if k not in known]
        errors += serde_errors(adapter)
    return errors


def main() -> None:
    payload = json.load(sys.stdin)
    os.environ.pop("LMCACHE_CONFIG_FILE", None)
    literals = string_literals(Path(lmcache.__file__).parent)
    out: dict[str, Any] = {}
    for kind, loader in (("inprocess", load_inprocess), ("server", load_server)):
        for name, item in payload[kind].items():
            stderr = io.StringIO()
            try:
                with contextlib.redirect_stderr(stderr):
                    errors = loader(item, literals) if kind == "inprocess" else loader(item)
            except SystemExit as exc:
                errors = [f"argparse exit {exc.code}: "
                          + " ".join(stderr.getvalue().strip().splitlines()[-1:])]
            except Exception as exc:  # LMCache's own refusal, reported per file
                errors = [f"{type(exc).__name__}: {exc}"]
            out[name] = {"ok": not errors, "errors": errors}
    version = getattr(lmcache, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version
        version = dist_version("lmcache")
    print(json.dumps({"lmcache": version, "results": out}, default=str))


if __name__ == "__main__":
    main()
