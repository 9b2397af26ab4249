"""Upgrades as a flow: detection from the converge records' versions against the inventory,
the cold-cache (key space) rule against LMCache's key layouts, the waves (canary, batches,
resume), and what `up` prints and runs for them (the playbook runs and verify replaced)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.cache.keys import parse_key
from deploy_kit.cli.app import main
from deploy_kit.cli.environment import Environment
from deploy_kit.config.site import Site
from deploy_kit.ops.converged import watch
from deploy_kit.ops.site import open_site
from deploy_kit.plan import upgrade as up
from tests.conftest import InventoryFactory

# vLLM 0.33/0.34 on CUDA pin torch 2.14: the site brings an LMCache built against it
SERVING_VARS = {"vllm_accelerator": "cuda", "vllm_model": "Qwen/Qwen3-8B",
                "lmcache_wheel_dir": "/srv/wheelhouse/lmcache-torch214"}

# a Consul newer than deploykit's pin needs the site's own sha256 (docs/dns.md)
CONSUL_117_SHA = "0" * 64


def fleet(make_inventory: InventoryFactory, serving: int, instances: int = 1,
          **vllm: Any) -> Site:
    """The base topology with `serving` serving hosts (each `instances` vLLM instances)."""
    hosts = {"all": {"children": {
        "ceph_admin": {"hosts": {"adm1": {"ansible_host": "10.0.0.10"}}},
        "rgw": {"hosts": {"rgw1": {"ansible_host": "10.0.0.11"},
                          "rgw2": {"ansible_host": "10.0.0.12"}}},
        "consul_servers": {"hosts": {"c1": {"ansible_host": "10.0.0.21"},
                                     "c2": {"ansible_host": "10.0.0.22"},
                                     "c3": {"ansible_host": "10.0.0.23"}}},
        "dns": {"hosts": {"rgw1": {}, "rgw2": {}}},
        "vllm": {"hosts": {f"gpu{i:04d}": {"ansible_host": f"10.1.{i // 250}.{i % 250 + 1}"}
                           for i in range(serving)},
                 "vars": {**SERVING_VARS, "vllm_instances": instances,
                          "vllm_accelerator_count": instances, **vllm}}}}}
    return open_site(str(make_inventory(hosts=hosts)))


def records(site: Site, hosts: list[str] | None = None) -> dict[str, dict[str, Any] | None]:
    """What the hosts' converge records would say after a converge of `site`."""
    return {h: up.host_versions(site.hosts[h]) for h in hosts or site.hosts
            if up.host_versions(site.hosts[h])}


# --- detection ------------------------------------------------------------------------

def test_a_vllm_bump_moves_every_serving_host_and_starts_a_new_key_space(
        make_inventory: InventoryFactory) -> None:
    old = fleet(make_inventory, 3, vllm_version="0.33.0")
    new = fleet(make_inventory, 3, vllm_version="0.34.0")
    found = up.detect(new, records(old))
    assert set(found.moving) == {"gpu0000", "gpu0001", "gpu0002"}
    assert all(found.moving[h] == {"vllm", up.KEY_SPACE} for h in found.moving)
    assert [(c.component, c.old, c.new, len(c.hosts)) for c in found.changes] == [
        ("vllm", "0.33.0", "0.34.0", 3)]
    lines = found.lines()
    assert lines[0] == ("upgrade: vllm 0.33.0 → 0.34.0 on 3 hosts "
                        "(gpu0000, gpu0001, gpu0002)")
    assert lines[1].startswith("cold cache: new key space (vllm_version 0.33.0 → 0.34.0)")
    assert "hits start from zero" in lines[1] and "lifecycle" in lines[1]
    # the gateways and Consul servers run what their records say: not moving
    assert {"rgw1", "rgw2", "c1", "c2", "c3"} <= found.current


