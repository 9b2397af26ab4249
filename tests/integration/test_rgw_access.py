"""The cache bucket's identities on a real Ceph + radosgw on loopback (test_rgw_loopback's
cluster fixture): the modules the ceph_rgw_s3 role runs create a marked owner and two
models' serving users, the bucket with its tag, lifecycle, policy and quota; each model's
identity then gets, puts and lists its own model's keys, is refused every one of the other
model's (read, write, list) and every bucket-level change; what deploykit did not create
is neither adopted nor deleted; a second run and check mode change nothing.

Run only inside both locks (the lab's Ceph and the other integration daemons), as
test_rgw_loopback.py.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from deploy_kit.config.s3_identities import Identity, legacy_uid, serving_uid, team_uid
from deploy_kit.render.s3_access import bucket_policy
from deploy_kit.transport.sigv4 import Credentials, request
from deploy_kit.verify.checks.s3_privilege import CHECK, ISOLATION
from deploy_kit.verify.model import CHECKS, IsolationProbe, Observation, Status
from deploy_kit.verify.probes import privilege_probe
from deploy_kit.verify.probes.s3_probe import listing
from tests.integration.test_rgw_loopback import (  # noqa: F401  (the cluster fixture)
    ADDRESS,
    BUCKET,
    FQDN,
    PORT,
    Loopback,
    loopback,
)
from tests.tools import ansible_module

OWNER, CACHE, MARK = "dk-owner", "dk-cache", "deploykit-site=loop"
# two models in two layouts: the in-process connector's (`/` as `_`) and the server's (as is)
MODEL_A, MODEL_B = "Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B"


def _identity(model: str, prefix: str, host: str) -> Identity:
    uid = serving_uid(OWNER, model)
    return Identity(uid, model, uid.removeprefix(f"{OWNER}-serving-"), (prefix,), (host,))


A = _identity(MODEL_A, "Qwen_Qwen3-8B@", "gpu1")
B = _identity(MODEL_B, "meta-llama/Llama-3.1-8B@", "gpu2")
CHUNK_A = "Qwen_Qwen3-8B@1@0@1be814944da4012e@bfloat16"
CHUNK_B = "meta-llama/Llama-3.1-8B@01000100@0@6c0ffee0ddba11"
LIFECYCLE = {"Rules": [{"ID": "deploykit-expire-kv", "Status": "Enabled",
                        "Filter": {"Prefix": ""}, "Expiration": {"Days": 1},
                        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}]}


def admin(conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["radosgw-admin", "--conf", str(conf), *args], capture_output=True,
                          text=True, timeout=60)


def user(conf: Path, uid: str) -> dict[str, Any] | None:
    done = admin(conf, "user", "info", "--uid", uid)
    return json.loads(done.stdout) if done.returncode == 0 else None


def s3(creds: Credentials, method: str, path: str, bucket: str = CACHE, body: bytes = b"",
       query: str = "") -> tuple[int, bytes]:
    return request(ADDRESS, PORT, method, urllib.parse.quote(path, safe="-_.~/"),
                   f"{bucket}.{FQDN}", "default", creds, body, query=query)


def owner_args(conf: Path, uid: str, **more: Any) -> dict[str, Any]:
    return {"conf": str(conf), "uid": uid, "display_name": "deploykit test", "marker": MARK,
            **more}


def bucket_args(keys: dict[str, str], **more: Any) -> dict[str, Any]:
    return {"endpoint": f"http://{ADDRESS}:{PORT}", "access_key": "{{ k_access }}",
            "secret_key": "{{ k_secret }}", "bucket": CACHE, "lifecycle": LIFECYCLE,
            "policy": bucket_policy(CACHE, [A, B], legacy_uid(OWNER)),
            "tags": {"deploykit-site": "loop"}, **more}


def secrets(keys: dict[str, str]) -> dict[str, str]:
    return {"k_access": keys["access_key"], "k_secret": keys["secret_key"]}


@pytest.fixture(scope="module")
def identities(loopback: Loopback, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
               ) -> dict[str, Credentials]:
    """Owner and serving user, the bucket with tag, lifecycle and policy, as `up` makes them."""
    conf, tmp = loopback.conf, tmp_path_factory.mktemp("access")
    # check mode first: reports the creation, creates nothing
    planned = ansible_module("deploykit_rgw_user", owner_args(conf, OWNER), check=True)
    assert planned["changed"] is True and user(conf, OWNER) is None
    owner = ansible_module("deploykit_rgw_user", owner_args(conf, OWNER))
    assert owner["changed"] is True and owner["keys"]["access_key"]
    info = user(conf, OWNER)
    assert info is not None and info["display_name"] == f"deploykit test [{MARK}]"
    again = ansible_module("deploykit_rgw_user", owner_args(conf, OWNER))
    assert (again["changed"], again["marked"], again["keys"]) == (False, True, owner["keys"])
    serving = {i.uid: ansible_module("deploykit_rgw_user", owner_args(conf, i.uid,
                                                                      max_buckets=-1))
               for i in (A, B, Identity(legacy_uid(OWNER), "", "", (), ()))}
    assert all(r["changed"] for r in serving.values())
    assert user(conf, A.uid)["max_buckets"] == -1  # type: ignore[index]
    keys = owner["keys"]
    first = ansible_module("deploykit_s3_bucket", bucket_args(keys), secrets=secrets(keys),
                           tmp=tmp)
    assert first["changed"] and first["created"] and first["policy_changed"], first
    second = ansible_module("deploykit_s3_bucket", bucket_args(keys), secrets=secrets(keys),
                            tmp=tmp)
    assert not second["changed"], second  # RGW's copy of the policy compares equal
    # check mode with another policy: reported, not written
    other = bucket_args(keys)
    other["policy"]["Statement"] = other["policy"]["Statement"][:1]
    checked = ansible_module("deploykit_s3_bucket", other, check=True, secrets=secrets(keys),
                             tmp=tmp)
    assert checked["changed"] and checked["policy_changed"], checked
    assert not ansible_module("deploykit_s3_bucket", bucket_args(keys), secrets=secrets(keys),
                              tmp=tmp)["changed"]
    return {"owner": Credentials(keys["access_key"], keys["secret_key"]),
            **{name: Credentials(serving[uid]["keys"]["access_key"],
                                 serving[uid]["keys"]["secret_key"])
               for name, uid in (("a", A.uid), ("b", B.uid), ("legacy", legacy_uid(OWNER)))}}


def test_serving_identity_reads_and_writes_objects(identities: dict[str, Credentials]) -> None:
    creds = identities["a"]
    key = f"/{CHUNK_A}"
    assert s3(creds, "PUT", key, body=b"kv" * 4096)[0] == 200
    assert s3(creds, "HEAD", key)[0] == 200
    status, body = s3(creds, "GET", key)
    assert (status, body) == (200, b"kv" * 4096)
    # a lookup miss is a 403: no s3:ListBucket outside listings of its own prefix, so that
    # no identity learns from a 404 which keys another model holds (render/s3_access.py)
    assert s3(creds, "HEAD", "/Qwen_Qwen3-8B@1@0@0000000000000000@bfloat16")[0] == 403
    assert s3(creds, "HEAD", "/")[0] == 403  # HEAD of the bucket: a listing right too
    # LMCache's managed upload: initiate, then abort (its failure path)
    status, body = s3(creds, "POST", key, query="uploads=")
    assert status == 200, body
    upload = body.split(b"<UploadId>")[1].split(b"</UploadId>")[0].decode()
    assert s3(creds, "DELETE", key, query=f"uploadId={upload}")[0] == 204
    # but never delete a chunk, and own no bucket of its own
    assert s3(creds, "DELETE", key)[0] == 403
    assert s3(creds, "PUT", "/", bucket="dk-serving-own")[0] != 200
    # its own listing and lease; the server layout (a `/` in the key) for the other model
    assert s3(creds, "GET", "/", query=listing(A.prefixes[0]))[0] == 200
    assert s3(creds, "PUT", f"/deploykit-lease/{A.slug}/serving-restart.000000000001",
              body=b"{}")[0] == 200
    assert s3(identities["b"], "PUT", f"/{CHUNK_B}", body=b"vk" * 4096)[0] == 200


def test_a_models_identity_is_refused_on_another_models_keys(
        identities: dict[str, Credentials]) -> None:
    """A's keys (a host of model A, compromised) against B's chunk: no read, no overwrite,
    no listing, no lease; and the site-wide identity of old releases has no right left."""
    a, b = identities["a"], identities["b"]
    assert s3(b, "PUT", f"/{CHUNK_B}", body=b"vk" * 4096)[0] == 200
    for creds, key in ((a, CHUNK_B), (b, CHUNK_A), (identities["legacy"], CHUNK_A)):
        assert s3(creds, "GET", f"/{key}")[0] == 403
        assert s3(creds, "HEAD", f"/{key}")[0] == 403
        assert s3(creds, "PUT", f"/{key}", body=b"poison")[0] == 403
        assert s3(creds, "POST", f"/{key}", query="uploads=")[0] == 403
    # a miss in another model's prefix is a 403 too: no oracle of which keys it holds
    assert s3(a, "HEAD", "/meta-llama/Llama-3.1-8B@01000100@0@00")[0] == 403
    for prefix in (B.prefixes[0], "", "meta", "Qwen_Qwen3-8B"):  # "Qwen_Qwen3-8B": not A's
        assert s3(a, "GET", "/", query=listing(prefix))[0] == 403, prefix
    assert s3(a, "PUT", f"/deploykit-lease/{B.slug}/serving-restart.000000000001",
              body=b"{}")[0] == 403
    assert s3(identities["legacy"], "GET", "/", query=listing(""))[0] == 403
    status, body = s3(b, "GET", f"/{CHUNK_B}")
    assert (status, body) == (200, b"vk" * 4096)  # B's chunk as B wrote it


def test_a_listing_right_beyond_the_prefix_would_be_an_oracle(
        identities: dict[str, Credentials]) -> None:
    """Why a miss is 403 (render/s3_access.py): with s3:ListBucket granted outside listings
    (what a 404 for a miss needs), RGW answers A's HEAD of a key B never stored 404 and of
    one B stored 403, which tells A what B holds. Measured, then the policy put back."""
    owner, a, b = identities["owner"], identities["a"], identities["b"]
    assert s3(b, "PUT", f"/{CHUNK_B}", body=b"vk" * 4096)[0] == 200
    missing = "/meta-llama/Llama-3.1-8B@01000100@0@00"
    status, before = s3(owner, "GET", "/", query="policy=")
    assert status == 200
    wider = bucket_policy(CACHE, [A, B], legacy_uid(OWNER))
    wider["Statement"].append({
        "Sid": "misses", "Effect": "Allow", "Principal": {"AWS": [
            f"arn:aws:iam:::user/{A.uid}", f"arn:aws:iam:::user/{B.uid}"]},
        "Action": ["s3:ListBucket"], "Resource": [f"arn:aws:s3:::{CACHE}"],
        "Condition": {"Null": {"s3:max-keys": "true"}}})  # any request but a listing
    try:
        assert s3(owner, "PUT", "/", body=json.dumps(wider).encode(),
                  query="policy=")[0] in (200, 204)
        assert (s3(a, "HEAD", missing)[0], s3(a, "HEAD", f"/{CHUNK_B}")[0]) == (404, 403)
    finally:
        assert s3(owner, "PUT", "/", body=before, query="policy=")[0] in (200, 204)
    assert (s3(a, "HEAD", missing)[0], s3(a, "HEAD", f"/{CHUNK_B}")[0]) == (403, 403)


def test_verify_proves_the_isolation_and_fails_without_it(
        identities: dict[str, Credentials]) -> None:
    """verify's probe: A's keys against B's stored chunk, and an allowed write is harmless
    (the owner's keys, which may write anywhere: RGW answers the invalid Content-MD5 400 and
    stores nothing)."""
    host = f"{CACHE}.{FQDN}"
    target = privilege_probe.first_key(ADDRESS, PORT, host, "default", identities["b"],
                                       B.prefixes[0])
    assert target == CHUNK_B
    found = privilege_probe.isolation(
        ADDRESS, PORT, host, "default",
        IsolationProbe(A.uid, "gpu1", A.prefixes[0], B.uid, B.prefixes[0]),
        identities["a"], target)
    assert found.own_list == 200 and found.error is None, found
    assert found.refused == {"GET": 403, "HEAD": 403, "HEAD (a missing key)": 403,
                             "PUT": 403, "LIST": 403, "LIST (no prefix)": 403}, found
    obs = Observation(fqdn=FQDN, bucket=CACHE, region="default", rgw_addresses=[ADDRESS],
                      dns_servers=[], expected_pools=[], expected_rgw_daemons=1,
                      expected_lifecycle=LIFECYCLE, pinned={}, isolation=[found])
    assert [f.status for f in CHECKS[ISOLATION].evaluate(obs)] == [Status.PASS]
    before = s3(identities["b"], "GET", f"/{CHUNK_B}")
    allowed = privilege_probe.isolation(
        ADDRESS, PORT, host, "default",
        IsolationProbe(OWNER, "adm1", A.prefixes[0], B.uid, B.prefixes[0]),
        identities["owner"], target)
    # past the permission check: the listing answers, the PUT stops at the digest (the owner
    # may not read B's object: B uploaded it, so B owns it)
    assert (allowed.refused["PUT"], allowed.refused["LIST"]) == (400, 200), allowed
    assert s3(identities["b"], "GET", f"/{CHUNK_B}") == before  # nothing written
    obs.isolation = [allowed]
    failed = [f for f in CHECKS[ISOLATION].evaluate(obs) if f.status == Status.FAIL]
    assert failed and "PUT HTTP 400" in failed[0].message, failed


def test_serving_identity_is_refused_every_bucket_change(
        loopback: Loopback, identities: dict[str, Credentials]) -> None:  # noqa: F811
    found = privilege_probe.probe(ADDRESS, PORT, f"{CACHE}.{FQDN}", "default",
                                  identities["a"], "gpu1", own_prefix=A.prefixes[0])
    assert (found.put, found.get, found.head_missing, found.cleanup) == (200, 200, 403, 204)
    assert found.refused == {"PutBucketPolicy": 403, "PutBucketLifecycle": 403,
                             "DeleteBucket": 403, "DeleteObject (a chunk)": 403}, found
    obs = Observation(fqdn=FQDN, bucket=CACHE, region="default", rgw_addresses=[ADDRESS],
                      dns_servers=[], expected_pools=[], expected_rgw_daemons=1,
                      expected_lifecycle=LIFECYCLE, pinned={}, privilege=found)
    assert [f.status for f in CHECKS[CHECK].evaluate(obs)] == [Status.PASS]


def test_the_probe_is_harmless_with_keys_that_may_change_the_bucket(
        loopback: Loopback, identities: dict[str, Credentials]) -> None:  # noqa: F811
    """The owner's keys on a serving host (what deploykit shipped before): every probe
    request is accepted past the permission check, changes nothing, and the check fails."""
    owner = identities["owner"]
    policy_before = s3(owner, "GET", "/", query="policy=")
    lifecycle_before = s3(owner, "GET", "/", query="lifecycle=")
    found = privilege_probe.probe(ADDRESS, PORT, f"{CACHE}.{FQDN}", "default", owner, "gpu1")
    assert found.refused["PutBucketPolicy"] == 400  # MalformedPolicy: nothing written
    assert found.refused["PutBucketLifecycle"] == 400  # MalformedXML
    assert found.refused["DeleteBucket"] == 409  # BucketNotEmpty: the probe's object
    assert found.refused["DeleteObject (a chunk)"] == 204  # a key that never existed
    assert s3(owner, "GET", "/", query="policy=") == policy_before
    assert s3(owner, "GET", "/", query="lifecycle=") == lifecycle_before
    assert s3(owner, "HEAD", "/")[0] == 200
    obs = Observation(fqdn=FQDN, bucket=CACHE, region="default", rgw_addresses=[ADDRESS],
                      dns_servers=[], expected_pools=[], expected_rgw_daemons=1,
                      expected_lifecycle=LIFECYCLE, pinned={}, privilege=found)
    failed = [f.message for f in CHECKS[CHECK].evaluate(obs) if f.status == Status.FAIL]
    assert any("PutBucketPolicy HTTP 400" in m for m in failed), failed
    assert any("answered 404, not 403" in m for m in failed), failed  # lists everything


def test_quota_set_once_and_checked(loopback: Loopback,  # noqa: F811
                                    identities: dict[str, Credentials]) -> None:
    conf, args = str(loopback.conf), {"conf": str(loopback.conf), "bucket": CACHE}
    set_ = ansible_module("deploykit_rgw_bucket_quota", {**args, "max_size": 1 << 30})
    assert set_["changed"] is True, set_
    quota = json.loads(admin(Path(conf), "bucket", "stats", "--bucket", CACHE).stdout)
    assert (quota["bucket_quota"]["enabled"], quota["bucket_quota"]["max_size"]) == \
        (True, 1 << 30)
    assert ansible_module("deploykit_rgw_bucket_quota",
                          {**args, "max_size": 1 << 30})["changed"] is False
    planned = ansible_module("deploykit_rgw_bucket_quota", {**args, "max_size": 2 << 30},
                             check=True)
    assert planned["changed"] is True
    quota = json.loads(admin(Path(conf), "bucket", "stats", "--bucket", CACHE).stdout)
    assert quota["bucket_quota"]["max_size"] == 1 << 30
    # a size that is no multiple of 1 KiB (plan's, with the encryption frame): RGW rounds
    # it up, and the next run compares the rounded value (nothing to change)
    odd = (1 << 30) + 29
    assert ansible_module("deploykit_rgw_bucket_quota", {**args, "max_size": odd})["changed"]
    assert json.loads(admin(Path(conf), "bucket", "stats", "--bucket", CACHE).stdout)[
        "bucket_quota"]["max_size"] == (1 << 30) + 1024
    assert ansible_module("deploykit_rgw_bucket_quota",
                          {**args, "max_size": odd})["changed"] is False
    # the bound holds: an object larger than a tiny quota is refused
    ansible_module("deploykit_rgw_bucket_quota", {**args, "max_size": 4096})
    assert s3(identities["a"], "PUT", f"/{A.prefixes[0]}too-big", body=b"x" * 65536)[0] == 403
    off = ansible_module("deploykit_rgw_bucket_quota", {**args, "max_size": 0})
    assert off["changed"] is True
    assert json.loads(admin(Path(conf), "bucket", "stats", "--bucket", CACHE).stdout)[
        "bucket_quota"]["enabled"] is False


def test_what_deploykit_did_not_create_is_neither_adopted_nor_deleted(
        loopback: Loopback, tmp_path: Path) -> None:  # noqa: F811
    """The fixture's user and bucket `lmcache` were made by hand, without the marker."""
    conf = loopback.conf
    before = user(conf, BUCKET)
    refused = ansible_module("deploykit_rgw_user", owner_args(conf, BUCKET), ok=False)
    assert "not adopted" in refused["msg"] and "keys" not in refused
    assert user(conf, BUCKET) == before
    keys = {"access_key": loopback.credentials.access_key,
            "secret_key": loopback.credentials.secret_key}
    untagged = ansible_module("deploykit_s3_bucket", {**bucket_args(keys), "bucket": BUCKET},
                              secrets=secrets(keys), tmp=tmp_path, ok=False)
    assert "not adopted" in untagged["msg"]
    assert s3(loopback.credentials, "GET", "/", bucket=BUCKET, query="lifecycle=")[0] == 404
    kept = ansible_module("deploykit_rgw_user", owner_args(
        conf, BUCKET, state="absent", purge_buckets=[BUCKET]))
    assert kept["changed"] is False and "lacks" in kept["kept"][0]
    assert user(conf, BUCKET) == before
    assert s3(loopback.credentials, "HEAD", "/", bucket=BUCKET)[0] == 200
    # a bucket of that name owned by another user: refused even to its marked owner
    foreign = ansible_module("deploykit_rgw_user", owner_args(conf, "dk-other"))
    other = foreign["keys"]
    taken = ansible_module("deploykit_s3_bucket", {**bucket_args(other), "bucket": BUCKET},
                           secrets=secrets(other), tmp=tmp_path, ok=False)
    assert "belongs to another RGW user" in taken["msg"]
    # the explicit opt-in adopts (marks) it
    adopted = ansible_module("deploykit_rgw_user", owner_args(conf, BUCKET, adopt=True))
    assert adopted["changed"] is True and adopted["marked"] is False
    assert user(conf, BUCKET)["display_name"].endswith(f"[{MARK}]")  # type: ignore[index]


