"""Rules over the inventory as read (RawInventory), before typing: who the hosts are and
what each vars entry applies to. Each is O(hosts + files).

- Host identity (corpus class 3, review H4): a host named like a group makes Ansible's
  patterns (`hosts: rgw`) target that host instead of the group; two inventory names for one
  machine (one connection target, or one service address) run every role twice on it and
  count it twice in DNS answers and quorums.
- Entries that apply to nothing (class 2): group_vars for a group the inventory does not
  have or that has no hosts, host_vars for a host it does not list, and a role's setting
  (vllm_*, lmcache_*, coredns_*, ceph_rgw_*) where no host of that role reads it.
"""

from __future__ import annotations

import contextlib
import difflib
import ipaddress
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from deploy_kit.config.load import _read_yaml
from deploy_kit.config.models import OWNED_PREFIXES
from deploy_kit.config.raw import RawHost, RawInventory
from deploy_kit.config.site import GROUPS, address_problem
from deploy_kit.config.vault import VaultSecrets
from deploy_kit.core.errors import Problem
from deploy_kit.core.text import encodable, first_unencodable, shown_name

RawRule = Callable[[RawInventory], Iterator[Problem]]
RAW_RULES: list[RawRule] = []


def raw_rule(fn: RawRule) -> RawRule:
    RAW_RULES.append(fn)
    return fn


def validate_raw(raw: RawInventory) -> list[Problem]:
    problems: list[Problem] = []
    for check in RAW_RULES:
        problems.extend(check(raw))
    return problems


# --- text: every name and value is text Ansible can encode -----------------------------------

# YAML's "\ud800" (and a non-UTF-8 byte in an INI or script inventory) is a lone surrogate:
# Python holds it, but no file, argv or JSON writer can encode it, so it must not get past
# the reader (a render, a settings file or ansible-playbook would fail on it mid-way).
def unencodable(raw: RawInventory) -> list[Problem]:
    """Every host name, group name and variable (name or value, at any depth) that is not
    encodable text, named by file and key, its value never quoted (it may be a secret)."""
    problems: list[Problem] = []
    hosts_file = str(raw.hosts_file)
    fix = ("remove the lone surrogate (a \\ud800-style escape that is not half of a pair, "
           "or a byte that is not UTF-8)")
    for group in raw.group_depth:
        if not encodable(group):
            problems.append(Problem(hosts_file, shown_name(group),
                                    "group name is not valid Unicode text", fix))
    seen: dict[int, str | None] = {}
    for name, host in raw.hosts.items():
        if not encodable(name):
            problems.append(Problem(hosts_file, shown_name(name),
                                    "host name is not valid Unicode text", fix))
            continue
        for key, value in host.vars.items():
            where = host.sources.get(key, hosts_file)
            if isinstance(key, str) and not encodable(key):
                problems.append(Problem(where, shown_name(key),
                                        "variable name is not valid Unicode text", fix,
                                        hosts=(name,)))
                continue
            found = first_unencodable(value, "", seen)
            if found is not None:
                problems.append(Problem(where, f"{key}{found}",
                                        "value is not valid Unicode text", fix, hosts=(name,)))
    return problems


# --- host identity ---------------------------------------------------------------------------


@raw_rule
def host_names_not_groups(raw: RawInventory) -> Iterator[Problem]:
    """`hosts: rgw` in a play selects a host named rgw (Ansible warns "Found both group and
    host with same name") and none of the group's hosts."""
    groups = set(raw.group_depth) | set(GROUPS) | {"all", "ungrouped"}
    for name in sorted(set(raw.hosts) & groups):
        yield Problem(str(raw.hosts_file), name, f"host {name} has the name of a group: "
                      f"Ansible's `{name}` plays would target this host, not the group",
                      f"rename the host (e.g. {name}-host1) and keep its address in "
                      "ansible_host", hosts=(name,))


_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_DOTTED_QUAD = re.compile(rf"^{_OCTET}(\.{_OCTET}){{3}}$")


def machine_names(text: Any) -> set[str]:
    """The forms under which `text` (a host name or address) names one machine: DNS names
    ignore case and a trailing dot; an IP address in any spelling (IPv6 zero runs, an
    IPv4-mapped IPv6, 10.1, 0x0a.0.0.1) as the resolver reads it. A dotted quad with leading
    zeros is ambiguous (SSH's resolver reads 010 as octal 8, most tools as decimal 10):
    it names both."""
    text = str(text).strip().lower().rstrip(".")
    if _DOTTED_QUAD.match(text):  # the common spelling, already canonical: no parsing
        return {text}
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    forms: set[str] = set()
    try:
        ip = ipaddress.ip_address(text)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
            ip = ip.ipv4_mapped
        return {str(ip)}
    except ValueError:
        pass
    parts = text.split(".")
    if all(p.isdigit() for p in parts) and len(parts) == 4:
        with contextlib.suppress(ValueError):
            forms.add(str(ipaddress.IPv4Address(".".join(str(int(p)) for p in parts))))
    if text and all(c in "0123456789abcdefx." for c in text):
        with contextlib.suppress(OSError):  # what getaddrinfo (SSH's resolver) reads
            forms.add(str(ipaddress.IPv4Address(socket.inet_aton(text))))
    return forms or {text}