def test_nothing_changed_is_no_upgrade_and_unknown_records_are_first_installs(
        make_inventory: InventoryFactory) -> None:
    site = fleet(make_inventory, 2)
    assert not up.detect(site, records(site)).pending
    found = up.detect(site, {"gpu0000": None, "gpu0001": {}})
    assert not found.pending and not found.lines()
    assert "first install" in found.unknown["gpu0000"]
    assert "older deploykit" in found.unknown["gpu0001"]
    assert "adm1" not in found.unknown  # runs no versioned component


def test_consul_and_coredns_bumps_move_the_hosts_that_run_them(
        make_inventory: InventoryFactory) -> None:
    old = fleet(make_inventory, 2)
    new = open_site(str(make_inventory(
        hosts=yaml.safe_load((new_root := Path(old.inventory_source)).joinpath(
            "hosts.yml").read_text()),
        all={"consul_version": "1.17.0",
             "consul_archive_sha256": CONSUL_117_SHA})))
    del new_root
    found = up.detect(new, records(old))
    assert set(found.moving) == {"c1", "c2", "c3", "rgw1", "rgw2"}
    assert not found.cold_cache  # Consul does not name LMCache's objects
    waves = up.plan_waves(new, found)
    # canary per tier (Consul servers, then gateways), then one host at a time, servers
    # before the agents
    assert [(w.tier, w.hosts, w.canary) for w in waves] == [
        ("consul servers", ("c1",), True), ("gateways", ("rgw1",), True),
        ("consul servers", ("c2",), False), ("consul servers", ("c3",), False),
        ("gateways", ("rgw2",), False)]
    assert not any(w.restart_serving for w in waves)


# --- the key space ----------------------------------------------------------------------

KEY_FIELD_SETTINGS = {
    # the fields parse_key reads out of every layout, and the settings that write them
    "model": {"vllm_model", "vllm_served_model_name"},
    "world_size": {"vllm_tensor_parallel_size", "vllm_pipeline_parallel_size"},
    "dtype": {"vllm_kv_cache_dtype", "vllm_dtype"},
    "chunk_hash": {"lmcache_chunk_size", "lmcache_pre_caching_hash_algorithm",
                   "vllm_python_hash_seed"},
}


def test_every_field_of_an_object_name_is_covered_by_the_key_space_settings() -> None:
    connector = parse_key("Qwen_Qwen3-8B@2@1@-5f3a@bfloat16")
    server = parse_key(f"Qwen/Qwen3-8B@{(2 << 24) | (1 << 16):08x}@0@5f3a")
    assert connector is not None and server is not None
    for key in (connector, server):
        assert set(vars(key)) - {"rank"} == set(KEY_FIELD_SETTINGS)
    for settings in KEY_FIELD_SETTINGS.values():
        assert settings <= set(up.KEY_SPACE_SETTINGS)


@pytest.mark.parametrize(("setting", "before", "after", "cold"), [
    ("vllm_tensor_parallel_size", 1, 2, True),
    ("vllm_kv_cache_dtype", "auto", "fp8", True),
    ("lmcache_chunk_size", 256, 512, True),
    ("lmcache_pre_caching_hash_algorithm", "sha256_cbor", "sha256", True),
    ("vllm_python_hash_seed", 67, 68, True),
    ("vllm_model", "Qwen/Qwen3-8B", "Qwen/Qwen3-32B", True),
    ("lmcache_remote_serde", "naive", "cachegen", True),
    # these change what a host runs, not what its objects are named
    ("vllm_gpu_memory_utilization", 0.8, 0.9, False),
    ("lmcache_s3_num_io_threads", 64, 32, False),
    ("vllm_max_model_len", 8192, 16384, False),
])
def test_which_setting_changes_start_a_new_key_space(
        make_inventory: InventoryFactory, setting: str, before: Any, after: Any,
        cold: bool) -> None:
    extra: dict[str, Any] = \
        {"vllm_accelerator_count": 2} if setting == "vllm_tensor_parallel_size" else {}
    if setting == "vllm_model":  # Qwen3-32B at TP 1 on an H100: 32K beside its CUDA graphs
        extra["vllm_max_model_len"] = 32768
    old = fleet(make_inventory, 2, **extra, **{setting: before})
    new = fleet(make_inventory, 2, **extra, **{setting: after})
    found = up.detect(new, records(old))
    assert found.cold_cache is cold
    assert found.pending is cold  # only the key space is recorded of these settings
    if cold:
        # the served name follows the model where it is unset
        assert next(k.setting for k in found.key_changes) == setting
        assert found.lines()[-1].startswith(f"cold cache: new key space ({setting} ")


