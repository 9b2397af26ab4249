"""Two teams on one tier, for real: lab3 serves team alpha and lab4 team beta, one model,
each team with its own RGW identity, bucket and cache_salt, and every chunk encrypted at
rest (lmcache_l2_encryption).

What only the mechanism under test can pass:
- a chunk alpha's LMCache stored is ciphertext in alpha's bucket (version byte 0x01, does
  not compress) and is read back after the LMCache server restarts (L1 empty: the hit comes
  from S3 through the decryption);
- beta's prompt with alpha's prefix and beta's salt hits nothing, on beta's host and on
  alpha's, while alpha's salt hits;
- alpha's keys are refused every read, write and listing of beta's bucket;
- `verify` passes its team-isolation and encryption checks;
- a second `up --full` changes nothing.
"""

from __future__ import annotations

import json
import random
import time
import urllib.request
import zlib
from urllib.parse import quote

import pytest

from deploy_kit.transport import openai as oa
from deploy_kit.transport.sigv4 import Credentials, request
from tests.lab.conftest import Lab, lab_model
from tests.lab.rgw_admin import keys_of
from tests.lab.vllm_http import SERVING, get, headers

pytestmark = pytest.mark.lab

GATEWAY, OWNER = "10.99.0.11", "lmcache"
ALPHA, BETA = "alpha", "beta"
BUCKET = {ALPHA: "lmcache-alpha", BETA: "lmcache-beta"}  # <deploykit_s3_bucket>-<team>
HOST_OF = {ALPHA: "lab3", BETA: "lab4"}
FRAME = 29  # aesgcm: 1 version byte + 12 IV + 16 tag
CHUNK = 256  # the lab's lmcache_chunk_size




def s3(creds: Credentials, bucket: str, method: str, key: str = "", body: bytes = b"",
       query: str = "") -> tuple[int, bytes]:
    return request(GATEWAY, 80, method, "/" + quote(key, safe="-_.~/"),
                   f"{bucket}.s3.lab.test", "default", creds, body, query=query, timeout=30)


def listing(prefix: str = "") -> str:
    """ListObjectsV2, up to 1000 keys, as SigV4 signs the query (sorted, encoded)."""
    return "list-type=2&max-keys=1000" + (f"&prefix={quote(prefix, safe='-_.~')}"
                                          if prefix else "")


def keys_in(creds: Credentials, bucket: str) -> list[str]:
    status, body = s3(creds, bucket, "GET", query=listing())
    assert status == 200, body[:300]
    return [part.split(b"</Key>")[0].decode() for part in body.split(b"<Key>")[1:]]


def prompt(seed: int) -> list[int]:
    """Three full chunks of tokens no other test (nor an earlier run on this lab) sends."""
    rng = random.Random(f"{seed}-{time.time_ns()}")
    return [rng.randrange(3, 250) for _ in range(CHUNK * 3 + 5)]


def hits(address: str, port: int, tokens: list[int], salt: str) -> int:
    """Send `tokens` with `salt` as cache_salt; the tokens LMCache (the external connector)
    answered for it."""
    before = oa.metrics(address, port, _key(address))
    body = json.dumps({"model": lab_model().name, "prompt": tokens, "max_tokens": 2,
                       "temperature": 0, "cache_salt": salt}).encode()
    req = urllib.request.Request(f"http://{address}:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json",
                                          **headers(address)})
    with urllib.request.urlopen(req, timeout=300) as response:
        assert response.status == 200
    found = oa.delta(before, oa.metrics(address, port, _key(address)))
    assert found is not None
    return found.external


def _key(address: str) -> str | None:
    auth = headers(address).get("Authorization", "")
    return auth.removeprefix("Bearer ") or None


def wait_healthy(address: str, port: int, timeout: float = 600) -> None:
    time.sleep(5)  # the restart has begun
    deadline = time.monotonic() + timeout
    while get(f"http://{address}:{port}/health") != 200:
        assert time.monotonic() < deadline, f"{address}:{port} not healthy after {timeout} s"
        time.sleep(3)


def wait_for_keys(creds: Credentials, bucket: str, suffix: str, at_least: int) -> list[str]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = [k for k in keys_in(creds, bucket) if k.endswith("@" + suffix)]
        if len(found) >= at_least:
            return found
        time.sleep(3)
    raise AssertionError(f"fewer than {at_least} chunks salted {suffix} in {bucket}")


