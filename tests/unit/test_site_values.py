"""Site-wide values are read from every host that sets them (not the first gateway's alone),
must agree, and the agreed value is what the render writes."""

from __future__ import annotations

import ast
import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml

from deploy_kit.config.models import HostConfig
from deploy_kit.config.site import PER_HOST_SETTINGS, SITE_KEYS
from deploy_kit.core.errors import Problem
from deploy_kit.ops.rundir import SETTINGS_PATH, SITE_PATH, role_tree
from deploy_kit.ops.site import open_site
from deploy_kit.render.files import CLUSTER
from tests.conftest import BASE_HOSTS, REPO, InventoryFactory, inventory_problems

EXAMPLE = REPO / "inventory" / "example"


def _example(tmp_path: Path, **group_vars: dict) -> Path:
    """The shipped example with group_vars/<group>.yml updated by `group_vars`."""
    root = tmp_path / "example"
    shutil.copytree(EXAMPLE, root)
    for group, values in group_vars.items():
        path = root / "group_vars" / f"{group}.yml"
        data = yaml.safe_load(path.read_text()) if path.exists() else {}
        path.write_text(yaml.safe_dump({**(data or {}), **values}))
    return root


def _problems(inventory: Path) -> list[Problem]:
    return inventory_problems(inventory)


def test_the_example_is_valid_and_its_admin_values_count(tmp_path: Path) -> None:
    site = open_site(str(_example(tmp_path, ceph_admin={"ceph_rgw_s3_user": "cacheowner",
                                                          "ceph_rgw_s3_lifecycle_days": 3})))
    tree = role_tree(site)
    facts = json.loads(tree[CLUSTER][SITE_PATH].content)
    assert facts["s3"]["owner"] == "cacheowner"
    assert facts["s3"]["serving_users"] and all(
        u.startswith("cacheowner-serving-") for u in facts["s3"]["serving_users"])
    assert facts["lifecycle"]["Rules"][0]["Expiration"] == {"Days": 3}
    # every host's settings carry the agreed value, not its own default
    for host in site.hosts:
        settings = json.loads(tree[host][SETTINGS_PATH].content)
        assert settings["ceph_rgw_s3_user"] == "cacheowner", host
    assert site.settings_source("ceph_rgw_s3_user").endswith("group_vars/ceph_admin.yml")


def test_no_expiry_and_no_quota_on_the_admin_host_is_refused(tmp_path: Path) -> None:
    found = _problems(_example(tmp_path, ceph_admin={"ceph_rgw_s3_lifecycle_days": 0,
                                                       "ceph_rgw_s3_quota_bytes": 0}))
    assert [p.key for p in found] == ["ceph_rgw_s3_lifecycle_days"]
    assert found[0].file.endswith("group_vars/ceph_admin.yml")
    assert "no expiry" in found[0].message


def test_admin_and_gateway_disagreeing_is_refused_naming_both(tmp_path: Path) -> None:
    found = _problems(_example(tmp_path, ceph_admin={"ceph_rgw_s3_user": "cacheowner"},
                               rgw={"ceph_rgw_s3_user": "other"}))
    assert [p.key for p in found] == ["ceph_rgw_s3_user"]
    line = str(found[0])
    # both files, both values and a host of each
    assert "group_vars/ceph_admin.yml" in line and "group_vars/rgw.yml" in line
    assert "'cacheowner'" in line and "'other'" in line
    site_hosts = yaml.safe_load((EXAMPLE / "hosts.yml").read_text())["all"]["children"]
    admin = next(iter(site_hosts["ceph_admin"]["hosts"]))
    assert admin in line


@pytest.mark.parametrize("key", ["ceph_rgw_s3_lifecycle_days", "deploykit_s3_bucket",
                                 "consul_datacenter", "deploykit_dns_mode"])