def test_a_rotated_key_is_valid_beside_the_old_until_the_old_is_pruned(
        loopback: Loopback) -> None:  # noqa: F811
    """`deploykit secrets rotate s3`'s steps on a real radosgw (a user of its own, so the
    identities above keep their keys): added - a second key, current for every reader, both
    signing; pruned - only the new one; the old one is refused as RGW refuses a key it
    does not know (InvalidAccessKeyId)."""
    conf, uid = loopback.conf, "dk-rotate"

    def list_buckets(key: dict[str, str]) -> tuple[int, bytes]:
        return request(ADDRESS, PORT, "GET", "/", FQDN, "default",
                       Credentials(key["access_key"], key["secret_key"]))

    old = ansible_module("deploykit_rgw_user", owner_args(conf, uid))["keys"]
    try:
        assert list_buckets(old)[0] == 200
        added = ansible_module("deploykit_rgw_key", {"conf": str(conf), "uid": uid,
                                                     "state": "added"})
        new = added["key"]
        assert added["changed"] and added["others"] == 1 and new["access_key"] != old["access_key"]
        assert list_buckets(old)[0] == 200 and list_buckets(new)[0] == 200  # both valid
        # every reader takes the new key: the user module (`up`'s storage play) too
        assert ansible_module("deploykit_rgw_user", owner_args(conf, uid))["keys"] == new
        assert not ansible_module("deploykit_rgw_key", {"conf": str(conf), "uid": uid,
                                                        "state": "added"})["changed"]
        pruned = ansible_module("deploykit_rgw_key", {"conf": str(conf), "uid": uid,
                                                      "state": "pruned"})
        assert pruned["removed"] == 1
        status, body = list_buckets(old)
        assert status == 403 and b"InvalidAccessKeyId" in body, (status, body[:300])
        assert list_buckets(new)[0] == 200
        assert [k["access_key"] for k in user(conf, uid)["keys"]] == [new["access_key"]]  # type: ignore[index]
    finally:
        admin(conf, "user", "rm", "--uid", uid)


