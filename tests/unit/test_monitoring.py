"""Monitoring: the rendered scrape targets, alert rules, rule tests and dashboard, checked by
Prometheus's own promtool (and the blackbox exporter's config check)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from deploy_kit.config.models import HostConfig
from deploy_kit.config.site import Site
from deploy_kit.ops.site import open_site
from deploy_kit.render import monitoring
from deploy_kit.render.consul import consul_scrapable
from deploy_kit.render.files import render_site, write_tree
from deploy_kit.verify import checks as _registered_checks  # noqa: F401  (fills CHECKS)
from deploy_kit.verify.doctor import diagnose
from deploy_kit.verify.model import CHECKS
from tests.conftest import BASE_HOSTS, REPO, InventoryFactory
from tests.tools import require_tool


def site_of(make_inventory: InventoryFactory, hosts: dict | None = None, **all_vars: object
            ) -> Site:
    return open_site(str(make_inventory(hosts, all=dict(all_vars))))


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_tool("promtool"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def write_cluster(site: Site, out: Path) -> Path:
    write_tree(render_site(site), out)
    return out / "_cluster" / "monitoring"


def labels_by_host(targets: list[dict]) -> dict[str, dict]:
    return {entry["labels"]["host"]: entry for entry in targets}


def test_targets_per_job_with_host_group_model_accelerator(make_inventory: InventoryFactory
                                                          ) -> None:
    site = site_of(make_inventory, vllm_model="Qwen/Qwen3-8B", vllm_port=8100)
    found = monitoring.scrape_targets(site)
    vllm = labels_by_host(found.groups[monitoring.VLLM])
    assert vllm["gpu1"]["targets"] == ["10.0.1.1:8100"]
    assert vllm["gpu2"]["labels"] == {"host": "gpu2", "group": "vllm", "model": "Qwen/Qwen3-8B",
                                      "accelerator": "rocm", "vllm_instance": "gpu2"}
    assert sorted(labels_by_host(found.groups[monitoring.HAPROXY])) == ["rgw1", "rgw2"]
    assert labels_by_host(found.groups[monitoring.HAPROXY])["rgw1"]["targets"] == \
        ["10.0.0.11:1967"]
    assert labels_by_host(found.groups[monitoring.DNS_ANSWERS])["dns1"]["targets"] == \
        ["10.0.0.31:53"]
    assert labels_by_host(found.groups[monitoring.CEPH])["adm1"]["targets"] == ["10.0.0.10:9283"]
    # in-process LMCache has no metrics port of its own; Consul's API is on loopback
    assert monitoring.LMCACHE in found.omitted and monitoring.CONSUL in found.omitted
    assert "loopback" in found.omitted[monitoring.CONSUL]


def test_every_vllm_instance_is_scraped_on_its_own_port(make_inventory: InventoryFactory
                                                        ) -> None:
    site = site_of(make_inventory, vllm_accelerator_count=4, vllm_tensor_parallel_size=2)
    found = [g for g in monitoring.scrape_targets(site).groups[monitoring.VLLM]
             if g["labels"]["host"] == "gpu1"]
    assert [(g["labels"]["vllm_instance"], g["targets"]) for g in found] == [
        ("gpu1/0", ["10.0.1.1:8000"]), ("gpu1/1", ["10.0.1.1:8001"])]


def test_an_lmcache_that_serves_metrics_gets_its_job(make_inventory: InventoryFactory,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from deploy_kit.core import compat

    real = compat.lmcache
    monkeypatch.setattr(compat, "lmcache", lambda v: dataclasses.replace(
        real(v), server_metrics=True))
    found = monitoring.scrape_targets(site_of(make_inventory, lmcache_topology="server"))
    assert labels_by_host(found.groups[monitoring.LMCACHE])["gpu1"]["targets"] == \
        ["10.0.1.1:6557"]


def test_consul_and_lmcache_jobs_follow_the_settings(make_inventory: InventoryFactory) -> None:
    opened = monitoring.scrape_targets(site_of(make_inventory, consul_http_address="0.0.0.0",
                                               consul_acl_enabled=False,
                                               lmcache_topology="server"))
    assert sorted(labels_by_host(opened.groups[monitoring.CONSUL])) == ["c1", "rgw1", "rgw2"]
    # LMCache 0.5.6's `lmcache server` serves no metrics (compat.yaml server_metrics): no
    # target that could only ever be down, and the rendered config says why
    assert monitoring.LMCACHE not in opened.groups
    assert "serves no metrics" in opened.omitted[monitoring.LMCACHE]
    # under ACLs /v1/agent/metrics needs a token deploykit does not give Prometheus
    assert not consul_scrapable(HostConfig(consul_http_address="0.0.0.0",
                                                      consul_acl_enabled=True))
    assert consul_scrapable(HostConfig(consul_http_address="0.0.0.0", consul_acl_enabled=False))
    mgr = monitoring.scrape_targets(site_of(
        make_inventory, monitoring_ceph_mgr_targets=["mgr1.example.com:9283", "10.0.0.9:9999"]))
    assert [e["targets"] for e in mgr.groups[monitoring.CEPH]] == \
        [["mgr1.example.com:9283"], ["10.0.0.9:9999"]]
    off = monitoring.scrape_targets(site_of(make_inventory, monitoring_ceph_mgr_prometheus=False))
    assert monitoring.CEPH not in off.groups


def test_rules_pass_promtool_and_their_tests_pass(make_inventory: InventoryFactory,
                                                  tmp_path: Path) -> None:
    directory = write_cluster(site_of(make_inventory), tmp_path / "out")
    checked = promtool("check", "rules", "rules.yml", cwd=directory)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "rules.test.yml", cwd=directory)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    config = promtool("check", "config", "prometheus.yml", cwd=directory)
    assert config.returncode == 0, config.stdout + config.stderr


@pytest.mark.parametrize("alert", [a.name for a in monitoring.alerts(open_site(
    str(Path(__file__).resolve().parents[2] / "inventory" / "example")))])
def test_each_rule_test_fails_when_its_input_is_healthy(alert: str, tmp_path: Path) -> None:
    """Feeding an alert's firing case the healthy series must break `promtool test rules`:
    the tests prove the rule fires on its input, not just that the file parses."""
    site = open_site(str(Path(__file__).resolve().parents[2] / "inventory" / "example"))
    directory = write_cluster(site, tmp_path / "out")
    (directory / "swapped.test.yml").write_text(
        yaml.safe_dump(monitoring.rule_tests(site, swap=alert)))
    result = promtool("test", "rules", "swapped.test.yml", cwd=directory)
    assert result.returncode != 0
    assert alert in result.stdout + result.stderr


def test_thresholds_come_from_the_settings(make_inventory: InventoryFactory,
                                           tmp_path: Path) -> None:
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["rgw"]["hosts"]["rgw3"] = {"ansible_host": "10.0.0.13"}
    site = site_of(make_inventory, hosts, monitoring_hit_ratio_target=0.85,
                   monitoring_hit_ratio_for="30m", monitoring_rgw_latency_seconds=0.25,
                   monitoring_shm_free_ratio=0.2)
    rules = {a.name: a for a in monitoring.alerts(site)}
    assert rules["DeploykitExternalHitRatioLow"].expr.endswith("< 0.85")
    assert rules["DeploykitExternalHitRatioLow"].for_ == "30m"
    assert "probe_dns_answer_rrs{job=\"deploykit-dns-answers\"} < 3" in \
        rules["DeploykitDnsAnswersShort"].expr
    assert rules["DeploykitRgwSlow"].expr.endswith("> 0.25")
    assert rules["DeploykitShmNearlyFull"].expr.endswith("< 0.2")
    directory = write_cluster(site, tmp_path / "out")
    tested = promtool("test", "rules", "rules.test.yml", cwd=directory)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # a target of 0 can never be missed: the alert is left out, not rendered to never fire
    off = {a.name for a in monitoring.alerts(site_of(make_inventory,
                                                     monitoring_hit_ratio_target=0))}
    assert "DeploykitExternalHitRatioLow" not in off


def test_every_alert_names_a_real_check_and_a_symptom_doctor_maps_to_it(
        make_inventory: InventoryFactory) -> None:
    for alert in monitoring.alerts(site_of(make_inventory)):
        assert alert.verify_check in CHECKS, alert.name
        suggested = {check for _, checks in diagnose(alert.doctor_symptom) for check in checks}
        assert alert.verify_check in suggested, (alert.name, alert.doctor_symptom)
        assert alert.annotations()["runbook"].startswith(
            f"deploykit verify --check {alert.verify_check}")


def test_dashboard_structure_and_every_query_parses(make_inventory: InventoryFactory,
                                                    tmp_path: Path) -> None:
    directory = write_cluster(site_of(make_inventory), tmp_path / "out")
    board = json.loads((directory / "dashboard.json").read_text())
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"panel {panel['title']} overlaps another"
                cells.add((x, y))
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
    titles = " ".join(p["title"] for p in board["panels"])
    for topic in ("hit ratio", "TTFT", "output token", "S3 throughput", "S3 response time",
                  "DNS answers"):
        assert topic in titles
    queries = monitoring.dashboard_queries(board)
    assert parse_errors(queries, tmp_path) == ""
    # the same check refuses a broken query: it can fail
    assert "parse error" in parse_errors(["sum by (host (rate(up[5m]))"], tmp_path)


def parse_errors(queries: list[str], tmp_path: Path) -> str:
    """promtool's PromQL parser on each query (as a recording rule), '' when all parse."""
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query{i}", "expr": q} for i, q in enumerate(queries)]}]}
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump(rules))
    result = promtool("check", "rules", str(path), cwd=tmp_path)
    return "" if result.returncode == 0 else result.stdout + result.stderr


