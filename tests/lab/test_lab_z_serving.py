"""The serving tier for real: vLLM (CPU) + an LMCache server on lab3 and lab4, installed
offline from the controller's wheelhouse and started by `up`. A completion is served, the
same prompt hits LMCache, a rolling restart always leaves one host answering, and a stopped
vLLM is a verify FAIL naming its host. Runs after the Consul tests (its restarts are slow)."""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.lab.conftest import Lab

pytestmark = pytest.mark.lab

SERVING = {"lab3": "10.99.0.13", "lab4": "10.99.0.14"}
MODEL = "model-lab-llama-1"  # the lab model's directory name is its served name


def get(url: str, timeout: float = 3) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def metric(address: str, name: str) -> float:
    with urllib.request.urlopen(f"http://{address}:8000/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def complete(address: str, tokens: list[int]) -> dict:
    body = json.dumps({"model": MODEL, "prompt": tokens, "max_tokens": 4,
                       "temperature": 0}).encode()
    request = urllib.request.Request(f"http://{address}:8000/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        result: dict = json.loads(response.read())
    return result


def wait_healthy(address: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if get(f"http://{address}:8000/health") == 200:
            return
        time.sleep(2)
    raise AssertionError(f"{address}: vLLM not healthy after {timeout} s")


def test_both_hosts_serve_the_staged_model(converged: Lab) -> None:
    for name, address in SERVING.items():
        with urllib.request.urlopen(f"http://{address}:8000/v1/models", timeout=10) as r:
            models = [m["id"] for m in json.loads(r.read())["data"]]
        assert models == [MODEL], (name, models)
        assert complete(address, [7] * 40)["usage"]["prompt_tokens"] == 40
        states = converged.ssh(address, "systemctl is-active vllm lmcache-server").split()
        assert states == ["active", "active"], (name, states)
        # installed offline from the wheelhouse: the lock's digest is recorded in the venv
        recorded = converged.ssh(address, "cat /opt/vllm/.deploykit-wheelhouse").strip()
        assert len(recorded) == 64, recorded


def test_a_repeated_prompt_is_served_from_lmcache(converged: Lab) -> None:
    address = SERVING["lab3"]
    tokens = [random.Random(8).randrange(3, 259) for _ in range(256 * 3 + 5)]
    before = metric(address, "vllm:external_prefix_cache_hits_total")
    complete(address, tokens)  # cold: computed, then stored by the LMCache server
    complete(address, tokens)
    hits = metric(address, "vllm:external_prefix_cache_hits_total") - before
    assert hits >= 256 * 3 - 1, hits  # every full chunk (vLLM counts one token less)


def test_rolling_restart_keeps_one_host_answering(converged: Lab) -> None:
    """A changed environment restarts vLLM one host at a time, each gated on /health: a
    poller sees at least one healthy host at every poll and each host restart once."""
    extra = REPO / "inventory" / "lab" / "group_vars" / "vllm"
    extra.mkdir(parents=True, exist_ok=True)
    (extra / "roll.yml").write_text(yaml.safe_dump({"vllm_extra_env": {"DEPLOYKIT_ROLL": "1"}}))
    polls: list[dict[str, int]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            polls.append({n: get(f"http://{a}:8000/health", 2) for n, a in SERVING.items()})
            time.sleep(0.5)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        summary = converged.converge()
    finally:
        stop.set()
        poller.join(timeout=10)
        (extra / "roll.yml").unlink()
    assert summary["rc"] == 0 and not summary["failed"], summary["failed"]
    down = {n for p in polls for n, code in p.items() if code != 200}
    assert down == set(SERVING), f"not every host restarted: down at some poll = {down}"
    assert all(any(code == 200 for code in p.values()) for p in polls), \
        [p for p in polls if not any(code == 200 for code in p.values())][:3]
    assert len(polls) > 20


def test_stopped_vllm_fails_verify_naming_the_host(converged: Lab) -> None:
    address = SERVING["lab4"]
    converged.ssh(address, "systemctl stop vllm")
    try:
        # the unit's ExecStopPost removed vLLM's KV segment (it leaks a GiB per stop)
        leaked = converged.ssh(address, "ls /dev/shm | grep -c '^lmcache_kv_' || true").strip()
        assert leaked == "0", leaked
        result = converged.deploykit("verify", "--inventory", "lab", "--json", check=False)
        findings = json.loads(result.stdout)["findings"]
        assert result.returncode == 6
        failed = [f for f in findings if f["check"] == "vllm-service" and f["status"] == "fail"]
        assert [f["target"] for f in failed] == ["lab4"], failed
    finally:
        # the LMCache server dropped the stopped vLLM's KV registration; start both fresh
        converged.ssh(address, "systemctl restart lmcache-server && systemctl start vllm")
        wait_healthy(address, timeout=600)


def test_wheelhouse_command_reuses_the_lab_wheelhouse(lab: Lab, tmp_path: Path) -> None:
    """`deploykit wheelhouse` against the lab inventory names the cached directory (no
    download: its manifest is there) that the lab's serving hosts installed from."""
    out = Path("/var/cache/deploykit/wheelhouse")
    result = lab.deploykit("wheelhouse", "--inventory", "lab", "--out", str(out))
    assert "cpu-vllm-0.32.0-lmcache-0.5.6-py311" in result.stdout + result.stderr
    manifest = json.loads((out / "cpu-vllm-0.32.0-lmcache-0.5.6-py311" /
                           "manifest.json").read_text())
    assert manifest["installed_without_deps"] and manifest["wheels"] > 100