def test_destroy_deletes_only_the_marked(loopback: Loopback,  # noqa: F811
                                         identities: dict[str, Credentials]) -> None:
    conf = loopback.conf
    for uid in (A.uid, B.uid, legacy_uid(OWNER)):
        gone = ansible_module("deploykit_rgw_user", owner_args(conf, uid, state="absent"))
        assert gone["changed"] is True and user(conf, uid) is None
    planned = ansible_module("deploykit_rgw_user", owner_args(
        conf, OWNER, state="absent", purge_buckets=[CACHE]), check=True)
    assert planned["changed"] is True and user(conf, OWNER) is not None
    removed = ansible_module("deploykit_rgw_user", owner_args(
        conf, OWNER, state="absent", purge_buckets=[CACHE]))
    assert removed["changed"] is True and user(conf, OWNER) is None
    assert admin(conf, "bucket", "stats", "--bucket", CACHE).returncode != 0


def role_play(tmp: Path, conf: Path, owner: str, bucket: str, *flags: str
              ) -> tuple[int, str]:
    """roles/ceph_rgw_s3 configure.yml through ansible-playbook on this host, with the
    settings the render would give it (site.json's s3 entry from render/s3_access.py)."""
    import os
    import sys

    import yaml

    from tests.conftest import REPO

    ids = [Identity(serving_uid(owner, m), m, serving_uid(owner, m).removeprefix(
        f"{owner}-serving-"), (m.replace("/", "_") + "@",), (h,))
        for m, h in ((MODEL_A, "gpu1"), (MODEL_B, "gpu2"))]
    site = {"gateways": [ADDRESS], "lifecycle": LIFECYCLE,
            "s3": {"owner": owner, "serving_users": [i.uid for i in ids],
                   "serving_user_of": {i.hosts[0]: i.uid for i in ids},
                   "legacy_serving_user": legacy_uid(owner), "marker": MARK,
                   "adopt_existing": False,
                   "buckets": [{"bucket": bucket, "team": None,
                                "serving_users": [i.uid for i in ids],
                                "policy": bucket_policy(bucket, ids, legacy_uid(owner)),
                                "quota_bytes": 1 << 30}]}}
    playbook = tmp / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False,
        "vars": {"deploykit_ceph_conf": str(conf), "ceph_rgw_s3_display_name": "role test",
                 "deploykit_s3_port": PORT, "deploykit_s3_tls": False,
                 "deploykit_s3_bucket": bucket, "deploykit_s3_region": "default",
                 "_deploykit_site": site},
        "tasks": [{"ansible.builtin.include_role": {"name": "deploykit.kvcache.ceph_rgw_s3",
                                                     "tasks_from": "configure.yml"}}]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_LOCALHOST_WARNING": "false"}
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(playbook),
                           "-e", f"ansible_python_interpreter={sys.executable}", *flags],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    return done.returncode, done.stdout + done.stderr


