"""The serving identity's bucket policy, the ownership marker, the quota and its rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy_kit.config.models import HostConfig
from deploy_kit.core.errors import InventoryError, Problem
from deploy_kit.ops.rundir import SITE_PATH, role_tree
from deploy_kit.ops.site import open_site
from deploy_kit.plan.plan import build_plan
from deploy_kit.render.files import CLUSTER
from deploy_kit.render.s3_access import PROBE_PREFIX, bucket_policy, serving_user
from deploy_kit.verify.checks.s3_privilege import CHECK
from deploy_kit.verify.model import CHECKS, Observation, PrivilegeProbe, Status
from tests.conftest import InventoryFactory

REFUSED = {"PutBucketPolicy": 403, "PutBucketLifecycle": 403, "DeleteBucket": 403,
           "DeleteObject (a chunk)": 403}


def test_policy_grants_the_serving_user_objects_only() -> None:
    c = HostConfig(ceph_rgw_s3_user="kv", deploykit_s3_bucket="cache")
    assert serving_user(c) == "kv-serving"
    policy = bucket_policy(c)
    grants = {(s["Effect"], tuple(s["Principal"]["AWS"]), tuple(s["Resource"])):
              set(s["Action"]) for s in policy["Statement"]}
    who = ("arn:aws:iam:::user/kv-serving",)
    assert grants == {
        ("Allow", who, ("arn:aws:s3:::cache/*",)):
            {"s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"},
        ("Allow", who, ("arn:aws:s3:::cache",)): {"s3:ListBucket"},
        ("Allow", who, (f"arn:aws:s3:::cache/{PROBE_PREFIX}*",)): {"s3:DeleteObject"},
    }
    # nothing that changes or deletes the bucket, nothing for the owner (it owns it)
    actions = {a for s in policy["Statement"] for a in s["Action"]}
    assert not {a for a in actions if "Bucket" in a and a != "s3:ListBucket"}
    assert not any("*" in a for a in actions)


def _site_json(inventory: Path) -> dict:
    tree = role_tree(open_site(str(inventory)))
    return json.loads(tree[CLUSTER][SITE_PATH].content)["s3"]


def test_site_facts_carry_identity_marker_and_plan_quota(make_inventory: InventoryFactory
                                                         ) -> None:
    inventory = make_inventory()
    facts = _site_json(inventory)
    site = open_site(str(inventory))
    assert facts["serving_user"] == "lmcache-serving" and facts["owner"] == "lmcache"
    assert facts["marker"] == f"deploykit-site={site.name}"
    assert facts["adopt_existing"] is False
    assert facts["quota_bytes"] == sum(m.storage_bytes for m in build_plan(site).models) > 0
    override = _site_json(make_inventory(all={"ceph_rgw_s3_quota_bytes": 123456789,
                                              "ceph_rgw_s3_adopt_existing": True}))
    assert (override["quota_bytes"], override["adopt_existing"]) == (123456789, True)


def _problems(inventory: Path) -> list[Problem]:
    try:
        open_site(str(inventory))
    except InventoryError as exc:
        return exc.problems
    return []


@pytest.mark.parametrize(("settings", "refused"), [
    ({"ceph_rgw_s3_lifecycle_days": 0, "ceph_rgw_s3_quota_bytes": 0}, True),
    ({"ceph_rgw_s3_lifecycle_days": 0}, False),  # plan's bytes bound it
    ({"ceph_rgw_s3_lifecycle_days": 0, "ceph_rgw_s3_quota_bytes": 1 << 40}, False),
    ({"ceph_rgw_s3_quota_bytes": 0}, False),  # expiry bounds it
])
def test_no_expiry_needs_a_quota(make_inventory: InventoryFactory, settings: dict,
                                 refused: bool) -> None:
    found = [p for p in _problems(make_inventory(all=settings))
             if p.key == "ceph_rgw_s3_lifecycle_days"]
    assert bool(found) == refused
    if refused:
        line = str(found[0])
        assert "all.yml" in line and "no expiry" in line and "ceph_rgw_s3_quota_bytes" in line


def test_no_expiry_without_a_sizable_model_is_refused(make_inventory: InventoryFactory
                                                     ) -> None:
    found = _problems(make_inventory(all={"ceph_rgw_s3_lifecycle_days": 0,
                                          "deploykit_cache_target_tokens": 0}))
    assert [p.key for p in found] == ["ceph_rgw_s3_lifecycle_days"]


def _observe(probe: PrivilegeProbe | None) -> Observation:
    return Observation(fqdn="s3.t.test", bucket="lmcache", region="default",
                       rgw_addresses=[], dns_servers=[], expected_pools=[],
                       expected_rgw_daemons=0, expected_lifecycle={}, pinned={},
                       privilege=probe)


def test_privilege_check_passes_only_on_refusals() -> None:
    def run(**fields: object) -> list[tuple[Status, str]]:
        probe = PrivilegeProbe(address="10.0.0.11", credentials_from="gpu1", put=200, get=200,
                               head_missing=404, refused=dict(REFUSED), cleanup=204)
        for k, v in fields.items():
            setattr(probe, k, v)
        return [(f.status, f.message) for f in CHECKS[CHECK].evaluate(_observe(probe))]

    assert [s for s, _ in run()] == [Status.PASS]
    # the owner's keys on a serving host: each request got past the permission check
    owner = run(refused={"PutBucketPolicy": 400, "PutBucketLifecycle": 400,
                         "DeleteBucket": 409, "DeleteObject (a chunk)": 204})
    assert [s for s, _ in owner] == [Status.FAIL] and "PutBucketPolicy HTTP 400" in owner[0][1]
    unsent = run(refused={k: v for k, v in REFUSED.items() if k != "DeleteBucket"})
    assert "DeleteBucket not tried" in unsent[0][1]
    assert "not 404" in run(head_missing=403)[0][1]
    assert "cannot use the cache" in run(put=403)[0][1]
    assert run(error="ConnectionRefusedError: x")[0][0] == Status.FAIL
    assert list(CHECKS[CHECK].evaluate(_observe(None))) == []


# `radosgw-admin lc get --bucket` on Ceph 16.2.15 after deploykit's lifecycle was put
LC_GET = """{"prefix_map": {"": {"status": true, "expiration": 7, "mp_expiration": 1}},
 "rule_map": [{"id": "deploykit-expire-kv", "rule": {
   "id": "deploykit-expire-kv", "prefix": "", "status": "Enabled",
   "expiration": {"days": "7", "date": ""}, "noncur_expiration": {"days": "", "date": ""},
   "mp_expiration": {"days": "1", "date": ""},
   "filter": {"prefix": "", "obj_tags": {"tagset": {}}}, "transitions": {},
   "noncur_transitions": {}, "dm_expiration": false}}]}"""


def test_admin_host_lifecycle_read_matches_what_up_puts() -> None:
    from deploy_kit.render.storage import lifecycle_rules
    from deploy_kit.transport.hosts import ShellResult
    from deploy_kit.verify.checks.s3 import _normalise
    from deploy_kit.verify.probes.ceph_probe import lifecycle

    out = f"### pools\n[]\n### lifecycle\n{LC_GET}\n"
    rules = lifecycle(ShellResult("adm", out, 0, None, ""))
    assert rules is not None
    assert _normalise(rules) == _normalise(lifecycle_rules(HostConfig())["Rules"])
    assert lifecycle(ShellResult("adm", "### lifecycle\n\n", 0, None, "")) == []
    assert lifecycle(ShellResult("adm", "### lifecycle\n{not json\n", 0, None, "")) is None
    obs = _observe(None)
    obs.lifecycle, obs.expected_lifecycle = rules, lifecycle_rules(HostConfig())
    assert [f.status for f in CHECKS["s3-bucket-lifecycle"].evaluate(obs)] == [Status.PASS]
    obs.lifecycle = []
    assert [f.status for f in CHECKS["s3-bucket-lifecycle"].evaluate(obs)] == [Status.FAIL]
