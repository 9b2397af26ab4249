"""What a converge shows while it runs, from ansible-runner events (pure).

On a terminal a status line follows the current play and task, and each change and failure
gets a line; without one (CI, AWX logs) every task result is one line, so a log shows where
a run is and where it stopped. `--diff` diffs and `-v…` output are Ansible's own text.
"""

from __future__ import annotations

from typing import Any

RESULTS = {"runner_on_ok": "ok", "runner_on_failed": "failed", "runner_on_skipped": "skipped",
           "runner_on_unreachable": "unreachable"}


def result_of(event: dict[str, Any]) -> tuple[str, str, str] | None:
    """(status, host, task) of a task-result event; status ok|changed|failed|ignored|
    skipped|unreachable."""
    status = RESULTS.get(str(event.get("event")))
    if status is None:
        return None
    data = event.get("event_data") or {}
    res = data.get("res") or {}
    if status == "ok" and res.get("changed"):
        status = "changed"
    if status == "failed" and data.get("ignore_errors"):
        status = "ignored"
    role = data.get("role")
    task = str(data.get("task", ""))
    return status, str(data.get("host", "?")), f"{role} : {task}" if role else task


def line(event: dict[str, Any]) -> str | None:
    """One plain line per task result (no terminal), or per play start."""
    if event.get("event") == "playbook_on_play_start":
        return f"PLAY {(event.get('event_data') or {}).get('play', '')}"
    found = result_of(event)
    if found is None:
        return None
    status, host, task = found
    return f"{status:<11} {host} | {task}"


def diff_text(event: dict[str, Any]) -> str | None:
    """Ansible's rendering of a task's diff (--diff), as its own output shows it."""
    res = (event.get("event_data") or {}).get("res") or {}
    if not res.get("diff") or not event.get("stdout"):
        return None
    return str(event["stdout"])