def test_the_role_converges_once_then_changes_nothing(loopback: Loopback,  # noqa: F811
                                                     tmp_path: Path) -> None:
    """A site of an older release (one marked `dk-role-serving` for every model) converges to
    one identity per model, and the old identity is deleted; a second run changes nothing."""
    conf = loopback.conf
    models = [serving_uid("dk-role", m) for m in (MODEL_A, MODEL_B)]
    old = ansible_module("deploykit_rgw_user", {**owner_args(conf, "dk-role-serving"),
                                                "display_name": "role test (serving hosts)"})
    assert old["changed"] is True
    planned_rc, planned = role_play(tmp_path, conf, "dk-role", "dk-role-cache", "--check")
    assert planned_rc == 0 and user(conf, "dk-role") is None, planned[-2000:]
    assert user(conf, "dk-role-serving") is not None  # check mode removed nothing
    rc, first = role_play(tmp_path, conf, "dk-role", "dk-role-cache")
    assert rc == 0 and "changed=0" not in first, first[-3000:]
    assert all(user(conf, uid) is not None for uid in models)
    assert user(conf, "dk-role-serving") is None  # the site-wide identity is gone
    stats = json.loads(admin(conf, "bucket", "stats", "--bucket", "dk-role-cache").stdout)
    assert (stats["owner"], stats["bucket_quota"]["max_size"]) == ("dk-role", 1 << 30)
    for flags in ((), ("--check",)):
        rc, again = role_play(tmp_path, conf, "dk-role", "dk-role-cache", *flags)
        assert rc == 0 and "changed=0" in again, again[-3000:]
    secrets_ = [k["secret_key"] for uid in ("dk-role", *models)
                for k in (user(conf, uid) or {})["keys"]]
    assert len(secrets_) == 3 and not any(s in first + again for s in secrets_)
    # a hand-made user of the configured name: refused, the reason shown despite no_log
    assert admin(conf, "user", "create", "--uid", "dk-handmade", "--display-name",
                 "someone else").returncode == 0
    rc, refused = role_play(tmp_path, conf, "dk-handmade", "dk-handmade-cache")
    assert rc != 0 and "not adopted" in refused, refused[-3000:]
    assert user(conf, serving_uid("dk-handmade", MODEL_A)) is None
    # a hand-made user of the old identity's name is kept (not deploykit's to delete)
    assert admin(conf, "user", "create", "--uid", "dk-kept-serving", "--display-name",
                 "someone else's").returncode == 0
    rc, kept = role_play(tmp_path, conf, "dk-kept", "dk-kept-cache")
    assert rc == 0 and user(conf, "dk-kept-serving") is not None, kept[-3000:]


