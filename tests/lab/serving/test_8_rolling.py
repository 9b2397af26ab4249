"""The serving tier's own converges and artefacts: the same prompt twice on one host hits
LMCache, a changed vLLM environment restarts the hosts one at a time (a poller always sees
one answering), and `deploykit wheelhouse` names the lab's cached wheelhouse. Runs last in
its session (its restarts are slow)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.lab.conftest import Lab
from tests.lab.vllm_http import (
    SERVING,
    assert_rolled,
    complete,
    metric,
    poll_health_during,
)

pytestmark = pytest.mark.lab


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
    servers = {a: server_invocation(converged, a) for a in SERVING.values()}
    try:
        polls, summary = poll_health_during(converged.converge)
    finally:
        (extra / "roll.yml").unlink()
    assert summary["rc"] == 0 and not summary["failed"], summary["failed"]
    assert_rolled(polls)
    # only vLLM's environment changed, yet each LMCache server restarted with it: a server
    # kept the restarted vLLM's /dev/shm KV segment, and the second such roll crash-looped
    for address, before in servers.items():
        assert server_invocation(converged, address) != before, address


def server_invocation(lab: Lab, address: str) -> str:
    return lab.ssh(address, "systemctl show -p InvocationID --value lmcache-server").strip()


def test_wheelhouse_command_reuses_the_lab_wheelhouse(lab: Lab, tmp_path: Path) -> None:
    """`deploykit wheelhouse` against the lab inventory names the cached directory (no
    download: its manifest is there) that the lab's serving hosts installed from."""
    out = Path("/var/cache/deploykit/wheelhouse")
    result = lab.deploykit("wheelhouse", "--inventory", "lab", "--out", str(out))
    assert "cpu-vllm-0.32.0-lmcache-0.5.6-py311" in result.stdout + result.stderr
    manifest = json.loads((out / "cpu-vllm-0.32.0-lmcache-0.5.6-py311" /
                           "manifest.json").read_text())
    assert manifest["installed_without_deps"] and manifest["wheels"] > 100
