"""The cache bucket's identities on a real Ceph + radosgw on loopback (test_rgw_loopback's
cluster fixture): the modules the ceph_rgw_s3 role runs create a marked owner and serving
user, the bucket with its tag, lifecycle, policy and quota; the serving identity then gets
and puts objects and is refused every bucket-level change; what deploykit did not create
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

from deploy_kit.config.models import HostConfig
from deploy_kit.render.s3_access import bucket_policy
from deploy_kit.transport.sigv4 import Credentials, request
from deploy_kit.verify.checks.s3_privilege import CHECK
from deploy_kit.verify.model import CHECKS, Observation, Status
from deploy_kit.verify.probes import privilege_probe
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
SERVING = f"{OWNER}-serving"
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
    config = HostConfig(ceph_rgw_s3_user=OWNER, deploykit_s3_bucket=CACHE)
    return {"endpoint": f"http://{ADDRESS}:{PORT}", "access_key": "{{ k_access }}",
            "secret_key": "{{ k_secret }}", "bucket": CACHE, "lifecycle": LIFECYCLE,
            "policy": bucket_policy(config), "tags": {"deploykit-site": "loop"}, **more}


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
    serving = ansible_module("deploykit_rgw_user", owner_args(conf, SERVING, max_buckets=-1))
    assert serving["changed"] is True and user(conf, SERVING)["max_buckets"] == -1  # type: ignore[index]
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
            "serving": Credentials(serving["keys"]["access_key"],
                                   serving["keys"]["secret_key"])}


def test_serving_identity_reads_and_writes_objects(identities: dict[str, Credentials]) -> None:
    creds = identities["serving"]
    key = "/Qwen_Qwen3-8B@1@0@1be814944da4012e@bfloat16"
    assert s3(creds, "PUT", key, body=b"kv" * 4096)[0] == 200
    assert s3(creds, "HEAD", key)[0] == 200
    status, body = s3(creds, "GET", key)
    assert (status, body) == (200, b"kv" * 4096)
    # a lookup miss is 404, not 403 (s3:ListBucket granted)
    assert s3(creds, "HEAD", "/Qwen_Qwen3-8B@1@0@0000000000000000@bfloat16")[0] == 404
    # LMCache's managed upload: initiate, then abort (its failure path)
    status, body = s3(creds, "POST", key, query="uploads=")
    assert status == 200, body
    upload = body.split(b"<UploadId>")[1].split(b"</UploadId>")[0].decode()
    assert s3(creds, "DELETE", key, query=f"uploadId={upload}")[0] == 204
    # but never delete a chunk, and own no bucket of its own
    assert s3(creds, "DELETE", key)[0] == 403
    assert s3(creds, "PUT", "/", bucket="dk-serving-own")[0] != 200


def test_serving_identity_is_refused_every_bucket_change(
        loopback: Loopback, identities: dict[str, Credentials]) -> None:  # noqa: F811
    found = privilege_probe.probe(ADDRESS, PORT, f"{CACHE}.{FQDN}", "default",
                                  identities["serving"], "gpu1")
    assert (found.put, found.get, found.head_missing, found.cleanup) == (200, 200, 404, 204)
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
    failed = [f for f in CHECKS[CHECK].evaluate(obs) if f.status == Status.FAIL]
    assert failed and "PutBucketPolicy HTTP 400" in failed[0].message


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
    # the bound holds: an object larger than a tiny quota is refused
    ansible_module("deploykit_rgw_bucket_quota", {**args, "max_size": 4096})
    assert s3(identities["serving"], "PUT", "/too-big", body=b"x" * 65536)[0] == 403
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
    gone = ansible_module("deploykit_rgw_user", owner_args(conf, SERVING, state="absent"))
    assert gone["changed"] is True and user(conf, SERVING) is None
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

    config = HostConfig(ceph_rgw_s3_user=owner, deploykit_s3_bucket=bucket)
    site = {"gateways": [ADDRESS], "lifecycle": LIFECYCLE,
            "s3": {"owner": owner, "serving_user": f"{owner}-serving", "marker": MARK,
                   "adopt_existing": False, "policy": bucket_policy(config),
                   "quota_bytes": 1 << 30}}
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
    conf = loopback.conf
    planned_rc, planned = role_play(tmp_path, conf, "dk-role", "dk-role-cache", "--check")
    assert planned_rc == 0 and user(conf, "dk-role") is None, planned[-2000:]
    rc, first = role_play(tmp_path, conf, "dk-role", "dk-role-cache")
    assert rc == 0 and "changed=0" not in first, first[-3000:]
    assert user(conf, "dk-role-serving") is not None
    stats = json.loads(admin(conf, "bucket", "stats", "--bucket", "dk-role-cache").stdout)
    assert (stats["owner"], stats["bucket_quota"]["max_size"]) == ("dk-role", 1 << 30)
    for flags in ((), ("--check",)):
        rc, again = role_play(tmp_path, conf, "dk-role", "dk-role-cache", *flags)
        assert rc == 0 and "changed=0" in again, again[-3000:]
    secrets_ = [k["secret_key"] for uid in ("dk-role", "dk-role-serving")
                for k in (user(conf, uid) or {})["keys"]]
    assert secrets_ and not any(s in first + again for s in secrets_)
    # a hand-made user of the configured name: refused, the reason shown despite no_log
    assert admin(conf, "user", "create", "--uid", "dk-handmade", "--display-name",
                 "someone else").returncode == 0
    rc, refused = role_play(tmp_path, conf, "dk-handmade", "dk-handmade-cache")
    assert rc != 0 and "not adopted" in refused, refused[-3000:]
    assert user(conf, "dk-handmade-serving") is None