def test_rotate_s3_adds_and_prunes_a_key_on_every_models_identity(
        loopback: Loopback, tmp_path: Path) -> None:  # noqa: F811
    """playbooks/rotate_s3.yml's admin-host tasks (its second and last plays, as written)
    against a real radosgw, for a site of two models: every identity gets a second key, each
    named by its digest only; then, with no serving host left to roll, the old keys go."""
    import os
    import sys

    import yaml

    from tests.conftest import REPO

    conf, owner = loopback.conf, "dk-rot"
    uids = [serving_uid(owner, m) for m in (MODEL_A, MODEL_B)]
    old = {uid: ansible_module("deploykit_rgw_user", owner_args(conf, uid))["keys"]
           for uid in (owner, *uids)}
    plays = yaml.safe_load((REPO / "playbooks" / "rotate_s3.yml").read_text())
    add, prune = next(p for p in plays if "hosts" in p), plays[-1]
    assert "ceph_admin[0]" in add["hosts"] and "ceph_admin[0]" in prune["hosts"]
    site = {"s3": {"owner": owner, "serving_users": uids}}

    def run(play: dict[str, Any]) -> str:
        tasks = [t for t in play["tasks"] if "ansible.builtin.import_role" not in t]
        path = tmp_path / "rotate.yml"
        path.write_text(yaml.safe_dump([{
            "hosts": "localhost", "gather_facts": False, "tasks": tasks,
            "vars": {"deploykit_ceph_conf": str(conf), "_deploykit_site": site}}]))
        done = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), str(path),
             "-e", f"ansible_python_interpreter={sys.executable}"],
            capture_output=True, text=True, timeout=300, cwd=REPO,
            env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
                 "ANSIBLE_LOCALHOST_WARNING": "false"})
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        return done.stdout + done.stderr

    try:
        added = run(add)
        for uid in uids:
            keys = [k["access_key"] for k in user(conf, uid)["keys"]]  # type: ignore[index]
            assert len(keys) == 2 and old[uid]["access_key"] in keys, uid
            assert f"{uid}: key " in added and "added" in added
        pruned = run(prune)
        for uid in (owner, *uids):
            keys = user(conf, uid)["keys"]  # type: ignore[index]
            assert len(keys) == 1 and keys[0]["access_key"] != old[uid]["access_key"], uid
        assert all(f"{uid}: 1 old key(s) deleted" in pruned for uid in uids), pruned[-2000:]
        every = [k["secret_key"] for uid in (owner, *uids)
                 for k in (user(conf, uid) or {})["keys"]] + [k["secret_key"]
                                                            for k in old.values()]
        assert not any(secret in added + pruned for secret in every)
    finally:
        for uid in (owner, *uids):
            admin(conf, "user", "rm", "--uid", uid)


