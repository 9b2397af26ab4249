"""One S3 identity per model, on the converged lab: a second model's identity, and a key
that belongs to no model's grant (a forged or stray RGW user's), are refused every read,
write and listing of the first model's chunks, which LMCache stored with the first model's
keys; each identity still reads, writes and lists its own prefix.

The lab serves one model. The second model is brought in as `up` would for a site that
serves two: its identity created with the site's marker and the bucket policy deploykit
renders for both (render/s3_access.py), written with the owner's key; both are put back as
they were at the end, and `verify` then passes as before.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from deploy_kit.config.s3_identities import (
    Identity,
    identities,
    legacy_uid,
    serving_slug,
    serving_uid,
)
from deploy_kit.ops.site import open_site
from deploy_kit.render.s3_access import bucket_policy
from deploy_kit.transport.sigv4 import Credentials, request
from deploy_kit.verify.checks.s3_privilege import ISOLATION
from deploy_kit.verify.model import CHECKS, IsolationProbe, Observation, Status
from deploy_kit.verify.probes import privilege_probe
from deploy_kit.verify.probes.s3_probe import listing
from tests.lab.conftest import CEPH_CONF, LAB_INVENTORY, Lab, lab_model_on_host
from tests.lab.rgw_admin import admin, keys_of
from tests.lab.vllm_http import SERVING, complete

pytestmark = pytest.mark.lab

GATEWAY, BUCKET, HOST = "10.99.0.11", "lmcache", "lmcache.s3.lab.test"
CREDENTIALS = "/etc/deploykit/aws/credentials"
SECOND_MODEL = "lab-second/tiny-model"  # a model the lab does not serve: only its identity
FORGED = "deploykit-lab-forged"  # an RGW user no policy statement names




def s3(creds: Credentials, method: str, key: str = "", body: bytes = b"", query: str = "",
       unsigned: dict[str, str] | None = None) -> tuple[int, bytes]:
    return request(GATEWAY, 80, method, "/" + quote(key, safe="-_.~/"), HOST, "default",
                   creds, body, query=query, timeout=30, unsigned=unsigned)


def host_keys(lab: Lab, address: str) -> Credentials:
    """The keys a serving host's LMCache signs with (its 0600 AWS profile)."""
    lines = dict(line.split(" = ", 1) for line in lab.ssh(address, f"cat {CREDENTIALS}")
                 .splitlines() if " = " in line)
    return Credentials(lines["aws_access_key_id"].strip(), lines["aws_secret_access_key"].strip())


def stored_chunk(creds: Credentials, prefix: str) -> str:
    """A chunk LMCache stored under `prefix`: a long prompt to lab3, then the first key its
    LMCache server wrote (listed with the first model's own keys)."""
    complete(SERVING["lab3"], [(7 * i) % 250 + 3 for i in range(256 * 3 + 5)])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status, body = s3(creds, "GET", query=listing(prefix))
        assert status == 200, body[:300]
        if b"<Key>" in body:
            return body.split(b"<Key>")[1].split(b"</Key>")[0].decode()
        time.sleep(3)
    raise AssertionError(f"no chunk under {prefix!r} after 120 s")


@pytest.fixture
def two_models(converged: Lab) -> Iterator[dict[str, object]]:
    """The second model's identity and the policy for both; then the lab as it was."""
    site = open_site(str(LAB_INVENTORY))
    (first,) = identities(site)
    owner = keys_of("lmcache")
    uid = serving_uid("lmcache", SECOND_MODEL)
    second = Identity(uid, SECOND_MODEL, serving_slug("lmcache", SECOND_MODEL),
                      (SECOND_MODEL.replace("/", "_") + "@",), ("lab-second",))
    status, before = s3(owner, "GET", query="policy=")
    assert status == 200, before[:300]
    made: list[str] = []
    try:
        for name, display in ((uid, "LMCache KV cache (serving hosts) [deploykit-site=lab]"),
                              (FORGED, "someone's stray key")):
            admin("user", "create", "--uid", name, "--display-name", display)
            made.append(name)
        policy = bucket_policy(BUCKET, [first, second], legacy_uid("lmcache"))
        assert s3(owner, "PUT", body=json.dumps(policy).encode(), query="policy=")[0] in (
            200, 204)
        yield {"first": first, "second": second, "owner": owner}
    finally:
        s3(owner, "PUT", body=before, query="policy=")
        for name in made:
            subprocess.run(["radosgw-admin", "--conf", CEPH_CONF, "user", "rm", "--uid", name],
                           capture_output=True, timeout=60)


