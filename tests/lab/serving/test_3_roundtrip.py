"""LMCache's real S3 connector between two lab serving hosts, without a GPU: one stores the
chunks of a fixed token sequence through the deployed remote_url (virtual-hosted bucket via
CoreDNS), profile and seed; the other hits and gets identical bytes; another seed misses.
Then `cache stats` sees LMCache's objects and `cache purge` removes them."""

from __future__ import annotations

import json

import pytest

from tests.lab.conftest import Lab, chunk_bytes, lab_model_on_host

pytestmark = pytest.mark.lab


def test_roundtrip_hit_identical_and_seed_mismatch_miss(converged: Lab) -> None:
    result = converged.deploykit("verify", "--inventory", "lab", "--roundtrip", "--json",
                                 "--check", "s3-credentials-valid")
    findings = {f["check"]: f for f in json.loads(result.stdout)["findings"]}
    trip = findings["lmcache-roundtrip"]
    assert trip["status"] == "pass", trip
    assert "hit 2/2, byte-identical" in trip["message"] and trip["target"] == "lab3 → lab4"
    assert findings["lmcache-object-names"]["status"] == "pass"
    # the in-process connector names objects by the model with '/' as '_'
    name = lab_model_on_host().replace("/", "_")
    assert f"{name}@1@0@" in findings["lmcache-object-names"]["message"]
    mismatch = findings["lmcache-seed-mismatch"]
    assert mismatch["status"] == "pass" and "misses (0/2 hits)" in mismatch["message"]

    stats = json.loads(converged.deploykit("cache", "stats", "-i", "lab", "--json").stdout)
    # one 256-token chunk object: 2 MiB for the full lab model (8 KiB of KV per token)
    group = [g for g in stats["groups"] if g["model"] == name]
    assert group and group[0]["objects"] == 2 and group[0]["bytes"] == 2 * chunk_bytes(), \
        stats["groups"]
    converged.deploykit("cache", "purge", "-i", "lab", "--model",
                        lab_model_on_host(), "--yes")
    after = json.loads(converged.deploykit("cache", "stats", "-i", "lab", "--json").stdout)
    assert not [g for g in after["groups"] if g["model"] == name]
