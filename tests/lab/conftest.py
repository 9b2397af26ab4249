"""The lab session: `deploykit lab up`, one converge, tests, then `deploykit lab down`.

Needs root; CI runs it (DEPLOYKIT_REQUIRE_TOOLS=1 makes a missing lab a failure, not a skip).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import REPO

LAB_KEY = "/var/lib/deploykit-lab/ssh/id_ed25519"
CEPH_CONF = "/var/lib/deploykit-lab/ceph/ceph.conf"
LAB_RUNS = REPO / "runs" / "lab-suite"  # every run the lab suite starts, and only those


@dataclass
class Lab:
    outputs: list[str] = field(default_factory=list)  # everything deploykit printed
    runs: list[dict] = field(default_factory=list)  # summary.json of each run

    def deploykit(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        # the suite's runs get their own root: a unit test writing runs/ in the same checkout
        # at the same time must not pass for this converge's run
        result = subprocess.run([sys.executable, "-m", "deploy_kit", *args], cwd=REPO,
                                capture_output=True, text=True, timeout=1800,
                                env={**os.environ, "DEPLOYKIT_RUNS_DIR": str(LAB_RUNS)})
        self.outputs.append(result.stdout + result.stderr)
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    def converge(self, *extra: str) -> dict:
        before = set(runs_dirs())
        self.deploykit("up", "--inventory", "lab", *extra)
        new = sorted(set(runs_dirs()) - before)
        summary = json.loads((new[-1] / "summary.json").read_text())
        self.runs.append(summary)
        return summary

    def ssh(self, address: str, command: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            ["ssh", "-i", LAB_KEY, "-o", "StrictHostKeyChecking=no", "-o",
             "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", f"root@{address}", command],
            input=stdin, capture_output=True, text=True, timeout=600,
            stdin=None if stdin is not None else subprocess.DEVNULL)
        assert result.returncode == 0, f"{address}: {command}: {result.stderr}"
        return result.stdout


def runs_dirs() -> list[Path]:
    root = LAB_RUNS
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


def s3_round_trip(lab: Lab, client: str, size: int, tls: bool = False) -> dict:
    """PUT/GET/DELETE `size` random bytes through lmcache.s3.lab.test from lab host `client`
    with the RGW user's keys: the package's SigV4 module plus s3_client.py over SSH stdin
    (keys in the script text, never in argv)."""
    info = json.loads(subprocess.run(
        ["radosgw-admin", "--conf", CEPH_CONF, "user", "info", "--uid", "lmcache"],
        check=True, capture_output=True, text=True).stdout)
    key = info["keys"][0]
    script = (REPO / "deploy_kit/transport/sigv4.py").read_text() + "\n" + \
        (Path(__file__).parent / "s3_client.py").read_text()
    for placeholder, value in {"__ACCESS__": key["access_key"], "__SECRET__": key["secret_key"],
                               "__HOST__": "lmcache.s3.lab.test", "__SIZE__": str(size),
                               # tls: https on 443, verified by the host's system trust store
                               "__PORT__": "443" if tls else "80",
                               "__TLS__": "1" if tls else ""}.items():
        script = script.replace(placeholder, value)
    result: dict = json.loads(lab.ssh(client, "python3 -", stdin=script))
    return result


def ceph(*args: str) -> str:
    return subprocess.run(["ceph", "--conf", CEPH_CONF, *args], check=True,
                          capture_output=True, text=True, timeout=60).stdout


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    if os.geteuid() != 0:
        if os.environ.get("DEPLOYKIT_REQUIRE_TOOLS") == "1":
            pytest.fail("the lab tests need root")
        pytest.skip("the lab tests need root")
    session = Lab()
    session.deploykit("lab", "down")  # start from nothing: the first converge must do work
    # DEPLOYKIT_LAB_SERVING=0: `lab up --no-serving` (config and units only on lab3/lab4)
    serving = [] if os.environ.get("DEPLOYKIT_LAB_SERVING", "1") != "0" else ["--no-serving"]
    session.deploykit("lab", "up", *serving)
    try:
        yield session
    finally:
        session.deploykit("lab", "down")


@pytest.fixture(scope="session")
def converged(lab: Lab) -> Lab:
    first = lab.converge()
    assert first["rc"] == 0 and not first["failed"], first["failed"]
    assert first["changed"] > 0
    return lab