def test_the_old_site_wide_identity_is_gone_and_hosts_hold_their_models(converged: Lab
                                                                       ) -> None:
    gone = subprocess.run(["radosgw-admin", "--conf", CEPH_CONF, "user", "info", "--uid",
                           "lmcache-serving"], capture_output=True, timeout=60)
    assert gone.returncode != 0  # `up` deleted it
    (first,) = identities(open_site(str(LAB_INVENTORY)))
    assert first.model == lab_model_on_host()
    expected = keys_of(first.uid).access_key
    for name, address in SERVING.items():
        assert host_keys(converged, address).access_key == expected, name


def test_another_models_identity_and_a_forged_key_are_refused_on_the_first_models_chunks(
        converged: Lab, two_models: dict[str, object]) -> None:
    first, second = two_models["first"], two_models["second"]
    assert isinstance(first, Identity) and isinstance(second, Identity)
    mine = host_keys(converged, SERVING["lab3"])
    chunk = stored_chunk(mine, first.prefixes[0])
    status, original = s3(mine, "GET", chunk)
    assert status == 200 and original
    for who, creds in (("second model", keys_of(second.uid)), ("forged", keys_of(FORGED))):
        assert s3(creds, "GET", chunk)[0] == 403, who
        assert s3(creds, "HEAD", chunk)[0] == 403, who
        assert s3(creds, "PUT", chunk, b"poisoned KV")[0] == 403, who
        assert s3(creds, "POST", chunk, query="uploads=")[0] == 403, who
        assert s3(creds, "PUT", f"{first.prefixes[0]}1@0@planted@bfloat16", b"x")[0] == 403
        for prefix in (*first.prefixes, ""):
            assert s3(creds, "GET", query=listing(prefix))[0] == 403, (who, prefix)
        lease = f"deploykit-lease/{first.slug}/serving-restart/site/heal-0.999999999999"
        assert s3(creds, "PUT", lease, b"{}")[0] == 403, who
    assert s3(mine, "GET", chunk) == (200, original)  # the chunk as LMCache stored it
    # each is allowed on its own prefix, and the first model's keys are refused on the second's
    other = keys_of(second.uid)
    own = f"{second.prefixes[0]}1@0@6c0ffee@bfloat16"
    assert s3(other, "PUT", own, b"kv")[0] == 200
    assert s3(other, "GET", query=listing(second.prefixes[0]))[0] == 200
    assert s3(mine, "GET", own)[0] == 403 and s3(mine, "PUT", own, b"poison")[0] == 403
    assert s3(mine, "GET", query=listing(second.prefixes[0]))[0] == 403
    owner = two_models["owner"]
    assert isinstance(owner, Credentials)
    assert s3(owner, "DELETE", own)[0] == 204  # the owner cleans up (nobody else may)
    # verify's probe says the same, and would say FAIL were it allowed
    found = privilege_probe.isolation(
        GATEWAY, 80, HOST, "default",
        IsolationProbe(second.uid, "lab-second", second.prefixes[0], first.uid,
                       first.prefixes[0]), other, chunk)
    assert found.refused and set(found.refused.values()) == {403}, found
    obs = Observation(fqdn="s3.lab.test", bucket=BUCKET, region="default", rgw_addresses=[],
                      dns_servers=[], expected_pools=[], expected_rgw_daemons=0,
                      expected_lifecycle={}, pinned={}, isolation=[found])
    assert [f.status for f in CHECKS[ISOLATION].evaluate(obs)] == [Status.PASS]


def test_verify_passes_after_the_second_model_is_gone(converged: Lab) -> None:
    result = converged.deploykit("verify", "--inventory", "lab", "--json", "--check",
                                 "s3-serving-least-privilege", "--check",
                                 "s3-credentials-valid", check=False)
    findings = json.loads(result.stdout)["findings"]
    assert result.returncode == 0 and findings, findings
    assert all(f["status"] == "pass" for f in findings), findings