def _literal(value: Any) -> str | None:
    text = None if value is None else str(value)
    return None if text is None or "{{" in text or "{%" in text else text


def _identities(name: str, rh: RawHost) -> list[tuple[tuple[str, ...], str]]:
    """(identity, the key that gives it): how Ansible reaches the host (connection, target,
    port) and the address the site's services use."""
    v = rh.vars
    target_key = next((k for k in ("ansible_host", "ansible_ssh_host") if _literal(v.get(k))),
                      "ansible_host")
    target = _literal(v.get(target_key)) or name
    connection = _literal(v.get("ansible_connection")) or "ssh"
    port = _literal(v.get("ansible_port", v.get("ansible_ssh_port"))) or "22"
    keys: list[tuple[tuple[str, ...], str]] = []
    # a `local` host runs on the controller whatever its ansible_host, so only its service
    # address tells it apart: several of them with their own addresses are hosts simulated
    # on one machine (loopback test sites), not one host listed twice
    if connection != "local":
        keys += [(("via", connection, form, port.strip()), target_key)
                 for form in machine_names(target)]
    address = _literal(v.get("deploykit_address"))
    forms = machine_names(address) if address else \
        {i[2] for i, _ in keys if len(i) > 2} or machine_names(target)  # parsed once
    keys += [(("address", form), "deploykit_address" if address else target_key)
             for form in forms]
    return keys


def _refused_address(rh: RawHost) -> bool:
    address = rh.vars.get("deploykit_address") or rh.vars.get("ansible_host") or rh.name
    return address_problem(str(address), rh.groups) is not None


@raw_rule
def one_name_per_machine(raw: RawInventory) -> Iterator[Problem]:
    """Two inventory hosts reaching one machine (one connection target and port, or one
    service address): each role would run twice there, and DNS and quorums count it twice."""
    owner: dict[tuple[str, ...], str] = {}
    parent: dict[str, str] = {}

    def root(n: str) -> str:
        while parent.get(n, n) != n:
            parent[n] = parent.get(parent[n], parent[n])
            n = parent[n]
        return n

    keys: dict[str, str] = {}  # host -> the key that makes it another host's machine
    for name in sorted(raw.hosts):
        rh = raw.hosts[name]
        for ident, key in _identities(name, rh):
            other = owner.setdefault(ident, name)
            if other != name:
                keys.setdefault(name, key)
                a, b = root(other), root(name)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    members: dict[str, list[str]] = {}
    for name in parent:
        members.setdefault(root(name), []).append(name)
    for first, names in sorted(members.items()):
        # a host whose address build_site refuses is reported there (only the few colliding
        # hosts are checked, so the rule stays one pass over the inventory)
        names = sorted(n for n in {first, *names} if not _refused_address(raw.hosts[n]))
        if len(names) < 2:
            continue
        culprit = max((n for n in names if n in keys), default=names[-1])
        last, key = raw.hosts[culprit], keys.get(culprit, "ansible_host")
        where = str(last.vars.get(key) or culprit)
        yield Problem(last.sources.get(key, str(raw.hosts_file)), key,
                      f"{' and '.join(names)} are one machine ({where}): every role would "
                      "run on it once per name, and DNS and quorums would count it twice",
                      "list the machine once, under one name, in every group it serves "
                      "(or give each host its own ansible_host / deploykit_address)",
                      hosts=tuple(names))


# --- entries that apply to nothing -------------------------------------------------------------

# which groups' hosts read a role's settings (the roles' plays and the renderers)
READERS: tuple[tuple[str, frozenset[str], str], ...] = (  # (prefix, readers, its file)
    ("vllm_", frozenset({"vllm"}), "vllm"), ("lmcache_", frozenset({"vllm"}), "vllm"),
    ("coredns_", frozenset({"dns"}), "dns"),
    # the serving hosts read the S3 user too (their credentials profile)
    ("ceph_rgw_s3_", frozenset({"ceph_admin", "rgw", "vllm"}), "all"),
    ("ceph_rgw_", frozenset({"ceph_admin", "rgw"}), "rgw"),
)
_SUFFIXES = ("", ".yml", ".yaml", ".json")


