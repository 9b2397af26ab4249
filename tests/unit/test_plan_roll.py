"""`plan` shows how long the daily scheduled restart takes across the site (plan/roll.py),
against the time each host waits for a slot: a 40-host site fits once it lets a few hosts
restart at once, and says how many it needs when it does not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from deploy_kit.ops.site import open_site
from deploy_kit.plan import roll
from deploy_kit.plan.plan import build_plan
from tests.cli import run_cli
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
from fleet_site import generate


def fleet(root: Path, hosts: int, **vllm: object) -> Path:
    """bench/fleet_site.py's site with `hosts` serving hosts, group_vars/vllm.yml extended,
    every host in-process in the site bucket: one lease of them all (the example's Gaudi3
    hosts have a bucket, so a lease, of their own)."""
    import yaml

    site = generate(root, hosts)
    (site / "group_vars" / "vllm_gaudi.yml").unlink()
    path = site / "group_vars" / "vllm.yml"
    path.write_text(yaml.safe_dump({**(yaml.safe_load(path.read_text()) or {}),
                                    "lmcache_topology": "inprocess", **vllm}))
    return site


def test_a_forty_host_sites_daily_roll_fits_its_window(tmp_path: Path) -> None:
    site = open_site(str(fleet(tmp_path / "site", 40)))  # nothing set: sized from the fleet
    plan = build_plan(site)
    (r,) = plan.restarts
    assert len(r.hosts) == 40 and r.slots == 4  # ceil(40 / 10)
    assert r.fits and r.roll_seconds <= r.window_seconds == 21600
    # 4 instances a host; the slowest (Gaudi3, warm-up) about 42 minutes
    assert 30 * 60 < r.host_seconds < 60 * 60
    assert not [w for w in plan.warnings if w.startswith("daily restart")]


def test_a_site_that_lets_one_host_restart_at_a_time_is_told_what_it_needs(tmp_path: Path
                                                                          ) -> None:
    """lmcache_scheduled_restart_slots 1: 40 hosts one after another overrun the 6 h wait,
    and plan names the slots that fit."""
    root = fleet(tmp_path / "site", 40, lmcache_scheduled_restart_slots=1)
    plan = build_plan(open_site(str(root)))
    (r,) = plan.restarts
    assert r.slots == 1 and not r.fits and r.slots_needed == 2
    (warning,) = [w for w in plan.warnings if w.startswith("daily restart")]
    assert "(lmcache_scheduled_restart_slots: 2)" in warning
    fixed = build_plan(open_site(str(fleet(tmp_path / "fixed", 40,
                                           lmcache_scheduled_restart_slots=2))))
    assert fixed.restarts[0].slots == 2 and fixed.restarts[0].fits


def test_the_example_rolls_each_bucket_within_an_hour(tmp_path: Path) -> None:
    plan = build_plan(open_site(str(REPO / "inventory" / "example")))
    # a lease per bucket: the CUDA/ROCm hosts' (site bucket) and the Gaudi3 host's
    r, gaudi = plan.restarts if len(plan.restarts[0].hosts) > 1 else plan.restarts[::-1]
    assert (len(r.hosts), r.slots, r.fits) == (3, 1, True)
    assert gaudi.hosts == ["gaudi3-1"] and gaudi.fits
    # one slot: three hosts one after another, each the server then four instances
    assert 30 * 60 <= r.roll_seconds <= 3600 and gaudi.roll_seconds <= 3600
    shown = run_cli("plan", "-i", str(REPO / "inventory" / "example"))
    assert shown.returncode == 0, shown.stderr
    assert "Daily restart of Qwen/Qwen3-32B" in shown.stdout


def test_no_scheduled_restart_no_roll(tmp_path: Path) -> None:
    root = fleet(tmp_path / "site", 12, lmcache_scheduled_restart=False)
    assert build_plan(open_site(str(root))).restarts == []


@pytest.mark.parametrize(("times", "slots", "seconds"), [
    ([100] * 10, 1, 1000), ([100] * 10, 4, 300), ([500, 100, 100], 2, 500), ([], 3, 0),
])
def test_the_roll_spreads_hosts_over_the_slots(times: list[int], slots: int,
                                               seconds: int) -> None:
    assert roll.roll_seconds(times, slots) == seconds


def test_an_instance_restart_is_start_up_plus_the_weights_of_one_device(tmp_path: Path
                                                                        ) -> None:
    site = open_site(str(REPO / "inventory" / "example"))
    h100 = site.hosts["gpu-h100-1"]
    # Qwen3-32B bf16 over TP 2: 30.5 GiB a device at 1 GiB/s, after 2 minutes' start-up
    assert roll.instance_seconds(h100) == 120 + 30
    assert roll.host_seconds(h100) == roll.SERVER_S + 4 * 150  # the server first
