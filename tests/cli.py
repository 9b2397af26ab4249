"""Run the deploykit CLI in process: `deploy_kit.cli.app.main` with its own Environment.

What a subprocess gave the tests, without starting Python and importing everything per
call: the exit code, stdout and stderr apart, the variables and working directory of the
run, and nothing left behind (os.environ, the working directory and the console are the
process's again afterwards; a call that leaves them changed fails).
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from deploy_kit.cli.app import main
from deploy_kit.cli.environment import Environment
from deploy_kit.console import console


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, env: Mapping[str, str] | None = None,
            cwd: Path | str | None = None) -> Result:
    """`deploykit ARGS` with this process's variables plus `env` (COLUMNS=400 unless given:
    no line of the console wraps), in `cwd` (default: the current directory), stdin empty,
    stderr not a terminal and no colour."""
    out, err = io.StringIO(), io.StringIO()
    variables = {**os.environ, "COLUMNS": "400", **(env or {})}
    before_env, before_cwd, before_console = dict(os.environ), os.getcwd(), console()
    try:
        if cwd is not None:
            os.chdir(cwd)
        run_cwd = os.getcwd()
        rc = main(list(args), Environment(stdin=io.StringIO(), stdout=out, stderr=err,
                                          env=variables, stderr_isatty=False, color=False))
        assert os.getcwd() == run_cwd, "the run changed the working directory"
    finally:
        os.chdir(before_cwd)
    assert dict(os.environ) == before_env, "the run left os.environ changed"
    assert console() is before_console, "the run left its console bound"
    return Result(int(rc), out.getvalue(), err.getvalue())
