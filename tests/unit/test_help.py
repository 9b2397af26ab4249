"""Help that reads well: every verb's --help at 80 columns without a terminal cuts nothing
short and shows plain metavars; every option says what it does; nothing is wrapped when
the help goes to a pipe or a file; the lists `verify --list-checks` and `doctor --list`."""

from __future__ import annotations

import re
from typing import Any

import pytest

import deploy_kit.verify.checks  # noqa: F401  (registers the checks)
from deploy_kit.cli.app import command
from deploy_kit.verify.doctor import SYMPTOMS
from deploy_kit.verify.model import CHECKS
from tests.cli import run_cli

# typer's type metavars and Click's range notation (`OUT/<host>/<path>` in a text is fine)
TYPER_METAVARS = re.compile(r"<list\[|<bool>|(--[\w-]+|^ +[A-Z_]+) <\w+( range)?>|x[<>]=")


def _paths(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out = [(path, cmd)]
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        if not sub.hidden:
            out += _paths(sub, (*path, name))
    return out


COMMANDS = _paths(command())


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) or "deploykit"
                                                          for p, _ in COMMANDS])
def test_help_at_80_columns_cuts_nothing(path: tuple[str, ...], cmd: Any) -> None:
    result = run_cli(*path, "--help", env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"Usage: deploykit {' '.join(path)}".rstrip())
    for line in lines:
        assert len(line) <= 80, line
        if not line.startswith("Usage:"):
            assert not line.rstrip().endswith(("…", "...")), line
        assert not TYPER_METAVARS.search(line), line
    for param in cmd.params:
        if not param.hidden and param.name != "help":
            assert getattr(param, "help", None), f"{' '.join(path)} {param.opts} has no help"


def test_every_summary_and_description_is_whole() -> None:
    top = run_cli("--help", env={"COLUMNS": "80"}).stdout
    assert "--debug" in top and "--install-completion" in top and "--show-completion" in top
    assert "to the\n              checks that explain it, and run those." in top  # doctor
    ttft = run_cli("bench", "ttft", "--help", env={"COLUMNS": "80"}).stdout
    # the docstring's own line breaks are not kept: Click rewraps each paragraph
    assert "hits,\n  per length." in ttft
    assert "(each\n  repeat)" in ttft


def test_help_into_a_pipe_is_not_wrapped() -> None:
    result = run_cli("up", "--help", env={"COLUMNS": ""})  # no COLUMNS, not a terminal
    full = [line for line in result.stdout.splitlines() if line.lstrip().startswith("--full")]
    assert len(full) == 1 and full[0].endswith("every unit that ran still active)")


def test_list_checks_lists_every_registered_check() -> None:
    result = run_cli("verify", "--list-checks")  # no inventory needed
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    assert sorted(r[0] for r in rows) == sorted(CHECKS)
    for row in rows:
        check = CHECKS[row[0]]
        assert row[1] == ",".join(check.tags)
        assert " ".join(row[2:]).startswith(" ".join(check.summary.split()))


def test_doctor_list_names_every_symptom() -> None:
    result = run_cli("doctor", "--list")
    assert result.returncode == 0, result.stderr
    for _pattern, why, checks in SYMPTOMS:
        assert why in result.stdout
        assert f"checks:  {', '.join(checks)}" in result.stdout


def test_shell_completion_completes_verbs_and_options() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "_DEPLOYKIT_COMPLETE": "complete_bash", "COMP_WORDS": "deploykit ve",
           "COMP_CWORD": "1"}
    done = subprocess.run([sys.executable, "-m", "deploy_kit"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.split() == ["verify", "version"], done.stderr


def test_data_into_a_pipe_is_not_cut_to_80_columns() -> None:
    """`deploykit plan -i example > plan.txt`: rich would size a console that is no
    terminal at 80 columns and cut the table's cells (`gaudi…`)."""
    piped = run_cli("plan", "-i", "example", env={"COLUMNS": ""}).stdout
    assert "…" not in piped and "│ gaudi3-1 " in piped
    narrow = run_cli("plan", "-i", "example", env={"COLUMNS": "80"}).stdout
    assert "…" in narrow  # COLUMNS, when given, is what the reader asked for
