"""Lab sessions: each package under tests/lab/ is one session with one lab profile,
`deploykit lab up --profile P` with P's settings from the start, one cold converge, its
tests, then `deploykit lab down`. `tests/lab/core` is the one session `make test` runs;
`make test-lab` runs the others (docs/testing.md).

A package's conftest.py declares its session: `lab, converged = session_fixtures("plain")`.
Every deploykit call and every test's duration is appended to runs/lab-suite/timings.json.

Needs root; CI runs it (DEPLOYKIT_REQUIRE_TOOLS=1 makes a missing lab a failure, not a skip).

With DEPLOYKIT_CLI naming an installed `deploykit` (`make test`: the wheel in a fresh venv
outside the checkout, Makefile wheel-venv), every deploykit call runs that executable from
LAB_SITE, a directory outside the checkout where `lab up` writes inventory/lab, as an
operator's site directory; without it, `python -m deploy_kit` from the checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

LAB_KEY = "/var/lib/deploykit-lab/ssh/id_ed25519"
CEPH_CONF = "/var/lib/deploykit-lab/ceph/ceph.conf"
LAB_RUNS = REPO / "runs" / "lab-suite"  # every run the lab suite starts, and only those
TIMINGS = LAB_RUNS / "timings.json"
VAULT_PASSWORD = "/var/lib/deploykit-lab/vault-password"  # every profile's (lab status)
INSTALLED_CLI = os.environ.get("DEPLOYKIT_CLI")
# where deploykit runs and `lab up` writes inventory/lab: one lab per machine, so one path
LAB_SITE = Path("/var/tmp/deploykit-lab-site") if INSTALLED_CLI else REPO
LAB_INVENTORY = LAB_SITE / "inventory" / "lab"


def record_timing(entry: dict[str, Any]) -> None:
    """Append one {kind, ..., seconds} record (a deploykit call or a test) to timings.json."""
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    entries = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else []
    entries.append({**entry, "at": time.strftime("%Y-%m-%dT%H:%M:%S")})
    TIMINGS.write_text(json.dumps(entries, indent=1) + "\n")


@dataclass
class Lab:
    profile: str = "serving"
    outputs: list[str] = field(default_factory=list)  # everything deploykit printed
    runs: list[dict] = field(default_factory=list)  # summary.json of each run

    def env(self) -> dict[str, str]:
        # the suite's runs get their own root: a unit test writing runs/ in the same checkout
        # at the same time must not pass for this converge's run
        env = {**os.environ, "DEPLOYKIT_RUNS_DIR": str(LAB_RUNS)}
        if INSTALLED_CLI:  # the install's own code only: no checkout on its import path
            env.pop("PYTHONPATH", None)
        # every profile has a vault, as a CI rollout's site has: the generated secrets go
        # into the inventory's vault file (the secured profile's Consul tokens are vaulted too)
        env["ANSIBLE_VAULT_PASSWORD_FILE"] = VAULT_PASSWORD
        return env

    def deploykit(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        start = time.monotonic()
        cli = [INSTALLED_CLI] if INSTALLED_CLI else [sys.executable, "-m", "deploy_kit"]
        LAB_SITE.mkdir(parents=True, exist_ok=True)
        result = subprocess.run([*cli, *args], cwd=LAB_SITE, capture_output=True, text=True,
                                timeout=1800, env=self.env())
        record_timing({"kind": "deploykit", "profile": self.profile, "argv": list(args),
                       "rc": result.returncode,
                       "seconds": round(time.monotonic() - start, 1)})
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


def lab_model() -> Path:
    """The model `lab up` chose for this CPU (deploykit_lab.model: full or small), as the
    inventory names it: the controller path the serving role stages from."""
    import yaml

    hosts = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())
    return Path(hosts["all"]["children"]["vllm"]["vars"]["vllm_model"])


def lab_model_on_host() -> str:
    """Where the serving role stages the lab model on a serving host (vllm_models_dir's default):
    the name vLLM gives LMCache, so the one in every object name."""
    return f"/var/lib/vllm/models/{lab_model().name}"


def chunk_bytes(chunk_tokens: int = 256) -> int:
    """Bytes of one LMCache chunk object of the lab model (bf16 KV)."""
    from deploy_kit.core.geometry import bytes_per_token, from_hf_config

    return chunk_tokens * bytes_per_token(from_hf_config(lab_model() / "config.json"), 2)


def runs_dirs() -> list[Path]:
    root = LAB_RUNS
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


def s3_round_trip(lab: Lab, client: str, size: int, tls: bool = False) -> dict:
    """PUT/GET/DELETE `size` random bytes through lmcache.s3.lab.test from lab host `client`
    with the RGW user's keys: a stdlib SigV4 signer plus s3_client.py over SSH stdin
    (keys in the script text, never in argv)."""
    info = json.loads(subprocess.run(
        ["radosgw-admin", "--conf", CEPH_CONF, "user", "info", "--uid", "lmcache"],
        check=True, capture_output=True, text=True).stdout)
    from deploy_kit.core.rgw_keys import current_key

    key = current_key(info, "lmcache")  # the newest after `secrets rotate s3`
    assert key is not None
    script = (Path(__file__).parent / "sigv4_stdlib.py").read_text() + "\n" + \
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


def require_root() -> None:
    if os.geteuid() != 0:
        if os.environ.get("DEPLOYKIT_REQUIRE_TOOLS") == "1":
            pytest.fail("the lab tests need root")
        pytest.skip("the lab tests need root")


# a developer's iteration: the session's tests on a lab already up and converged with the
# session's profile (`deploykit lab up --profile P`, `deploykit up -i lab`), left up after;
# never in `make test` or CI
REUSE_ENV = "DEPLOYKIT_LAB_REUSE"


def session_fixtures(profile: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The `lab` and `converged` fixtures of one lab session (package scope: a package under
    tests/lab/ is a session). `lab up --profile` writes the profile's settings before the
    first converge; nothing in a session switches a profile on or off."""

    @pytest.fixture(scope="package")
    def lab() -> Iterator[Lab]:
        require_root()
        session = Lab(profile=profile)
        if os.environ.get(REUSE_ENV) == "1":  # a developer's rerun on the lab left up
            yield session
            return
        session.deploykit("lab", "down")  # start from nothing: the first converge must do work
        wait_for_prefetch()
        session.deploykit("lab", "up", "--profile", profile)
        try:
            yield session
        finally:
            session.deploykit("lab", "down")

    @pytest.fixture(scope="package")
    def converged(lab: Lab) -> Lab:
        if os.environ.get(REUSE_ENV) == "1":
            return lab
        first = lab.converge()
        assert first["rc"] == 0 and not first["failed"], first["failed"]
        assert first["changed"] > 0
        return lab

    return lab, converged


# `make test` starts `deploykit lab prefetch` in the background before lint and unit tests
# (the Makefile's lab-prefetch-background): the downloads and Go builds overlap them. Its
# log and exit code:
PREFETCH_LOG = LAB_RUNS.parent / "lab-prefetch.log"
PREFETCH_RC = LAB_RUNS.parent / "lab-prefetch.rc"
PREFETCH_PID = LAB_RUNS.parent / "lab-prefetch.pid"


def _prefetch_running() -> bool:
    try:
        os.kill(int(PREFETCH_PID.read_text().split()[0]), 0)
    except (OSError, ValueError, IndexError):
        return False
    return True


def wait_for_prefetch() -> None:
    """A prefetch still running holds the cache locks, so `lab up` would wait anyway; waiting
    here keeps its failure (in its own log) from looking like a lab up failure."""
    if not PREFETCH_LOG.exists():
        return
    deadline = time.monotonic() + 3600
    while not PREFETCH_RC.exists() and _prefetch_running() and time.monotonic() < deadline:
        time.sleep(2)
    time.sleep(0.5)  # the subshell writes the exit code just after the prefetch ends
    rc = PREFETCH_RC.read_text().strip() if PREFETCH_RC.exists() else "no exit code"
    assert rc == "0", f"deploykit lab prefetch: {rc}; " + PREFETCH_LOG.read_text()[-3000:]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    start = time.monotonic()
    yield
    parts = item.nodeid.split("/")  # tests/lab/<session>/test_….py::…
    record_timing({"kind": "test", "session": parts[2] if len(parts) > 3 else None,
                   "test": item.nodeid,
                   "seconds": round(time.monotonic() - start, 1)})
