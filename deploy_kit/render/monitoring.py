"""Prometheus for the cache tier (pure): one file_sd target file per job, the alert rules
with their `promtool test rules` cases (data/alerts.yaml, with this site's values filled in),
a Grafana dashboard, and the configs of a `monitoring` host (Prometheus, blackbox exporter).

Metric names are upstream's, read from the pinned releases: vLLM 0.32/0.33
(`vllm/v1/metrics/loggers.py`: `vllm:external_prefix_cache_{hits,queries}` counters,
`vllm:time_to_first_token_seconds`), the LMCache 0.5.6 server's OpenTelemetry counters
(`lmcache/v1/mp_observability/subscribers/metrics/{lookup,l2,l2_failures}.py`, which its
Prometheus exporter names `lmcache_mp_<name>_<unit>_total`), HAProxy 2.6's built-in exporter
(`haproxy_server_status{state=...}`, `haproxy_server_response_time_average_seconds`), the
blackbox exporter's DNS prober (`probe_dns_answer_rrs`), the node exporter, and vllm-router
0.1.17 (`src/metrics.rs`, each name seen in a scrape of the real router:
`vllm_router_policy_decisions_total{policy,worker}`, `vllm_router_worker_health{worker}`).
Everything about routers is rendered only where the site has a `router` group.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from deploy_kit.agents import lmcache_s3_events
from deploy_kit.config import names
from deploy_kit.config.instances import instances
from deploy_kit.config.models import HostConfig
from deploy_kit.config.names import LMCACHE_SERVER_UNIT
from deploy_kit.config.site import Host, Site
from deploy_kit.core import compat, trusted_yaml
from deploy_kit.plan.serving import accelerator_of
from deploy_kit.render.consul import consul_scrapable

# where the monitoring host keeps deploykit's part of its Prometheus configuration
PROMETHEUS_CONFIG_PATH = "/etc/prometheus/prometheus.yml"
PROMETHEUS_DIR = "/etc/prometheus/deploykit"
TARGETS_DIR = f"{PROMETHEUS_DIR}/targets"
RULES_PATH = f"{PROMETHEUS_DIR}/rules.yml"
BLACKBOX_CONFIG_PATH = "/etc/prometheus/blackbox.yml"  # Debian's prometheus-blackbox-exporter
CLUSTER_DIR = "monitoring"  # _cluster/monitoring/ in the render tree

# Debian's units read their flags from these (EnvironmentFile=, ARGS)
PROMETHEUS_DEFAULTS_PATH = "/etc/default/prometheus"
BLACKBOX_DEFAULTS_PATH = "/etc/default/prometheus-blackbox-exporter"
ALERTMANAGER_DEFAULTS_PATH = "/etc/default/prometheus-alertmanager"
NODE_EXPORTER_DEFAULTS_PATH = "/etc/default/prometheus-node-exporter"
# Debian's node exporter reads *.prom files here (textfile collector)
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
S3_EVENTS_SCRIPT = names.S3_EVENTS_SCRIPT
S3_EVENTS_CONFIG = lmcache_s3_events.CONFIG
S3_EVENTS_UNIT = "/etc/systemd/system/deploykit-lmcache-s3-events.service"
S3_EVENTS_TIMER = "/etc/systemd/system/deploykit-lmcache-s3-events.timer"

DNS_PROBE_MODULE = "deploykit_s3_name"
CEPH_MGR_PORT = 9283  # the mgr `prometheus` module's default

VLLM = "deploykit-vllm"
LMCACHE = "deploykit-lmcache"
COREDNS = "deploykit-coredns"
CONSUL = "deploykit-consul"
HAPROXY = "deploykit-haproxy"
CEPH = "deploykit-ceph-mgr"
NODE = "deploykit-node"
DNS_ANSWERS = "deploykit-dns-answers"
ROUTER = "deploykit-router"


@dataclass(frozen=True)
class Job:
    name: str
    metrics_path: str = "/metrics"
    params: dict[str, list[str]] = field(default_factory=dict)
    probed: bool = False  # targets are probed through the blackbox exporter


JOBS = (Job(VLLM), Job(LMCACHE), Job(COREDNS),
        Job(CONSUL, "/v1/agent/metrics", {"format": ["prometheus"]}),
        Job(HAPROXY), Job(CEPH), Job(NODE),
        Job(DNS_ANSWERS, "/probe", {"module": [DNS_PROBE_MODULE]}, probed=True), Job(ROUTER))
# the jobs of an optional group (every host of it is scraped): a site without the group
# renders no word of them, not even why they are left out
GROUP_JOBS = {ROUTER}


def _endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _group(host: Host, tier: str, **labels: str) -> dict[str, Any]:
    return {"targets": [], "labels": {"host": host.name, "group": tier, **labels}}


def _serving_labels(c: HostConfig) -> dict[str, str]:
    return {"model": c.served_model_name, "accelerator": accelerator_of(c)}


@dataclass(frozen=True)
class Targets:
    """file_sd content per job, and why a job has none (said in the rendered config)."""

    groups: dict[str, list[dict[str, Any]]]
    omitted: dict[str, str]


# The last site's targets: a render asks for them six times (targets, configs, for the
# monitoring host and for _cluster), each a pass over every host. Keyed by identity and
# holding the site itself, so the entry cannot outlive or mistake it; a Site is frozen, its
# hosts dict is never changed in place and HostConfig is frozen, so the targets cannot go
# stale. Callers only read them.
_last_targets: tuple[Site, Targets] | None = None


def scrape_targets(site: Site) -> Targets:
    global _last_targets
    if _last_targets is None or _last_targets[0] is not site:
        _last_targets = (site, _scrape_targets(site))
    return _last_targets[1]


def _scrape_targets(site: Site) -> Targets:
    groups: dict[str, list[dict[str, Any]]] = {job.name: [] for job in JOBS}
    omitted: dict[str, str] = {}

    def add(job: str, host: Host, tier: str, port: int, **labels: str) -> None:
        entry = _group(host, tier, **labels)
        entry["targets"] = [_endpoint(host.address, port)]
        groups[job].append(entry)

    s = site.settings
    for host in site.hosts.values():
        c = host.config
        if "vllm" in host.groups:
            for instance in instances(host.name, c):  # each vLLM instance has its /metrics
                add(VLLM, host, "vllm", instance.port, vllm_instance=instance.name,
                    **_serving_labels(c))
            if c.lmcache_server and _server_metrics(c):
                add(LMCACHE, host, "vllm", c.lmcache_server_metrics_port, **_serving_labels(c))
            add(NODE, host, "vllm", c.monitoring_node_exporter_port, **_serving_labels(c))
        if "router" in host.groups:  # the router front passes /metrics to its metrics port
            add(ROUTER, host, "router", c.router_port)
        if "dns" in host.groups:
            add(COREDNS, host, "dns", c.coredns_metrics_port)
            add(DNS_ANSWERS, host, "dns", c.coredns_port)
        if "rgw" in host.groups and c.ceph_rgw_concentrator == "deploykit":
            add(HAPROXY, host, "rgw", c.ceph_rgw_concentrator_monitor_port)
        if c.deploykit_dns_mode == "consul" and host.groups & names.CONSUL_AGENT_GROUPS \
                and consul_scrapable(c):
            add(CONSUL, host, "consul", c.consul_http_port)
    if s.deploykit_dns_mode != "consul":
        omitted[CONSUL] = "static DNS mode runs no Consul"
    elif not groups[CONSUL]:
        omitted[CONSUL] = ("Consul's HTTP API, which serves its metrics, listens on loopback "
                           "(consul_http_address) or needs an ACL token with agent:read")
    servers = [h for h in site.group("vllm") if h.config.lmcache_server]
    if servers and not groups[LMCACHE]:
        omitted[LMCACHE] = (f"LMCache {servers[0].config.lmcache_version}'s `lmcache server` "
                            "serves no metrics (compat.yaml server_metrics)")
    elif not servers:
        omitted[LMCACHE] = ("no serving host runs `lmcache server` (lmcache_topology: "
                            "inprocess keeps LMCache inside vLLM)")
    if not s.monitoring_ceph_mgr_prometheus:
        omitted[CEPH] = "monitoring_ceph_mgr_prometheus is false"
    elif s.monitoring_ceph_mgr_targets:
        groups[CEPH] = [{"targets": [t], "labels": {"host": t.rpartition(":")[0],
                                                     "group": "ceph_admin"}}
                        for t in s.monitoring_ceph_mgr_targets]
    else:
        for host in site.group("ceph_admin"):
            add(CEPH, host, "ceph_admin", CEPH_MGR_PORT)
    for job in JOBS:
        if not groups[job.name] and job.name not in omitted and job.name not in GROUP_JOBS:
            omitted[job.name] = "no host in the inventory runs it"
    return Targets({k: v for k, v in groups.items() if v}, omitted)


def _server_metrics(c: HostConfig) -> bool:
    try:
        return compat.lmcache(c.lmcache_version).server_metrics
    except ValueError:
        return False


def gateway_count(site: Site) -> int:
    """What a healthy DNS answer for the S3 name holds: one A record per concentrator."""
    return len(site.group("rgw"))


# --- alert rules ------------------------------------------------------------------------

def _seconds(duration: str) -> int:
    from deploy_kit.config.rules_monitoring import seconds  # one parser of the syntax

    return int(seconds(duration))


def _minutes(duration: str) -> int:
    return -(-_seconds(duration) // 60)


@dataclass(frozen=True)
class Alert:
    """One rule, with the series that must fire it and the series that must not."""

    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str
    verify_check: str
    doctor_symptom: str
    labels: dict[str, str]  # what the firing case's alert carries besides severity
    firing: list[tuple[str, str]]  # (series, promtool values)
    healthy: list[tuple[str, str]]
    eval_time: str  # when promtool looks at the alert

    def annotations(self) -> dict[str, str]:
        return {"summary": self.summary, "description": self.description,
                "verify_check": self.verify_check, "doctor_symptom": self.doctor_symptom,
                "runbook": f"deploykit verify --check {self.verify_check}; "
                           f"deploykit doctor \"{self.doctor_symptom}\""}

    def fired_annotations(self, labels: dict[str, str]) -> dict[str, str]:
        """What the alert carries when it fires with `labels` (promtool compares them)."""
        return {k: _expand(v, labels) for k, v in self.annotations().items()}

    def rule(self) -> dict[str, Any]:
        return {"alert": self.name, "expr": self.expr, "for": self.for_,
                "labels": {"severity": self.severity}, "annotations": self.annotations()}


def _expand(template: str, labels: dict[str, str]) -> str:
    """What Prometheus makes of `{{ $labels.x }}` (the only template the rules use)."""
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)


def _series(metric: str, /, **labels: str) -> str:  # a label may be called `name`
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{metric}{{{inner}}}"


@functools.cache
def _alert_data() -> list[dict[str, Any]]:
    """data/alerts.yaml's alerts, as written (read once; callers copy before they fill in)."""
    text = resources.files("deploy_kit").joinpath("data/alerts.yaml").read_text()
    alerts: list[dict[str, Any]] = trusted_yaml.load(text)["alerts"]
    return alerts


