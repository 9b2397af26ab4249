"""`status` for a person: one compact table per tier, then the versions (pure: a Site's
status in, rich renderables out)."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from deploy_kit.status.model import (
    FAILED_OUTCOMES,
    HostStatus,
    SiteStatus,
    UnitStatus,
    converge_outcome,
    mixed,
    version_mix,
)

# tier title, the groups whose hosts it lists, the components it shows a version column of
TIERS: tuple[tuple[str, frozenset[str], tuple[str, ...]], ...] = (
    ("storage / gateways", frozenset({"rgw", "ceph_admin"}), ("ceph", "haproxy")),
    ("dns / consul", frozenset({"dns", "consul_servers", "rgw"}), ("consul", "coredns")),
    ("serving", frozenset({"vllm"}), ("vllm", "lmcache")),
    ("monitoring", frozenset({"monitoring"}), ()),
)


def tier_of(unit: str) -> str:
    """The tier a deploykit unit (plan/watch.role_units) is shown in."""
    if unit.startswith("ceph-radosgw@") or unit == "haproxy":
        return "storage / gateways"
    if unit in ("consul", "coredns"):
        return "dns / consul"
    if unit in ("prometheus", "prometheus-blackbox-exporter", "prometheus-alertmanager"):
        return "monitoring"
    return "serving"  # vllm*, lmcache-server, the node exporter and the S3-events timer


def age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    for size, suffix in ((86400, "d"), (3600, "h"), (60, "m")):
        if s >= size:
            return f"{s // size}{suffix}"
    return f"{s}s"


STATE_STYLE = {"active": "green", "failed": "red", "activating": "yellow",
               "deactivating": "yellow", "reloading": "yellow"}


def unit_line(host: HostStatus, unit: UnitStatus) -> Text:
    if not unit.installed:
        return Text(f"{unit.unit} not installed", style="dim")
    line = Text(f"{unit.unit} ")
    line.append(unit.active, style=STATE_STYLE.get(unit.active, "yellow"))
    if unit.since is not None and host.clock is not None:
        line.append(f" {age(host.clock - unit.since)}", style="dim")
    instance = next((i for i in host.instances if i.unit == unit.unit), None)
    if instance is not None:
        line.append(f" :{instance.port}")
        if unit.active == "active":
            code = str(instance.health) if instance.health is not None else "no answer"
            line.append(f" /health {code}", style="green" if instance.health == 200 else "red")
    if unit.active == "failed" and unit.result and unit.result != "success":
        line.append(f" ({unit.result})", style="red")
    return line


def unit_lines(host: HostStatus, units: list[UnitStatus]) -> list[Text]:
    """One line per unit, except a template's instances in the same state (a gateway's
    ceph-radosgw@ units): one line with their count and the youngest's age; the units not
    on the host, one line after them."""
    lines: list[Text] = []
    done: set[str] = set()
    absent = [u.unit for u in units if not u.installed]
    for unit in units:
        if unit.unit in done or not unit.installed:
            continue
        template = unit.unit.split("@", 1)[0] + "@" if "@" in unit.unit else None
        alike = [u for u in units if template and u.unit.startswith(template)
                 and (u.active, u.installed) == (unit.active, unit.installed)]
        if len(alike) < 2:
            lines.append(unit_line(host, unit))
            continue
        done.update(u.unit for u in alike)
        youngest = max((u.since for u in alike if u.since is not None), default=None)
        lines.append(unit_line(host, UnitStatus(f"{template}* x{len(alike)}", unit.active,
                                                load=unit.load, since=youngest)))
    if absent:  # e.g. the monitoring units where monitoring is off: one line, not one each
        lines.append(Text(f"not installed: {', '.join(absent)}", style="dim"))
    return lines


def yes_no(value: bool | None, yes: str = "yes", no: str = "NO") -> Text:
    if value is None:
        return Text("-", style="dim")
    return Text(yes, style="green") if value else Text(no, style="red")


def converge_cell(host: HostStatus) -> Text:
    record = host.converge
    outcome = converge_outcome(record)
    if outcome == "none":
        return Text("never recorded", style="yellow")
    if outcome in FAILED_OUTCOMES:
        run = record.last_run or {}
        when = age(host.clock - run["started"]) if host.clock and run.get("started") else "?"
        text = Text(f"{outcome} {when} ago", style="red")
        if run.get("task"):
            text.append(f": {run['task']}", style="red")
        return text
    text = Text(f"ok {age(record.age_s)} ago", style="green")
    if record.units_down:
        text.append(f"; since: {', '.join(record.units_down)} not active", style="yellow")
    return text


def _membership(host: HostStatus, column: str) -> Text:
    m = host.membership
    if column == "in DNS":
        return yes_no(m.dns)
    if column == "consul s3":
        value = m.consul_s3
        style = {"passing": "green", "maintenance": "yellow"}.get(value or "", "red")
        return Text(value, style=style) if value else Text("-", style="dim")
    if column == "consul member":
        value = m.consul_member
        return Text(value, style="green" if value == "alive" else "red") if value \
            else Text("-", style="dim")
    # breaker
    b = host.breaker
    if b.tripped is None:
        return Text("-", style="dim")
    return Text(f"TRIPPED in {b.unit}", style="red") if b.tripped else Text("ok", style="green")


MEMBERSHIP = {"storage / gateways": ("in DNS", "consul s3"),
              "dns / consul": ("consul member",),
              "serving": ("breaker",), "monitoring": ()}


def tier_table(title: str, groups: frozenset[str], components: tuple[str, ...],
               hosts: list[HostStatus], mix: dict[str, dict[str, list[str]]]) -> Table | None:
    members = [h for h in hosts if set(h.groups) & groups]
    if not members:
        return None
    table = Table(title=title, title_justify="left", show_lines=False, pad_edge=False)
    table.add_column("host", no_wrap=True)
    table.add_column("units")
    for component in components:
        table.add_column(component + (" (mixed)" if len(mix.get(component, {})) > 1 else ""))
    for column in MEMBERSHIP[title]:
        table.add_column(column)
    table.add_column("last converge")
    for host in members:
        if not host.reachable:
            table.add_row(Text(host.name, style="red"),
                          Text(f"unreachable: {host.error}", style="red"),
                          *[""] * (len(components) + len(MEMBERSHIP[title]) + 1))
            continue
        units = unit_lines(host, [u for u in host.units if tier_of(u.unit) == title])
        table.add_row(host.name, Text("\n").join(units) if units else Text("-", style="dim"),
                      *[_version(host, c, mix) for c in components],
                      *[_membership(host, c) for c in MEMBERSHIP[title]],
                      converge_cell(host))
    return table


def _version(host: HostStatus, component: str, mix: dict[str, dict[str, list[str]]]) -> Text:
    version = host.versions.get(component)
    if version is None:
        return Text("-", style="dim")
    return Text(version, style="yellow" if len(mix.get(component, {})) > 1 else "")


def versions_table(status: SiteStatus) -> Table:
    mix = version_mix(status.hosts)
    table = Table(title="versions", title_justify="left", pad_edge=False)
    for column in ("component", "version", "hosts", ""):
        table.add_column(column)
    for component, versions in mix.items():
        marker = Text("mixed", style="bold yellow") if len(versions) > 1 else Text("")
        for version, names in versions.items():
            table.add_row(component, version, ", ".join(names), marker)
    for kind, counts in sorted(status.ceph_daemons.items()):
        marker = Text("mixed", style="bold yellow") if len(counts) > 1 else Text("")
        for version, count in sorted(counts.items()):
            table.add_row(f"ceph {kind}", version, f"{count} daemon(s)", marker)
    return table


def render(status: SiteStatus) -> Group:
    mix = version_mix(status.hosts)
    parts: list[Table | Text] = []
    for title, groups, components in TIERS:
        table = tier_table(title, groups, components, status.hosts, mix)
        if table is not None:
            parts.append(table)
    parts.append(versions_table(status))
    drifting = mixed(mix, status.ceph_daemons)
    if drifting:
        parts.append(Text(f"mixed versions: {', '.join(drifting)}", style="bold yellow"))
    for note in status.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    return Group(*parts)


def show(status: SiteStatus, console: Console) -> None:
    console.print(render(status))
