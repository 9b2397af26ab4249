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
HTTP server; each --l2-adapter's keys must be ones its config class's from_dict reads."""

from __future__ import annotations

import argparse
import ast
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
        known = from_dict_keys(get_l2_adapter_config_class(adapter["type"])) | {"type"}
        errors += [f"--l2-adapter {adapter['type']}: key {k!r} is not read by its from_dict"
                   for k in adapter if k not in known]
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
