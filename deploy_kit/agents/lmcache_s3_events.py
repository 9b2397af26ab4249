#!/usr/bin/python3
# Managed by deploykit; local changes are overwritten.
"""LMCache's S3 trouble, from the running processes' journals, as node exporter textfile
metrics: deploykit_lmcache_s3_log_lines{unit, kind} counts the lines of each kind (breaker,
store, connection) since the unit's current process started (verify's lmcache-s3-breaker
check reads the same lines). LMCache exports no metric of its own for them. Run by
deploykit-lmcache-s3-events.timer; reads only new journal lines each time.

The patterns, units and files are the JSON file CONFIG, written by the render
(deploy_kit/render/monitoring.py render_s3_events)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any

# beside the agent: a directory the role creates and owns, wherever lmcache_config_dir is
CONFIG = "/usr/local/libexec/deploykit/lmcache-s3-events.json"


def run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def main(config: str = CONFIG) -> None:
    with open(config) as handle:
        settings = json.load(handle)
    units: list[str] = settings["units"]
    state_path: str = settings["state"]
    out_path: str = settings["textfile"]
    rules = {kind: re.compile(rx) for kind, rx in settings["patterns"].items()}
    try:
        with open(state_path) as handle:
            state: dict[str, Any] = json.load(handle)
    except (OSError, ValueError):
        state = {}
    out = ["# HELP deploykit_lmcache_s3_log_lines LMCache's S3 trouble lines since the unit's "
           "process started (deploykit verify --check lmcache-s3-breaker)",
           "# TYPE deploykit_lmcache_s3_log_lines gauge"]
    for unit in units:
        invocation = run(["systemctl", "show", "-p", "InvocationID", "--value", unit]).strip()
        if not invocation:
            state.pop(unit, None)
            continue
        seen = state.get(unit) or {}
        if seen.get("invocation") != invocation:  # a new process: count from its start
            seen = {"invocation": invocation, "cursor": None, "counts": dict.fromkeys(rules, 0)}
        argv = ["journalctl", "_SYSTEMD_INVOCATION_ID=" + invocation, "-o", "cat",
                "--no-pager", "-q", "--show-cursor"]
        if seen["cursor"]:
            argv += ["--after-cursor", seen["cursor"]]
        for line in run(argv).splitlines():
            if line.startswith("-- cursor: "):
                seen["cursor"] = line[len("-- cursor: "):]
                continue
            for kind, rule in rules.items():
                if rule.search(line):
                    seen["counts"][kind] += 1
        state[unit] = seen
        for kind in rules:
            out.append(f'deploykit_lmcache_s3_log_lines{{unit="{unit}",kind="{kind}"}} '
                       f"{int(seen['counts'][kind])}")
    os.makedirs(os.path.dirname(state_path), exist_ok=True)
    for path, text in ((state_path, json.dumps(state)), (out_path, "\n".join(out) + "\n")):
        with open(path + ".tmp", "w") as handle:
            handle.write(text)
        os.replace(path + ".tmp", path)  # the collector never reads half a file


if __name__ == "__main__":
    main()