def alert_values(site: Site) -> dict[str, str]:
    """What alerts.yaml's `${name}`s stand for on this site."""
    s = site.settings
    target, ratio_for = s.monitoring_hit_ratio_target, s.monitoring_hit_ratio_for
    gateways, slow = gateway_count(site), s.monitoring_rgw_latency_seconds
    free, shm_size = s.monitoring_shm_free_ratio, 64 * 2**30  # a made-up 64 GiB /dev/shm
    values: dict[str, object] = {
        "vllm": VLLM, "node": NODE, "haproxy": HAPROXY, "dns_answers": DNS_ANSWERS,
        "ceph": CEPH, "ceph_osd_latency": s.monitoring_ceph_osd_latency_ms,
        "ceph_osd_latency_doubled": s.monitoring_ceph_osd_latency_ms * 2,
        "ceph_osd_latency_halved": s.monitoring_ceph_osd_latency_ms / 2,
        "s3_fqdn": s.deploykit_s3_fqdn,
        "hit_ratio_target": target, "hit_ratio_for": ratio_for,
        # the test's hits per 1000 queries: half the target, and halfway from it to all
        "hits_below_target": int(1000 * target / 2),
        "hits_above_target": min(1000, -(-int(1000 * (1 + target)) // 2)),
        # the rule's 10-minute rate window, then its `for`, then 5 minutes to spare
        "hit_ratio_eval": 10 + _minutes(ratio_for) + 5,
        "gateways": gateways, "gateways_short": gateways - 1,
        "rgw_latency": slow, "rgw_latency_doubled": slow * 2, "rgw_latency_halved": slow / 2,
        "shm_free_ratio": free, "shm_free_percent": f"{free:.0%}", "shm_size": shm_size,
        "shm_avail_short": int(shm_size * free / 2),
        "shm_avail_ample": int(shm_size * (1 + free) / 2),
        **_quota_values(site),
        **_router_values(site),
    }
    return {name: str(value) for name, value in values.items()}


# below this many requests a second a router's choices say little: at light sequential
# traffic cache_aware sends every prompt to its first instance (measured on 0.1.17), and a
# site without traffic must not page anyone
ROUTER_SKEW_MIN_RATE = 0.2
# the skew rule's test traffic: policy decisions a minute (about 16.7 a second, well above
# the minimum rate), and the `for`'s test margin
_SKEW_TEST_PER_MINUTE = 1000


def _router_values(site: Site) -> dict[str, object]:
    """The router alerts' values: the skew rule's share, rate and `for`, and its test
    series (one instance just past the share, and an even split between two)."""
    s = site.settings
    ratio = s.monitoring_router_skew_ratio
    top = min(_SKEW_TEST_PER_MINUTE,
              -(-int(_SKEW_TEST_PER_MINUTE * (1 + ratio)) // 2))  # halfway from ratio to 1
    return {"router": ROUTER, "router_fqdn": names.router_fqdn(s), "router_skew_ratio": ratio,
            "router_skew_percent": f"{ratio * 100:g}%",
            "router_skew_for": s.monitoring_router_skew_for,
            "router_skew_min_rate": ROUTER_SKEW_MIN_RATE,
            # the rule's 10-minute rate window, then its `for`, then 5 minutes to spare
            "router_skew_eval": 10 + _minutes(s.monitoring_router_skew_for) + 5,
            "router_skew_top": top, "router_skew_rest": _SKEW_TEST_PER_MINUTE - top,
            "router_even": _SKEW_TEST_PER_MINUTE // 2}


# the share of the bucket's quota at which the quota alert fires: room for a day or more of
# stores at LMCache's rate, well before every store fails
QUOTA_WARN_RATIO = 0.8


def _quota_values(site: Site) -> dict[str, object]:
    """The quota alert's values: the RGW data pool, the quota and its warning line, and the
    test inputs (stored bytes just above the line, and half of it)."""
    from deploy_kit.render.s3_access import quota_bytes

    quota = quota_bytes(site)
    warn = int(quota * QUOTA_WARN_RATIO)
    pools = [p.name for p in site.settings.ceph_rgw_pools_list if p.name.endswith(".data")]
    return {"data_pool": pools[0] if pools else "default.rgw.buckets.data",
            "quota_bytes": quota, "quota_warn_bytes": warn,
            "quota_warn_percent": f"{QUOTA_WARN_RATIO:.0%}",
            "quota_stored_high": warn + max(1, quota // 100), "quota_stored_low": warn // 2}


def alert_switches(site: Site) -> dict[str, bool]:
    """alerts.yaml's `when` names: an alert whose switch is off is left out."""
    return {
        # a ratio is never below 0: a target of 0 turns the hit ratio alert off
        "hit_ratio_target": site.settings.monitoring_hit_ratio_target > 0,
        "gateways": gateway_count(site) > 0,
        # the Ceph rules read the mgr's exporter, scraped only when it is on
        "ceph_mgr": bool(scrape_targets(site).groups.get(CEPH)),
        # a quota to fill (0: none) and the pool usage to watch it with
        "bucket_quota": bool(scrape_targets(site).groups.get(CEPH)) and _has_quota(site),
        "routers": bool(scrape_targets(site).groups.get(ROUTER)),
        "router_decisions": bool(scrape_targets(site).groups.get(ROUTER))
        and counts_decisions(site),
    }


def counts_decisions(site: Site) -> bool:
    """Whether the routers count their choices of an instance: vllm-router 0.1.17's kv_aware
    policy never calls record_policy_decision (src/policies/kv_aware.rs; measured, no
    vllm_router_policy_decisions_total at all), the others do."""
    return site.settings.router_routing_logic != "kvaware"


def _has_quota(site: Site) -> bool:
    from deploy_kit.render.s3_access import quota_bytes

    return quota_bytes(site) > 0


_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")  # not `$labels`: that one is Prometheus's


def _fill(data: Any, values: dict[str, str]) -> Any:
    """A copy of `data` with `${name}` replaced in every string; a name without a value,
    or a value YAML read as a number, is a mistake in alerts.yaml and raises."""
    if isinstance(data, dict):
        return {key: _fill(value, values) for key, value in data.items()}
    if isinstance(data, list):
        return [_fill(value, values) for value in data]
    if not isinstance(data, str):
        raise TypeError(f"alerts.yaml: {data!r} is not a string: quote it")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], data)


def _cases(series: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(_series(s["metric"], **s["labels"]), s["values"]) for s in series]


def _alert(entry: dict[str, Any]) -> Alert:
    return Alert(name=entry["alert"], expr=entry["expr"], for_=entry["for"],
                 severity=entry["severity"], summary=entry["summary"],
                 description=entry["description"], verify_check=entry["verify_check"],
                 doctor_symptom=entry["doctor_symptom"], labels=entry["labels"],
                 firing=_cases(entry["firing"]), healthy=_cases(entry["healthy"]),
                 eval_time=entry["eval_time"])


def alerts(site: Site) -> list[Alert]:
    """data/alerts.yaml with this site's values, less the alerts it switches off."""
    switches = alert_switches(site)
    wanted = [e for e in _alert_data() if "when" not in e or switches[e["when"]]]
    return [_alert(entry) for entry in _fill(wanted, alert_values(site))]


RECORDS = {
    # per host and model, what the dashboard and the lab's proof read
    "deploykit:vllm_external_hit_ratio:rate5m":
        f'sum by (host, model_name) (rate(vllm:external_prefix_cache_hits_total{{job="{VLLM}"}}'
        f'[5m])) / sum by (host, model_name) (rate(vllm:external_prefix_cache_queries_total'
        f'{{job="{VLLM}"}}[5m]))',
    "deploykit:vllm_external_hit_tokens:increase1h":
        f'sum by (host, model_name) (increase(vllm:external_prefix_cache_hits_total'
        f'{{job="{VLLM}"}}[1h]))',
}


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)


def render_rules(site: Site, header: str) -> str:
    groups = [{"name": "deploykit-records", "rules": [
                  {"record": name, "expr": expr} for name, expr in RECORDS.items()]},
              {"name": "deploykit-alerts", "rules": [a.rule() for a in alerts(site)]}]
    return f"# {header}\n" + _dump({"groups": groups})


def rule_tests(site: Site, rules_file: str = "rules.yml",
               swap: str | None = None) -> dict[str, Any]:
    """promtool's unit tests of the rules: each alert fires on its firing series and stays
    silent on its healthy ones. `swap` (tests only) feeds one alert's healthy series to its
    firing case, which must then fail."""
    tests = []
    for alert in alerts(site):
        firing = alert.healthy if alert.name == swap else alert.firing
        labels = {**alert.labels, "severity": alert.severity}
        expected = alert.fired_annotations(labels)
        tests.append({"interval": "1m",
                      "input_series": [{"series": s, "values": v} for s, v in firing],
                      "alert_rule_test": [{"eval_time": alert.eval_time,
                                           "alertname": alert.name,
                                           "exp_alerts": [{"exp_labels": labels,
                                                           "exp_annotations": expected}]}]})
        tests.append({"interval": "1m",
                      "input_series": [{"series": s, "values": v} for s, v in alert.healthy],
                      "alert_rule_test": [{"eval_time": alert.eval_time,
                                           "alertname": alert.name, "exp_alerts": []}]})
    return {"rule_files": [rules_file], "evaluation_interval": "1m", "tests": tests}


def render_rule_tests(site: Site, header: str) -> str:
    return f"# {header}\n# promtool test rules rules.test.yml (beside rules.yml)\n" + \
        _dump(rule_tests(site))


# --- Prometheus and blackbox configuration ----------------------------------------------

def prometheus_config(site: Site, targets_dir: str, rules_path: str,
                      blackbox: str) -> dict[str, Any]:
    s = site.settings
    found = scrape_targets(site)
    config: dict[str, Any] = {
        "global": {"scrape_interval": s.monitoring_scrape_interval,
                   "evaluation_interval": s.monitoring_scrape_interval},
        "rule_files": [rules_path],
    }
    if s.monitoring_alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [
            {"targets": [f"127.0.0.1:{s.monitoring_alertmanager_port}"]}]}]}
    scrapes = []
    for job in JOBS:
        if job.name not in found.groups:
            continue
        scrape: dict[str, Any] = {"job_name": job.name, "metrics_path": job.metrics_path}
        if job.params:
            scrape["params"] = job.params
        scrape["file_sd_configs"] = [{"files": [f"{targets_dir}/{job.name}.json"]}]
        if job.probed:  # the DNS server is the probe's target; the exporter is scraped
            scrape["relabel_configs"] = [
                {"source_labels": ["__address__"], "target_label": "__param_target"},
                {"source_labels": ["__param_target"], "target_label": "instance"},
                {"target_label": "__address__", "replacement": blackbox}]
        scrapes.append(scrape)
    config["scrape_configs"] = scrapes
    return config


def render_prometheus_config(site: Site, header: str, targets_dir: str, rules_path: str) -> str:
    s = site.settings
    omitted = scrape_targets(site).omitted
    notes = "".join(f"# not scraped: {job}: {why}\n" for job, why in sorted(omitted.items()))
    blackbox = f"127.0.0.1:{s.monitoring_blackbox_port}"
    return f"# {header}\n{notes}" + _dump(prometheus_config(site, targets_dir, rules_path,
                                                            blackbox))


def render_blackbox_config(site: Site, header: str) -> str:
    module = {"prober": "dns", "timeout": "5s",
              "dns": {"query_name": site.settings.deploykit_s3_fqdn, "query_type": "A",
                      "transport_protocol": "udp", "preferred_ip_protocol": "ip4",
                      "valid_rcodes": ["NOERROR"]}}
    return f"# {header}\n" + _dump({"modules": {DNS_PROBE_MODULE: module}})


def _args(header: str, *flags: str) -> str:
    return f"# {header}\nARGS=\"{' '.join(flags)}\"\n"


def render_defaults(site: Site, header: str) -> dict[str, str]:
    """The monitoring host's unit flags: Prometheus on its port, the blackbox exporter on
    loopback (only this Prometheus asks it), Alertmanager without a gossip cluster."""
    s = site.settings
    files = {
        PROMETHEUS_DEFAULTS_PATH: _args(
            header, f"--web.listen-address=:{s.monitoring_prometheus_port}"),
        BLACKBOX_DEFAULTS_PATH: _args(
            header, f"--config.file={BLACKBOX_CONFIG_PATH}",
            f"--web.listen-address=127.0.0.1:{s.monitoring_blackbox_port}"),
    }
    if s.monitoring_alertmanager:
        files[ALERTMANAGER_DEFAULTS_PATH] = _args(
            header, f"--web.listen-address=127.0.0.1:{s.monitoring_alertmanager_port}",
            "--cluster.listen-address=")
    return files


def render_node_exporter_defaults(host: Host, header: str) -> str:
    return _args(header, f"--web.listen-address=:{host.config.monitoring_node_exporter_port}",
                 f"--collector.textfile.directory={TEXTFILE_DIR}")


def render_s3_events(host: Host) -> dict[str, tuple[str, int]]:
    """path -> (text, mode): the settings of the journal counter of LMCache's S3 trouble, its
    service and its timer. The patterns are the ones verify reads
    (core.patterns.S3_LOG_PATTERNS), so alert and check agree."""
    from deploy_kit.core.patterns import S3_LOG_PATTERNS
    from deploy_kit.render.templating import render_template, settings_json

    c = host.config
    units = [LMCACHE_SERVER_UNIT] if c.lmcache_server else ["vllm"]
    interval = f"{min(30, _seconds(c.monitoring_scrape_interval) * 2)}s"
    return {
        # the counter itself is deploy_kit/agents/lmcache_s3_events.py, installed by the
        # monitoring role at S3_EVENTS_SCRIPT
        S3_EVENTS_CONFIG: (settings_json({
            "patterns": S3_LOG_PATTERNS, "units": units,
            "state": "/var/lib/deploykit/lmcache-s3-events.json",
            "textfile": f"{TEXTFILE_DIR}/deploykit_lmcache.prom"}), 0o644),
        S3_EVENTS_UNIT: (render_template("lmcache-s3-events.service.j2",
                                         script=S3_EVENTS_SCRIPT), 0o644),
        S3_EVENTS_TIMER: (render_template("lmcache-s3-events.timer.j2", interval=interval),
                          0o644),
    }


def render_targets(site: Site) -> dict[str, str]:
    """job -> file_sd JSON (Prometheus re-reads these files on change, no reload)."""
    return {job: json.dumps(entries, indent=2, sort_keys=True) + "\n"
            for job, entries in scrape_targets(site).groups.items()}


# --- dashboard ---------------------------------------------------------------------------

BACKEND_CHOICE = "Backend choice: the router's decisions per instance"
PANELS: list[tuple[str, str, list[tuple[str, str]]]] = [
    # (title, unit, [(PromQL, legend)])
    ("External (LMCache) hit ratio per host and model", "percentunit",
     [("deploykit:vllm_external_hit_ratio:rate5m", "{{host}} {{model_name}}")]),
    ("vLLM local prefix cache hit ratio", "percentunit",
     [(f'sum by (host) (rate(vllm:prefix_cache_hits_total{{job="{VLLM}"}}[5m])) / '
       f'sum by (host) (rate(vllm:prefix_cache_queries_total{{job="{VLLM}"}}[5m]))', "{{host}}")]),
    ("External (LMCache) hit tokens per second per host", "short",
     [(f'sum by (host) (rate(vllm:external_prefix_cache_hits_total{{job="{VLLM}"}}[5m]))',
       "{{host}}")]),
    ("LMCache hit tokens per second: DRAM (L1) and remote tier (L2)", "short",
     [(f'sum by (host) (rate(lmcache_mp_lookup_hit_l1_tokens_total{{job="{LMCACHE}"}}[5m]))',
       "{{host}} L1"),
      (f'sum by (host) (rate(lmcache_mp_lookup_hit_l2_tokens_total{{job="{LMCACHE}"}}[5m]))',
       "{{host}} L2")]),
    ("LMCache remote stores submitted and completed per second", "reqps",
     [(f'sum by (host) (rate(lmcache_mp_l2_store_submitted_requests_total{{job="{LMCACHE}"}}'
       '[5m]))', "{{host}} submitted"),
      (f'sum by (host) (rate(lmcache_mp_l2_store_completed_requests_total{{job="{LMCACHE}"}}'
       '[5m]))', "{{host}} completed")]),
    ("TTFT p50 / p99 per host", "s",
     [(f'histogram_quantile(0.5, sum by (le, host) (rate(vllm:time_to_first_token_seconds_bucket'
       f'{{job="{VLLM}"}}[5m])))', "{{host}} p50"),
      (f'histogram_quantile(0.99, sum by (le, host) (rate('
       f'vllm:time_to_first_token_seconds_bucket{{job="{VLLM}"}}[5m])))', "{{host}} p99")]),
    ("Time per output token p50 / p99 per host", "s",
     [(f'histogram_quantile(0.5, sum by (le, host) (rate('
       f'vllm:request_time_per_output_token_seconds_bucket{{job="{VLLM}"}}[5m])))',
       "{{host}} p50"),
      (f'histogram_quantile(0.99, sum by (le, host) (rate('
       f'vllm:request_time_per_output_token_seconds_bucket{{job="{VLLM}"}}[5m])))',
       "{{host}} p99")]),
    ("S3 throughput per gateway (bytes/s)", "Bps",
     [(f'sum by (host, server) (rate(haproxy_server_bytes_out_total{{job="{HAPROXY}",'
       'proxy="rgw"}[5m]))', "{{server}} out"),
      (f'sum by (host, server) (rate(haproxy_server_bytes_in_total{{job="{HAPROXY}",'
       'proxy="rgw"}[5m]))', "{{server}} in")]),
    ("S3 response time per gateway (average of the last 1024 requests)", "s",
     [(f'haproxy_server_response_time_average_seconds{{job="{HAPROXY}",proxy="rgw"}}',
       "{{server}}")]),
    ("S3 responses per gateway and class", "reqps",
     [(f'sum by (server, code) (rate(haproxy_server_http_responses_total{{job="{HAPROXY}",'
       'proxy="rgw"}[5m]))', "{{server}} {{code}}")]),
    ("DNS answers for the S3 name per DNS server", "short",
     [(f'probe_dns_answer_rrs{{job="{DNS_ANSWERS}"}}', "{{host}}")]),
    ("CoreDNS queries per second", "reqps",
     [(f'sum by (host) (rate(coredns_dns_requests_total{{job="{COREDNS}"}}[5m]))', "{{host}}")]),
    ("/dev/shm free on serving hosts", "percentunit",
     [(f'node_filesystem_avail_bytes{{job="{NODE}",mountpoint="/dev/shm"}} / '
       f'node_filesystem_size_bytes{{job="{NODE}",mountpoint="/dev/shm"}}', "{{host}}")]),
    ("Ceph OSD commit and apply latency (worst OSD, average)", "ms",
     [(f'max(ceph_osd_commit_latency_ms{{job="{CEPH}"}})', "commit, worst OSD"),
      (f'avg(ceph_osd_commit_latency_ms{{job="{CEPH}"}})', "commit, average"),
      (f'max(ceph_osd_apply_latency_ms{{job="{CEPH}"}})', "apply, worst OSD")]),
    ("Ceph recovery: PGs degraded, undersized, recovering, backfilling; slow ops", "short",
     [*((f'sum(ceph_pg_{state}{{job="{CEPH}"}})', f"PGs {state}")
        for state in ("degraded", "undersized", "recovering", "backfilling")),
      (f'max(ceph_healthcheck_slow_ops{{job="{CEPH}"}})', "slow ops")]),
    ("Ceph recovery throughput", "Bps",
     [(f'sum(ceph_pool_recovering_bytes_per_sec{{job="{CEPH}"}})', "recovering")]),
    ("Scrape targets up per job", "short",
     [('sum by (job) (up{job=~"deploykit-.*"})', "{{job}}")]),
    # the routers (vllm-router 0.1.17's names, each seen in a scrape of the real router; its
    # requests_total counts answered requests only, the failed ones are request_errors_total)
    ("Router targets up", "short",
     [(f'up{{job="{ROUTER}"}}', "{{host}}")]),
    ("Router requests answered per second per router", "reqps",
     [(f'sum by (host) (rate(vllm_router_requests_total{{job="{ROUTER}"}}[5m]))', "{{host}}")]),
    (BACKEND_CHOICE, "reqps",
     [(f'sum by (host, worker) (rate(vllm_router_policy_decisions_total{{job="{ROUTER}"}}[5m]))',
       "{{host}} to {{worker}}")]),
    ("Healthy instances per router (of those it routes to)", "short",
     [(f'sum by (host) (vllm_router_worker_health{{job="{ROUTER}"}})', "{{host}} healthy"),
      (f'max by (host) (vllm_router_active_workers{{job="{ROUTER}"}})', "{{host}} configured")]),
    ("Router errors, retries and exhausted retries per second", "reqps",
     [(f'sum by (host, error_type) (rate(vllm_router_request_errors_total{{job="{ROUTER}"}}'
       '[5m]))', "{{host}} {{error_type}}"),
      (f'sum by (host) (rate(vllm_router_retries_total{{job="{ROUTER}"}}[5m]))',
       "{{host}} retries"),
      (f'sum by (host) (rate(vllm_router_retries_exhausted_total{{job="{ROUTER}"}}[5m]))',
       "{{host}} retries exhausted")]),
]

# a panel that reads a job only some sites scrape is left out where that job has no target
# (no panel that can never show data): the LMCache server's own metrics (no LMCache release
# serves them yet, compat.yaml server_metrics) and the Ceph mgr's exporter
PANEL_JOBS = {
    "LMCache hit tokens per second: DRAM (L1) and remote tier (L2)": LMCACHE,
    "LMCache remote stores submitted and completed per second": LMCACHE,
    "Ceph OSD commit and apply latency (worst OSD, average)": CEPH,
    "Ceph recovery: PGs degraded, undersized, recovering, backfilling; slow ops": CEPH,
    "Ceph recovery throughput": CEPH,
    **{title: ROUTER for title, _, queries in PANELS
       if any(f'job="{ROUTER}"' in q for q, _ in queries)},
}
# stacked: the series add up to a whole (every choice a router made)
STACKED = {BACKEND_CHOICE}
# read vllm_router_policy_decisions_total: left out where the routers count none
DECISION_PANELS = {BACKEND_CHOICE}
# the first panel of a section starts a row of its own
NEW_ROW = {"Router targets up"}


def dashboard(site: Site) -> dict[str, Any]:
    """Grafana's dashboard JSON (schema 39): time series panels on a Prometheus data source
    chosen through the `datasource` variable, two panels per row."""
    source = {"type": "prometheus", "uid": "${datasource}"}
    panels = []
    scraped = scrape_targets(site).groups
    shown = [p for p in PANELS if (p[0] not in PANEL_JOBS or scraped.get(PANEL_JOBS[p[0]]))
             and (p[0] not in DECISION_PANELS or counts_decisions(site))]
    slot = 0  # the panel's place in the grid, two to a row
    for index, (title, unit, queries) in enumerate(shown):
        if title in NEW_ROW and slot % 2:
            slot += 1
        defaults: dict[str, Any] = {"unit": unit}
        if title in STACKED:
            defaults["custom"] = {"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 60}
        panels.append({
            "id": index + 1, "type": "timeseries", "title": title, "datasource": source,
            "gridPos": {"h": 8, "w": 12, "x": 12 * (slot % 2), "y": 8 * (slot // 2)},
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
            "targets": [{"refId": chr(ord("A") + i), "datasource": source, "expr": expr,
                         "legendFormat": legend} for i, (expr, legend) in enumerate(queries)],
        })
        slot += 1
    return {
        "uid": "deploykit-kv-tier",
        "title": f"deploykit KV-cache tier ({site.settings.deploykit_s3_fqdn})",
        "tags": ["deploykit", "lmcache", "vllm", "ceph"], "timezone": "browser",
        "schemaVersion": 39, "version": 1, "editable": True, "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource",
                                 "query": "prometheus", "label": "Prometheus"}]},
        "panels": panels,
    }


def render_dashboard(site: Site) -> str:
    return json.dumps(dashboard(site), indent=2) + "\n"


def dashboard_queries(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for panel in board["panels"] for t in panel["targets"]]
