"""`deploykit cache stats|purge` against the lab bucket, with objects named as LMCache
names them (the round trip of the serving issue stores real ones)."""

from __future__ import annotations

import json
import os
import urllib.parse

import pytest

from deploy_kit.cache.store import open_bucket
from deploy_kit.config.open import open_site
from deploy_kit.transport.sigv4 import request
from tests.conftest import REPO
from tests.lab.conftest import Lab

pytestmark = pytest.mark.lab

KEYS = [f"Qwen_Qwen3-8B@2@{rank}@{h}@bfloat16" for h in ("1be814944da4012e", "-d07e2091d48598c")
        for rank in (0, 1)] + ["meta-llama_Llama-3.1-8B-Instruct@1@0@abc123@bfloat16"]


def test_cache_stats_and_purge(converged: Lab) -> None:
    bucket = open_bucket(open_site(str(REPO / "inventory" / "lab")))
    for key in KEYS:
        status, _ = request(bucket.address, bucket.port, "PUT",
                            "/" + urllib.parse.quote(key, safe="-_.~"), bucket.host,
                            bucket.region, bucket.credentials, os.urandom(4096))
        assert status == 200
    stats = json.loads(converged.deploykit("cache", "stats", "-i", "lab", "--json").stdout)
    groups = {(g["model"], g["world_size"]): g for g in stats["groups"]}
    qwen = groups[("Qwen_Qwen3-8B", 2)]
    assert (qwen["objects"], qwen["chunks"], qwen["bytes"]) == (4, 2, 4 * 4096)
    assert groups[("meta-llama_Llama-3.1-8B-Instruct", 1)]["objects"] == 1
    refused = converged.deploykit("cache", "purge", "-i", "lab", "--model", "Qwen/Qwen3-8B",
                                  check=False)
    assert refused.returncode == 2  # no terminal and no --yes: nothing deleted
    purged = converged.deploykit("cache", "purge", "-i", "lab", "--model", "Qwen/Qwen3-8B",
                                 "--yes")
    assert "deleted 4 of 4" in purged.stderr
    after = json.loads(converged.deploykit("cache", "stats", "-i", "lab", "--json").stdout)
    assert [(g["model"], g["objects"]) for g in after["groups"]] == \
        [("meta-llama_Llama-3.1-8B-Instruct", 1)]
    converged.deploykit("cache", "purge", "-i", "lab", "--model",
                        "meta-llama/Llama-3.1-8B-Instruct", "--yes")
