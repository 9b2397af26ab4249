"""The few CLI tests that need a real process (the rest run in process, tests/cli.py): the
installed `deploykit` script and `python -m deploy_kit` exit with main()'s code, write to
the real stdout/stderr, and a refused render writes nothing. The corpus cases that guard
against a hang run in a subprocess too (test_bad_inventories.py, `bounded=True`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, InventoryFactory

DEPLOYKIT = Path(sys.executable).parent / "deploykit"  # the console script pip installed
TIMEOUT_S = 60


def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=REPO,
                          timeout=TIMEOUT_S, env={**os.environ, "COLUMNS": "400"})


@pytest.mark.parametrize(("args", "code"), [
    (("version",), 0), ((), 2), (("plan",), 2), (("no-such-command",), 2),
    (("validate", "-i", "does-not-exist"), 3)])
def test_the_installed_script_exits_with_the_documented_code(args: tuple[str, ...],
                                                             code: int) -> None:
    result = run(DEPLOYKIT, *args)
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    if args == ("version",):
        assert result.stdout.startswith("deploykit ") and result.stderr == ""


def test_python_m_deploy_kit_exits_with_the_documented_code() -> None:
    assert run(sys.executable, "-m", "deploy_kit", "validate", "-i", "example"
               ).returncode == 0
    result = run(sys.executable, "-m", "deploy_kit", "validate", "-i", "does-not-exist")
    assert result.returncode == 3 and "no such inventory" in result.stderr


def test_a_refused_render_writes_nothing(make_inventory: InventoryFactory,
                                         tmp_path: Path) -> None:
    root = make_inventory(vllm={"lmcache_chunk_size": 250, "vllm_block_size": 16})
    before = sorted(tmp_path.rglob("*"))
    result = run(DEPLOYKIT, "render", "-i", root, "-o", tmp_path / "out")
    assert result.returncode == 3, result.stderr
    assert result.stdout == ""  # humans read stderr
    lines = [ln for ln in result.stderr.splitlines() if " — " in ln]
    assert len(lines) == 1 and "lmcache_chunk_size: 250 is not a multiple" in lines[0]
    assert sorted(tmp_path.rglob("*")) == before  # not OUT, nothing else


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    """`deploykit plan --json | head -c 20` where head left first: exit 141 (128 + SIGPIPE,
    what a shell reports for a tool SIGPIPE ended), no traceback, no 'Exception ignored'
    from Python's exit-time flush. The pipe's read end is closed before the process starts,
    so its first write always meets the missing reader."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([str(DEPLOYKIT), "plan", "-i", "example", "--json"], cwd=REPO,
                              stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=TIMEOUT_S)
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert "BrokenPipe" not in proc.stderr, proc.stderr


def test_output_paths_that_cannot_be_written_are_usage_errors(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me\n")
    result = run(DEPLOYKIT, "render", "-i", "example", "-o", a_file)
    assert result.returncode == 2 and "exists and is not a directory" in result.stderr
    assert a_file.read_text() == "keep me\n" and "Traceback" not in result.stderr
    # --junit is checked before any probe: a site nobody can reach is not even opened
    result = run(DEPLOYKIT, "verify", "-i", "example", "--junit", a_file / "report.xml")
    assert result.returncode == 2 and "is not a directory" in result.stderr, result.stderr
