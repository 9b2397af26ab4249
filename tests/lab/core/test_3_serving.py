"""The serving tier for real: vLLM (CPU) + an LMCache server on lab3 and lab4, installed
offline from the controller's wheelhouse and started by `up`. Both hosts serve the staged
model; a prefix computed on lab3 is a hit on lab4, which only the shared S3 tier can answer
(lab4 never saw the prompt, and its LMCache server's DRAM holds nothing of lab3's). lab3
runs two vLLM instances (vllm_instances: 2, the lab's serving profile) on one LMCache
server: verify checks each, and a prompt one computed is a hit on the other and on lab4.
A stopped vLLM and the repair converge's rolling restart are the `faults` session's
(tests/lab/faults)."""

from __future__ import annotations

import json
import random
import time

import pytest

from tests.lab.conftest import Lab, lab_model, lab_model_on_host
from tests.lab.vllm_http import (
    SERVING,
    complete,
    metric,
    models,
)

pytestmark = pytest.mark.lab


def test_both_hosts_serve_the_staged_model(converged: Lab) -> None:
    for name, address in SERVING.items():
        served = models(address)
        assert served == [lab_model().name], (name, served)  # its directory's name
        assert complete(address, [7] * 40)["usage"]["prompt_tokens"] == 40
        states = converged.ssh(address, "systemctl is-active vllm lmcache-server").split()
        assert states == ["active", "active"], (name, states)
        # installed offline from the wheelhouse: the lock's digest is recorded in the venv
        recorded = converged.ssh(address, "cat /opt/vllm/.deploykit-wheelhouse").strip()
        assert len(recorded) == 64, recorded


def test_a_prefix_computed_on_one_host_is_a_remote_hit_on_the_other(converged: Lab) -> None:
    """A fresh prompt (seeded by the clock, so no earlier run stored it) to lab3, then the
    same prompt to lab4: every full chunk lab4 serves from outside vLLM came from RGW."""
    tokens = [random.Random(time.time_ns()).randrange(3, 259) for _ in range(256 * 3 + 5)]
    stored_on, read_on = SERVING["lab3"], SERVING["lab4"]
    queries = metric(read_on, "vllm:external_prefix_cache_queries_total")
    complete(stored_on, tokens)  # cold on lab3: computed, then stored through its server
    hits = 0.0
    deadline = time.monotonic() + 60  # the server's S3 writes are asynchronous
    while True:
        before = metric(read_on, "vllm:external_prefix_cache_hits_total")
        complete(read_on, tokens)
        hits = metric(read_on, "vllm:external_prefix_cache_hits_total") - before
        if hits >= 256 * 3 - 1 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert hits >= 256 * 3 - 1, hits  # every full chunk (vLLM counts one token less)
    assert metric(read_on, "vllm:external_prefix_cache_queries_total") > queries


def external_hits(address: str, tokens: list[int], port: int = 8000,
                  want: int = 256 * 3 - 1) -> float:
    """Send `tokens` until vLLM counts `want` tokens served from outside itself (LMCache's
    S3 writes are asynchronous), for at most a minute; the last count."""
    deadline = time.monotonic() + 60
    while True:
        before = metric(address, "vllm:external_prefix_cache_hits_total", port)
        complete(address, tokens, port)
        hits = metric(address, "vllm:external_prefix_cache_hits_total", port) - before
        if hits >= want or time.monotonic() > deadline:
            return hits
        time.sleep(2)


def test_two_instances_on_lab3_verify_and_share_one_cache_and_the_remote_tier(
        converged: Lab) -> None:
    """lab3 runs vllm.service on 8000 (lab3/0) and vllm-1.service on 8001 (lab3/1), both
    clients of lab3's one LMCache server. verify checks each instance by name. A fresh prompt
    (seeded by the clock) computed by lab3/0 is a hit on lab3/1, through the server they
    share, and on lab4, which never saw it and whose own server holds nothing of lab3's: only
    S3 can answer there, as in the cross-host test above."""
    lab3 = SERVING["lab3"]
    states = converged.ssh(lab3, "systemctl is-active vllm vllm-1 lmcache-server").split()
    assert states == ["active"] * 3, states
    assert converged.ssh(lab3, "systemctl is-enabled vllm-1").strip() == "enabled"
    for port in (8000, 8001):
        assert models(lab3, port) == [lab_model().name]

    result = converged.deploykit("verify", "--inventory", "lab", "--json", check=False)
    findings = json.loads(result.stdout)["findings"]
    assert result.returncode == 0, [f for f in findings if f["status"] == "fail"]
    service = {f["target"]: f["status"] for f in findings if f["check"] == "vllm-service"}
    assert service == {"lab3/0": "pass", "lab3/1": "pass", "lab4": "pass"}, service

    tokens = [random.Random(time.time_ns()).randrange(3, 259) for _ in range(256 * 3 + 5)]
    cold_before = metric(lab3, "vllm:external_prefix_cache_hits_total", 8000)
    complete(lab3, tokens, 8000)  # cold on lab3/0: computed, stored through lab3's server
    assert metric(lab3, "vllm:external_prefix_cache_hits_total", 8000) == cold_before
    # lab3/1 never computed it: every full chunk comes from the server both instances use
    assert external_hits(lab3, tokens, 8001) >= 256 * 3 - 1
    # lab4 never saw it either, and its server's DRAM holds nothing of lab3's: from S3
    queries = metric(SERVING["lab4"], "vllm:external_prefix_cache_queries_total")
    assert external_hits(SERVING["lab4"], tokens) >= 256 * 3 - 1
    assert metric(SERVING["lab4"], "vllm:external_prefix_cache_queries_total") > queries


def test_readme_verbs_work_after_a_plain_converge(converged: Lab) -> None:
    """`verify --roundtrip` and `cache stats|purge` as a user runs them after `make lab`: the
    driver runs on the serving hosts themselves through Ansible (their venv, no controller
    venv), and the server topology's object names are counted, not called foreign."""
    result = converged.deploykit("verify", "--inventory", "lab", "--roundtrip", "--json",
                                 "--check", "s3-credentials-valid")
    findings = {f["check"]: f for f in json.loads(result.stdout)["findings"]}
    trip = findings["lmcache-roundtrip"]
    assert trip["status"] == "pass" and trip["target"] == "lab3 → lab4", trip
    assert "hit 2/2, byte-identical" in trip["message"], trip
    assert findings["lmcache-seed-mismatch"]["status"] == "pass"

    model = lab_model_on_host()
    stats = json.loads(converged.deploykit("cache", "stats", "-i", "lab", "--json").stdout)
    layouts = {g["dtype"] for g in stats["groups"] if g["model"] in (model,
                                                                     model.replace("/", "_"))}
    # the remote-hit test stored through the LMCache servers, the round trip through the
    # in-process connector: both layouts under the one name vLLM gives the model on the host,
    # and nothing left unexplained
    assert layouts == {"-", "bfloat16"}, stats
    assert stats["other_objects"] == 0, stats
    converged.deploykit("cache", "purge", "-i", "lab", "--model", model, "--yes")
    after = json.loads(converged.deploykit("cache", "stats", "-i", "lab", "--json").stdout)
    assert after["groups"] == [], after
