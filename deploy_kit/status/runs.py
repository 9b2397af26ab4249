"""This host in the newest `up` run record on this controller (runs/<time>-up/summary.json,
deploy_kit/ansible/runner.py): how that run ended for it. Pure but for reading the files."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deploy_kit.ansible.runner import RECORD_NAME

CONVERGE_VERBS = ("up",)
SCANNED = 100  # run records read, newest first (runner.RUNS_KEEP keeps 50 by default)


def _inventories(argv: list[str]) -> set[str]:
    return {str(Path(argv[i + 1])) for i, word in enumerate(argv[:-1]) if word == "-i"}


def _started(name: str) -> float | None:
    try:
        return datetime.strptime(name.split("-", 1)[0], "%Y%m%dT%H%M%S.%fZ").replace(
            tzinfo=UTC).timestamp()
    except ValueError:
        return None


def converge_runs(root: Path, inventories: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Finished, non-check `up` runs of this inventory, newest first."""
    if not root.is_dir():
        return []
    wanted = {str(p.resolve()) for p in inventories}
    found = []
    records = sorted((p for p in root.iterdir() if RECORD_NAME.fullmatch(p.name)),
                     key=lambda p: p.name, reverse=True)[:SCANNED]
    for path in records:
        try:
            summary = json.loads((path / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        argv = [str(w) for w in summary.get("argv", [])]
        if summary.get("verb") not in CONVERGE_VERBS or "--check" in argv or \
                "--list-hosts" in argv or not (_inventories(argv) & wanted):
            continue
        found.append((path, summary))
    return found


def outcome(summary: dict[str, Any], host: str) -> str | None:
    """ok, failed, unreachable, left out (its record held), stopped (the run ended before
    it was recorded); None: the run did not include the host."""
    stats = (summary.get("hosts") or {}).get(host)
    if stats is None:
        return None
    if stats.get("unreachable"):
        return "unreachable"
    if stats.get("failed"):
        return "failed"
    if (summary.get("converge_records") or {}).get(host) == []:
        return "left out (record holds)"
    return "ok" if summary.get("status") == "successful" else "stopped"


def last_run(runs: list[tuple[Path, dict[str, Any]]], host: str) -> dict[str, Any] | None:
    """The newest run that included `host`: when, how it ended for it, its record."""
    for path, summary in runs:
        result = outcome(summary, host)
        if result is None:
            continue
        failed = [f for f in summary.get("failed", []) if f.get("host") == host]
        return {"outcome": result, "started": _started(path.name),
                "task": failed[0].get("task") if failed else None,
                "record": str(path / "summary.json")}
    return None