def test_a_host_moved_to_another_bucket_starts_a_new_key_space(
        make_inventory: InventoryFactory) -> None:
    """A sharing group of its own (or a team) is another bucket: none of the old objects."""
    old = fleet(make_inventory, 2)
    new = fleet(make_inventory, 2, lmcache_s3_bucket="lmcache-other")
    found = up.detect(new, records(old))
    assert found.cold_cache and {k.setting for k in found.key_changes} == {"cache_bucket"}
    assert found.key_changes[0].new == "lmcache-other"


def test_the_record_keeps_the_versions_the_watch_renders(
        make_inventory: InventoryFactory) -> None:
    site = fleet(make_inventory, 1)
    serving = watch(site.hosts["gpu0000"], [])["versions"]
    assert set(serving) == {"vllm", "lmcache", up.KEY_SPACE}
    assert serving["key_space"]["vllm_served_model_name"] == "Qwen/Qwen3-8B"
    json.dumps(serving)  # the module stores it as JSON
    assert set(watch(site.hosts["rgw1"], [])["versions"]) == {"ceph", "consul", "coredns"}
    assert watch(site.hosts["adm1"], [])["versions"] == {}
    record_task = Path("roles/deploykit_common/tasks/converged_record.yml").read_text()
    assert "versions: \"{{ __deploykit_common_watch.versions" in record_task


def test_the_converge_module_writes_the_versions_into_the_record(tmp_path: Path) -> None:
    record = tmp_path / "converged.json"
    args = {"ANSIBLE_MODULE_ARGS": {
        "state": "record", "digest": "d", "record_path": str(record),
        "versions": {"vllm": "0.34.0", "key_space": {"lmcache_chunk_size": 256}}}}
    done = subprocess.run([sys.executable, "plugins/modules/deploykit_converged.py"],
                          input=json.dumps(args), capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": str(Path.cwd()), "PATH": "/usr/bin:/bin"})
    assert json.loads(done.stdout)["changed"] is False, done.stderr
    assert json.loads(record.read_text())["versions"] == args["ANSIBLE_MODULE_ARGS"]["versions"]
    from deploy_kit.transport.records import parse
    assert parse("none\n") is None and parse('{"vllm": "0.34.0"}\n') == {"vllm": "0.34.0"}


# --- batches and waves -------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "total", "size"), [
    ("10%", 1, 1), ("10%", 2, 1), ("10%", 7, 1), ("10%", 1000, 100), ("10%", 11, 2),
    ("1", 1000, 1), ("25", 7, 25), ("100%", 7, 7), ("33%", 1000, 330)])
def test_batch_size_is_a_count_or_a_rounded_up_share_never_zero(
        spec: str, total: int, size: int) -> None:
    assert up.batch_size(spec, total) == size


@pytest.mark.parametrize("spec", ["0", "0%", "150%", "ten", "-1", "5.5", ""])
def test_a_batch_that_is_not_a_count_or_share_is_refused(spec: str) -> None:
    with pytest.raises(up.BatchError, match="--batch"):
        up.batch_size(spec, 10)


