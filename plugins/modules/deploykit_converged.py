#!/usr/bin/python
"""A host's converge record: written after a run converged it, compared before the next run
so a host whose inputs and state are unchanged is left out of every play."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: deploykit_converged
short_description: Record, or compare with, what a host looked like when a run converged it
description: >-
  state=record writes the host's converge record (0600, root): the digest of every input the
  run applied (rendered files, settings, secrets, deploykit's roles), the signature of each
  watched path (mode, owner, and content: sha256 up to 1 MiB, size and mtime above), the
  watched units that are active, and a hash of each probe command's output.
  state=check compares the host with that record and says why it is not converged: another
  input digest, a watched file edited, replaced, removed or re-permissioned, a recorded unit
  no longer active, a probe answering differently, or LMCache's S3 breaker in the journal of
  the unit's current invocation. Reads only in check; never changed in either.
options:
  state: {type: str, default: check, choices: [check, record], description: compare or record}
  digest: {type: str, required: true, no_log: true, description: digest of the run's inputs}
  paths: {type: list, elements: str, default: [], description: files to watch}
  units:
    type: list
    elements: str
    default: []
    description: units to watch (those active at the record)
  probes:
    type: list
    elements: list
    default: []
    description: argv of read-only commands whose output must not change (run concurrently)
  breaker_units: {type: list, elements: str, description: units whose running journal is searched}
  breaker_pattern: {type: str, description: extended regex of LMCache's breaker message}
  record_path: {type: str, default: /var/lib/deploykit/converged.json, description: the record}
  versions:
    type: dict
    default: {}
    description: >-
      what the host runs once converged (component versions, LMCache's key-space settings);
      kept in the record as given, read back by `deploykit up` to detect an upgrade, never
      compared here (the digest already covers them)
author: deploykit
"""

RETURN = r"""
state: {description: what was done (check or record), type: str}
converged: {description: the host matches its record, type: bool}
reasons: {description: "why not (at most 5, the first found)", type: list}
"""

SMALL = 1 << 20  # above this, size + mtime stand for the content (binaries: no 150 MB hash)
MAX_REASONS = 5


def path_signature(path: str) -> str:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    head = f"{info.st_mode:o}:{info.st_uid}:{info.st_gid}"
    if not os.path.isfile(path) or os.path.islink(path):
        return f"{head}:{os.readlink(path) if os.path.islink(path) else 'other'}"
    if info.st_size > SMALL:
        return f"{head}:stat:{info.st_size}:{info.st_mtime_ns}"
    with open(path, "rb") as handle:
        return f"{head}:sha256:{hashlib.sha256(handle.read()).hexdigest()}"


def active_units(systemctl: str, units: list[str]) -> list[str]:
    if not units:
        return []
    done = subprocess.run([systemctl, "is-active", *units], capture_output=True, text=True)
    states = done.stdout.split()
    return [unit for unit, state in zip(units, states, strict=False) if state == "active"]


def probe_hashes(probes: list[list[str]]) -> dict[str, str]:
    """Every probe at once (each is a CLI that spends most of its time starting)."""
    running = []
    for argv in probes:
        try:
            running.append((argv, subprocess.Popen(argv, stdout=subprocess.PIPE,
                                                   stderr=subprocess.DEVNULL)))
        except OSError as exc:
            running.append((argv, exc))
    hashes = {}
    for argv, proc in running:
        key = " ".join(argv)
        if isinstance(proc, OSError):
            hashes[key] = f"error:{proc.errno}"
            continue
        out, _ = proc.communicate(timeout=120)
        hashes[key] = f"{proc.returncode}:{hashlib.sha256(out).hexdigest()}"
    return hashes


def breaker_line(systemctl: str, journalctl: str, unit: str, pattern: str) -> str | None:
    """LMCache turns S3 off for the life of the process: a line in the running process's
    journal means this host needs its restart, however unchanged its files are."""
    shown = subprocess.run([systemctl, "show", "-p", "InvocationID", "--value", unit],
                           capture_output=True, text=True)
    invocation = shown.stdout.strip()
    if shown.returncode != 0 or not invocation:
        return None
    journal = subprocess.run([journalctl, f"_SYSTEMD_INVOCATION_ID={invocation}", "-o",
                              "short-iso", "--no-pager", "-q"], capture_output=True, text=True)
    found = re.compile(pattern)
    return next((line for line in journal.stdout.splitlines() if found.search(line)), None)


def snapshot(module: AnsibleModule, systemctl: str) -> dict:
    p = module.params
    return {
        "digest": p["digest"],
        "paths": {path: path_signature(path) for path in p["paths"]},
        "units": active_units(systemctl, p["units"]),
        "probes": probe_hashes(p["probes"]),
    }


def differences(record: dict, now: dict) -> list[str]:
    reasons = []
    if record.get("digest") != now["digest"]:
        reasons.append("inputs changed since the last converge (settings, files, secrets or "
                       "deploykit itself)")
    for path, signature in now["paths"].items():
        before = record.get("paths", {}).get(path)
        if before != signature:
            reasons.append(f"{path} {'is gone' if signature == 'absent' else 'changed'} "
                           "since the last converge")
    stopped = [u for u in record.get("units", []) if u not in now["units"]]
    reasons += [f"{unit} is not active" for unit in stopped]
    for probe, value in now["probes"].items():
        if record.get("probes", {}).get(probe) != value:
            reasons.append(f"`{probe}` answers differently")
    return reasons


def read_record(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_record(path: str, record: dict) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, scratch = tempfile.mkstemp(dir=directory, prefix=".converged-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:  # mkstemp: already 0600
            json.dump(record, handle, sort_keys=True)
        os.replace(scratch, path)
    except BaseException:
        os.unlink(scratch)
        raise


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "default": "check", "choices": ["check", "record"]},
            "digest": {"type": "str", "required": True, "no_log": True},
            "paths": {"type": "list", "elements": "str", "default": []},
            "units": {"type": "list", "elements": "str", "default": []},
            "probes": {"type": "list", "elements": "list", "default": []},
            "breaker_units": {"type": "list", "elements": "str", "default": []},
            "breaker_pattern": {"type": "str"},
            "record_path": {"type": "str", "default": "/var/lib/deploykit/converged.json"},
            "versions": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    systemctl = module.get_bin_path("systemctl", required=True)
    now = snapshot(module, systemctl)
    if p["state"] == "record":
        if not module.check_mode:
            write_record(p["record_path"], {**now, "versions": p["versions"]})
        # bookkeeping of the run, not a change to the site: a converged re-run reports 0
        module.exit_json(changed=False, state="record", converged=True, reasons=[])
    record = read_record(p["record_path"])
    reasons = ["no record of a converge"] if record is None else differences(record, now)
    if not reasons and p["breaker_units"] and p["breaker_pattern"]:
        journalctl = module.get_bin_path("journalctl", required=True)
        for unit in p["breaker_units"]:
            line = breaker_line(systemctl, journalctl, unit, p["breaker_pattern"])
            if line:
                reasons.append(f"LMCache turned its S3 tier off in {unit}: {line.strip()[:200]}")
    module.exit_json(changed=False, state="check", converged=not reasons,
                     reasons=reasons[:MAX_REASONS])


if __name__ == "__main__":
    main()
