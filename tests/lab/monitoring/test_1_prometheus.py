"""The monitoring's proof in the lab: the Prometheus that `up` installed on lab1 scrapes every
rendered job, the external hit series moves after a cross-host hit that only S3 can answer,
and stopping a concentrator fires the concentrator-down alert within its `for:` plus one
scrape and one evaluation interval."""

from __future__ import annotations

import json
import random
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from deploy_kit.ops.site import open_site
from deploy_kit.render import monitoring
from tests.conftest import REPO
from tests.lab.conftest import Lab
from tests.lab.vllm_http import SERVING, complete, wait_healthy

pytestmark = pytest.mark.lab

PROMETHEUS = "http://10.99.0.11:9090"  # lab1, the monitoring profile's monitoring host
LAB2 = "10.99.0.12"  # the second gateway, whose concentrator the alert test stops
SCRAPE_S = 5  # the profile's monitoring_scrape_interval (also the evaluation interval)


def api(path: str, **params: str) -> dict:
    url = f"{PROMETHEUS}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as response:
        doc: dict = json.loads(response.read())
    assert doc["status"] == "success", doc
    return doc["data"]


def query(expr: str) -> list[dict]:
    result: list[dict] = api("query", query=expr)["result"]
    return result


def rendered_jobs(lab: Lab, tmp_path: Path) -> set[str]:
    lab.deploykit("render", "--inventory", "lab", "-o", str(tmp_path / "r"))
    targets = tmp_path / "r" / "_cluster" / "monitoring" / "targets"
    return {p.stem for p in targets.glob("*.json")}


def test_every_rendered_job_is_scraped_and_up(converged: Lab, tmp_path: Path) -> None:
    jobs = rendered_jobs(converged, tmp_path)
    # the profile opens Consul's API: every job has targets but LMCache 0.5.6's server,
    # which serves no metrics (compat.yaml server_metrics; this lab found its port closed)
    assert jobs == {job.name for job in monitoring.JOBS} - {monitoring.LMCACHE}, jobs
    deadline = time.monotonic() + 120
    while True:
        active = api("targets", state="active")["activeTargets"]
        health = {(t["labels"]["job"], t["labels"].get("host", "")): t["health"] for t in active}
        errors = {(t["labels"]["job"], t["labels"].get("host", "")): t.get("lastError")
                  for t in active if t["health"] != "up"}
        if {job for job, _ in health} == jobs and not errors:
            break
        assert time.monotonic() < deadline, (sorted(health.items()), errors)
        time.sleep(SCRAPE_S)
    by_job: dict[str, set[str]] = {}
    for job, host in health:
        by_job.setdefault(job, set()).add(host)
    assert by_job[monitoring.VLLM] == by_job[monitoring.NODE] == {"lab3", "lab4"}
    assert by_job[monitoring.HAPROXY] == by_job[monitoring.COREDNS] == {"lab1", "lab2"}
    # the DNS probe counts one answer per concentrator on every DNS server
    answers = {r["metric"]["host"]: float(r["value"][1])
               for r in query(f'probe_dns_answer_rrs{{job="{monitoring.DNS_ANSWERS}"}}')}
    assert answers == {"lab1": 2.0, "lab2": 2.0}, answers
    # LMCache's S3 trouble, counted from each serving host's journal: present, and no
    # breaker tripped on a healthy lab
    events = {(r["metric"]["host"], r["metric"]["kind"]): float(r["value"][1]) for r in
              query('deploykit_lmcache_s3_log_lines{unit="lmcache-server"}')}
    assert {host for host, _ in events} == {"lab3", "lab4"}, events
    assert events[("lab3", "breaker")] == events[("lab4", "breaker")] == 0, events
    rules = [r["name"] for g in api("rules")["groups"] for r in g["rules"]]
    assert "DeploykitConcentratorDown" in rules and \
        "deploykit:vllm_external_hit_ratio:rate5m" in rules


def test_a_cross_host_hit_moves_the_remote_hit_series(converged: Lab) -> None:
    """A fresh prompt on lab3 (stored to S3 by its LMCache server), then on lab4, whose DRAM
    never saw it (and vLLM's own prefix cache is off in the lab): lab4's external hit can
    only come from the remote tier, and Prometheus sees it in lab4's series."""
    for address in SERVING.values():
        wait_healthy(address)
    # the lab model's vocabulary is small (tests/lab/core/test_3_serving.py): ids 3..258
    tokens = [random.Random(time.time_ns()).randrange(3, 259) for _ in range(256 * 3 + 5)]
    before = query('sum(vllm:external_prefix_cache_hits_total{host="lab4"})')
    start = float(before[0]["value"][1]) if before else 0.0
    complete(SERVING["lab3"], tokens)
    time.sleep(3)  # the store to S3 is asynchronous
    answer = complete(SERVING["lab4"], tokens)
    assert answer["choices"], answer
    deadline = time.monotonic() + 60
    while True:
        now = query('sum(vllm:external_prefix_cache_hits_total{host="lab4"})')
        ratio = query('deploykit:vllm_external_hit_ratio:rate5m{host="lab4"}')
        if now and float(now[0]["value"][1]) - start >= 512 and ratio and \
                float(ratio[0]["value"][1]) > 0:
            break
        assert time.monotonic() < deadline, (start, now, ratio)
        time.sleep(SCRAPE_S)


def test_a_stopped_concentrator_fires_its_alert_in_time(converged: Lab) -> None:
    site = open_site(str(REPO / "inventory" / "lab"))
    rule = next(a for a in monitoring.alerts(site) if a.name == "DeploykitConcentratorDown")
    bound = rule_seconds(rule.for_) + 2 * SCRAPE_S + 10  # for + scrape + evaluation + slack
    converged.ssh(LAB2, "systemctl stop haproxy")
    stopped = time.monotonic()
    try:
        while True:
            firing = [a for a in api("alerts")["alerts"]
                      if a["labels"]["alertname"] == rule.name and a["state"] == "firing"]
            if firing:
                break
            assert time.monotonic() - stopped < bound + 30, "no alert"
            time.sleep(1)
        elapsed = time.monotonic() - stopped
        print(f"{rule.name} fired {elapsed:.0f} s after the stop (bound {bound} s)")
        assert [a["labels"]["host"] for a in firing] == ["lab2"]
        assert firing[0]["annotations"]["verify_check"] == "s3-concentrator-reachable"
        assert elapsed <= bound, elapsed
    finally:
        converged.ssh(LAB2, "systemctl start haproxy")
    deadline = time.monotonic() + 120  # back in DNS before the next test
    while float(query(f'min(probe_dns_answer_rrs{{job="{monitoring.DNS_ANSWERS}"}})')[0]
                ["value"][1]) < 2:
        assert time.monotonic() < deadline
        time.sleep(SCRAPE_S)


def rule_seconds(duration: str) -> int:
    return int(duration[:-1]) * {"s": 1, "m": 60, "h": 3600}[duration[-1]]


def test_a_second_up_changes_nothing(converged: Lab) -> None:
    summary = converged.converge()
    assert summary["rc"] == 0 and summary["changed"] == 0, summary