# two teams (docs/teams.md): each its identity and bucket, granted the whole bucket
TEAM_A, TEAM_B = (Identity(team_uid(OWNER, t), MODEL_A, f"team-{t}", ("Qwen_Qwen3-8B@",),
                           (f"gpu-{t}",), (f"dk-team-{t}",), team=t) for t in ("red", "blue"))


@pytest.fixture(scope="module")
def teams(loopback: Loopback, identities: dict[str, Credentials],  # noqa: F811
          tmp_path_factory: pytest.TempPathFactory) -> dict[str, Credentials]:
    """Each team's user and bucket (tag, lifecycle, its own policy), as `up` makes them."""
    conf, tmp = loopback.conf, tmp_path_factory.mktemp("teams")
    keys = ansible_module("deploykit_rgw_user", owner_args(conf, OWNER))["keys"]
    # the site bucket as `up` keeps it (an earlier test of this module may have removed it)
    ansible_module("deploykit_s3_bucket", bucket_args(keys), secrets=secrets(keys), tmp=tmp)
    found = {}
    for team in (TEAM_A, TEAM_B):
        made = ansible_module("deploykit_rgw_user", owner_args(conf, team.uid, max_buckets=-1))
        found[team.uid] = Credentials(made["keys"]["access_key"], made["keys"]["secret_key"])
        bucket = team.buckets[0]
        done = ansible_module("deploykit_s3_bucket", bucket_args(
            keys, bucket=bucket, policy=bucket_policy(bucket, [team], legacy_uid(OWNER))),
            secrets=secrets(keys), tmp=tmp)
        assert done["created"], done
    return found