def test_each_teams_salt_keys_its_own_chunks_and_another_salt_hits_none(converged: Lab
                                                                        ) -> None:
    owner = keys_of(OWNER)
    tokens = prompt(47)
    alpha, beta = SERVING[HOST_OF[ALPHA]], SERVING[HOST_OF[BETA]]
    assert hits(alpha, 8000, tokens, ALPHA) == 0  # cold
    stored = wait_for_keys(owner, BUCKET[ALPHA], ALPHA, 3)
    assert not [k for k in keys_in(owner, BUCKET[BETA]) if k in stored]
    # alpha's other instance, the same LMCache server: alpha's salt hits
    assert hits(alpha, 8001, tokens, ALPHA) >= CHUNK * 3
    # beta's salt with alpha's prefix: nothing, on alpha's host or on beta's
    assert hits(alpha, 8001, tokens, BETA) == 0
    assert hits(beta, 8000, tokens, BETA) == 0
    # beta's host wrote beta-salted chunks, into beta's bucket only
    wait_for_keys(owner, BUCKET[BETA], BETA, 3)
    assert not [k for k in keys_in(owner, BUCKET[BETA]) if k.endswith("@" + ALPHA)]


def test_a_stored_chunk_is_ciphertext_and_reads_back_after_a_server_restart(converged: Lab
                                                                            ) -> None:
    owner = keys_of(OWNER)
    tokens = prompt(53)
    alpha = SERVING[HOST_OF[ALPHA]]
    assert hits(alpha, 8000, tokens, ALPHA) == 0
    key = wait_for_keys(owner, BUCKET[ALPHA], ALPHA, 1)[0]
    # read with the team's keys: RGW answers the bucket owner 403 on an object another
    # user (the team's identity) wrote; the owner lists, and `down` purges as admin
    mine = keys_of(f"{OWNER}-team-{ALPHA}")
    assert s3(owner, BUCKET[ALPHA], "GET", key)[0] == 403
    status, blob = s3(mine, BUCKET[ALPHA], "GET", key)
    assert status == 200 and blob[0] == 0x01, blob[:16]
    # KV in bf16/fp32 compresses; AES-GCM output does not
    assert len(zlib.compress(blob, 6)) > 0.99 * len(blob), len(blob)
    sizes = {len(s3(mine, BUCKET[ALPHA], "GET", k)[1])
             for k in wait_for_keys(owner, BUCKET[ALPHA], ALPHA, 3)[:3]}
    assert len(sizes) == 1 and (sizes.pop() - FRAME) % CHUNK == 0  # plaintext + frame
    # L1 gone: the hit can only come from S3, decrypted with the key derived for alpha
    converged.ssh(alpha, "systemctl restart lmcache-server")
    # its vLLM units restart with it (systemd): the session goes on once both answer again
    for port in (8000, 8001):
        wait_healthy(alpha, port)
    deadline = time.monotonic() + 300
    while True:
        try:
            got = hits(alpha, 8000, tokens, ALPHA)
        except OSError:
            got = -1
        if got >= CHUNK * 3 or time.monotonic() > deadline:
            break
        time.sleep(10)
    assert got >= CHUNK * 3, got


def test_a_teams_keys_are_refused_on_the_other_teams_bucket(converged: Lab) -> None:
    owner = keys_of(OWNER)
    alpha_keys = keys_of(f"{OWNER}-team-{ALPHA}")
    assert hits(SERVING[HOST_OF[BETA]], 8000, prompt(59), BETA) == 0
    theirs = wait_for_keys(owner, BUCKET[BETA], BETA, 1)[0]
    assert s3(alpha_keys, BUCKET[BETA], "GET", theirs)[0] == 403
    assert s3(alpha_keys, BUCKET[BETA], "PUT", theirs, b"poisoned KV")[0] == 403
    assert s3(alpha_keys, BUCKET[BETA], "GET", query=listing(""))[0] == 403
    assert s3(alpha_keys, BUCKET[BETA], "DELETE", theirs)[0] == 403
    # and its own bucket is its own
    assert s3(alpha_keys, BUCKET[ALPHA], "GET", query=listing(""))[0] == 200


def test_the_teams_quota_is_set_on_its_lmcache_server(converged: Lab) -> None:
    for team, host in HOST_OF.items():
        out = converged.ssh(SERVING[host], "python3 -c \"import urllib.request;print("
                            "urllib.request.urlopen('http://127.0.0.1:6556/quota/"
                            f"{team}').read().decode())\"")
        found = json.loads(out)
        assert found["exists"] is True and found["limit_gb"] > 0, (team, found)


def test_verify_passes_team_isolation_and_encryption(converged: Lab) -> None:
    result = converged.deploykit("verify", "--inventory", "lab", "--json", check=False)
    findings = json.loads(result.stdout)["findings"]
    assert result.returncode == 0, [f for f in findings if f["status"] == "fail"]
    checks = {f["check"]: f["status"] for f in findings}
    for check in ("team-isolation", "encryption"):
        assert checks.get(check) == "pass", (check, [f for f in findings
                                                     if f["check"] == check])


def test_a_second_full_run_changes_nothing(converged: Lab) -> None:
    """Teams' buckets, identities and quotas, the key file and the quota at each start:
    a second `up --full` finds everything as the first left it."""
    again = converged.converge("--full")
    assert again["rc"] == 0 and not again["failed"], again["failed"]
    assert again["changed"] == 0, again.get("changed_tasks")
