"""Idempotent re-run cost on the lab (root): a second `deploykit up` against the floor any
Ansible run pays on the same hosts (`ansible -m ping` + fact gathering), in one run.

Brings the lab up and converges it first when needed. Prints one JSON document with the
median of ROUNDS, the ratio, and where the re-run spends its time (summary.json's
slowest_tasks).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROUNDS = int(os.environ.get("DEPLOYKIT_BENCH_ROUNDS", "3"))
BIN = Path(sys.executable).parent


def timed(argv: list[str]) -> float:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    start = time.perf_counter()
    subprocess.run(argv, cwd=REPO, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def deploykit(*args: str) -> float:
    return timed([sys.executable, "-m", "deploy_kit", *args])


def lab_is_up() -> bool:
    result = subprocess.run([sys.executable, "-m", "deploy_kit", "lab", "status"], cwd=REPO,
                            capture_output=True)
    return result.returncode == 0


def floor() -> float:
    inventory = str(REPO / "inventory" / "lab")
    return timed([str(BIN / "ansible"), "all", "-i", inventory, "-m", "ansible.builtin.ping"]) \
        + timed([str(BIN / "ansible"), "all", "-i", inventory, "-m", "ansible.builtin.setup"])


def last_summary() -> dict[str, object]:
    runs = sorted(p for p in (REPO / "runs").iterdir() if p.name.endswith("-up"))
    return dict(json.loads((runs[-1] / "summary.json").read_text()))


def main() -> None:
    if not lab_is_up():
        deploykit("lab", "up")
    deploykit("up", "-i", "lab")  # converge (a no-op when it already is)
    reruns, floors = [], []
    for _ in range(ROUNDS):
        reruns.append(deploykit("up", "-i", "lab"))
        floors.append(floor())
    summary = last_summary()
    rerun, base = statistics.median(reruns), statistics.median(floors)
    print(json.dumps({
        "rounds": ROUNDS,
        "rerun_up_seconds": round(rerun, 1),
        "ping_plus_facts_seconds": round(base, 1),
        "ratio": round(rerun / base, 2),
        "target_ratio": 2.0,
        "rerun_changed": summary["changed"],
        "left_out": sorted(h for h, r in summary.get("converge_records", {}).items() if not r),
        "slowest_tasks": summary.get("slowest_tasks", [])[:10],
    }, indent=2))


if __name__ == "__main__":
    main()
