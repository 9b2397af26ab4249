"""Fleet simulation (root, lab up): `deploykit up --check` over many simulated serving hosts,
controller CPU per host-task against a plain `copy content=` playbook doing as many tasks on
the same hosts, in one run.

The simulated hosts are SSH logins to the lab's first serving host (its real sshd, in its
network namespace); each gets its own lmcache_config_dir so no two share a file. Check mode: the
controller does all of its work (render, templating, module transfer, diff) and nothing is
changed. CPU is the ansible-playbook process tree's (os.wait4), not sshd's.

  python bench/fleet.py [HOSTS]        (default 256)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab import REPO

RECAP = re.compile(r"^(?P<host>sim\d+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
                   r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)\s+"
                   r"skipped=(?P<skipped>\d+)", re.M)
BIN = Path(sys.executable).parent


def measured(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(CPU seconds of the whole process tree, wall seconds, stdout)."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        out.seek(0)
        text = out.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[:3]} failed:\n{text[-3000:]}")
    return usage.ru_utime + usage.ru_stime, wall, text


def host_tasks(text: str) -> int:
    """Tasks the simulated hosts ran (ok + skipped; changed and failed are counted in ok)."""
    return sum(int(m["ok"]) + int(m["skipped"]) for m in RECAP.finditer(text))


def fleet_inventory(workdir: Path, hosts: int) -> Path:
    inventory = workdir / "inventory"
    shutil.copytree(REPO / "inventory" / "lab", inventory)
    doc = yaml.safe_load((inventory / "hosts.yml").read_text())
    serving = doc["all"]["children"]["vllm"]["hosts"]
    target = next(iter(serving.values()))
    sims = {f"sim{i:03d}": {"ansible_host": target["ansible_host"],
                            "lmcache_config_dir": f"{workdir}/hosts/sim{i:03d}/etc"}
            for i in range(hosts)}
    doc["all"]["children"]["vllm"]["hosts"].update(sims)
    (inventory / "hosts.yml").write_text(yaml.safe_dump(doc))
    # a check run rolls nothing: one batch per 64 hosts, as a fleet would configure
    group_vars = inventory / "group_vars" / "vllm.yml"
    existing = yaml.safe_load(group_vars.read_text()) if group_vars.exists() else {}
    group_vars.parent.mkdir(exist_ok=True)
    group_vars.write_text(yaml.safe_dump({**(existing or {}), "vllm_serial": 64}))
    return inventory


def floor_playbook(workdir: Path, tasks: int) -> Path:
    plays = [{"name": "Floor: copy content= only", "hosts": "sim*", "gather_facts": False,
              "tasks": [{"name": f"Copy {n}", "ansible.builtin.copy": {
                  "content": f"file {n} of {{{{ inventory_hostname }}}}\n",
                  "dest": f"{workdir}/floor/{{{{ inventory_hostname }}}}/file{n}",
                  "mode": "0644"}} for n in range(tasks)]}]
    path = workdir / "floor.yml"
    path.write_text(yaml.safe_dump(plays, sort_keys=False))
    return path


def main() -> None:
    hosts = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "PATH": f"{BIN}:{os.environ['PATH']}", "ANSIBLE_HOST_KEY_CHECKING": "False"}
    with tempfile.TemporaryDirectory(prefix="dk-fleet-") as tmp:
        workdir = Path(tmp)
        inventory = fleet_inventory(workdir, hosts)
        ours_cpu, ours_wall, _ = measured(
            [sys.executable, "-m", "deploy_kit", "up", "-i", str(inventory), "--check",
             "--limit", "sim*"], env)
        summary = sorted((REPO / "runs").glob("*-up"))[-1] / "summary.json"
        stats = json.loads(summary.read_text())["hosts"]
        ours_tasks = sum(s["ok"] + s["skipped"] for h, s in stats.items()
                         if h.startswith("sim"))
        per_host = max(1, ours_tasks // hosts)
        floor_cpu, floor_wall, floor_text = measured(
            [str(BIN / "ansible-playbook"), "-i", str(inventory),
             str(floor_playbook(workdir, per_host)), "--check"], env)
        floor_tasks = host_tasks(floor_text)
    ours = ours_cpu / ours_tasks
    floor = floor_cpu / floor_tasks
    print(json.dumps({
        "simulated_serving_hosts": hosts,
        "deploykit_up_check": {"host_tasks": ours_tasks, "cpu_seconds": round(ours_cpu, 1),
                               "wall_seconds": round(ours_wall, 1),
                               "cpu_ms_per_host_task": round(ours * 1000, 1)},
        "copy_content_floor": {"host_tasks": floor_tasks, "cpu_seconds": round(floor_cpu, 1),
                               "wall_seconds": round(floor_wall, 1),
                               "cpu_ms_per_host_task": round(floor * 1000, 1)},
        "ratio": round(ours / floor, 2), "target_ratio": 1.3}, indent=2))


if __name__ == "__main__":
    main()