def _vars_entries(base: Path) -> dict[str, list[Path]]:
    """group_vars/ or host_vars/ entries by the group or host they name, as Ansible reads
    them: <name>, <name>.yml|.yaml|.json, and a <name>/ directory."""
    entries: dict[str, list[Path]] = {}
    if not base.is_dir():
        return entries
    for entry in sorted(base.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            entries.setdefault(entry.name, []).extend(
                sorted(f for f in entry.rglob("*") if f.is_file()
                       and f.suffix in _SUFFIXES and not f.name.startswith(".")))
        elif entry.suffix in _SUFFIXES:
            entries.setdefault(entry.stem if entry.suffix else entry.name, []).append(entry)
    return entries


def _claimed_keys(path: Path, raw: RawInventory) -> list[str]:
    """deploykit's and Ansible's own keys a file sets (other variables are the site's)."""
    data = _read_yaml(path, VaultSecrets(), [], [], root=raw.root)
    if not isinstance(data, dict):
        return []
    return [str(k) for k in data if str(k).startswith((*OWNED_PREFIXES, "ansible_"))]


@raw_rule
def vars_apply_to_something(raw: RawInventory) -> Iterator[Problem]:
    """group_vars of a group the inventory lacks (a typo: group_vars/vlm.yml) or whose
    groups have no host, host_vars of a host it does not list: Ansible reads none of them."""
    populated = {g for rh in raw.hosts.values() for g in rh.groups} | {"all"}
    if any(not rh.groups - {"all"} for rh in raw.hosts.values()):
        populated.add("ungrouped")  # a host in no group is in Ansible's implicit one
    declared = set(raw.group_depth) | {"all", "ungrouped"}
    for name, files in _vars_entries(raw.root / "group_vars").items():
        if name in populated:
            continue
        for path in files:
            keys = _claimed_keys(path, raw)
            if not keys:
                continue
            if name in declared:
                why = f"group {name} has no hosts: {', '.join(keys)} would apply to none"
                fix = f"add hosts to {name}, or remove the file"
            else:
                why = f"no group {name} in the inventory: Ansible never reads this file"
                close = difflib.get_close_matches(name, sorted(populated - {"all"}), n=1)
                fix = (f"rename it to group_vars/{close[0]}{path.suffix}" if close else
                       "name it after a group of the inventory") + ", or remove it"
            yield Problem(str(path), keys[0], why, fix)
    for name, files in _vars_entries(raw.root / "host_vars").items():
        if name in raw.hosts:
            continue
        for path in files:
            keys = _claimed_keys(path, raw)
            if keys:
                close = difflib.get_close_matches(name, sorted(raw.hosts), n=1)
                yield Problem(str(path), keys[0], f"no host {name} in the inventory: Ansible "
                              "never reads this file",
                              (f"rename it to host_vars/{close[0]}{path.suffix}" if close
                               else "name it after a host of the inventory") + ", or remove it")


@raw_rule
def role_settings_reach_their_role(raw: RawInventory) -> Iterator[Problem]:
    """A role's setting in vars of hosts that never run the role (`vllm_*` in
    group_vars/rgw.yml): it does nothing, and the role's hosts keep another value."""
    tiers = {g for rh in raw.hosts.values() for g in rh.groups}
    setters: dict[tuple[str, str], list[str]] = {}  # (file, key) -> hosts it is read on
    readers: dict[tuple[str, str], bool] = {}
    all_files = str(raw.root / "group_vars" / "all")
    prefixes = tuple(prefix for prefix, _, _ in READERS)
    for name, rh in raw.hosts.items():
        for key, source in rh.sources.items():
            if not isinstance(key, str) or not key.startswith(prefixes) or \
                    source.startswith(all_files):
                continue
            groups = next(g for prefix, g, _ in READERS if key.startswith(prefix))
            if not groups & tiers:
                continue
            reads = bool(groups & rh.groups)
            pair = (source, key)
            readers[pair] = readers.get(pair, False) or reads
            if not reads:
                setters.setdefault(pair, []).append(name)
    for (source, key), names in sorted(setters.items()):
        if readers[(source, key)]:
            continue
        groups, home = next((g, h) for prefix, g, h in READERS if key.startswith(prefix))
        tier = " or ".join(sorted(groups))
        yield Problem(source, key, f"no host in group {tier} reads it (it is set for hosts "
                      f"outside {tier})", f"move it to group_vars/{home}.yml (or host_vars "
                      f"of a {tier} host), or remove it", hosts=tuple(sorted(names)))
