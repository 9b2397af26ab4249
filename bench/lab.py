"""Benchmark on the local lab (root): `make lab` wall time (lab up + up + verify), the
idempotent second `up`, and `verify` of the lab plus 256 simulated serving endpoints
(concurrent probes) against the same checks run one after another.

The simulated endpoints are SSH logins to one sshd on 127.0.0.1 that this script starts;
each reads a copy of a real lab serving host's files. Only loopback and the lab's own
addresses are contacted. Prints one JSON document.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SIMULATED = 256
LAB_KEY = Path("/var/lib/deploykit-lab/ssh/id_ed25519")


def deploykit(*args: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "deploy_kit", *args], cwd=REPO, check=True,
                   capture_output=True)
    return time.perf_counter() - start


def start_sshd(workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    host_key = workdir / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)],
                   check=True)
    keys = workdir / "authorized_keys"
    keys.write_text(LAB_KEY.with_suffix(".pub").read_text())
    Path("/run/sshd").mkdir(exist_ok=True)
    proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-p", str(port), "-o",
                             "ListenAddress=127.0.0.1", "-o", f"HostKey={host_key}", "-o",
                             f"AuthorizedKeysFile={keys}", "-o", "StrictModes=no", "-o",
                             "PasswordAuthentication=no", "-o", "MaxStartups=400", "-o",
                             "MaxSessions=400", "-o", f"PidFile={workdir}/sshd.pid"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    return proc, port


def simulated_inventory(workdir: Path, port: int) -> Path:
    inv = workdir / "inventory"
    shutil.copytree(REPO / "inventory" / "lab", inv)
    files = workdir / "serving-files"
    subprocess.run(["scp", "-q", "-r", "-i", str(LAB_KEY), "-o", "StrictHostKeyChecking=no",
                    "-o", "UserKnownHostsFile=/dev/null", "root@10.99.0.13:/etc/deploykit",
                    str(files)], check=True)
    doc = yaml.safe_load((inv / "hosts.yml").read_text())
    sims = {f"sim{i:03d}": {"ansible_host": "127.0.0.1", "ansible_port": port,
                            "lmcache_config_dir": str(files)} for i in range(SIMULATED)}
    doc["all"]["children"]["vllm"]["hosts"].update(sims)
    (inv / "hosts.yml").write_text(yaml.safe_dump(doc))
    return inv


def timed_verify(inventory: Path, workers: int) -> tuple[float, int]:
    import deploy_kit.verify.checks  # noqa: F401
    from deploy_kit.config.open import open_site
    from deploy_kit.verify.gather import gather
    from deploy_kit.verify.model import evaluate

    site = open_site(str(inventory))
    start = time.perf_counter()
    findings = evaluate(gather(site, workers=workers))
    return time.perf_counter() - start, len(findings)


def main() -> None:
    result: dict[str, object] = {}
    deploykit("lab", "down")
    steps = {"lab_up": deploykit("lab", "up"), "up_first": deploykit("up", "-i", "lab"),
             "verify": deploykit("verify", "-i", "lab")}
    result["make_lab_seconds"] = round(sum(steps.values()), 1)
    result["steps_seconds"] = {k: round(v, 1) for k, v in steps.items()}
    result["up_second_idempotent_seconds"] = round(deploykit("up", "-i", "lab"), 1)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        sshd, port = start_sshd(workdir)
        try:
            inventory = simulated_inventory(workdir, port)
            concurrent, n = timed_verify(inventory, workers=32)
            sequential, _ = timed_verify(inventory, workers=1)
        finally:
            sshd.terminate()
            sshd.wait()
    result["verify_simulated"] = {
        "serving_endpoints": SIMULATED + 2, "findings": n,
        "concurrent_seconds": round(concurrent, 2), "sequential_seconds": round(sequential, 2),
        "speedup": round(sequential / concurrent, 1)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
