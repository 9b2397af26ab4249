"""Findings, the observation of a whole site, and the check registry (pure data)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    check: str
    status: Status
    target: str  # host, address or name the finding is about
    message: str
    hint: str = ""


@dataclass
class DnsAnswer:
    server: str
    name: str
    transport: str  # udp | tcp
    addresses: list[str] = field(default_factory=list)
    owner_names: list[str] = field(default_factory=list)
    ttl: int | None = None
    error: str | None = None


@dataclass
class Concentrator:
    address: str
    s3_status: int | None  # HTTP status on the S3 port, None when unreachable
    health_status: int | None
    error: str | None = None


@dataclass
class TlsEndpoint:
    """One concentrator's TLS handshake as a client sees it (deploykit_s3_tls)."""

    address: str
    port: int
    sni: str  # <bucket>.<fqdn>: what LMCache sends
    handshake_error: str | None = None  # no TLS at all (refused, plain HTTP, reset)
    verify_error: str | None = None  # the chain (or name) does not verify against the site CA
    dns_sans: list[str] = field(default_factory=list)
    ip_sans: list[str] = field(default_factory=list)
    not_after: str = ""  # ISO 8601, UTC
    days_left: float | None = None
    issuer: str = ""


@dataclass
class S3Probe:
    address: str
    host_header: str
    auth_status: int | None = None  # signed HEAD of the bucket
    put: int | None = None
    head: int | None = None
    get: int | None = None
    delete: int | None = None
    same: bool | None = None
    bytes: int = 0
    lifecycle: list[dict[str, Any]] | None = None
    anonymous_bucket: str | None = None  # <BucketName> RGW routed the vhost to
    error: str | None = None
    credentials_from: str = ""
    # "auth": one serving host's profile signs a HEAD; "roundtrip": a chunk through one
    # address, with the first profile RGW accepted (its HEAD is the auth probe's, not this)
    purpose: str = "auth"


@dataclass
class ServingHost:
    name: str
    address: str
    reachable: bool = True
    error: str | None = None
    lmcache_yaml: dict[str, Any] | None = None
    env: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    credentials: dict[str, str] | None = None  # the profile's keys (never printed)
    resolv_nameservers: list[str] = field(default_factory=list)
    resolved: dict[str, list[str]] = field(default_factory=dict)  # name -> addresses (getent)
    shm_bytes: int | None = None
    mem_total_bytes: int | None = None
    versions: dict[str, str] = field(default_factory=dict)
    service_active: bool = False
    health_status: int | None = None
    models_status: int | None = None


@dataclass
class ConsulMember:
    name: str
    address: str
    status: str  # alive | leaving | left | failed | none


@dataclass
class ConsulServiceNode:
    node: str
    address: str  # the service address (what DNS answers)
    status: str  # worst check: passing | warning | critical
    output: str = ""


@dataclass
class ConsulView:
    """Consul as one server's HTTP API sees it (consul DNS mode only)."""

    server: str
    service: str
    expected_nodes: list[str]  # consul_servers + rgw node names
    rgw_nodes: dict[str, str]  # node name -> address, where the s3 service is registered
    members: list[ConsulMember] = field(default_factory=list)
    instances: list[ConsulServiceNode] = field(default_factory=list)
    error: str | None = None


@dataclass
class Observation:
    """Everything the probes saw, plus what the inventory planned."""

    fqdn: str
    bucket: str
    region: str
    rgw_addresses: list[str]
    dns_servers: list[str]
    expected_pools: list[dict[str, Any]]
    expected_rgw_daemons: int
    expected_lifecycle: dict[str, Any]
    pinned: dict[str, str]  # component -> pinned version from the inventory
    planned_identity: dict[str, str] = field(default_factory=dict)  # seed, model, TP, ...
    dns: list[DnsAnswer] = field(default_factory=list)
    concentrators: list[Concentrator] = field(default_factory=list)
    s3: list[S3Probe] = field(default_factory=list)
    pools: list[dict[str, Any]] | None = None
    rgw_daemons: int | None = None
    ceph_version: str | None = None
    ceph_error: str | None = None
    serving: list[ServingHost] = field(default_factory=list)
    probe_errors: list[str] = field(default_factory=list)
    consul: ConsulView | None = None  # consul DNS mode
    tls: list[TlsEndpoint] = field(default_factory=list)  # deploykit_s3_tls only


@dataclass(frozen=True)
class Check:
    id: str
    severity: str  # error | warning
    tags: tuple[str, ...]
    summary: str
    evaluate: Callable[[Observation], Iterator[Finding]]


CHECKS: dict[str, Check] = {}


def check(check_id: str, *, tags: tuple[str, ...], summary: str, severity: str = "error"
          ) -> Callable[[Callable[[Observation], Iterator[Finding]]],
                        Callable[[Observation], Iterator[Finding]]]:
    def register(fn: Callable[[Observation], Iterator[Finding]]
                 ) -> Callable[[Observation], Iterator[Finding]]:
        CHECKS[check_id] = Check(check_id, severity, tags, summary, fn)
        return fn
    return register


def evaluate(observation: Observation, only: set[str] | None = None) -> list[Finding]:
    findings: list[Finding] = []
    for check_id, c in CHECKS.items():
        if only and check_id not in only:
            continue
        produced = list(c.evaluate(observation))
        if not produced:
            produced = [Finding(check_id, Status.SKIP, "-", "nothing to check")]
        if c.severity == "warning":
            produced = [Finding(f.check, Status.WARN, f.target, f.message, f.hint)
                        if f.status == Status.FAIL else f for f in produced]
        findings.extend(produced)
    return findings
