"""Monitoring currency: no dashboard panel reads a job the site never scrapes; Ceph
op-latency and recovery alerts from the mgr exporter, proven by promtool; every listed mgr
is scraped (only the active one serves data)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from deploy_kit.ops.site import open_site
from deploy_kit.render import monitoring
from tests.conftest import REPO, InventoryFactory
from tests.unit.test_monitoring import promtool, site_of, write_cluster

CEPH_ALERTS = {"DeploykitCephSlowOps", "DeploykitCephOsdLatencyHigh", "DeploykitCephRecoveryLong",
               "DeploykitCephPgUnavailable"}


def _jobs(query: str) -> set[str]:
    return set(re.findall(r'job="([^"]+)"', query))


def test_every_panel_reads_a_job_the_site_scrapes() -> None:
    for inventory in [REPO / "inventory" / "example",
                      *sorted((REPO / "tests" / "golden").glob("*/inventory"))]:
        site = open_site(str(inventory))
        scraped = set(monitoring.scrape_targets(site).groups)
        for panel in monitoring.dashboard(site)["panels"]:
            for target in panel["targets"]:
                assert _jobs(target["expr"]) <= scraped, (inventory.parent.name, panel["title"])


def test_lmcache_server_panels_appear_only_with_its_metrics(
        make_inventory: InventoryFactory) -> None:
    site = site_of(make_inventory)
    titles = [p["title"] for p in monitoring.dashboard(site)["panels"]]
    assert not any(t.startswith("LMCache ") for t in titles)  # no release serves them yet
    assert "External (LMCache) hit tokens per second per host" in titles  # vLLM's count
    # a site whose LMCache server served metrics would get them
    scraped = monitoring.scrape_targets(site)
    fake = monitoring.Targets({**scraped.groups, monitoring.LMCACHE: [{"targets": ["x:1"]}]},
                              scraped.omitted)
    monitoring._last_targets = (site, fake)
    try:
        titles = [p["title"] for p in monitoring.dashboard(site)["panels"]]
    finally:
        monitoring._last_targets = None
    assert sum(t.startswith("LMCache ") for t in titles) == 2


def test_ceph_rules_fire_on_their_input_and_pass_promtool(make_inventory: InventoryFactory,
                                                          tmp_path: Path) -> None:
    site = site_of(make_inventory, monitoring_ceph_osd_latency_ms=40)
    names = {a.name for a in monitoring.alerts(site)}
    assert names >= CEPH_ALERTS
    directory = write_cluster(site, tmp_path / "out")
    rules = yaml.safe_load((directory / "rules.yml").read_text())
    exprs = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert "ceph_osd_commit_latency_ms" in exprs["DeploykitCephOsdLatencyHigh"]
    assert "> 40" in exprs["DeploykitCephOsdLatencyHigh"]  # from the setting
    assert 'name="PG_AVAILABILITY"' in exprs["DeploykitCephPgUnavailable"]
    assert all(_jobs(exprs[a]) == {monitoring.CEPH} for a in CEPH_ALERTS)
    for args in (("check", "rules", "rules.yml"), ("test", "rules", "rules.test.yml")):
        done = promtool(*args, cwd=directory)
        assert done.returncode == 0, done.stdout + done.stderr
    for alert in CEPH_ALERTS:  # each test proves its rule: the healthy input breaks it
        (directory / "swapped.test.yml").write_text(
            yaml.safe_dump(monitoring.rule_tests(site, swap=alert)))
        swapped = promtool("test", "rules", "swapped.test.yml", cwd=directory)
        assert swapped.returncode != 0 and alert in swapped.stdout + swapped.stderr


def test_without_the_mgr_exporter_no_ceph_rule_or_panel(make_inventory: InventoryFactory) -> None:
    site = site_of(make_inventory, monitoring_ceph_mgr_prometheus=False)
    assert not CEPH_ALERTS & {a.name for a in monitoring.alerts(site)}
    board = json.dumps(monitoring.dashboard(site))
    assert "ceph_" not in board


def test_every_listed_mgr_is_scraped(make_inventory: InventoryFactory) -> None:
    mgrs = ["mon1:9283", "mon2:9283", "mon3:9283"]
    site = site_of(make_inventory, monitoring_ceph_mgr_targets=mgrs)
    groups = monitoring.scrape_targets(site).groups[monitoring.CEPH]
    assert [t for g in groups for t in g["targets"]] == mgrs
    # the queries aggregate over targets: standbys serve no series, so a sum or max over
    # the job is the active mgr's value wherever it runs
    for panel in monitoring.dashboard(site)["panels"]:
        for target in panel["targets"]:
            if monitoring.CEPH in _jobs(target["expr"]):
                assert re.match(r"(max|avg|sum)\(", target["expr"]), target["expr"]
