"""The upgrade flow's mechanics on the lab (docs/day2.md#upgrades). The lab's wheelhouse has
one vLLM and one LMCache, so no real version change can run offline: the same flow is
driven by a staged restart (`up --restart-serving --canary lab4 --batch 1`), which rolls
the waves a version change would (canary, verify, next batch, the rest) through the same
code. Proven here: the records keep the versions the flow compares, the canary goes
first and alone, verify runs between the waves, and with nothing to upgrade `up` is one
ordinary run and `plan --upgrade` says so."""

from __future__ import annotations

import json
import re
import time

from tests.lab.conftest import Lab
from tests.lab.vllm_http import SERVING

RECORD = "/var/lib/deploykit/converged.json"


def recorded_versions(lab: Lab, address: str) -> dict:
    record = json.loads(lab.ssh(address, f"cat {RECORD}"))
    versions: dict = record["versions"]
    return versions


def test_the_records_keep_the_versions_and_nothing_is_pending(converged: Lab) -> None:
    for address in SERVING.values():
        versions = recorded_versions(converged, address)
        assert versions["vllm"] and versions["lmcache"]
        assert versions["key_space"]["lmcache_chunk_size"] > 0
    start = time.monotonic()
    converged.deploykit("plan", "-i", "lab")
    offline = time.monotonic() - start
    start = time.monotonic()
    plan = converged.deploykit("plan", "-i", "lab", "--upgrade")
    reading = time.monotonic() - start
    assert "upgrade: none" in plan.stdout, plan.stdout + plan.stderr
    # what the record read adds to every `up` (docs/day2.md#upgrades)
    print(f"plan: {offline:.1f} s; plan --upgrade: {reading:.1f} s")


def test_a_staged_restart_rolls_the_canary_first_and_verifies_each_wave(
        converged: Lab) -> None:
    start = time.monotonic()
    done = converged.deploykit("up", "-i", "lab", "--restart-serving", "--canary", "lab4",
                               "--batch", "1")
    print(f"staged restart of lab4 then lab3, verify after each: "
          f"{time.monotonic() - start:.0f} s")
    out = done.stdout + done.stderr
    waves = re.findall(r"^wave (\d)/(\d): serving (canary|batch), 1 host \((lab\d)\)", out,
                       re.MULTILINE)
    assert waves == [("1", "2", "canary", "lab4"), ("2", "2", "batch", "lab3")], out
    verified = re.findall(r"^verify --limit (lab\d): (.*)$", out, re.MULTILINE)
    assert [host for host, _ in verified] == ["lab4", "lab3"], out
    assert all("fail" not in summary for _, summary in verified), out
    assert "rollout done" in out  # a staged restart; a version change says "upgrade done"
    # the canary's run came first: its run record is older than the batch's
    assert out.index("wave 1/2") < out.index("verify --limit lab4") < out.index("wave 2/2")


def test_with_nothing_to_upgrade_up_is_one_ordinary_run(converged: Lab) -> None:
    start = time.monotonic()
    done = converged.deploykit("up", "-i", "lab")
    print(f"up with nothing to do, the record read included: {time.monotonic() - start:.1f} s")
    out = done.stdout + done.stderr
    assert "wave " not in out and "upgrade:" not in out, out
