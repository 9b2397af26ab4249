"""What the pinned upstream versions really accept: each case names its evidence in
deploy_kit/data/compat.yaml or the renderer's comment."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from deploy_kit.config.rules_accelerators import accelerator_wheels_available
from deploy_kit.core import compat
from deploy_kit.core.errors import InventoryError
from deploy_kit.ops.site import open_site
from deploy_kit.plan.plan import build_plan
from deploy_kit.render.files import render_site
from deploy_kit.render.vllm import vllm_argv, vllm_env
from deploy_kit.verify.checks.serving import rope_override_problems
from tests.conftest import BASE_HOSTS, REPO, InventoryFactory, encrypt_vault, vault_password_file

EXAMPLE = REPO / "inventory" / "example"
FSID = "00000000-0000-0000-0000-000000000000"
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


def _site(make_inventory: InventoryFactory, **all_vars: object):  # type: ignore[no-untyped-def]
    if "vllm_rope_scaling" in all_vars:  # 4 x the model's 40960 tokens would not fit one H100
        all_vars = {"vllm_max_model_len": 32768, **all_vars}
    if all_vars.get("vllm_version") not in (None, "0.32.0"):  # torch 2.14 / 2.8: a site build
        all_vars = {"lmcache_wheel_dir": "/srv/wheelhouse/lmcache", **all_vars}
    return open_site(str(make_inventory(BASE_HOSTS, all=all_vars)))


def _hf_overrides(argv: list[str]) -> dict:
    return json.loads(argv[argv.index("--hf-overrides") + 1])


def test_corefile_catch_all_is_one_key() -> None:
    corefile = render_site(open_site(str(EXAMPLE)))["dns1"]["/etc/coredns/Corefile"].content
    assert "\n.:53 {\n" in corefile and ". :53" not in corefile


MULTISITE = {"ceph_rgw_realm": "kv", "ceph_rgw_zonegroup": "kv-zg", "ceph_rgw_zone": "kv-a"}


@pytest.mark.parametrize(("version", "hostnames", "graceful"),
                         [("18.2.4", False, False), ("19.2.6", True, False),
                          ("20.2.4", True, True)])
@pytest.mark.parametrize("multisite", [False, True])
def test_cephadm_spec_routes_virtual_hosts_and_has_only_known_fields(
        make_inventory: InventoryFactory, version: str, hostnames: bool, graceful: bool,
        multisite: bool) -> None:
    site = _site(make_inventory, deploykit_ceph_version=version,
                 deploykit_s3_fqdn="s3.example.test", **(MULTISITE if multisite else {}))
    doc = yaml.safe_load(render_site(site)["_cluster"]["cephadm/rgw-spec.yaml"].content)
    config = doc["spec"]["config"]  # where cephadm's export puts it (render/cephadm_spec.py)
    assert config["rgw_dns_name"] == "s3.example.test"
    assert config["rgw_exit_timeout_secs"] == "120"
    # the runtime must not kill a draining gateway before RGW's own exit timeout
    assert doc["extra_container_args"] == ["--stop-timeout=130"]
    assert ("rgw_graceful_stop" in config) is graceful
    # cephadm's `rgw zonegroup modify` needs realm, zonegroup and zone with the hostnames
    # (D-1): a single site relies on rgw_dns_name and never names the zonegroup's hostnames
    assert ("zonegroup_hostnames" in doc["spec"]) is (hostnames and multisite)
    if hostnames and multisite:
        assert doc["spec"]["zonegroup_hostnames"] == ["s3.example.test"]
    if multisite:
        assert {k: doc["spec"][k] for k in ("rgw_realm", "rgw_zonegroup", "rgw_zone")} == \
            {"rgw_realm": "kv", "rgw_zonegroup": "kv-zg", "rgw_zone": "kv-a"}
    else:
        assert not {"rgw_realm", "rgw_zonegroup", "rgw_zone"} & set(doc["spec"])
    # upstream RGWSpec has neither field: `ceph orch apply` would refuse the spec
    assert "rgw_exit_timeout_secs" not in doc["spec"]
    assert not any(k.startswith("concentrator") for k in doc["spec"])
    assert "/etc/haproxy/haproxy.cfg" in render_site(site)["rgw1"]  # deploykit's own HAProxy


def test_cephadm_concentrator_only_as_opt_in(make_inventory: InventoryFactory) -> None:
    site = _site(make_inventory, deploykit_ceph_version="20.2.4",
                 ceph_rgw_concentrator="cephadm")
    tree = render_site(site)
    spec = yaml.safe_load(tree["_cluster"]["cephadm/rgw-spec.yaml"].content)["spec"]
    assert spec["concentrator"] == "haproxy" and spec["concentrator_frontend_port"] == 80
    assert "/etc/haproxy/haproxy.cfg" not in tree["rgw1"]
    assert any("no upstream release" in w for w in build_plan(site).warnings)
    with pytest.raises(InventoryError, match="ceph_rgw_concentrator"):
        _site(make_inventory, ceph_rgw_mode="packages", ceph_rgw_concentrator="cephadm",
              deploykit_ceph_fsid=FSID, deploykit_ceph_mon_host="10.0.0.10")


@pytest.mark.parametrize(("version", "graceful"), [("16.2.15", False), ("20.2.4", True)])
def test_packages_ceph_conf_graceful_stop_by_version(
        make_inventory: InventoryFactory, version: str, graceful: bool) -> None:
    site = _site(make_inventory, ceph_rgw_mode="packages", deploykit_ceph_version=version,
                 deploykit_ceph_fsid=FSID,
                 deploykit_ceph_mon_host="10.0.0.10")
    conf = render_site(site)["rgw1"]["/etc/ceph/ceph.conf"].content
    assert "rgw dns name = s3.cephlab.com" in conf
    assert ("rgw graceful stop = true" in conf) is graceful


def test_every_row_on_transformers_5_renders_the_complete_rope_parameters() -> None:
    """transformers 5's rope_scaling setter replaces rope_parameters whole: every row whose
    vLLM requires transformers >= 5 must render rope_parameters (the 0.26 row did not, and
    vllm-gaudi crashed at init on rope_theta None)."""
    majors = {}
    for series in compat.supported_series("vllm"):
        table = compat.vllm(f"{series}.0")
        majors[series] = compat.transformers_major_min(table)
        if majors[series] is not None and majors[series] >= 5:
            assert table.rope_override == "rope_parameters", series
    assert majors == {"0.34": 5, "0.33": 5, "0.32": 5, "0.26": 5, "0.10": 4}


@pytest.mark.parametrize(("version", "host", "accelerator"), [
    ("0.32.0", "gpu1", "cuda"), ("0.33.0", "gpu1", "cuda"), ("0.34.0", "gpu1", "cuda"),
    ("0.26.0", "gpu1", "gaudi3")])
def test_rope_override_is_complete_under_transformers_5(
        make_inventory: InventoryFactory, version: str, host: str, accelerator: str) -> None:
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["vllm"]["hosts"] = {
        host: {"ansible_host": "10.0.1.1", "vllm_accelerator": accelerator}}
    extra = {} if version == "0.32.0" else {"lmcache_wheel_dir": "/srv/wheelhouse/lmcache"}
    site = open_site(str(make_inventory(hosts, all={
        "vllm_version": version, "vllm_rope_scaling": YARN, "vllm_max_model_len": 32768,
        **extra})))
    overrides = _hf_overrides(vllm_argv(site.hosts[host]))
    assert overrides == {"rope_parameters": {**YARN, "rope_theta": 1000000}}
    assert rope_override_problems(json.dumps(overrides), compat.vllm(version), version) == []
    stale = json.dumps({"rope_scaling": YARN})
    assert rope_override_problems(stale, compat.vllm(version), version)


def test_rope_theta_unknown_is_a_problem_and_legacy_keeps_the_flag(
        make_inventory: InventoryFactory) -> None:
    with pytest.raises(InventoryError, match=r"vllm_rope_scaling\.rope_theta"):
        _site(make_inventory, vllm_model="org/unknown-model", vllm_rope_scaling=YARN)
    given = _site(make_inventory, vllm_rope_scaling={**YARN, "rope_theta": 5e5})
    assert _hf_overrides(vllm_argv(given.hosts["gpu1"]))["rope_parameters"]["rope_theta"] == 5e5
    legacy = _site(make_inventory, vllm_version="0.10.2", vllm_rope_scaling=YARN)
    argv = vllm_argv(legacy.hosts["gpu1"])
    assert "--rope-scaling" in argv and "--hf-overrides" not in argv


def test_a_stopping_vllm_drains_its_requests_where_the_flag_exists(
        make_inventory: InventoryFactory) -> None:
    """--shutdown-timeout (vLLM 0.18+): SIGTERM lets open requests finish; systemd waits
    that long plus the teardown. Series before it, or 0, keep vLLM's abort."""
    from deploy_kit.render.vllm import host_instances, render_unit

    def rendered(**all_vars: object) -> tuple[list[str], str]:
        host = _site(make_inventory, **all_vars).hosts["gpu1"]
        return vllm_argv(host), render_unit(host, host_instances(host)[0])

    argv, unit = rendered()
    assert argv[argv.index("--shutdown-timeout") + 1] == "60"
    assert "\nTimeoutStopSec=120\n" in unit
    argv, unit = rendered(vllm_shutdown_timeout=300)
    assert argv[argv.index("--shutdown-timeout") + 1] == "300"
    assert "\nTimeoutStopSec=360\n" in unit
    for off in ({"vllm_shutdown_timeout": 0},
                {"vllm_version": "0.10.2", "vllm_max_model_len": 32768}):
        argv, unit = rendered(**off)
        assert "--shutdown-timeout" not in argv and "\nTimeoutStopSec=120\n" in unit
        assert "\nExecStop=" not in unit  # the stop helper only where vLLM drains
    assert not compat.vllm("0.10.2").shutdown_timeout
    assert all(compat.vllm(v).shutdown_timeout for v in ("0.26.0", "0.32.0", "0.33.0", "0.34.0"))


