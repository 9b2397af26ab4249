"""The serving identities (one per model), their bucket policy, the ownership marker, the
quota and their rules."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from deploy_kit.config.models import HostConfig
from deploy_kit.config.s3_identities import (
    MAX_UID,
    identities,
    layout_prefix,
    legacy_uid,
    serving_uid,
    uid_of,
)
from deploy_kit.config.site import Site
from deploy_kit.core.errors import Problem
from deploy_kit.ops.rundir import SITE_PATH, role_tree
from deploy_kit.ops.site import open_site
from deploy_kit.plan.plan import build_plan
from deploy_kit.render.files import CLUSTER
from deploy_kit.render.s3_access import OBJECT_ACTIONS, PROBE_PREFIX, bucket_policy, serving_user
from deploy_kit.verify.checks.s3_privilege import CHECK
from deploy_kit.verify.model import CHECKS, Observation, PrivilegeProbe, Status
from tests.conftest import BASE_HOSTS, InventoryFactory, inventory_problems

REFUSED = {"PutBucketPolicy": 403, "PutBucketLifecycle": 403, "DeleteBucket": 403,
           "DeleteObject (a chunk)": 403}


TWO_MODELS = {"host_vars/gpu2.yml": "vllm_model: Qwen/Qwen3-8B\n"}


def test_policy_scopes_each_model_to_its_own_keys(make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(all={"ceph_rgw_s3_user": "kv",
                                             "deploykit_s3_bucket": "cache"},
                                        files=TWO_MODELS)))
    big, small = identities(site)
    assert (big.uid, small.uid) == (f"kv-serving-qwen-qwen3-32b-{_digest('Qwen/Qwen3-32B')}",
                                    f"kv-serving-qwen-qwen3-8b-{_digest('Qwen/Qwen3-8B')}")
    # gpu1/gpu2 run the LMCache server (cuda, rocm): its keys name the model as is; verify's
    # round trip drives the in-process connector (`/` as `_`) with the same keys
    assert (big.prefixes, small.prefixes) == (("Qwen/Qwen3-32B@", "Qwen_Qwen3-32B@"),
                                              ("Qwen/Qwen3-8B@", "Qwen_Qwen3-8B@"))
    assert uid_of(site) == {"gpu1": big.uid, "gpu2": small.uid}
    policy = bucket_policy("cache", [big, small], "kv-serving")
    grants = {(s["Effect"], tuple(s["Principal"]["AWS"]), tuple(s["Resource"]),
               json.dumps(s.get("Condition"), sort_keys=True)): set(s["Action"])
              for s in policy["Statement"]}
    a, b = (f"arn:aws:iam:::user/{i.uid}" for i in (big, small))
    lease_a, lease_b = (f"deploykit-lease/{i.slug}/" for i in (big, small))
    assert grants == {
        ("Allow", (a,), ("arn:aws:s3:::cache/Qwen/Qwen3-32B@*",
                         "arn:aws:s3:::cache/Qwen_Qwen3-32B@*", f"arn:aws:s3:::cache/{lease_a}*"),
         "null"): set(OBJECT_ACTIONS),
        ("Allow", (a,), ("arn:aws:s3:::cache",), json.dumps({"StringLike": {"s3:prefix": [
            "Qwen/Qwen3-32B@*", "Qwen_Qwen3-32B@*", f"{lease_a}*"]}})): {"s3:ListBucket"},
        ("Allow", (b,), ("arn:aws:s3:::cache/Qwen/Qwen3-8B@*",
                         "arn:aws:s3:::cache/Qwen_Qwen3-8B@*", f"arn:aws:s3:::cache/{lease_b}*"),
         "null"): set(OBJECT_ACTIONS),
        ("Allow", (b,), ("arn:aws:s3:::cache",), json.dumps({"StringLike": {"s3:prefix": [
            "Qwen/Qwen3-8B@*", "Qwen_Qwen3-8B@*", f"{lease_b}*"]}})): {"s3:ListBucket"},
        ("Allow", (a, b), (f"arn:aws:s3:::cache/{PROBE_PREFIX}*",), "null"):
            {"s3:DeleteObject", "s3:GetObject", "s3:PutObject"},
    }
    # nothing that changes or deletes the bucket, no listing without a prefix condition,
    # no object right outside a model's, its lease's or verify's prefixes
    actions = {a for s in policy["Statement"] for a in s["Action"]}
    assert not {a for a in actions if "Bucket" in a and a != "s3:ListBucket"}
    assert not any("*" in a for a in actions)
    assert all("Condition" in s for s in policy["Statement"] if "s3:ListBucket" in s["Action"])
    assert "kv-serving\"" not in json.dumps(policy)  # the old identity: granted nothing
    assert "s3:ListBucket" not in json.dumps(bucket_policy("cache", [], "kv-serving")).replace(
        '"s3:*"', "")


def _digest(model: str) -> str:
    import hashlib

    return hashlib.sha256(model.encode()).hexdigest()[:8]


@pytest.mark.parametrize(("mode", "topology", "model", "prefix"), [
    ("s3", "inprocess", "Qwen/Qwen3-8B", "Qwen_Qwen3-8B@"),  # the connector: / as _
    ("s3", "server", "Qwen/Qwen3-8B", "Qwen/Qwen3-8B@"),  # the server's adapter: as is
    ("nixl", "inprocess", "Qwen/Qwen3-8B", "Qwen_Qwen3-8B_"),  # NIXL: / and @ as _
    ("s3", "server", "/srv/models/tiny-llm", "/var/lib/vllm/models/tiny-llm@"),  # staged
    ("dram", "server", "Qwen/Qwen3-8B", None),
    ("disk", "inprocess", "Qwen/Qwen3-8B", None),
])
def test_the_prefix_is_the_one_lmcache_writes(mode: str, topology: str, model: str,
                                              prefix: str | None) -> None:
    from deploy_kit.cache.keys import model_prefixes, parse_key

    c = HostConfig(lmcache_mode=mode, lmcache_topology=topology, vllm_model=model)
    assert layout_prefix(c) == prefix
    if prefix is not None:  # one of the layouts cache/keys.py parses, a key of that model
        assert prefix in model_prefixes(c.model_path_on_host)
        key = f"{prefix}1@0@1be8@bfloat16" if prefix.endswith("@") and topology != "server" \
            else f"{prefix}01000100@0@1be8" if topology == "server" \
            else f"{prefix}1_0_1be8_bfloat16"
        parsed = parse_key(key)
        assert parsed is not None and parsed.model.replace("/", "_") == \
            c.model_path_on_host.replace("/", "_")


def test_uids_are_readable_stable_bounded_and_apart() -> None:
    assert serving_uid("lmcache", "Qwen/Qwen3-8B") == \
        f"lmcache-serving-qwen-qwen3-8b-{_digest('Qwen/Qwen3-8B')}"
    # case or punctuation alone: two identities still
    assert serving_uid("lmcache", "qwen/qwen3-8b") != serving_uid("lmcache", "Qwen/Qwen3-8B")
    long = serving_uid("lmcache", "org/" + "x" * 200)
    assert len(long) == MAX_UID and long.endswith(_digest("org/" + "x" * 200))
    assert serving_uid("o" * 47, "org/model") == f"{'o' * 47}-serving-{_digest('org/model')}"
    assert serving_user(HostConfig(ceph_rgw_s3_user="kv", vllm_model="Qwen/Qwen3-8B")) == \
        serving_uid("kv", "Qwen/Qwen3-8B")
    assert legacy_uid("kv") == "kv-serving"


def _site_json(inventory: Path) -> dict:
    tree = role_tree(open_site(str(inventory)))
    return json.loads(tree[CLUSTER][SITE_PATH].content)["s3"]


def test_site_facts_carry_identities_marker_and_plan_quota(make_inventory: InventoryFactory
                                                           ) -> None:
    inventory = make_inventory(files=TWO_MODELS)
    facts = _site_json(inventory)
    site = open_site(str(inventory))
    uids = [serving_uid("lmcache", m) for m in ("Qwen/Qwen3-32B", "Qwen/Qwen3-8B")]
    assert facts["serving_users"] == uids and facts["owner"] == "lmcache"
    assert facts["serving_user_of"] == {"gpu1": uids[0], "gpu2": uids[1]}
    assert facts["legacy_serving_user"] == "lmcache-serving"
    assert facts["marker"] == f"deploykit-site={site.name}"
    assert facts["adopt_existing"] is False
    (bucket,) = facts["buckets"]  # no team, no sharing group: the site bucket alone
    assert (bucket["bucket"], bucket["team"], bucket["serving_users"]) == ("lmcache", None, uids)
    assert bucket["quota_bytes"] == sum(m.storage_bytes for m in build_plan(site).models) > 0
    assert bucket["policy"] == bucket_policy("lmcache", identities(site), "lmcache-serving")
    override = _site_json(make_inventory(all={"ceph_rgw_s3_quota_bytes": 123456789,
                                              "ceph_rgw_s3_adopt_existing": True}))
    assert (override["buckets"][0]["quota_bytes"], override["adopt_existing"]) == \
        (123456789, True)


def test_each_hosts_lease_is_its_models(make_inventory: InventoryFactory) -> None:
    from deploy_kit.render.self_heal import lease_key

    site = open_site(str(make_inventory(files=TWO_MODELS)))
    one, two = (lease_key(site.hosts[h]) for h in ("gpu1", "gpu2"))
    big, small = identities(site)
    assert (one, two) == (f"deploykit-lease/{big.slug}/serving-restart",
                          f"deploykit-lease/{small.slug}/serving-restart")


def _problems(inventory: Path) -> list[Problem]:
    return inventory_problems(inventory)


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
                               head_missing=403, refused=dict(REFUSED), cleanup=204)
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
    assert "not 403" in run(head_missing=404)[0][1]  # ListBucket beyond its prefix: an oracle
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


def _with_models(site: Site, **models: tuple[str, str]) -> Site:
    """The site with host -> (vllm_model, lmcache_mode) set past validation (no preset
    geometry is needed to name keys)."""
    hosts = dict(site.hosts)
    for name, (model, mode) in models.items():
        host = hosts[name]
        hosts[name] = dataclasses.replace(host, config=host.config.model_copy(
            update={"vllm_model": model, "lmcache_mode": mode,
                    "lmcache_topology": "inprocess"}))
    return dataclasses.replace(site, hosts=hosts)


def test_two_models_may_share_a_site_each_agreeing_with_itself(
        make_inventory: InventoryFactory) -> None:
    """Hosts of one model must agree on what names its keys; hosts of two models need not."""
    site = open_site(str(make_inventory(files=TWO_MODELS)))
    assert len(identities(site)) == 2
    seed = _problems(make_inventory(files={
        **TWO_MODELS, "host_vars/gpu1.yml": "vllm_python_hash_seed: 1\n"}))
    assert seed == []  # each model has one host: nothing to disagree with
    hosts = {"all": {"children": {**BASE_HOSTS["all"]["children"], "vllm": {"hosts": {
        "gpu1": {"ansible_host": "10.0.1.1", "vllm_accelerator": "cuda",
                 "vllm_max_model_len": 32768},
        "gpu2": {"ansible_host": "10.0.1.2", "vllm_accelerator": "cuda",
                 "vllm_max_model_len": 32768},
        "gpu3": {"ansible_host": "10.0.1.3", "vllm_accelerator": "cuda",
                 "vllm_model": "Qwen/Qwen3-8B", "vllm_python_hash_seed": 5}}}}}}
    found = _problems(make_inventory(hosts=hosts, files=TWO_MODELS))
    assert [(p.key, p.message) for p in found] == [
        ("vllm_python_hash_seed", "gpu3 has 5, others have 67")], found


@pytest.mark.parametrize(("models", "says"), [
    # NIXL's prefix ends in `_`, which a longer model name extends
    ({"gpu1": ("/srv/models/tiny", "nixl"), "gpu2": ("/srv/models/tiny_v2", "nixl")},
     "a prefix of gpu2's"),
    # `/` and `_` flatten alike: two models, one key prefix
    ({"gpu1": ("acme/tiny", "s3"), "gpu2": ("acme_tiny", "s3")}, "the same key prefix"),
])
def test_nested_prefixes_are_refused(make_inventory: InventoryFactory, models: dict,
                                     says: str) -> None:
    from deploy_kit.config.rules_storage import model_identities_apart

    site = _with_models(open_site(str(make_inventory())), **models)
    found = list(model_identities_apart(site))
    assert len(found) == 1 and found[0].key == "vllm_model" and says in found[0].message
    assert set(found[0].hosts) == {"gpu1", "gpu2"}
    apart = _with_models(open_site(str(make_inventory())), gpu1=("/srv/models/tiny", "nixl"),
                         gpu2=("/srv/models/tinier", "nixl"))
    assert list(model_identities_apart(apart)) == []


@pytest.mark.parametrize(("model", "says"), [
    ("/srv/models/tiny*", "holds *"),  # a policy wildcard would widen its grant
    ("/srv/models/t?ny", "holds ?"),
    ("/srv/models/${aws:username}", "holds $"),
])
def test_policy_patterns_in_a_prefix_are_refused(make_inventory: InventoryFactory,
                                                 model: str, says: str) -> None:
    from deploy_kit.config.rules_storage import model_identities_apart

    site = _with_models(open_site(str(make_inventory())), gpu1=(model, "s3"),
                        gpu2=(model, "s3"))
    found = list(model_identities_apart(site))
    assert [p.key for p in found] == ["vllm_model"] and says in found[0].message


def test_an_owner_name_too_long_for_the_identities_is_refused(
        make_inventory: InventoryFactory) -> None:
    found = [p for p in _problems(make_inventory(all={"ceph_rgw_s3_user": "o" * 48}))
             if p.key == "ceph_rgw_s3_user"]
    assert len(found) == 1 and "at most 47 characters" in found[0].fix
    assert [p for p in _problems(make_inventory(all={"ceph_rgw_s3_user": "o" * 47}))
            if p.key == "ceph_rgw_s3_user"] == []
