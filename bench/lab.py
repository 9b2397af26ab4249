"""Benchmark on the local lab (root): `make lab` wall time (lab up + up + verify), the
idempotent second `up`, and `verify` of the lab plus 256 simulated serving hosts against
the floor of any Ansible-based tool on the same hosts: `ansible all -m ping` with the same
forks (the target: at most 1.5x that floor).

The simulated hosts are SSH logins to one sshd that this script starts (installing Debian's
openssh-server first if the machine has none), each on its own loopback address (127.0.N.M:
validate refuses two inventory hosts that reach one address and port, as a real site must);
each reads a copy of a real lab serving host's files. verify reaches them as it reaches any
host, through Ansible with the inventory's settings. Only loopback and the lab's own
addresses are contacted. Prints one JSON document.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SIMULATED = 256
FORKS = 32
LAB_KEY = Path("/var/lib/deploykit-lab/ssh/id_ed25519")


def deploykit(*args: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "deploy_kit", *args], cwd=REPO, check=True,
                   capture_output=True)
    return time.perf_counter() - start


def sim_address(index: int) -> str:
    """Every simulated host its own loopback address (Linux answers all of 127/8)."""
    return f"127.0.{1 + index // 250}.{1 + index % 250}"


def start_sshd(workdir: Path) -> tuple[list[subprocess.Popen[bytes]], int]:
    import socket

    from deploykit_lab.system import ensure_packages

    ensure_packages(["openssh-server"])  # the controller's sshd (the lab's hosts have theirs)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    host_key = workdir / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)],
                   check=True)
    keys = workdir / "authorized_keys"
    keys.write_text(LAB_KEY.with_suffix(".pub").read_text())
    Path("/run/sshd").mkdir(exist_ok=True)
    # one sshd listens on at most 16 sockets (OpenSSH's MAX_LISTEN_SOCKS: "Too many listen
    # sockets. Enlarge MAX_LISTEN_SOCKS" with 17 or more, Debian 12's 9.2): one per 16
    procs = []
    for first in range(0, SIMULATED, 16):
        listen = [arg for i in range(first, min(first + 16, SIMULATED))
                  for arg in ("-o", f"ListenAddress={sim_address(i)}")]
        procs.append(subprocess.Popen(
            ["/usr/sbin/sshd", "-D", "-e", "-p", str(port), *listen,
             "-o", f"HostKey={host_key}", "-o", f"AuthorizedKeysFile={keys}",
             "-o", "StrictModes=no", "-o", "PasswordAuthentication=no",
             "-o", "MaxStartups=400", "-o", "MaxSessions=400",
             "-o", f"PidFile={workdir}/sshd-{first}.pid"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(1)
    assert all(p.poll() is None for p in procs), "an sshd for the simulated hosts exited"
    return procs, port


def simulated_inventory(workdir: Path, port: int) -> Path:
    inv = workdir / "inventory"
    shutil.copytree(REPO / "inventory" / "lab", inv)
    files = workdir / "serving-files"
    subprocess.run(["scp", "-q", "-r", "-i", str(LAB_KEY), "-o", "StrictHostKeyChecking=no",
                    "-o", "UserKnownHostsFile=/dev/null", "root@10.99.0.13:/etc/deploykit",
                    str(files)], check=True)
    doc = yaml.safe_load((inv / "hosts.yml").read_text())
    sims = {f"sim{i:03d}": {"ansible_host": sim_address(i), "ansible_port": port,
                            "lmcache_config_dir": str(files)} for i in range(SIMULATED)}
    doc["all"]["children"]["vllm"]["hosts"].update(sims)
    (inv / "hosts.yml").write_text(yaml.safe_dump(doc))
    return inv


def timed_verify(inventory: Path, forks: int) -> tuple[float, int]:
    """`deploykit verify` as a user runs it (a process: imports, inventory, Ansible)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "deploy_kit", "verify", "-i", str(inventory),
                           "--json"], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "ANSIBLE_FORKS": str(forks)})
    seconds = time.perf_counter() - start
    return seconds, len(json.loads(done.stdout)["findings"]) if done.stdout else 0


def timed_ping(inventory: Path, forks: int) -> float:
    start = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "ansible"), "all", "-i", str(inventory),
                    "-m", "ansible.builtin.ping", "-f", str(forks)], cwd=REPO, check=True,
                   capture_output=True,
                   env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
    return time.perf_counter() - start


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
        sshds, port = start_sshd(workdir)
        try:
            inventory = simulated_inventory(workdir, port)
            ping = timed_ping(inventory, FORKS)
            verify, n = timed_verify(inventory, FORKS)
        finally:
            for sshd in sshds:
                sshd.terminate()
                sshd.wait()
    result["verify_simulated"] = {
        "serving_hosts": SIMULATED + 2, "forks": FORKS, "findings": n,
        "verify_seconds": round(verify, 2), "ansible_ping_seconds": round(ping, 2),
        "ratio_verify_vs_ping": round(verify / ping, 2), "target_ratio": 1.5}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