@pytest.mark.parametrize(("serving", "batch", "sizes"), [
    (1, None, [1]),  # the canary alone
    (2, None, [1, 1]),
    (7, None, [1, 1, 1, 1, 1, 1, 1]),  # 10% of 7 rounds up to 1
    (7, "3", [1, 3, 3]),
    (7, "50%", [1, 4, 2]),
])
def test_serving_waves_are_a_canary_then_batches_every_host_once(
        make_inventory: InventoryFactory, serving: int, batch: str | None,
        sizes: list[int]) -> None:
    old = fleet(make_inventory, serving, instances=8, lmcache_version="0.5.5")
    new = fleet(make_inventory, serving, instances=8, lmcache_version="0.5.6")
    found = up.detect(new, records(old))
    waves = up.plan_waves(new, found, batch=batch)
    assert [len(w.hosts) for w in waves] == sizes
    assert waves[0].canary and not any(w.canary for w in waves[1:])
    rolled = [h for w in waves for h in w.hosts]
    assert sorted(rolled) == sorted(found.moving) and len(set(rolled)) == len(rolled)
    assert all(w.restart_serving and w.tier == "serving" for w in waves)


def test_a_thousand_serving_hosts_roll_in_ten_percent_batches(
        make_inventory: InventoryFactory) -> None:
    old = fleet(make_inventory, 1000, vllm_version="0.33.0")
    new = fleet(make_inventory, 1000, vllm_version="0.34.0")
    waves = up.plan_waves(new, up.detect(new, records(old)))
    assert [len(w.hosts) for w in waves] == [1] + [100] * 9 + [99]
    # resumed after four waves: the records of 301 hosts say 0.34.0 already
    done = [h for w in waves[:4] for h in w.hosts]
    mixed = {**records(old), **records(new, done)}
    resumed = up.plan_waves(new, up.detect(new, mixed))
    assert not any(w.canary for w in resumed)  # the canary is not rolled again
    assert [w.hosts for w in resumed] == [w.hosts for w in waves[4:]]  # same batches


def test_canary_choice_no_canary_and_a_canary_that_does_not_move(
        make_inventory: InventoryFactory) -> None:
    old = fleet(make_inventory, 4, vllm_version="0.33.0")
    new = fleet(make_inventory, 4, vllm_version="0.34.0")
    found = up.detect(new, records(old))
    waves = up.plan_waves(new, found, canary="gpu0002")
    assert waves[0].hosts == ("gpu0002",) and "gpu0002" not in waves[1].hosts
    assert not any(w.canary for w in up.plan_waves(new, found, no_canary=True))
    with pytest.raises(up.FlowError, match="nothing moves on that host"):
        up.plan_waves(new, found, canary="rgw1")
    with pytest.raises(up.FlowError, match="no such host"):
        up.plan_waves(new, found, canary="nope")


def test_a_host_pinned_to_another_version_does_not_count_as_upgraded(
        make_inventory: InventoryFactory) -> None:
    """gpu0000 stays on 0.33.0 by a host var: it is current, but not at 0.34.0, so the
    others still get their canary."""
    old = fleet(make_inventory, 3, vllm_version="0.33.0")
    new = fleet(make_inventory, 3, vllm_version="0.34.0")
    recorded = records(old)
    found = up.detect(new, recorded)
    found.current.add("gpu0000")
    del found.moving["gpu0000"]
    site_with_pin = old  # gpu0000's inventory says 0.33.0 there
    mixed = Site(**{**vars(new), "hosts": {**new.hosts, "gpu0000": site_with_pin.hosts[
        "gpu0000"]}})
    assert up.plan_waves(mixed, found)[0].canary


def test_a_consul_server_that_also_serves_rolls_as_a_consul_server(
        make_inventory: InventoryFactory) -> None:
    hosts = {"all": {"children": {
        "consul_servers": {"hosts": {"lab3": {"ansible_host": "10.0.0.3"}}},
        "rgw": {"hosts": {"lab1": {"ansible_host": "10.0.0.1"}}},
        "dns": {"hosts": {"lab1": {}}},
        "ceph_admin": {"hosts": {"adm": {"ansible_host": "10.0.0.9"}}},
        "vllm": {"hosts": {"lab3": {}, "lab4": {"ansible_host": "10.0.0.4"}},
                 "vars": SERVING_VARS}}}}
    old = open_site(str(make_inventory(hosts=hosts)))
    new = open_site(str(make_inventory(hosts=hosts, all={"consul_version": "1.17.0",
             "consul_archive_sha256": CONSUL_117_SHA,
                                                         "vllm_version": "0.33.0"})))
    found = up.detect(new, records(old))
    assert found.moving["lab3"] == {"consul", "vllm", up.KEY_SPACE}
    tiers = {h: up.tier_of(new.hosts[h], found.moving[h]).name for h in found.moving}
    assert tiers == {"lab3": "consul servers", "lab1": "gateways", "lab4": "serving"}
    waves = up.plan_waves(new, found)
    assert [w.hosts for w in waves] == [("lab4",), ("lab3",), ("lab1",)]  # serving first
    assert [w.restart_serving for w in waves] == [True, True, False]