def test_served_model_name_and_api_key_never_in_argv(make_inventory: InventoryFactory) -> None:
    inv = make_inventory(BASE_HOSTS, all={"vllm_served_model_name": "qwen",
                                          "vllm_api_key": "{{ vault_vllm_api_key }}"},
                         files={"group_vars/all/vault.yml":
                                encrypt_vault("vault_vllm_api_key: sk-not-real\n")})
    site = open_site(str(inv), vault_password_file(inv))
    host = site.hosts["gpu1"]
    argv = vllm_argv(host)
    assert argv[argv.index("--served-model-name") + 1] == "qwen"
    tree = render_site(site)["gpu1"]
    secret = tree["/etc/deploykit/vllm-secret.env"]
    assert secret.mode == 0o600 and secret.secret
    assert "sk-not-real" not in "".join(f.content for f in tree.values())
    assert "EnvironmentFile=/etc/deploykit/vllm-secret.env" in \
        tree["/etc/systemd/system/vllm.service"].content
    assert "--api-key" not in argv


def test_api_key_inline_is_refused(make_inventory: InventoryFactory) -> None:
    inv = make_inventory(BASE_HOSTS, all={"vllm_api_key": "sk-inline"})
    from deploy_kit.config.load import load_inventory
    from deploy_kit.config.site import build_site

    _, problems = build_site(load_inventory(inv))
    assert {p.key for p in problems} == {"vllm_api_key"}  # one per host


