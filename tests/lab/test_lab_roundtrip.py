"""LMCache's real S3 connector between two lab serving hosts, without a GPU: one stores the
chunks of a fixed token sequence through the deployed remote_url (virtual-hosted bucket via
CoreDNS), profile and seed; the other hits and gets identical bytes; another seed misses.
Then `cache stats` sees LMCache's objects and `cache purge` removes them."""

from __future__ import annotations

import json

import pytest

from deploy_kit.lab.image import ensure_lmcache_venv
from tests.lab.conftest import Lab

pytestmark = pytest.mark.lab


def test_roundtrip_hit_identical_and_seed_mismatch_miss(converged: Lab) -> None:
    ensure_lmcache_venv("0.5.6")
    result = converged.deploykit("verify", "--inventory", "lab", "--roundtrip", "--json",
                                 "--check", "s3-credentials-valid")
    findings = {f["check"]: f for f in json.loads(result.stdout)["findings"]}
    trip = findings["lmcache-roundtrip"]
    assert trip["status"] == "pass", trip
    assert "hit 2/2, byte-identical" in trip["message"] and trip["target"] == "lab3 → lab4"
    assert findings["lmcache-object-names"]["status"] == "pass"
    # the in-process connector names objects by the model with '/' as '_'
    assert "_var_cache_deploykit_model-lab-llama-1@1@0@" in \
        findings["lmcache-object-names"]["message"]
    mismatch = findings["lmcache-seed-mismatch"]
    assert mismatch["status"] == "pass" and "misses (0/2 hits)" in mismatch["message"]

    stats = json.loads(converged.deploykit("cache", "stats", "-i", "lab", "--json").stdout)
    # the lab model: 8 KiB of KV per token, so one 256-token chunk object is 2 MiB
    name = "_var_cache_deploykit_model-lab-llama-1"
    group = [g for g in stats["groups"] if g["model"] == name]
    assert group and group[0]["objects"] == 2 and group[0]["bytes"] == 2 * 2_097_152, \
        stats["groups"]
    converged.deploykit("cache", "purge", "-i", "lab", "--model",
                        "/var/cache/deploykit/model-lab-llama-1", "--yes")
    after = json.loads(converged.deploykit("cache", "stats", "-i", "lab", "--json").stdout)
    assert not [g for g in after["groups"] if g["model"] == name]