# --- `up` -------------------------------------------------------------------------------

class Calls:
    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.verified: list[str] = []
        self.fail_verify: set[str] = set()


@pytest.fixture
def flow(monkeypatch: pytest.MonkeyPatch) -> Calls:
    """`up` with the playbook runs and verify replaced: what each wave ran and verified."""
    from deploy_kit.core.errors import VerifyFailed
    from deploy_kit.flows import converge, upgrade

    calls = Calls()

    def run(verb: str, playbook: str, inventory: Any, vault: Any, options: Any,
            run_vars: dict[str, Any], connection: Any, listing: Any,
            lock_wait: float = 0.0) -> None:
        calls.runs.append({"limit": options.limit, "vars": dict(run_vars),
                           "check": options.check})

    def verify(site: Any, wave: Any, connection: Any, title: str, *a: Any) -> None:
        limit = ",".join(wave.hosts)
        calls.verified.append(limit)
        if limit in calls.fail_verify:
            raise VerifyFailed("1 check(s) failed after the upgrade of " + limit)

    monkeypatch.setattr(converge, "_run_playbook", run)
    monkeypatch.setattr(upgrade, "verify_wave", verify)
    return calls


def with_records(monkeypatch: pytest.MonkeyPatch, recorded: dict[str, Any]) -> None:
    from deploy_kit.transport import records as rec

    monkeypatch.setattr(rec, "read_versions", lambda site, hosts=None: {
        h: v for h, v in recorded.items() if hosts is None or h in hosts})


