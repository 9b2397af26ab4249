"""`deploykit bench storage` on the lab: awscrt against boto3 in the same run."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO
from tests.lab.conftest import Lab

pytestmark = pytest.mark.lab


def test_bench_storage_compares_clients_and_spreads_over_gateways(converged: Lab) -> None:
    out = REPO / "runs" / "test-bench-storage"
    # 16 objects: the lab model's 2 MiB chunks are quick; enough requests to use both names
    converged.deploykit("bench", "storage", "-i", "lab", "--threads", "2", "--objects", "16",
                        "--out", str(out))
    result = json.loads((out / "storage.json").read_text())
    rows = {(r["client"], r["op"]): r for r in result["results"]
            if r["target"] == result["name"]}
    per_address = {r["target"] for r in result["results"] if r["target"] != result["name"]
                   and r["op"] == "GET" and r["gb_per_s"] > 0}
    assert per_address == {"10.99.0.11", "10.99.0.12"}
    for client in ("awscrt", "boto3"):
        for op in ("PUT", "GET", "HEAD"):
            assert rows[(client, op)]["count"] > 0 and rows[(client, op)]["ops_per_s"] > 0
    assert rows[("awscrt", "GET")]["kv_tokens_per_s_restorable"] > 0
    # LMCache's client spreads its connections over every address the name returns
    assert set(rows[("awscrt", "GET")]["connections"]) == {"10.99.0.11", "10.99.0.12"}
    assert (out / "storage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(result["other_tools"]) == {"elbencho", "warp"}
