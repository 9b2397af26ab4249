"""Monitoring values that make an alert impossible, and Consul check timings of zero
(class 13 of the 2026-12-06 review). The value types (durations, ratios, ports,
label-safe names) are checked in models.py; here, what only their combination with the
rendered rules (deploy_kit/data/alerts.yaml) and daemons shows.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from importlib import resources

from deploy_kit.config import names
from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.site import Site
from deploy_kit.core.errors import Problem

RULES, rule = collector()

# Prometheus's TSDB retention (deploykit keeps its default): a pending alert's `for` is
# restored from there after a restart, and nothing is kept longer
RETENTION_S = 15 * 86400
# HAProxy's `timeout server` (templates/haproxy.cfg.j2): no answer is timed above it
HAPROXY_SERVER_TIMEOUT_S = 300
# the alerts' `for` durations that come from settings
ALERT_FORS = ("monitoring_hit_ratio_for", "monitoring_router_skew_for")
_UNITS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1,
          "ms": 0.001}
_PART = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")


def seconds(duration: str) -> float:
    """A Prometheus (or Consul) duration in seconds: `15s`, `500ms`, `1d`, `1m30s`."""
    parts = _PART.findall(duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(duration)
    return sum(int(n) * _UNITS[u] for n, u in parts)


@functools.cache
def shortest_rate_window() -> float:
    """The shortest `[range]` any deploykit alert reads (rate, delta): it needs two
    samples in it."""
    text = resources.files("deploy_kit").joinpath("data/alerts.yaml").read_text()
    windows = [seconds(w) for w in re.findall(r"\[(\d+(?:ms|s|m|h))\]", text)]
    return min(windows) if windows else float("inf")


def _monitoring_problems(site: Site) -> Iterator[Problem]:
    """The rules and config are rendered once for the site (site.settings)."""
    c = site.settings
    for key in ("monitoring_scrape_interval", *ALERT_FORS):
        if getattr(c, key) and seconds(getattr(c, key)) == 0:
            yield Problem(site.settings_source(key), key, f"{getattr(c, key)} is zero "
                          "(Prometheus refuses it)", "give a positive duration, e.g. 15s")
            return
    if c.monitoring_scrape_interval:
        interval = seconds(c.monitoring_scrape_interval)
        window = shortest_rate_window()
        if interval * 2 > window:
            yield Problem(site.settings_source("monitoring_scrape_interval"),
                          "monitoring_scrape_interval",
                          f"{c.monitoring_scrape_interval} leaves fewer than two samples in "
                          f"the alerts' {int(window)}s rate windows: rate() is empty and "
                          "those alerts can never fire",
                          f"use at most {int(window // 2)}s")
        for key in ALERT_FORS:
            if seconds(getattr(c, key)) > RETENTION_S:
                yield Problem(site.settings_source(key), key,
                              f"{getattr(c, key)} is longer than Prometheus's 15-day "
                              "retention: the alert cannot fire", "use at most 360h (15 days)")
        if c.monitoring_rgw_latency_seconds >= HAPROXY_SERVER_TIMEOUT_S:
            yield Problem(site.settings_source("monitoring_rgw_latency_seconds"),
                          "monitoring_rgw_latency_seconds",
                          f"{c.monitoring_rgw_latency_seconds:g} s is not below HAProxy's "
                          f"{HAPROXY_SERVER_TIMEOUT_S} s server timeout: no request is "
                          "timed that long, the alert can never fire",
                          f"use less than {HAPROXY_SERVER_TIMEOUT_S}")


@rule
def alerts_can_fire(site: Site) -> Iterator[Problem]:
    """A threshold, window or `for` no series can ever meet is an alert that never fires.
    (The rules are rendered with or without a monitoring group: a site may load them into
    its own Prometheus.)"""
    yield from _monitoring_problems(site)


@rule
def consul_timings_work(site: Site) -> Iterator[Problem]:
    """Consul's check interval and timeout, and its join retry interval, must be positive
    (a timeout above the interval is Consul's to allow: it is not refused)."""
    if site.settings.deploykit_dns_mode != "consul":
        return
    for host in site.hosts.values():
        if not host.groups & names.CONSUL_AGENT_GROUPS:
            continue
        c = host.config
        for key in ("consul_check_interval", "consul_check_timeout", "consul_retry_interval"):
            value = getattr(c, key)
            if value is not None and seconds(value) == 0:
                yield Problem(_src(site, host, key), key, f"{value} is zero (Consul refuses "
                              "the check, or retries without pause)", "give a positive "
                              "duration, e.g. 10s", hosts=(host.name,))
