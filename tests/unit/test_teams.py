"""Teams and sharing groups at the storage, config and plan level (docs/teams.md): the example
site with two teams renders two team identities, a bucket policy per bucket that grants
each team's uid in its own bucket only, a quota per bucket; each teams rule refuses with the
file, the key and a fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.config.models import HostConfig
from deploy_kit.config.s3_identities import identities
from deploy_kit.config.site import Site
from deploy_kit.core.errors import Problem
from deploy_kit.ops.rundir import SITE_PATH, role_tree
from deploy_kit.ops.site import open_site
from deploy_kit.plan.plan import build_plan, cache_bytes
from deploy_kit.render.files import CLUSTER
from deploy_kit.render.s3_access import TEAM_OBJECT_ACTIONS
from tests.conftest import REPO, inventory_problems

EXAMPLE = REPO / "inventory" / "example"
BETA_QUOTA = 10**12
TEAMS = [{"name": "alpha", "models": ["Qwen/Qwen3-32B"]},
         {"name": "beta", "models": ["Qwen/Qwen3-8B"], "cache_salt": "beta-2026",
          "quota_bytes": BETA_QUOTA}]


def teams_site(tmp_path: Path, teams: list[dict[str, Any]] | None = None,
               files: dict[str, str] | None = None, routers: bool = False) -> Path:
    """The example site with two teams: alpha (the H100 hosts, Qwen3-32B, server topology)
    and beta (the MI300X host on Qwen3-8B, server topology, and the Gaudi3 host named into
    the team, in-process, its own bucket setting dropped)."""
    root = tmp_path / "teams"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".deploykit-*"))
    (root / "group_vars" / "all" / "teams.yml").write_text(yaml.safe_dump(
        {"teams": TEAMS if teams is None else teams}))
    if not routers:  # routers send any request to any host, across teams: refused
        doc = yaml.safe_load((root / "hosts.yml").read_text())
        del doc["all"]["children"]["router"]
        (root / "hosts.yml").write_text(yaml.safe_dump(doc))
    (root / "group_vars" / "vllm_rocm.yml").write_text("vllm_model: Qwen/Qwen3-8B\n")
    (root / "group_vars" / "vllm_gaudi.yml").write_text(
        "lmcache_topology: inprocess\nlmcache_team: beta\n")
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _s3(site: Site) -> dict[str, Any]:
    return json.loads(role_tree(site)[CLUSTER][SITE_PATH].content)["s3"]


def _problems(inventory: Path) -> list[Problem]:
    return inventory_problems(inventory)


def test_two_teams_get_two_identities_buckets_policies_and_quotas(tmp_path: Path) -> None:
    site = open_site(str(teams_site(tmp_path)))
    s3 = _s3(site)
    alpha, beta = "lmcache-team-alpha", "lmcache-team-beta"
    assert sorted(s3["serving_users"]) == [alpha, beta]  # one per team, not per model
    assert s3["serving_user_of"] == {"gpu-h100-1": alpha, "gpu-h100-2": alpha,
                                     "gpu-mi300x-1": beta, "gaudi3-1": beta}
    buckets = {b["bucket"]: b for b in s3["buckets"]}
    assert list(buckets) == ["lmcache", "lmcache-alpha", "lmcache-beta"]
    assert (buckets["lmcache-alpha"]["team"], buckets["lmcache-beta"]["team"],
            buckets["lmcache"]["team"]) == ("alpha", "beta", None)
    policies = {name: json.dumps(b["policy"]) for name, b in buckets.items()}
    # each team's uid in its own bucket's policy only; the site bucket grants no one
    assert alpha in policies["lmcache-alpha"] and alpha not in policies["lmcache-beta"]
    assert beta in policies["lmcache-beta"] and beta not in policies["lmcache-alpha"]
    assert alpha not in policies["lmcache"] and beta not in policies["lmcache"]
    assert [s["Effect"] for s in buckets["lmcache"]["policy"]["Statement"]] == ["Deny"]
    objects = next(s for s in buckets["lmcache-alpha"]["policy"]["Statement"]
                   if s["Sid"] == "deploykit-team-alpha-objects")
    assert objects["Resource"] == ["arn:aws:s3:::lmcache-alpha/*"]
    assert set(objects["Action"]) == set(TEAM_OBJECT_ACTIONS) >= {"s3:DeleteObject"}
    assert not any("Bucket" in a and a != "s3:ListBucket" for s in
                   buckets["lmcache-alpha"]["policy"]["Statement"] for a in s["Action"])
    # quotas: alpha's from plan (its bucket's models), beta's set, the site bucket's none
    assert buckets["lmcache-alpha"]["quota_bytes"] == cache_bytes(site, bucket="lmcache-alpha") > 0
    # the same bytes as the team's hosts' models (how the LMCache quota sizes a team)
    assert cache_bytes(site, {"gpu-h100-1", "gpu-h100-2"}) == \
        buckets["lmcache-alpha"]["quota_bytes"]
    assert buckets["lmcache-beta"]["quota_bytes"] == BETA_QUOTA
    assert buckets["lmcache"]["quota_bytes"] == 0


def test_each_team_host_caches_in_its_team_bucket(tmp_path: Path) -> None:
    site = open_site(str(teams_site(tmp_path)))
    tree = role_tree(site)
    assert site.hosts["gaudi3-1"].config.cache_bucket == "lmcache-beta"
    yaml_text = tree["gaudi3-1"]["/etc/deploykit/lmcache.yaml"].content
    assert yaml.safe_load(yaml_text)["remote_url"] == "s3://lmcache-beta.s3.cephlab.com"
    unit = tree["gpu-h100-1"]["/etc/systemd/system/lmcache-server.service"].content
    assert '"s3_endpoint":"s3://lmcache-alpha.s3.cephlab.com"' in unit
    assert "lmcache-beta" not in unit


def test_plan_shows_groups_teams_and_the_in_process_warning(tmp_path: Path) -> None:
    plan = build_plan(open_site(str(teams_site(tmp_path))))
    groups = {g.bucket: (g.team, g.topology, g.hosts) for g in plan.sharing_groups}
    assert groups == {
        "lmcache-alpha": ("alpha", "server", ["gpu-h100-1", "gpu-h100-2"]),
        "lmcache-beta": ("beta", "inprocess + server", ["gaudi3-1", "gpu-mi300x-1"])}
    (alpha, beta) = plan.teams
    assert (beta.name, beta.uid, beta.salt, beta.quota_bytes, beta.bucket) == \
        ("beta", "lmcache-team-beta", "beta-2026", BETA_QUOTA, "lmcache-beta")
    assert alpha.salt == "alpha" and alpha.hosts == ["gpu-h100-1", "gpu-h100-2"]
    warned = [w for w in plan.warnings if w.startswith("team beta")]
    assert len(warned) == 1 and "gaudi3-1" in warned[0] and "beta-2026" in warned[0]
    assert not [w for w in plan.warnings if w.startswith("team alpha")]
    assert plan.dns["names"] == ["s3.cephlab.com", "lmcache.s3.cephlab.com",
                                 "lmcache-alpha.s3.cephlab.com", "lmcache-beta.s3.cephlab.com"]


def test_the_example_splits_gaudi_into_its_own_sharing_group() -> None:
    site = open_site(str(EXAMPLE))
    s3 = _s3(site)
    assert [b["bucket"] for b in s3["buckets"]] == ["lmcache", "lmcache-gaudi3"]
    (model,) = identities(site)  # one model: one identity, granted in both buckets
    assert set(model.buckets) == {"lmcache", "lmcache-gaudi3"}
    assert all(model.uid in json.dumps(b["policy"]) for b in s3["buckets"])
    topologies = {h: site.hosts[h].config.lmcache_topology for h in model.hosts}
    assert topologies == {"gaudi3-1": "inprocess", "gpu-h100-1": "server",
                          "gpu-h100-2": "server", "gpu-mi300x-1": "server"}


def _one(problems: list[Problem], key: str, words: str) -> Problem:
    found = [p for p in problems if p.key == key and words in p.message]
    assert len(found) == 1, problems
    assert found[0].fix
    return found[0]


TEAMS_FILE = "group_vars/all/teams.yml"


@pytest.mark.parametrize(("teams", "words"), [
    ([*TEAMS, {"name": "alpha", "models": ["Qwen/Qwen3-8B"], "cache_salt": "x"}],
     "team 'alpha' is listed 2 times"),
    ([TEAMS[0] | {"cache_salt": "beta-2026"}, TEAMS[1]], "send one cache_salt 'beta-2026'"),
    ([TEAMS[0] | {"bucket": "lmcache"}, TEAMS[1]], "is the site bucket 'lmcache'"),
    ([TEAMS[0] | {"bucket": "shared"}, TEAMS[1] | {"bucket": "shared"}],
     "teams 'alpha' and 'beta' share bucket 'shared'"),
    ([*TEAMS, {"name": "gamma", "models": ["Qwen/Qwen3-4B"]}],
     "team 'gamma' lists 'Qwen/Qwen3-4B', which no vllm host serves"),
])
def test_team_rules_refuse_in_the_teams_file(tmp_path: Path, teams: list[dict[str, Any]],
                                             words: str) -> None:
    inventory = teams_site(tmp_path, teams, files={
        "group_vars/vllm_gaudi.yml": "lmcache_topology: inprocess\n"
                                     "lmcache_s3_bucket: lmcache-gaudi3\n"})
    problems = _problems(inventory)
    problem = _one(problems, "teams", words)
    assert problem.file.endswith(TEAMS_FILE)


def test_a_team_uid_longer_than_rgw_allows_is_refused(tmp_path: Path) -> None:
    inventory = teams_site(tmp_path)
    admin = inventory / "group_vars" / "ceph_admin.yml"
    admin.write_text(admin.read_text().replace("ceph_rgw_s3_user: lmcache",
                                               f"ceph_rgw_s3_user: {'o' * 58}"))
    problem = _one(_problems(inventory), "teams", "'beta''s identity")
    assert "is longer than 64" in problem.message and problem.file.endswith(TEAMS_FILE)


def test_a_long_default_team_bucket_is_refused(tmp_path: Path) -> None:
    inventory = teams_site(tmp_path, files={
        "group_vars/all/zz-bucket.yml": f"deploykit_s3_bucket: {'b' * 60}\n"})
    problem = _one(_problems(inventory), "teams", "-alpha' is 66 characters, S3 allows 63")
    assert problem.file.endswith(TEAMS_FILE) and "bucket" in problem.fix


def test_a_team_bucket_equal_to_a_sharing_groups_is_refused(tmp_path: Path) -> None:
    # the Gaudi host in no team, caching in what is alpha's bucket
    inventory = teams_site(tmp_path, [TEAMS[0], TEAMS[1] | {"models": ["Qwen/Qwen3-8B"]}],
                           files={"group_vars/vllm_gaudi.yml":
                                  "lmcache_topology: inprocess\n"
                                  "lmcache_s3_bucket: lmcache-alpha\nvllm_model: Qwen/Qwen3-4B\n"})
    problem = _one(_problems(inventory), "lmcache_s3_bucket", "team 'alpha''s bucket")
    assert problem.file.endswith("vllm_gaudi.yml") and problem.hosts == ("gaudi3-1",)


def test_host_level_team_rules(tmp_path: Path) -> None:
    unknown = _problems(teams_site(tmp_path / "a", files={
        "host_vars/gpu-h100-1.yml": "lmcache_team: gamma\n"}))
    problem = _one(unknown, "lmcache_team", "names team 'gamma'")
    assert problem.file.endswith("gpu-h100-1.yml") and "alpha, beta" in problem.fix
    both = _problems(teams_site(tmp_path / "b", [
        TEAMS[0], TEAMS[1] | {"models": ["Qwen/Qwen3-8B", "Qwen/Qwen3-32B"]}]))
    problem = _one(both, "lmcache_team", "gpu-h100-1's model 'Qwen/Qwen3-32B' is listed by "
                   "teams alpha, beta")
    assert problem.hosts == ("gpu-h100-1",) and "set lmcache_team" in problem.fix
    own_bucket = _problems(teams_site(tmp_path / "c", files={
        "host_vars/gpu-h100-2.yml": "lmcache_team: alpha\nlmcache_s3_bucket: elsewhere\n"}))
    problem = _one(own_bucket, "lmcache_s3_bucket", "is in team 'alpha'")
    assert problem.file.endswith("gpu-h100-2.yml") and problem.hosts == ("gpu-h100-2",)
    # a sharing group of its own and no lmcache_team: out of the team that lists its model
    out = teams_site(tmp_path / "d", files={
        "host_vars/gpu-h100-2.yml": "lmcache_s3_bucket: elsewhere\n"})
    assert not [p for p in _problems(out) if p.key in ("lmcache_team", "lmcache_s3_bucket")]
    host = open_site(str(out)).hosts["gpu-h100-2"].config
    assert host.team is None and host.cache_bucket == "elsewhere"


def test_sharing_hosts_agree_per_bucket_and_name_it(tmp_path: Path) -> None:
    # the example: Gaudi3 in-process beside server hosts of one model, in its own bucket: valid
    assert _problems(EXAMPLE) == []
    root = tmp_path / "mixed"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".deploykit-*"))
    (root / "group_vars" / "vllm_gaudi.yml").write_text("lmcache_topology: inprocess\n")
    problem = _one(_problems(root), "lmcache_topology", "gaudi3-1 has 'inprocess'")
    assert "in bucket 'lmcache'" in problem.fix
    (root / "group_vars" / "vllm_gaudi.yml").write_text(
        "lmcache_topology: inprocess\nlmcache_s3_bucket: lmcache-gaudi3\n")
    (root / "host_vars").mkdir(exist_ok=True)
    (root / "host_vars" / "gpu-h100-1.yml").write_text("lmcache_l2_encryption: true\n")
    # encryption is held per bucket by rules_encryption (once, not per model as well)
    problems = [p for p in _problems(root) if p.key == "lmcache_l2_encryption"]
    assert len(problems) == 1 and "other hosts of bucket lmcache" in problems[0].message


def test_a_host_config_knows_its_bucket() -> None:
    c = HostConfig(deploykit_s3_bucket="site", vllm_model="m",
                   teams=[{"name": "red", "models": ["m"]}])
    assert c.cache_bucket == "site-red"


def test_routers_in_front_of_several_teams_are_refused(tmp_path: Path) -> None:
    root = teams_site(tmp_path, routers=True, files={
        "group_vars/all/served.yml": "vllm_served_model_name: qwen\n"})
    problem = _one(_problems(root), "router", "serve teams alpha, beta")
    assert problem.file.endswith("hosts.yml") and "vllm_direct_sources" in problem.fix
