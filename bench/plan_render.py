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

import yaml

HOSTS = 1000


def generate(root: Path, hosts: int = HOSTS) -> Path:
    """A site with 16 RGW, 3 Consul, 2 DNS and the rest serving hosts, three accelerators."""
    rgw = {f"rgw{i:03d}": {"ansible_host": f"10.1.0.{i + 1}"} for i in range(16)}
    consul = {f"consul{i}": {"ansible_host": f"10.2.0.{i + 1}"} for i in range(3)}
    dns = {f"dns{i}": {"ansible_host": f"10.3.0.{i + 1}"} for i in range(2)}
    n_serving = hosts - len(rgw) - len(consul) - len(dns) - 1
    accelerators = ("cuda", "rocm", "gaudi3")
    serving: dict[str, dict[str, dict[str, object]]] = {a: {} for a in accelerators}
    for i in range(n_serving):
        accel = accelerators[i % 3]
        serving[accel][f"gpu{i:04d}"] = {"ansible_host": f"10.{10 + i // 250}.{i % 250}.1"}
    doc = {"all": {"children": {
        "ceph_admin": {"hosts": {"adm": {"ansible_host": "10.0.0.1"}}},
        "rgw": {"hosts": rgw}, "consul_servers": {"hosts": consul}, "dns": {"hosts": dns},
        "vllm": {"children": {f"vllm_{a}": {"hosts": serving[a],
                                             "vars": {"vllm_accelerator": a}}
                              for a in accelerators}}}}}
    root.mkdir(parents=True, exist_ok=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(doc))
    (root / "group_vars").mkdir(exist_ok=True)
    (root / "group_vars" / "all.yml").write_text(yaml.safe_dump({
        "deploykit_s3_fqdn": "s3.bench.test", "vllm_model": "Qwen/Qwen3-32B",
        "vllm_tensor_parallel_size": 2, "vllm_block_size": 16, "deploykit_ceph_version": "20.2.0"}))
    return root


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
