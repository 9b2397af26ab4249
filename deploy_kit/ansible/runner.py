"""The only ansible-runner caller: fresh private dir per run, live progress, run record."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from deploy_kit.ansible import progress
from deploy_kit.ansible.command import RunRequest, inventories, options, playbook_argv
from deploy_kit.ansible.events import RunRecord, redact
from deploy_kit.core.errors import AnsibleFailed, EnvironmentProblem, HostsUnreachable
from deploy_kit.project import project_dir, runs_root

SUMMARY_SCHEMA = 1


def runs_dir() -> Path:
    return runs_root()


RUNS_KEEP = 50  # run records kept by default (DEPLOYKIT_RUNS_KEEP; 0 keeps every one)
# the names deploykit gives run records: nothing else under runs/ is ever pruned
RECORD_NAME = re.compile(r"\d{8}T\d{6}\.\d{6}Z-[a-z][a-z-]*")
RECORD_FILES = ("summary.json", "run-vars.json", "ansible.log")  # one is in every record
UNFINISHED_AGE_S = 24 * 3600  # a record without summary.json this young may still be running


def new_record_dir(verb: str) -> Path:
    """runs/<time>-<verb>/, private to root: it holds the rendered site of this run. The
    oldest records beyond DEPLOYKIT_RUNS_KEEP are removed (prune_records)."""
    keep = runs_keep()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    record_dir = runs_dir() / f"{stamp}-{verb}"
    record_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    prune_records(runs_dir(), keep, record_dir)
    return record_dir


def runs_keep() -> int:
    value = os.environ.get("DEPLOYKIT_RUNS_KEEP", "").strip()
    if not value:
        return RUNS_KEEP
    if not value.isdigit():
        raise EnvironmentProblem(f"DEPLOYKIT_RUNS_KEEP={value!r} is not a whole number",
                                 hint="set it to how many run records to keep (0: all)")
    return int(value)


def prune_records(root: Path, keep: int, current: Path) -> list[Path]:
    """Remove all but the newest `keep` run records under `root` (0: remove none) and
    return what went. Only directories named and filled as deploykit writes them count;
    `current` stays, and so does a record without summary.json younger than a day (a run
    still going in another process). Best effort: what cannot be removed stays."""
    if keep <= 0 or not root.is_dir():
        return []
    others = sorted((p for p in root.iterdir() if p != current and _is_record(p)),
                    key=lambda p: p.name)  # <time>-<verb>: the name sorts by time
    now = time.time()
    removed = []
    for path in others[:max(len(others) - (keep - 1), 0)]:  # the current record is one kept
        if not (path / "summary.json").is_file() and \
                now - path.lstat().st_mtime < UNFINISHED_AGE_S:
            continue
        try:
            shutil.rmtree(path)
        except OSError:
            continue
        removed.append(path)
    return removed


def _is_record(path: Path) -> bool:
    if not RECORD_NAME.fullmatch(path.name) or path.is_symlink() or not path.is_dir():
        return False
    return any((path / name).is_file() for name in RECORD_FILES)


def ansible_env() -> dict[str, str]:
    """The user's own Ansible configuration (found as Ansible finds it) plus only what
    deploykit needs (deploy_kit.ansible.environment), this interpreter's ansible-playbook
    first."""
    from deploy_kit.ansible.environment import runner_variables

    project = project_dir()
    return {**runner_variables(project), "PYTHONPATH": str(project),
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}


def run_playbook(request: RunRequest, console: Console, record_dir: Path,
                 env: Mapping[str, str] | None = None) -> tuple[RunRecord, Path, int]:
    """Run one playbook; returns the record and the run directory (summary.json inside).
    `env`: variables for this run on top of ansible_env() (vault handover: paths only)."""
    import ansible_runner

    record = RunRecord()
    log = (record_dir / "ansible.log").open("w")
    started = time.monotonic()
    status = console.status("starting Ansible…")
    status.start()

    terminal = console.is_terminal

    def on_event(event: dict[str, Any]) -> bool:
        record.consume(event)
        if event.get("stdout"):
            log.write(redact(str(event["stdout"])) + "\n")
        data = event.get("event_data", {}) or {}
        if request.verbosity and event.get("stdout"):  # -v…: Ansible's own output
            console.print(escape(redact(str(event["stdout"]))), soft_wrap=True)
        elif request.diff and (diff := progress.diff_text(event)):
            console.print(escape(redact(diff)), soft_wrap=True)
        if event.get("event") == "playbook_on_task_start":
            status.update(f"[bold]{record.current_play}[/] › {record.current_task}")
        elif event.get("event") in ("runner_on_failed", "runner_on_unreachable") and \
                not data.get("ignore_errors"):
            failure = record.failed[-1]
            console.print(f"[red]✗ {escape(failure.host)}[/] {escape(failure.task)}: "
                          f"{escape(failure.message)}", soft_wrap=True)
        elif not terminal and not request.verbosity and (text := progress.line(event)):
            console.print(escape(text), soft_wrap=True, highlight=False)
        elif terminal and (found := progress.result_of(event)) and found[0] == "changed":
            console.print(f"[yellow]changed[/] {escape(found[1])} | {escape(found[2])}",
                          soft_wrap=True)
        return True  # True: let ansible-runner keep the event (stats come from it)

    env = {**ansible_env(), **(env or {})}
    with tempfile.TemporaryDirectory(prefix="deploykit-run-") as private:
        os.chmod(private, 0o700)
        try:
            result = ansible_runner.run(
                # project_dir is where ansible-playbook runs: the user's working directory,
                # so Ansible finds ./ansible.cfg there as for a plain ansible-playbook
                private_data_dir=private, project_dir=os.getcwd(),
                playbook=str(request.playbook),
                inventory=[str(p) for p in inventories(request)],
                # ansible-runner shlex-splits cmdline: quote each word (inline -e JSON has spaces)
                cmdline=shlex.join(options(request)), envvars=env, quiet=True,
                event_handler=on_event, rotate_artifacts=1, suppress_env_files=False)
        finally:
            status.stop()
            log.close()
    elapsed = time.monotonic() - started
    summary = {
        "schema": SUMMARY_SCHEMA, "verb": request.verb, "argv": playbook_argv(request),
        "status": result.status, "rc": result.rc, "seconds": round(elapsed, 1),
        "hosts": {h: asdict(s) for h, s in sorted(record.hosts.items())},
        "changed": record.total_changed,
        "changed_tasks": [{"host": h, "task": t} for h, t in record.changed_tasks],
        "failed": [asdict(f) for f in record.failed],
        "slowest_tasks": [{"task": t, "seconds": s} for t, s in record.slowest()],
        "task_seconds": record.task_seconds,
        "converge_records": record.converge_records,
    }
    (record_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return record, record_dir, int(result.rc or 0)


def list_only(request: RunRequest, env: Mapping[str, str] | None = None) -> None:
    """--list-hosts / --list-tasks: ansible-playbook's own output on stdout, its errors on
    stderr; no task runs, nothing is written."""
    import subprocess

    from deploy_kit.console import stdout

    argv = playbook_argv(request)
    beside = Path(sys.executable).parent / argv[0]
    if beside.is_file():
        argv[0] = str(beside)
    result = subprocess.run(argv, env={**os.environ, **ansible_env(), **(env or {})},
                            capture_output=True,
                            text=True, stdin=subprocess.DEVNULL, check=False)
    stdout().write(result.stdout)
    if result.returncode != 0:
        last = next((ln for ln in reversed(result.stderr.splitlines()) if ln.strip()), "")
        raise AnsibleFailed(f"ansible-playbook {' '.join(request.listing)} exited "
                            f"{result.returncode}: {redact(last.strip())[:500]}")


def show_record(record: RunRecord, console: Console) -> None:
    table = Table(title="Per-host result", title_justify="left")
    for col in ("host", "ok", "changed", "failed", "unreachable", "skipped"):
        table.add_column(col, justify="left" if col == "host" else "right")
    for host, s in sorted(record.hosts.items()):
        style = "red" if s.failed or s.unreachable else ("yellow" if s.changed else "green")
        table.add_row(f"[{style}]{host}[/]", str(s.ok), str(s.changed), str(s.failed),
                      str(s.unreachable), str(s.skipped))
    console.print(table)
    holding = sorted(h for h, reasons in record.converge_records.items() if not reasons)
    if holding:
        console.print(f"left out (their last converge holds; up --full converges them too): "
                      f"{', '.join(holding)}")
    for host, reasons in sorted(record.converge_records.items()):
        if reasons:
            console.print(f"{host} converges: {'; '.join(reasons)}")


def raise_for(record: RunRecord, rc: int, record_dir: Path) -> None:
    summary = record_dir / "summary.json"
    if any(s.unreachable for s in record.hosts.values()):
        names = sorted(h for h, s in record.hosts.items() if s.unreachable)
        raise HostsUnreachable(f"unreachable: {', '.join(names)} (run record: {summary})")
    if record.failed:
        raise AnsibleFailed(f"{len(record.failed)} task(s) failed (run record: {summary})")
    if rc != 0:  # e.g. a syntax error: Ansible stopped before any task ran
        raise AnsibleFailed(f"ansible-playbook exited {rc} (output: {summary.parent}/ansible.log)")
