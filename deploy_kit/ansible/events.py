"""Pure parsing of ansible-runner events into per-host stats and failed tasks (redacted)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

_SECRETISH = re.compile(
    r"(?i)((?:secret|password|passwd|token|key)[\w-]*[\"']?\s*[:=]\s*[\"']?)([^\s\"',}]{6,})")
_KEYRING = re.compile(r"AQ[A-Za-z0-9+/]{30,}={0,2}")


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Mask known secret values, `key = value`-shaped secrets and cephx keys."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "********")
    text = _KEYRING.sub("********", text)
    return _SECRETISH.sub(lambda m: m.group(1) + "********", text)


def _message(result: dict[str, Any]) -> str:
    """The useful text of a failure; for loops, the failed items' own messages."""
    items = [r for r in result.get("results", []) or [] if isinstance(r, dict) and r.get("failed")]
    if items:
        return "; ".join(_message(r) for r in items[:5])
    return str(result.get("msg") or result.get("stderr") or result.get("reason") or "failed")


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass
class FailedTask:
    host: str
    play: str
    task: str
    message: str
    unreachable: bool = False


@dataclass
class RunRecord:
    hosts: dict[str, HostStats] = field(default_factory=dict)
    failed: list[FailedTask] = field(default_factory=list)
    changed_tasks: list[tuple[str, str]] = field(default_factory=list)
    current_play: str = ""
    current_task: str = ""
    # Wall seconds from one task's start to the next, summed per task name: where a run's
    # time goes (all hosts of a task run in parallel, so this is what a rerun waits on).
    task_seconds: dict[str, float] = field(default_factory=dict)
    # Each host's comparison with its converge record (playbooks/converged.yml): why it
    # converges, or [] when its last converge holds and every play leaves it out.
    converge_records: dict[str, list[str]] = field(default_factory=dict)
    _task_started: tuple[str, datetime] | None = None

    def _clock(self, event: dict[str, Any], kind: str) -> None:
        try:
            now = datetime.fromisoformat(str(event.get("created", "")))
        except ValueError:
            return
        if self._task_started is not None:
            name, started = self._task_started
            elapsed = (now - started).total_seconds()
            self.task_seconds[name] = round(self.task_seconds.get(name, 0.0) + elapsed, 3)
            self._task_started = None
        if kind == "playbook_on_task_start":
            data = event.get("event_data", {}) or {}
            role = data.get("role")
            name = f"{role} : {data.get('task', '')}" if role else str(data.get("task", ""))
            self._task_started = (name, now)

    def slowest(self, count: int = 15) -> list[tuple[str, float]]:
        return sorted(self.task_seconds.items(), key=lambda kv: -kv[1])[:count]

    def consume(self, event: dict[str, Any]) -> None:
        kind = event.get("event", "")
        data = event.get("event_data", {}) or {}
        if kind in ("playbook_on_task_start", "playbook_on_play_start", "playbook_on_stats",
                    "playbook_on_handler_task_start"):
            self._clock(event, "playbook_on_task_start" if kind.endswith("task_start") else kind)
        if kind == "playbook_on_play_start":
            self.current_play = str(data.get("play", ""))
        elif kind == "playbook_on_task_start":
            self.current_task = str(data.get("task", ""))
        elif kind in ("runner_on_failed", "runner_on_unreachable") and not data.get(
                "ignore_errors"):
            result = data.get("res", {}) or {}
            message = _message(result)
            if result.get("_ansible_no_log") or data.get("censored"):
                message = "(output hidden: the task handles secrets; rerun with -vvv locally)"
            self.failed.append(FailedTask(
                host=str(data.get("host", "?")), play=str(data.get("play", "")),
                task=str(data.get("task", "")), message=redact(message)[:2000],
                unreachable=kind == "runner_on_unreachable"))
        elif kind == "runner_on_ok":
            result = data.get("res") or {}
            if result.get("changed") or _censored_change(result, event):
                self.changed_tasks.append((str(data.get("host", "?")), str(data.get("task", ""))))
            if str(data.get("task_action", "")).endswith("deploykit_converged") \
                    and result.get("state") == "check":
                self.converge_records[str(data.get("host", "?"))] = \
                    [redact(str(r)) for r in result["reasons"]]
        elif kind == "playbook_on_stats":
            self.hosts = {}
            keys = {"ok": "ok", "changed": "changed", "failures": "failed", "dark": "unreachable",
                    "skipped": "skipped", "rescued": "rescued", "ignored": "ignored"}
            for source, target in keys.items():
                for host, count in (data.get(source) or {}).items():
                    stats = self.hosts.setdefault(host, HostStats())
                    setattr(stats, target, int(count))

    @property
    def total_changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())


_CHANGED_LINE = re.compile(r"^\s*(?:\x1b\[[0-9;]*m)*changed: \[", re.MULTILINE)


def _censored_change(result: dict[str, Any], event: dict[str, Any]) -> bool:
    """ansible-runner replaces a no_log task's result with {"censored": ...}, `changed`
    included (display_callback awx_display); Ansible's own line still says `changed: [host]`.
    Without this, a task handling a secret (Consul's maintenance calls under ACLs) would
    change hosts without being named in the run record."""
    return "censored" in result and bool(_CHANGED_LINE.search(str(event.get("stdout", ""))))