def test_a_serving_host_disagreeing_is_refused(make_inventory: InventoryFactory,
                                               key: str) -> None:
    values = {"ceph_rgw_s3_lifecycle_days": (3, 5), "deploykit_s3_bucket": ("kvone", "kvtwo"),
              "consul_datacenter": ("east", "west"),
              "deploykit_dns_mode": ("static", "consul")}[key]
    found = [p for p in _problems(make_inventory(ceph_admin={key: values[0]},
                                                 vllm={key: values[1]})) if p.key == key]
    assert len(found) == 1
    assert {Path(found[0].file).name} <= {"ceph_admin.yml", "vllm.yml"}
    assert "ceph_admin.yml" in str(found[0]) and "vllm.yml" in str(found[0])


def test_one_value_set_in_two_places_is_accepted(make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(ceph_admin={"ceph_rgw_s3_lifecycle_days": 3},
                                        vllm={"ceph_rgw_s3_lifecycle_days": 3})))
    assert site.settings.ceph_rgw_s3_lifecycle_days == 3
    assert {h.config.ceph_rgw_s3_lifecycle_days for h in site.hosts.values()} == {3}


def test_a_value_set_only_on_a_serving_host_is_the_sites(make_inventory: InventoryFactory
                                                          ) -> None:
    site = open_site(str(make_inventory(vllm={"ceph_rgw_s3_quota_bytes": 1 << 40})))
    assert site.settings.ceph_rgw_s3_quota_bytes == 1 << 40
    assert site.hosts["rgw1"].config.ceph_rgw_s3_quota_bytes == 1 << 40
    assert site.settings_source("ceph_rgw_s3_quota_bytes").endswith("group_vars/vllm.yml")


def test_cephadm_gateways_share_one_spec(make_inventory: InventoryFactory) -> None:
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["rgw"]["hosts"]["rgw2"]["ceph_rgw_frontend_port"] = 8081
    found = _problems(make_inventory(hosts=hosts, rgw={"ceph_rgw_mode": "cephadm"}))
    assert [p.key for p in found] == ["ceph_rgw_frontend_port"]


def _read_from_settings() -> dict[str, set[str]]:
    """Every HostConfig key deploy_kit reads from `site.settings` (directly, through a local
    name for it, or as settings_source's key), with the files that read it."""
    found: dict[str, set[str]] = {}
    for path in (REPO / "deploy_kit").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            aliases = {t.id for node in ast.walk(fn) if isinstance(node, ast.Assign)
                       and ast.unparse(node.value) == "site.settings"
                       for t in node.targets if isinstance(t, ast.Name)}
            for node in ast.walk(fn):
                key = None
                if isinstance(node, ast.Attribute) and (
                        ast.unparse(node.value) == "site.settings"
                        or (isinstance(node.value, ast.Name) and node.value.id in aliases)):
                    key = node.attr
                elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith(
                        "settings_source") and node.args and \
                        isinstance(node.args[0], ast.Constant):
                    key = str(node.args[0].value)
                if key is not None:
                    found.setdefault(key, set()).add(str(path.relative_to(REPO)))
    return found


def test_every_key_read_from_the_site_settings_is_site_wide_or_named_per_host() -> None:
    read = _read_from_settings()
    assert "ceph_rgw_s3_lifecycle_days" in read and "deploykit_s3_fqdn" in read  # the scan
    unlisted = {k: sorted(v) for k, v in read.items() if k in HostConfig.model_fields
                and k not in SITE_KEYS and k not in PER_HOST_SETTINGS}
    assert not unlisted, f"add to config/site.py SITE_KEYS (or PER_HOST_SETTINGS): {unlisted}"
    assert set(SITE_KEYS) | set(PER_HOST_SETTINGS) <= set(HostConfig.model_fields)
    assert not set(SITE_KEYS) & set(PER_HOST_SETTINGS)
    # every S3 bucket setting is one value for the site
    assert {k for k in HostConfig.model_fields if k.startswith("ceph_rgw_s3_")} <= \
        set(SITE_KEYS)
