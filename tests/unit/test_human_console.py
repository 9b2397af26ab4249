"""The human console (stderr): a terminal's or COLUMNS' width; into a CI or AWX log (no
terminal, no COLUMNS) no line is wrapped, so one error is one line a reader can grep and a
path is never cut in two."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.cli import run_cli
from tests.conftest import REPO

DEEP = "a-directory-name-long-enough-that-the-path-passes-eighty-columns"


def _no_vault_site(tmp_path: Path) -> Path:
    site = tmp_path / DEEP / DEEP / "inventory"
    shutil.copytree(REPO / "inventory" / "example", site,
                    ignore=shutil.ignore_patterns(".deploykit-secrets*"))
    return site


def _lines(stderr: str) -> list[str]:
    # Ansible's own warnings about patching an in-process StringIO are not deploykit's
    return [line for line in stderr.splitlines()
            if line.strip() and not line.startswith("[WARNING]")]


def test_an_error_into_a_log_stays_one_line(tmp_path: Path) -> None:
    site = _no_vault_site(tmp_path)
    result = run_cli("secrets", "move", "-i", str(site), env={"COLUMNS": ""}, cwd=tmp_path)
    assert result.returncode != 0
    error, hint = _lines(result.stderr)
    assert error.startswith("error: ") and str(site) in error and error.endswith("with")
    assert len(error) > 200 and hint.startswith("hint: ")


def test_columns_still_sizes_the_console(tmp_path: Path) -> None:
    site = _no_vault_site(tmp_path)
    result = run_cli("secrets", "move", "-i", str(site), env={"COLUMNS": "60"}, cwd=tmp_path)
    lines = _lines(result.stderr)
    assert len(lines) > 2 and all(len(line) <= 60 for line in lines), lines