# tests/golden/example carries the dashboard and the rules whole (test_golden.py
# MONITORING_ONCE); each other golden case's S3 name and gateway count, against the
# example's s3.cephlab.com and 4 gateways. The example has routers, the other cases have
# none: they render the example's files less its router parts (without_routers)
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
GOLDEN_SITES = {"cpu-server": ("s3.cpu.test", 2), "disk-tier": ("s3.cephlab.com", 2),
                "dram-only": ("s3.cephlab.com", 2), "legacy-versions": ("s3.old.test", 2),
                "nixl-obj": ("s3.cephlab.com", 2), "packages-static": ("s3.lab.test", 2)}


@pytest.mark.parametrize("case", sorted(GOLDEN_SITES))
def test_golden_cases_monitoring_differs_only_in_site_values(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The case renders the example's golden dashboard.json, rules.yml and rules.test.yml
    byte for byte, with its own S3 name and gateway count where the example has its own,
    and without the example's routers."""
    monkeypatch.setenv("DK_GOLDEN_ACCESS", "GOLDENACCESSKEY")
    monkeypatch.setenv("DK_GOLDEN_SECRET", "golden-secret-not-real")
    fqdn, gateways = GOLDEN_SITES[case]
    site = open_site(str(GOLDEN / case / "inventory"))
    rendered = render_site(site)["_cluster"]
    # the bucket quota alert's bytes: plan's for each case's models
    theirs = monitoring.alert_values(site)
    example_values = monitoring.alert_values(open_site(str(REPO / "inventory" / "example")))
    quota = {f"{example_values[k]}{end}": f"{theirs[k]}{end}" for k, end in (
        ("quota_warn_bytes", "\n"), ("quota_bytes", " B quota"))}
    series = {f"values: {example_values[k]}x30": f"values: {theirs[k]}x30"
              for k in ("quota_stored_high", "quota_stored_low")}
    ours = {  # the example's text -> this case's; replaced all at once, each must occur
        "dashboard.json": {"(s3.cephlab.com)": f"({fqdn})"},
        "rules.yml": {"s3.cephlab.com": fqdn, '"} < 4 or': f'"}} < {gateways} or',
                      "fewer than 4 addresses": f"fewer than {gateways} addresses",
                      "concentrator (4)": f"concentrator ({gateways})", **quota},
        "rules.test.yml": {"s3.cephlab.com": fqdn,
                           "fewer than 4 addresses": f"fewer than {gateways} addresses",
                           "concentrator (4)": f"concentrator ({gateways})",
                           # DeploykitDnsAnswersShort's firing and healthy probe series
                           "values: 3x10": f"values: {gateways - 1}x10",
                           "values: 4x10": f"values: {gateways}x10",
                           **{k: v for k, v in quota.items() if k.endswith("quota")},
                           **series}}
    for name, table in ours.items():
        example = without_routers(name, (GOLDEN / "example" / "expected" / "_cluster" /
                                         "monitoring" / name).read_text())
        for old in table:  # a replacement that finds nothing would prove nothing
            assert old in example, (name, old)
        assert rendered[f"monitoring/{name}"].content == replace_all(example, table), \
            f"{case}: {name}"


ROUTER_PANELS = {title for title, job in monitoring.PANEL_JOBS.items()
                 if job == monitoring.ROUTER}


def without_routers(name: str, text: str) -> str:
    """The example's golden monitoring file `name` as a site without routers renders it.
    The router rules, their tests and their panels come last (alerts.yaml, PANELS), so
    they are cut off the end, and every part cut must be a router's."""
    if name == "dashboard.json":  # rendered by json.dumps(indent=2), so it reads back whole
        board = json.loads(text)
        assert [p["title"] for p in board["panels"] if p["title"] in ROUTER_PANELS], name
        board["panels"] = [p for p in board["panels"] if p["title"] not in ROUTER_PANELS]
        return json.dumps(board, indent=2) + "\n"
    mark = {"rules.yml": "  - alert: ", "rules.test.yml": "    alertname: "}[name]
    first = text.index(f"{mark}DeploykitRouter")
    if name == "rules.test.yml":  # the start of the first router alert's test
        first = text.rindex("\n- interval: ", 0, first) + 1
    cut = re.findall(f"^{mark}(\\w+)", text[first:], re.M)
    assert cut and all(a.startswith("DeploykitRouter") for a in cut), (name, cut)
    return text[:first]


def replace_all(text: str, table: dict[str, str]) -> str:
    """Each key of `table` by its value, at once (no replacement sees another's result)."""
    return re.sub("|".join(map(re.escape, table)), lambda m: table[m.group()], text)


def test_blackbox_module_probes_the_s3_name(make_inventory: InventoryFactory,
                                            tmp_path: Path) -> None:
    site = site_of(make_inventory, deploykit_s3_fqdn="s3.example.org")
    directory = write_cluster(site, tmp_path / "out")
    module = yaml.safe_load((directory / "blackbox.yml").read_text())["modules"][
        monitoring.DNS_PROBE_MODULE]
    assert module["dns"]["query_name"] == "s3.example.org"
    exporter = require_tool("prometheus-blackbox-exporter")
    result = subprocess.run([exporter, "--config.check",
                             f"--config.file={directory / 'blackbox.yml'}"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load((directory / "prometheus.yml").read_text())
    probe = next(j for j in config["scrape_configs"] if j["job_name"] == monitoring.DNS_ANSWERS)
    assert probe["params"] == {"module": [monitoring.DNS_PROBE_MODULE]}
    assert probe["relabel_configs"][-1]["replacement"] == "127.0.0.1:9115"


def test_monitoring_host_gets_prometheus_with_absolute_paths(make_inventory: InventoryFactory,
                                                             tmp_path: Path) -> None:
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["monitoring"] = {"hosts": {"mon1": {"ansible_host": "10.0.2.1"}}}
    site = site_of(make_inventory, hosts, monitoring_alertmanager=True)
    tree = render_site(site)
    files = tree["mon1"]
    assert monitoring.PROMETHEUS_CONFIG_PATH in files and monitoring.RULES_PATH in files
    config = yaml.safe_load(files[monitoring.PROMETHEUS_CONFIG_PATH].content)
    assert config["rule_files"] == [monitoring.RULES_PATH]
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == \
        ["127.0.0.1:9093"]
    for scrape in config["scrape_configs"]:
        for path in scrape["file_sd_configs"][0]["files"]:
            assert path.startswith(monitoring.TARGETS_DIR + "/") and path in files
    # without a monitoring group nothing of Prometheus lands on a host
    assert not any(p.startswith("/etc/prometheus") for h, f in render_site(
        site_of(make_inventory)).items() for p in f)
    # and the host's config passes promtool with its rules and targets in place
    out = tmp_path / "host"
    write_tree({"mon1": files}, out)
    root = out / "mon1"
    text = (root / monitoring.PROMETHEUS_CONFIG_PATH.lstrip("/")).read_text()
    (root / "local.yml").write_text(text.replace("/etc/prometheus", str(root / "etc/prometheus")))
    result = promtool("check", "config", "local.yml", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr


FAKE_SYSTEMCTL = """#!/bin/sh
cat "$FAKE_DIR/invocation"
"""
# journalctl -o cat --show-cursor [--after-cursor N]: the journal file's lines after line N
FAKE_JOURNALCTL = """#!/usr/bin/python3
import os, sys
lines = open(os.path.join(os.environ["FAKE_DIR"], "journal")).read().splitlines()
after = int(sys.argv[sys.argv.index("--after-cursor") + 1]) if "--after-cursor" in sys.argv else 0
for line in lines[after:]:
    print(line)
print("-- cursor: %d" % len(lines))
"""


def test_the_journal_counter_counts_only_new_lines_per_process(
        make_inventory: InventoryFactory, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The LMCache S3 trouble counter (LMCache 0.5.6 exports no metric for it): verify's
    patterns over the current process's journal, incrementally, reset by a restart. The
    program (deploy_kit/agents/lmcache_s3_events.py) runs with the settings the render
    writes, its files moved under tmp_path."""
    import os
    import stat

    from deploy_kit.agents import lmcache_s3_events
    from deploy_kit.core.patterns import S3_LOG_PATTERNS

    bin_dir, fake = tmp_path / "bin", tmp_path / "fake"
    bin_dir.mkdir()
    fake.mkdir()
    for name, text in (("systemctl", FAKE_SYSTEMCTL), ("journalctl", FAKE_JOURNALCTL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    host = site_of(make_inventory).hosts["gpu1"]
    rendered = json.loads(monitoring.render_s3_events(host)[monitoring.S3_EVENTS_CONFIG][0])
    assert rendered["patterns"] == S3_LOG_PATTERNS
    settings = tmp_path / "lmcache-s3-events.json"
    settings.write_text(json.dumps({**rendered, "units": ["lmcache-server"],
                                    "state": str(tmp_path / "state.json"),
                                    "textfile": str(tmp_path / "deploykit_lmcache.prom")}))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DIR", str(fake))

    def counts(journal: list[str], invocation: str = "inv-1") -> dict[str, int]:
        (fake / "invocation").write_text(invocation + "\n")
        (fake / "journal").write_text("\n".join(journal) + "\n")
        lmcache_s3_events.main(str(settings))
        text = (tmp_path / "deploykit_lmcache.prom").read_text()
        return {line.split('kind="')[1].split('"')[0]: int(line.rsplit(" ", 1)[1])
                for line in text.splitlines() if line.startswith("deploykit_lmcache")}

    journal = ["INFO started", "WARNING S3L2Adapter connection error (1/3): refused"]
    assert counts(journal) == {"breaker": 0, "store": 0, "connection": 1}
    journal += ["WARNING S3L2Adapter connection error (2/3)",
                # the breaker: LMCache's own line, as its logger writes it (core/patterns.py)
                "\x1b[31;20m[2026-12-06 10:00:00,123] LMCache ERROR:\x1b[0m S3L2Adapter disabled "
                "after 3 consecutive connection failures \x1b[3m(s3_l2_adapter.py:1030:"
                "lmcache.v1.distributed.l2_adapters.s3_l2_adapter)\x1b[0m",
                # the same words echoed in a request log: not a breaker
                "INFO [logger.py:43] Received request cmpl-1: prompt: 'S3L2Adapter disabled "
                "after 3 consecutive connection failures'"]
    assert counts(journal) == {"breaker": 1, "store": 0, "connection": 2}  # only new lines read
    assert counts(journal) == {"breaker": 1, "store": 0, "connection": 2}  # nothing new
    assert counts(["INFO started again"], "inv-2") == {"breaker": 0, "store": 0,
                                                        "connection": 0}  # a restart resets
    # the exposition format is what Prometheus's own linter accepts
    checked = subprocess.run([require_tool("promtool"), "check", "metrics"],
                             input=(tmp_path / "deploykit_lmcache.prom").read_text(),
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_alert_data_refuses_an_unknown_name_and_an_unquoted_number() -> None:
    """alerts.yaml is filled in strictly: a `${name}` the site has no value for, or a value
    YAML read as a number (`0x15` is 21 to YAML, "0 fifteen times" to promtool), raises."""
    from deploy_kit.render.monitoring import _fill

    assert _fill({"expr": 'up{job="${job}"} == 0', "labels": ["$labels.host"]},
                 {"job": "j"}) == {"expr": 'up{job="j"} == 0', "labels": ["$labels.host"]}
    with pytest.raises(KeyError):
        _fill("${nothing}", {})
    with pytest.raises(TypeError, match="quote it"):
        _fill({"values": yaml.safe_load("v: 0x15")["v"]}, {})
