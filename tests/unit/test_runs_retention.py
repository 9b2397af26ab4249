"""runs/ keeps the newest DEPLOYKIT_RUNS_KEEP run records (default 50): never the record
of the run in progress, never a directory deploykit did not write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deploy_kit.ansible import runner
from deploy_kit.core.errors import EnvironmentProblem


def _record(root: Path, stamp: int, verb: str = "up", finished: bool = True) -> Path:
    path = root / f"2026010{stamp // 100 + 1}T{stamp % 100:06d}.000000Z-{verb}"
    path.mkdir(parents=True)
    (path / ("summary.json" if finished else "run-vars.json")).write_text("{}\n")
    return path


def test_only_the_newest_records_stay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs"
    old = [_record(runs, i, "up" if i % 2 else "down") for i in range(6)]
    mine = [runs / "lab-suite", runs / "bench-storage", runs / "notes.txt"]
    mine[0].mkdir()
    (mine[0] / "timings.json").write_text("{}")
    mine[1].mkdir()
    mine[2].write_text("kept")
    odd = runs / "20260101T000000.000000Z-empty"  # a record's name, nothing deploykit writes
    odd.mkdir()
    monkeypatch.setenv("DEPLOYKIT_RUNS_DIR", str(runs))
    monkeypatch.setenv("DEPLOYKIT_RUNS_KEEP", "3")
    current = runner.new_record_dir("up")
    (current / "run-vars.json").write_text("{}\n")
    left = sorted(p.name for p in runs.iterdir())
    assert left == sorted([p.name for p in old[-2:]] + [current.name, odd.name]
                          + [p.name for p in mine])
    assert (mine[0] / "timings.json").is_file()


def test_the_run_in_progress_and_unfinished_records_stay(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    going = _record(runs, 0, finished=False)  # another process, still running
    stale = _record(runs, 1, finished=False)  # a run that died a week ago
    week = os.stat(stale).st_mtime - 7 * 86400
    os.utime(stale, (week, week))
    done = [_record(runs, i) for i in range(2, 5)]
    current = done[-1]
    assert runner.prune_records(runs, 1, current) == [stale, *done[:-1]]
    assert sorted(runs.iterdir()) == [going, current]
    # the current record is never removed, even when it sorts first (a clock set back)
    first = runs / "20250101T000000.000000Z-up"
    first.mkdir()
    assert runner.prune_records(runs, 1, first) == [current]
    assert sorted(runs.iterdir()) == [first, going]


def test_keep_zero_keeps_all_and_a_bad_value_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs"
    records = [_record(runs, i) for i in range(4)]
    assert runner.prune_records(runs, 0, records[-1]) == []
    monkeypatch.setenv("DEPLOYKIT_RUNS_KEEP", "ten")
    with pytest.raises(EnvironmentProblem, match="DEPLOYKIT_RUNS_KEEP"):
        runner.runs_keep()
    monkeypatch.delenv("DEPLOYKIT_RUNS_KEEP")
    assert runner.runs_keep() == runner.RUNS_KEEP == 50