def run_up(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = main(["up", *args], Environment(stdin=io.StringIO(), stdout=out, stderr=err,
                                         env={**os.environ, "COLUMNS": "400"}, color=False))
    return rc, err.getvalue() + out.getvalue()


def test_up_rolls_the_waves_verifying_each_then_the_rest(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch,
        flow: Calls) -> None:
    old = fleet(make_inventory, 3, vllm_version="0.33.0")
    new = fleet(make_inventory, 3, vllm_version="0.34.0")
    with_records(monkeypatch, records(old))
    rc, out = run_up("-i", str(new.inventory_source), "--batch", "2")
    assert rc == 0, out
    assert "upgrade: vllm 0.33.0 → 0.34.0 on 3 hosts" in out
    assert "cold cache: new key space" in out
    # the last run converges what no wave did, the wave hosts left out by name
    assert [r["limit"] for r in flow.runs] == ["gpu0000", "gpu0001,gpu0002",
                                               "*,!gpu0000,!gpu0001,!gpu0002"]
    assert flow.verified == ["gpu0000", "gpu0001,gpu0002"]
    assert [r["vars"].get("deploykit_restart_serving") for r in flow.runs] == [
        True, True, None]
    assert "upgrade done" in out


def test_a_failed_verify_stops_the_flow_with_exit_6_and_says_how_to_resume(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch,
        flow: Calls) -> None:
    old = fleet(make_inventory, 3, vllm_version="0.33.0")
    new = fleet(make_inventory, 3, vllm_version="0.34.0")
    with_records(monkeypatch, records(old))
    flow.fail_verify = {"gpu0000"}
    rc, out = run_up("-i", str(new.inventory_source), "--batch", "1")
    assert rc == 6
    assert [r["limit"] for r in flow.runs] == ["gpu0000"]  # nothing after the canary
    assert "wave 1/3: serving canary" in out
    assert f"resume with `deploykit up -i {new.inventory_source} --batch 1`" in out
    # the resume: the canary's record says 0.34.0 now; the same command goes on
    flow.runs.clear()
    flow.verified.clear()
    flow.fail_verify = set()
    with_records(monkeypatch, {**records(old), **records(new, ["gpu0000"])})
    rc, out = run_up("-i", str(new.inventory_source), "--batch", "1")
    assert rc == 0, out
    assert [r["limit"] for r in flow.runs] == ["gpu0001", "gpu0002",
                                               "*,!gpu0001,!gpu0002"]
    assert "canary" not in " ".join(line for line in out.splitlines()
                                    if line.strip().startswith("wave"))


def test_pause_after_canary_stops_with_exit_0(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch,
        flow: Calls) -> None:
    old = fleet(make_inventory, 3, lmcache_chunk_size=256)
    new = fleet(make_inventory, 3, lmcache_chunk_size=512)
    with_records(monkeypatch, records(old))
    rc, out = run_up("-i", str(new.inventory_source), "--pause-after-canary",
                     "--canary", "gpu0001")
    assert rc == 0, out
    assert [r["limit"] for r in flow.runs] == ["gpu0001"]
    assert "paused after the canary" in out


def test_no_upgrade_is_one_ordinary_run_and_check_mode_only_shows_the_waves(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch,
        flow: Calls) -> None:
    old = fleet(make_inventory, 2, vllm_version="0.33.0")
    with_records(monkeypatch, records(old))
    rc, out = run_up("-i", str(old.inventory_source))
    assert rc == 0 and [r["limit"] for r in flow.runs] == [None]
    assert "upgrade:" not in out
    new = fleet(make_inventory, 2, vllm_version="0.34.0")
    flow.runs.clear()
    rc, out = run_up("-i", str(new.inventory_source), "--check")
    assert rc == 0, out
    assert "wave 1/2: serving canary" in out and flow.verified == []
    assert flow.runs == [{"limit": None, "vars": {}, "check": True}]


def test_restart_serving_with_a_canary_stages_the_restart(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch,
        flow: Calls) -> None:
    site = fleet(make_inventory, 2)
    with_records(monkeypatch, records(site))
    rc, out = run_up("-i", str(site.inventory_source), "--restart-serving", "--canary",
                     "gpu0001")
    assert rc == 0, out
    assert [r["limit"] for r in flow.runs] == ["gpu0001", "gpu0000", "*,!gpu0000,!gpu0001"]
    assert flow.verified == ["gpu0001", "gpu0000"]
    # the waves restarted every serving host: the last run restarts none again
    assert [r["vars"].get("deploykit_restart_serving") for r in flow.runs] == [
        True, True, None]
    assert "rollout done" in out
    # a staged restart keeps no state: a stop names the hosts it did not reach
    flow.runs.clear()
    flow.fail_verify = {"gpu0001"}
    rc, out = run_up("-i", str(site.inventory_source), "--restart-serving", "--canary",
                     "gpu0001")
    assert rc == 6
    assert (f"`deploykit up -i {site.inventory_source} --restart-serving --limit gpu0000`"
            in out.replace("\n", " "))


def test_the_last_run_keeps_the_users_limit_and_restarts_serving_hosts_no_wave_did(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch,
        flow: Calls) -> None:
    """Only the gateways move (Consul); --restart-serving: the serving hosts restart in the
    last run. With --limit, nothing outside it is read, rolled or run."""
    old = fleet(make_inventory, 2)
    root = make_inventory(hosts=yaml.safe_load(
        Path(old.inventory_source, "hosts.yml").read_text()), all={"consul_version": "1.17.0",
             "consul_archive_sha256": CONSUL_117_SHA})
    with_records(monkeypatch, records(old))
    rc, out = run_up("-i", str(root), "--restart-serving", "--limit", "rgw,vllm")
    assert rc == 0, out
    assert [r["limit"] for r in flow.runs] == ["rgw1", "rgw2", "rgw,vllm,!rgw1,!rgw2"]
    assert [r["vars"].get("deploykit_restart_serving") for r in flow.runs] == [
        True, True, True]
    assert "c1" not in out  # the Consul servers are outside the limit


def test_a_host_whose_record_cannot_be_read_is_warned_about_and_left_to_the_last_run(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch,
        flow: Calls) -> None:
    old = fleet(make_inventory, 3, vllm_version="0.33.0")
    new = fleet(make_inventory, 3, vllm_version="0.34.0")
    with_records(monkeypatch, {**records(old), "gpu0002": "unreachable through Ansible"})
    rc, out = run_up("-i", str(new.inventory_source))
    assert rc == 0, out
    assert "gpu0002: its converge record could not be read (unreachable" in out
    assert [r["limit"] for r in flow.runs] == ["gpu0000", "gpu0001", "*,!gpu0000,!gpu0001"]


def test_bad_flow_options_exit_2_before_any_host_is_read(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch,
        flow: Calls) -> None:
    from deploy_kit.transport import records as rec

    def no(*a: Any, **k: Any) -> None:
        raise AssertionError("a host was read")

    monkeypatch.setattr(rec, "read_versions", no)
    site = fleet(make_inventory, 2)
    assert run_up("-i", str(site.inventory_source), "--batch", "0%")[0] == 2
    rc, out = run_up("-i", str(site.inventory_source), "--canary", "gpu0000", "--tags",
                     "vllm_configure")
    assert rc == 2 and "drop --tags" in out
    assert run_up("-i", str(site.inventory_source), "--tags", "nope")[0] == 2
    assert flow.runs == []


# --- the playbooks ------------------------------------------------------------------------

def test_the_rolling_plays_are_what_the_flow_relies_on() -> None:
    """Each wave is a whole `up` limited to its hosts: the record play is last and the
    rolling plays stop at the first failure (docs/day2.md#upgrades)."""
    site = yaml.safe_load(Path("playbooks/site.yml").read_text())
    assert [p["ansible.builtin.import_playbook"] for p in site][-1] == "record.yml"
    serving = yaml.safe_load(Path("playbooks/serving.yml").read_text())
    rolling = serving[1]
    assert rolling["serial"] == "{{ vllm_serial | default(1) }}"
    assert rolling["max_fail_percentage"] == 0
    for book in ("dns.yml", "storage.yml"):
        for play in yaml.safe_load(Path(f"playbooks/{book}").read_text()):
            if "serial" in play:
                assert play["serial"] == 1 and play["max_fail_percentage"] == 0


def test_the_flow_holds_one_site_lock_its_runs_reuse(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Each wave's `up` takes the site lock the flow already holds (flock is per open
    file: without reuse the flow would refuse itself); another process is still refused."""
    from deploy_kit.ops.site_lock import LOCK_DIR_ENV, site_lock

    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "locks"))
    root = tmp_path / "site"
    root.mkdir()
    with site_lock(root, "up") as outer:
        with site_lock(root, "up") as inner:
            assert inner is outer
        other = subprocess.run(
            [sys.executable, "-c",
             "import sys; from pathlib import Path; from deploy_kit.ops.site_lock import "
             "site_lock\nwith site_lock(Path(sys.argv[1]), 'up'): pass", str(root)],
            capture_output=True, text=True, check=False,
            env={**os.environ, "PYTHONPATH": str(Path.cwd())})
        assert other.returncode != 0 and "SiteBusy" in other.stderr
    with site_lock(root, "up"):  # released: free again
        pass


def test_plan_upgrade_shows_the_changes_the_cold_cache_and_the_waves(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    old = fleet(make_inventory, 3, lmcache_version="0.5.5")
    new = fleet(make_inventory, 3, lmcache_version="0.5.6")
    with_records(monkeypatch, records(old))
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdin=io.StringIO(), stdout=out, stderr=err,
                      env={**os.environ, "COLUMNS": "400"}, color=False)
    assert main(["plan", "-i", str(new.inventory_source), "--upgrade"], env) == 0
    text = out.getvalue()
    assert "upgrade: lmcache 0.5.5 → 0.5.6 on 3 hosts" in text
    assert "cold cache: new key space (lmcache_version 0.5.5 → 0.5.6)" in text
    assert "rollout: wave 1/3: serving canary, 1 host (gpu0000)" in text
    out.truncate(0)
    assert main(["plan", "-i", str(new.inventory_source), "--upgrade", "--json"], env) == 0
    doc = json.loads(out.getvalue().strip("\0"))
    pending = doc["data"]["upgrade"] if "data" in doc else doc["upgrade"]
    assert pending["cold_cache"] is True
    assert pending["changes"] == [{"component": "lmcache", "from": "0.5.5", "to": "0.5.6",
                                   "hosts": ["gpu0000", "gpu0001", "gpu0002"]}]
    # without --upgrade, plan reads no host
    from deploy_kit.transport import records as rec

    monkeypatch.setattr(rec, "read_versions", lambda *a, **k: pytest.fail("read a host"))
    assert main(["plan", "-i", str(new.inventory_source)], env) == 0


def test_the_record_read_script_prints_only_the_versions(tmp_path: Path) -> None:
    """The script `up` runs on each host (through Ansible's shell module), run here by sh:
    the versions of a record, {} for a record without them, `none` for no or a bad one."""
    from deploy_kit.transport.records import _SCRIPT, parse

    def read(path: Path) -> Any:
        done = subprocess.run(["sh"], input=_SCRIPT.format(path=str(path)), text=True,
                              capture_output=True, check=True)
        return parse(done.stdout)

    record = tmp_path / "converged.json"
    assert read(record) is None
    record.write_text(json.dumps({"digest": "secret-digest", "paths": {"/x": "y"},
                                  "versions": {"vllm": "0.34.0"}}))
    assert read(record) == {"vllm": "0.34.0"}
    record.write_text(json.dumps({"digest": "d"}))
    assert read(record) == {}
    record.write_text("{not json")
    assert read(record) is None
    record.write_text("[1, 2]")
    assert read(record) == {}


def test_each_wave_is_a_real_limited_up_run_inside_the_flows_lock(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """Only Ansible and verify replaced: every wave goes through `up`'s own request builder
    (render tree, generated secrets, the site lock the flow holds: no exit 7 against
    itself), with the wave's --limit and the serving restart."""
    from deploy_kit.ansible import runner
    from deploy_kit.ansible.command import playbook_argv
    from deploy_kit.ansible.events import RunRecord
    from deploy_kit.flows import upgrade
    from deploy_kit.ops.site_lock import LOCK_DIR_ENV

    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "locks"))
    monkeypatch.setenv("DEPLOYKIT_RUNS_DIR", str(tmp_path / "runs"))
    argvs: list[list[str]] = []

    def run(request: Any, console: Any, record_dir: Path,
            env: Any = None) -> tuple[RunRecord, Path, int]:
        argvs.append(playbook_argv(request))
        return RunRecord(), record_dir, 0

    monkeypatch.setattr(runner, "run_playbook", run)
    monkeypatch.setattr(upgrade, "verify_wave", lambda *a, **k: None)
    old = fleet(make_inventory, 2, vllm_version="0.33.0")
    new = fleet(make_inventory, 2, vllm_version="0.34.0")
    with_records(monkeypatch, records(old))
    rc, out = run_up("-i", str(new.inventory_source))
    assert rc == 0, out
    limits = [a[a.index("--limit") + 1] for a in argvs]
    assert limits == ["gpu0000", "gpu0001", "*,!gpu0000,!gpu0001"]
    restart = ['"deploykit_restart_serving": true' in " ".join(a) for a in argvs]
    assert restart == [True, True, False]
