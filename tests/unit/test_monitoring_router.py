"""Monitoring of the routers: one target per router front, rules and panels that read only
what vllm-router 0.1.17 serves (a scrape of the real router, data/vllm-router-0.1.17.metrics),
alerts proven by promtool on that router's own series, and nothing of it on a site without
routers."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.config.site import Site
from deploy_kit.ops.site import open_site
from deploy_kit.render import monitoring
from deploy_kit.render.files import render_site
from deploy_kit.verify import checks as _registered_checks  # noqa: F401  (fills CHECKS)
from deploy_kit.verify.doctor import diagnose
from deploy_kit.verify.model import CHECKS
from tests.conftest import CPU_TWO_INSTANCES, REPO, InventoryFactory
from tests.tools import require_tool
from tests.unit.test_monitoring import (
    GOLDEN,
    ROUTER_PANELS,
    parse_errors,
    promtool,
    site_of,
    without_routers,
    write_cluster,
)

SCRAPE = Path(__file__).parent / "data" / "vllm-router-0.1.17.metrics"
ROUTER_ALERTS = {"DeploykitRouterDown", "DeploykitRouterNoHealthyInstance",
                 "DeploykitRouterSkewed"}
# the labels Prometheus gives every router series (file_sd and the scrape), not the router's
TARGET_LABELS = {"job", "instance", "host", "group"}
# the workers of the scraped router, as its page names them
W1, W2, W3 = (f"http://127.0.0.1:{port}" for port in (27101, 27102, 27103))


def routed(make_inventory: InventoryFactory, **all_vars: object) -> Site:
    """Two CPU serving hosts (three instances) behind two routers."""
    hosts = copy.deepcopy(CPU_TWO_INSTANCES)
    children = hosts["all"]["children"]
    children["vllm"]["hosts"]["cpu2"] = {"ansible_host": "10.0.1.2"}
    children["router"] = {"hosts": {"r1": {"ansible_host": "10.0.2.1"},
                                    "r2": {"ansible_host": "10.0.2.2"}}}
    return site_of(make_inventory, hosts, **all_vars)


def scrape_samples(text: str) -> dict[str, list[dict[str, str]]]:
    """Sample name -> each sample's labels, from Prometheus's text format (the simple form
    the router writes: one `name{k="v",...} value` a line)."""
    samples: dict[str, list[dict[str, str]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        assert match, line
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        samples.setdefault(match.group(1), []).append(labels)
    return samples


def unknown_reads(query: str, samples: dict[str, list[dict[str, str]]]) -> list[str]:
    """The router metric names and labels `query` reads that the router's page lacks: every
    `vllm_router_*` name, and every label it groups, joins, matches or names in a legend
    beyond the target's own."""
    names = set(re.findall(r"\bvllm_router_\w+", query))
    missing = sorted(n for n in names if n not in samples)
    labels = {label.strip() for group in re.findall(r"\b(?:by|on|ignoring)\s*\(([^)]*)\)", query)
              for label in group.split(",")}
    labels |= set(re.findall(r"(\w+)\s*=~?\s*\"", query))
    labels |= set(re.findall(r"\{\{\s*(\w+)\s*\}\}", query))
    have = {label for n in names if n in samples for s in samples[n] for label in s}
    return missing + sorted(f"label {label}" for label in labels - TARGET_LABELS - have - {""})


def router_reads(site: Site) -> dict[str, str]:
    """Each router alert's expression and each router panel's queries with their legends."""
    reads = {a.name: a.expr for a in monitoring.alerts(site) if a.name in ROUTER_ALERTS}
    for panel in monitoring.dashboard(site)["panels"]:
        if panel["title"] in ROUTER_PANELS:
            for target in panel["targets"]:
                reads[f"{panel['title']} {target['refId']}"] = \
                    f"{target['expr']} {target['legendFormat']}"
    return reads


def test_the_real_routers_page_parses_and_holds_what_the_router_rules_read() -> None:
    text = SCRAPE.read_text()
    # promtool's parser reads the page whole: only its lint (no HELP lines) complains
    linted = subprocess.run([require_tool("promtool"), "check", "metrics"], input=text,
                            capture_output=True, text=True, timeout=60)
    assert "error while linting" not in linted.stdout + linted.stderr, linted.stderr
    samples = scrape_samples(text)
    assert {s["worker"] for s in samples["vllm_router_worker_health"]} == {W1, W2, W3}
    site = open_site(str(REPO / "inventory" / "example"))
    reads = router_reads(site)
    assert set(reads) >= ROUTER_ALERTS and len(reads) >= len(ROUTER_ALERTS) + len(ROUTER_PANELS)
    for where, query in reads.items():
        assert unknown_reads(query, samples) == [], where
    # the check can fail: a name of the router's source its page never showed, a label the
    # metric does not carry
    assert unknown_reads('max(vllm_router_worker_load{job="x"})', samples) == \
        ["vllm_router_worker_load"]
    assert unknown_reads("sum by (host, route) (vllm_router_worker_health)", samples) == \
        ["label route"]


