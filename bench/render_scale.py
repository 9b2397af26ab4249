"""Fleet scale: `validate` and `render -o` of a 10,000-serving-host site against
`ansible-inventory --list` of the same site, in one run; prints the ratios (target: render
within 3x Ansible's own parse). Minimum of REPEAT runs each (these machines are shared and
noisy); wall and CPU seconds (the command's process tree) both.

  python bench/render_scale.py [SERVING_HOSTS] [REPEAT]      (default 10,000 and 3)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet_site import REPO, generate, host_count

BIN = Path(sys.executable).parent


def run(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process tree) of one run; fails loudly."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            out.seek(0)
            raise SystemExit(f"{argv[:3]} failed:\n{out.read().decode(errors='replace')[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def best(argv: list[str], repeat: int) -> dict[str, float]:
    runs = [run(argv) for _ in range(repeat)]
    return {"wall": round(min(w for w, _ in runs), 2), "cpu": round(min(c for _, c in runs), 2)}


def main() -> None:
    serving = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    deploykit = [sys.executable, "-m", "deploy_kit"]
    with tempfile.TemporaryDirectory(prefix="dk-scale-") as tmp:
        site = generate(Path(tmp) / "site", serving)
        out = Path(tmp) / "out"
        seconds = {
            # Ansible reads the whole inventory directory (group_vars too), as deploykit does
            "ansible_inventory_list": best([str(BIN / "ansible-inventory"), "-i", str(site),
                                            "--list", "--output", os.devnull], repeat),
            "validate": best([*deploykit, "validate", "-i", str(site)], repeat),
            # the first render writes a new OUT, later ones replace the previous tree
            "render": best([*deploykit, "render", "-i", str(site), "-o", str(out)], repeat),
        }
        files = sum(len(names) for _, _, names in os.walk(out))
        hosts = host_count(site)
    ansible = seconds["ansible_inventory_list"]["wall"]
    print(json.dumps({
        "hosts": hosts, "files_rendered": files, "repeat": repeat,
        "min_seconds": seconds,
        "ratio_validate_vs_ansible_inventory": round(seconds["validate"]["wall"] / ansible, 2),
        "ratio_render_vs_ansible_inventory": round(seconds["render"]["wall"] / ansible, 2),
        "target_ratio_render": 3.0}, indent=2))


if __name__ == "__main__":
    main()
