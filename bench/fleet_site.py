"""A large site for the scale benches: inventory/example's group_vars and service hosts
(1 Ceph admin, 4 RGW, 3 Consul, 2 DNS, 1 monitoring), with its serving groups grown to many
hosts (two thirds CUDA, one sixth each ROCm and Gaudi3), so it validates as the example does.

  python bench/fleet_site.py DIR [SERVING_HOSTS]      (default 10,000 serving hosts)
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "inventory" / "example"


def _address(i: int) -> str:
    """A distinct address per serving host in 10.64.0.0/10 (validate refuses shared ones)."""
    return f"10.{64 + i // 65024}.{(i // 254) % 256}.{i % 254 + 1}"


def _share(serving: int) -> dict[str, int]:
    gaudi = rocm = serving // 6
    return {"vllm_cuda": serving - rocm - gaudi, "vllm_rocm": rocm, "vllm_gaudi": gaudi}


def generate(root: Path, serving: int = 10_000) -> Path:
    """Write the site to root (replaced if present) and return root."""
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(EXAMPLE, root)
    doc = yaml.safe_load((EXAMPLE / "hosts.yml").read_text())
    groups = doc["all"]["children"]["vllm"]["children"]
    first = 0
    for group, count in _share(serving).items():
        prefix = group.removeprefix("vllm_")
        groups[group]["hosts"] = {f"{prefix}-{i:05d}": {"ansible_host": _address(i)}
                                  for i in range(first, first + count)}
        first += count
    (root / "hosts.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return root


def host_count(root: Path) -> int:
    doc = yaml.safe_load((root / "hosts.yml").read_text())

    def count(group: dict[str, object]) -> set[str]:
        hosts = set(group.get("hosts") or {})  # type: ignore[arg-type]
        for child in (group.get("children") or {}).values():  # type: ignore[attr-defined]
            hosts |= count(child or {})
        return hosts

    return len(count(doc["all"]))


if __name__ == "__main__":
    site = generate(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 10_000)
    print(f"{site}: {host_count(site)} hosts")