def test_gaudi_env_uses_the_bucketing_strategy(make_inventory: InventoryFactory) -> None:
    hosts = {"all": {"children": {**BASE_HOSTS["all"]["children"], "vllm": {"hosts": {
        "g1": {"ansible_host": "10.0.1.3", "vllm_accelerator": "gaudi3"}}}}}}
    site = open_site(str(make_inventory(hosts, all={"vllm_version": "0.26.0"})))
    env = vllm_env(site.hosts["g1"])
    assert env["VLLM_BUCKETING_STRATEGY"] == "exp" and env["PT_HPU_GPU_MIGRATION"] == "1"
    assert not {"VLLM_USE_V1", "VLLM_SKIP_WARMUP", "VLLM_EXPONENTIAL_BUCKETING"} & set(env)
    dev = open_site(str(make_inventory(hosts, all={"vllm_version": "0.26.0",
                                                   "vllm_gaudi_skip_warmup": True,
                                                   "vllm_gaudi_bucketing_strategy": "lin"})))
    assert vllm_env(dev.hosts["g1"])["VLLM_SKIP_WARMUP"] == "true"
    assert vllm_env(dev.hosts["g1"])["VLLM_BUCKETING_STRATEGY"] == "lin"
    old = open_site(str(make_inventory(hosts, all={"vllm_version": "0.10.2"})))
    assert vllm_env(old.hosts["g1"])["VLLM_EXPONENTIAL_BUCKETING"] == "True"
    with pytest.raises(InventoryError, match="vllm_gaudi_bucketing_strategy"):
        open_site(str(make_inventory(hosts, all={"vllm_version": "0.10.2",
                                                 "vllm_gaudi_bucketing_strategy": "pad"})))


def test_rocm_wheelhouse_and_device_groups(make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory()))
    unit = render_site(site)["gpu2"]["/etc/systemd/system/vllm.service"].content
    assert "SupplementaryGroups=video render" in unit
    assert "SupplementaryGroups" not in render_site(site)["gpu1"][
        "/etc/systemd/system/vllm.service"].content
    assert {p.key for p in accelerator_wheels_available(site)} == {"vllm_wheel_dir",
                                                                    "lmcache_wheel_dir"}
    assert any("vllm_wheel_dir" in w for w in build_plan(site).warnings)
    assert not list(accelerator_wheels_available(open_site(str(EXAMPLE))))


def test_aws_profile_and_haproxy_stats_login() -> None:
    tree = render_site(open_site(str(EXAMPLE)))
    profile = tree["gpu-h100-1"]["/etc/deploykit/aws/config"].content
    assert "request_checksum_calculation = when_required" in profile
    assert "response_checksum_validation = when_required" in profile
    cfg = tree["rgw1"]["/etc/haproxy/haproxy.cfg"].content
    assert 'stats auth "${DEPLOYKIT_STATS_USER}:${DEPLOYKIT_STATS_PASSWORD}"' in cfg
    env = tree["rgw1"]["/etc/haproxy/deploykit-stats.env"]
    assert env.mode == 0o600 and env.secret and "<vault:" in env.content
    dropin = tree["rgw1"]["/etc/systemd/system/haproxy.service.d/deploykit-stats.conf"].content
    assert "EnvironmentFile=/etc/haproxy/deploykit-stats.env" in dropin
    assert "EnvironmentFile=-" not in dropin