def test_every_router_front_is_a_target_labelled_with_its_host(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    site = routed(make_inventory, router_port=8300)
    found = monitoring.scrape_targets(site)
    assert found.groups[monitoring.ROUTER] == [
        {"targets": ["10.0.2.1:8300"], "labels": {"host": "r1", "group": "router"}},
        {"targets": ["10.0.2.2:8300"], "labels": {"host": "r2", "group": "router"}}]
    directory = write_cluster(site, tmp_path / "out")
    config = yaml.safe_load((directory / "prometheus.yml").read_text())
    job = next(j for j in config["scrape_configs"] if j["job_name"] == monitoring.ROUTER)
    # plain /metrics: the router front passes it to the router's Prometheus port and answers
    # the monitoring hosts without the key (render/router.py metrics_sources)
    assert job["metrics_path"] == "/metrics" and "authorization" not in job
    assert job["file_sd_configs"] == [{"files": [f"targets/{monitoring.ROUTER}.json"]}]
    assert json.loads((directory / "targets" / f"{monitoring.ROUTER}.json").read_text()) == \
        found.groups[monitoring.ROUTER]
    for args in (("check", "config", "prometheus.yml"), ("check", "rules", "rules.yml"),
                 ("test", "rules", "rules.test.yml")):
        done = promtool(*args, cwd=directory)
        assert done.returncode == 0, done.stdout + done.stderr


def test_a_site_without_routers_renders_no_word_of_them(make_inventory: InventoryFactory
                                                         ) -> None:
    site = site_of(make_inventory)
    found = monitoring.scrape_targets(site)
    assert monitoring.ROUTER not in found.groups and monitoring.ROUTER not in found.omitted
    assert not ROUTER_ALERTS & {a.name for a in monitoring.alerts(site)}
    files = render_site(site)["_cluster"]
    assert f"monitoring/targets/{monitoring.ROUTER}.json" not in files
    for name in ("prometheus.yml", "rules.yml", "rules.test.yml", "dashboard.json"):
        text = files[f"monitoring/{name}"].content
        assert "router" not in text.lower(), name


def test_the_example_without_its_routers_renders_its_golden_less_the_router_parts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Byte for byte: the routers add to the monitoring files and change nothing else."""
    monkeypatch.setenv("DK_GOLDEN_ACCESS", "GOLDENACCESSKEY")
    monkeypatch.setenv("DK_GOLDEN_SECRET", "golden-secret-not-real")
    root = tmp_path / "example"
    shutil.copytree(REPO / "inventory" / "example", root)
    hosts = yaml.safe_load((root / "hosts.yml").read_text())
    del hosts["all"]["children"]["router"]
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts))
    rendered = render_site(open_site(str(root)))["_cluster"]
    golden = GOLDEN / "example" / "expected" / "_cluster" / "monitoring"
    for name in ("dashboard.json", "rules.yml", "rules.test.yml"):
        example = (golden / name).read_text()
        assert rendered[f"monitoring/{name}"].content == without_routers(name, example), name
        assert len(without_routers(name, example)) < len(example)
    config = (golden / "prometheus.yml").read_text()
    job = f"- job_name: {monitoring.ROUTER}\n"
    assert job in config  # the router job is the last; without routers it is all that goes
    assert rendered["monitoring/prometheus.yml"].content == config[:config.index(job)]


def test_router_alerts_name_real_checks_and_symptoms_doctor_maps() -> None:
    site = open_site(str(REPO / "inventory" / "example"))
    found = [a for a in monitoring.alerts(site) if a.name in ROUTER_ALERTS]
    assert {a.name for a in found} == ROUTER_ALERTS
    for alert in found:
        assert alert.verify_check in CHECKS, alert.name
        suggested = {c for _, checks in diagnose(alert.doctor_symptom) for c in checks}
        assert alert.verify_check in suggested, (alert.name, alert.doctor_symptom)


def test_the_router_panels_start_a_row_and_stack_the_backend_choice(tmp_path: Path) -> None:
    board = monitoring.dashboard(open_site(str(REPO / "inventory" / "example")))
    panels = {p["title"]: p for p in board["panels"]}
    assert set(panels) >= ROUTER_PANELS
    first = panels["Router targets up"]["gridPos"]
    assert first["x"] == 0  # a row of its own, below every earlier panel
    assert all(p["gridPos"]["y"] < first["y"] for p in board["panels"]
               if p["title"] not in ROUTER_PANELS)
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        here = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not here & cells, panel["title"]
        cells |= here
    stacking = panels[monitoring.BACKEND_CHOICE]["fieldConfig"]["defaults"]["custom"]
    assert stacking["stacking"]["mode"] == "normal"
    assert "custom" not in panels["Router targets up"]["fieldConfig"]["defaults"]
    assert parse_errors([t["expr"] for title in ROUTER_PANELS
                         for t in panels[title]["targets"]], tmp_path) == ""


def test_kvaware_routers_get_no_skew_alert_and_no_decisions_panel(
        make_inventory: InventoryFactory) -> None:
    """vllm-router 0.1.17's kv_aware policy counts no decision: an alert that can never
    fire and an empty panel are left out; the rest of the routers' monitoring stays."""
    site = routed(make_inventory, router_routing_logic="kvaware")
    assert {a.name for a in monitoring.alerts(site)} & ROUTER_ALERTS == \
        ROUTER_ALERTS - {"DeploykitRouterSkewed"}
    titles = {p["title"] for p in monitoring.dashboard(site)["panels"]}
    assert ROUTER_PANELS - titles == {monitoring.BACKEND_CHOICE}
    prefix = routed(make_inventory)  # the default, prefixaware: both
    assert "DeploykitRouterSkewed" in {a.name for a in monitoring.alerts(prefix)}
    assert monitoring.BACKEND_CHOICE in {p["title"] for p in monitoring.dashboard(prefix)["panels"]}


@pytest.mark.parametrize(("ratio", "for_"), [(0.65, "1h"), (0.51, "5m"), (0.99, "10m")])
def test_the_skew_settings_flow_into_the_rule_and_its_tests(
        make_inventory: InventoryFactory, tmp_path: Path, ratio: float, for_: str) -> None:
    site = routed(make_inventory, monitoring_router_skew_ratio=ratio,
                  monitoring_router_skew_for=for_)
    rule = next(a for a in monitoring.alerts(site) if a.name == "DeploykitRouterSkewed")
    assert f"> {ratio} and on (host)" in rule.expr and rule.for_ == for_
    assert f"more than {ratio * 100:g}% of the" in rule.summary
    directory = write_cluster(site, tmp_path / "out")
    tested = promtool("test", "rules", "rules.test.yml", cwd=directory)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    (directory / "swapped.test.yml").write_text(
        yaml.safe_dump(monitoring.rule_tests(site, swap="DeploykitRouterSkewed")))
    swapped = promtool("test", "rules", "swapped.test.yml", cwd=directory)
    assert swapped.returncode != 0 and "DeploykitRouterSkewed" in swapped.stdout + swapped.stderr


# --- the alerts on the real router's series ---------------------------------------------

def _series(metric: str, labels: dict[str, str], values: str) -> dict[str, str]:
    target = {"job": monitoring.ROUTER, "instance": "10.0.2.1:8200", "host": "r1",
              "group": "router"}
    inner = ",".join(f'{k}="{v}"' for k, v in {**target, **labels}.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


def _decisions(samples: dict[str, list[dict[str, str]]], per_minute: dict[str, int],
               minutes: int) -> list[dict[str, str]]:
    """The page's policy decision series (its own labels), each counting `per_minute`."""
    return [_series("vllm_router_policy_decisions_total", s, f"0+{per_minute[s['worker']]}x"
                    f"{minutes}") for s in samples["vllm_router_policy_decisions_total"]]


def _health(workers: dict[str, str], minutes: int) -> list[dict[str, str]]:
    return [_series("vllm_router_worker_health", {"worker": w}, f"{v}x{minutes}")
            for w, v in workers.items()]


def _run(directory: Path, tests: list[dict[str, Any]]) -> str:
    """promtool's verdict on `tests` against the rules in `directory`: '' when they pass."""
    (directory / "router.test.yml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests}))
    done = promtool("test", "rules", "router.test.yml", cwd=directory)
    return "" if done.returncode == 0 else done.stdout + done.stderr


def _expect(site: Site, name: str, minutes: int, series: list[dict[str, str]],
            fired: list[dict[str, str]]) -> dict[str, Any]:
    """A promtool test: at `minutes`, alert `name` fires once for each labels in `fired`."""
    alert = next(a for a in monitoring.alerts(site) if a.name == name)
    return {"interval": "1m", "input_series": series, "alert_rule_test": [
        {"eval_time": f"{minutes}m", "alertname": name,
         "exp_alerts": [{"exp_labels": labels,
                         "exp_annotations": alert.fired_annotations(labels)}
                        for labels in fired]}]}


def test_no_healthy_instance_fires_on_the_real_page_at_its_end(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    """The page was scraped with all three backends stopped: the router's own health
    series, as it wrote them, fire the alert; one of them healthy keeps it silent."""
    site = routed(make_inventory)
    directory = write_cluster(site, tmp_path / "out")
    samples = scrape_samples(SCRAPE.read_text())
    scraped = {s["worker"]: "0" for s in samples["vllm_router_worker_health"]}
    page = [_series("vllm_router_worker_health", s, "0x10")
            for s in samples["vllm_router_worker_health"]]
    fired = [{"host": "r1", "severity": "critical"}]
    assert _run(directory, [
        _expect(site, "DeploykitRouterNoHealthyInstance", 5, page, fired),
        _expect(site, "DeploykitRouterNoHealthyInstance", 5,
                _health({**scraped, W3: "1"}, 10), [])]) == ""
    # and the test can fail: the page's series do not leave the alert silent
    assert "DeploykitRouterNoHealthyInstance" in _run(directory, [
        _expect(site, "DeploykitRouterNoHealthyInstance", 5, page, [])])


def test_skew_fires_on_the_real_routers_split_only_past_the_ratio(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    """The scraped router chose 27101 22 times and 27102 10 times (about 69%): at that
    split a share of 0.6 fires, the default 0.8 does not."""
    samples = scrape_samples(SCRAPE.read_text())
    counts = {W1: 22, W2: 10}
    assert {s["worker"] for s in samples["vllm_router_policy_decisions_total"]} == set(counts)
    minutes = 10 + 5 + 5  # the rule's rate window, its `for`, 5 to spare
    series = [*_decisions(samples, counts, minutes),
              *_health({W1: "1", W2: "1", W3: "1"}, minutes)]
    fired = [{"host": "r1", "worker": W1, "severity": "warning"}]
    low = routed(make_inventory, monitoring_router_skew_ratio=0.6,
                 monitoring_router_skew_for="5m")
    assert _run(write_cluster(low, tmp_path / "low"), [
        _expect(low, "DeploykitRouterSkewed", minutes, series, fired)]) == ""
    default = routed(make_inventory, monitoring_router_skew_for="5m")
    directory = write_cluster(default, tmp_path / "default")
    assert _run(directory, [
        _expect(default, "DeploykitRouterSkewed", minutes, series, [])]) == ""
    assert "DeploykitRouterSkewed" in _run(directory, [
        _expect(default, "DeploykitRouterSkewed", minutes, series, fired)])


@pytest.mark.parametrize(("case", "per_minute", "health", "fires"), [
    ("busy-and-skewed", {W1: 90, W2: 10}, {W1: "1", W2: "1"}, True),
    # 10 decisions a minute, below the rule's 0.2 a second: an idle site pages nobody
    ("idle", {W1: 9, W2: 1}, {W1: "1", W2: "1"}, False),
    # one healthy instance gets everything by necessity
    ("one-healthy-instance", {W1: 90, W2: 10}, {W1: "1", W2: "0", W3: "0"}, False),
], ids=["busy-and-skewed", "idle", "one-healthy-instance"])
def test_skew_needs_traffic_and_two_healthy_instances(
        make_inventory: InventoryFactory, tmp_path: Path, case: str,
        per_minute: dict[str, int], health: dict[str, str], fires: bool) -> None:
    site = routed(make_inventory, monitoring_router_skew_for="5m")
    directory = write_cluster(site, tmp_path / "out")
    samples = {"vllm_router_policy_decisions_total": [
        {"policy": "cache_aware", "worker": w} for w in per_minute]}
    minutes = 20
    series = [*_decisions(samples, per_minute, minutes), *_health(health, minutes)]
    fired = [{"host": "r1", "worker": W1, "severity": "warning"}]
    assert _run(directory, [
        _expect(site, "DeploykitRouterSkewed", minutes, series, fired if fires else [])]) == ""
    assert "DeploykitRouterSkewed" in _run(directory, [  # the opposite verdict fails
        _expect(site, "DeploykitRouterSkewed", minutes, series, [] if fires else fired)])
    if case == "idle":
        assert sum(per_minute.values()) / 60 < monitoring.ROUTER_SKEW_MIN_RATE