def test_a_teams_keys_work_in_its_bucket_only(teams: dict[str, Credentials]) -> None:
    """Team red's keys (a red host, compromised) on blue's bucket: no read, write, list or
    delete, whatever the key; on red's own bucket all of them, delete included (LMCache's
    per-salt eviction deletes)."""
    red, blue = teams[TEAM_A.uid], teams[TEAM_B.uid]
    mine, theirs = TEAM_A.buckets[0], TEAM_B.buckets[0]
    chunk = f"/{CHUNK_A}@salt-blue"
    assert s3(blue, "PUT", chunk, bucket=theirs, body=b"blue")[0] == 200
    assert s3(red, "GET", chunk, bucket=theirs)[0] == 403
    assert s3(red, "PUT", chunk, bucket=theirs, body=b"poison")[0] == 403
    assert s3(red, "GET", "/", bucket=theirs, query=listing(""))[0] == 403
    assert s3(red, "DELETE", chunk, bucket=theirs)[0] == 403
    assert s3(blue, "GET", chunk, bucket=theirs) == (200, b"blue")
    # and nothing in the site bucket either (the team is granted its own bucket only)
    assert s3(red, "GET", "/", query=listing(A.prefixes[0]))[0] == 403
    own = f"/{CHUNK_A}@salt-red"
    assert s3(red, "PUT", own, bucket=mine, body=b"red")[0] == 200
    assert s3(red, "GET", own, bucket=mine) == (200, b"red")
    assert s3(red, "GET", "/", bucket=mine, query=listing(""))[0] == 200
    assert s3(red, "DELETE", own, bucket=mine)[0] == 204
    assert s3(red, "PUT", "/", bucket=mine, query="policy=", body=b"{}")[0] == 403
