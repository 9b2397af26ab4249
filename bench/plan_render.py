"""Benchmark: `plan` + `render` of a generated 1,000-host inventory, side by side with
Ansible's own parse of the same inventory (`ansible-inventory --list`) in the same run.

Reports ratios (these machines are noisy); absolute seconds are printed for context only.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fleet_site

HOSTS = 1000
SERVICE_HOSTS = 11  # the example's admin, RGW, Consul, DNS and monitoring hosts


def generate(root: Path, hosts: int = HOSTS) -> Path:
    """inventory/example grown to `hosts` hosts (bench/fleet_site.py), so it validates."""
    return fleet_site.generate(root, hosts - SERVICE_HOSTS)


def timed(argv: list[str], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    bin_dir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as tmp:
        inv = generate(Path(tmp) / "inv")
        out = Path(tmp) / "out"
        plan = timed([str(bin_dir / "deploykit"), "plan", "-i", str(inv), "--json"], repeat)
        render = timed([str(bin_dir / "deploykit"), "render", "-i", str(inv), "-o", str(out)],
                       repeat)
        files = sum(1 for p in out.rglob("*") if p.is_file())
        ansible = timed([str(bin_dir / "ansible-inventory"), "-i", str(inv / "hosts.yml"),
                         "--list"], repeat)
    med = {k: statistics.median(v) for k, v in
           {"plan": plan, "render": render, "ansible_inventory_list": ansible}.items()}
    result = {
        "hosts": HOSTS, "files_rendered": files, "repeat": repeat,
        "median_seconds": {k: round(v, 3) for k, v in med.items()},
        "ratio_plan_vs_ansible_inventory": round(med["plan"] / med["ansible_inventory_list"], 2),
        "ratio_render_vs_ansible_inventory":
            round(med["render"] / med["ansible_inventory_list"], 2),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
