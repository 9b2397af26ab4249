"""The typed site: hosts with their groups and validated variables, built from a raw inventory."""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import json
import os
import re
import unicodedata
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from deploy_kit.config.load import is_reference, resolve_reference
from deploy_kit.config.models import (
    OWNED_PREFIXES,
    SECRET_KEYS,
    HostConfig,
    dns_name_problem,
    known_keys,
)
from deploy_kit.config.raw import RawInventory
from deploy_kit.config.templated import settle_vars
from deploy_kit.config.vault import VaultSecrets
from deploy_kit.core import compat
from deploy_kit.core.errors import Problem
from deploy_kit.core.geometry import ModelGeometry, find_preset, from_hf_config

_REF_NAME = re.compile(r"^\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")
GROUPS = ("ceph_admin", "rgw", "consul_servers", "dns", "vllm", "router", "monitoring")
CONNECTION_KEYS = ("ansible_user", "ansible_port", "ansible_ssh_private_key_file",
                   "ansible_connection")

# One value for the whole site: every key the render, plan, status and rules read from
# Site.settings. Any host may set one (group_vars/ceph_admin.yml, rgw.yml, all.yml, a
# host_vars file): the values set must agree (rules_site.site_values_agree names both places),
# and the agreed value is every host's and Site.settings' (never the first gateway's alone).
SITE_KEYS: tuple[str, ...] = (
    # the S3 name and bucket, its bounds and identities
    "deploykit_s3_fqdn", "deploykit_s3_bucket", "deploykit_s3_port", "deploykit_s3_region",
    "deploykit_s3_tls", "ceph_rgw_s3_user", "ceph_rgw_s3_display_name",
    "ceph_rgw_s3_lifecycle_days", "ceph_rgw_s3_quota_bytes", "ceph_rgw_s3_adopt_existing",
    "teams",
    # the Ceph cluster and its RGW service
    "deploykit_ceph_version", "deploykit_ceph_osd_count", "ceph_rgw_mode",
    "ceph_rgw_concentrator", "ceph_rgw_service_id", "ceph_rgw_realm", "ceph_rgw_zonegroup",
    "ceph_rgw_zone", "ceph_rgw_pools_list",
    # DNS and Consul
    "deploykit_dns_mode", "consul_datacenter", "consul_acl_enabled", "consul_acl_default_policy",
    "consul_gossip_encryption", "consul_http_port", "consul_service_name",
    # the router name: one name, one port and one Consul service for all routers
    "router_fqdn", "router_service_name", "router_port", "router_routing_logic",
    # the site's TLS authority (on the controller)
    "deploykit_tls_dir", "deploykit_tls_ca_cert", "deploykit_tls_ca_key",
    "deploykit_tls_cert_days",
    # the monitoring host's rules and ports
    "monitoring_scrape_interval", "monitoring_hit_ratio_target", "monitoring_hit_ratio_for",
    "monitoring_rgw_latency_seconds", "monitoring_ceph_osd_latency_ms",
    "monitoring_shm_free_ratio", "monitoring_router_skew_ratio", "monitoring_router_skew_for",
    "monitoring_ceph_mgr_prometheus", "monitoring_ceph_mgr_targets",
    "monitoring_prometheus_port", "monitoring_blackbox_port", "monitoring_alertmanager",
    "monitoring_alertmanager_port",
)

# Read from Site.settings too, but each host's own: the gateway's daemons (cephadm's one spec
# takes the first gateway's; rules_site.gateways_agree holds them to one value there), the
# versions each accelerator pins, the serving hosts' batch, the per-host ports.
PER_HOST_SETTINGS: tuple[str, ...] = (
    "ceph_rgw_count_per_host", "ceph_rgw_frontend_port", "ceph_rgw_exit_timeout_secs",
    "ceph_rgw_networks", "ceph_rgw_concentrator_monitor_port",
    "ceph_rgw_concentrator_monitor_user", "lmcache_version", "vllm_version", "vllm_serial",
    "coredns_port", "consul_http_address",
)


def comparable(value: Any) -> Any:
    """A value two hosts' settings can be compared (and grouped) by: lists, mappings and
    pool models as their JSON."""
    try:
        hash(value)
        return value
    except TypeError:
        return json.dumps(to_jsonable_python(value), sort_keys=True, default=str)


@dataclass(frozen=True)
class SiteValue:
    """A site-wide key's value and who set it: the hosts of each value set, by source file
    (host order kept), the agreed value first. `agreed` is the default when no host sets it."""
    key: str
    agreed: Any
    setters: tuple[tuple[Any, str, tuple[str, ...]], ...]  # (value, source file, hosts)

    @property
    def source(self) -> str | None:
        return self.setters[0][1] if self.setters else None


def site_values(hosts: list[Host]) -> dict[str, SiteValue]:
    """Each site-wide key's agreed value over the hosts that set it: the value most hosts
    set (a tie: the first host's in inventory order). Keys no host sets are left out."""
    found: dict[str, SiteValue] = {}
    for key in SITE_KEYS:
        by_value: dict[Any, tuple[Any, dict[str, list[str]]]] = {}
        for host in hosts:
            if key not in host.sources:
                continue
            value = getattr(host.config, key)
            entry = by_value.setdefault(comparable(value), (value, {}))
            entry[1].setdefault(host.sources[key], []).append(host.name)
        if not by_value:
            continue
        ranked = sorted(by_value.values(), key=lambda e: -sum(map(len, e[1].values())))
        setters = tuple((value, source, tuple(names)) for value, files in ranked
                        for source, names in files.items())
        found[key] = SiteValue(key, ranked[0][0], setters)
    return found


def with_site_values(host: Host, agreed: dict[str, SiteValue]) -> Host:
    """`host` with every site-wide key it leaves unset at the agreed value."""
    update = {k: v.agreed for k, v in agreed.items() if k not in host.sources}
    if not update:
        return host
    return dataclasses.replace(host, config=host.config.model_copy(update=update))


def with_agreed_values(hosts: dict[str, Host]) -> dict[str, Host]:
    """Every host with the site-wide values the hosts that set them agree on, and the
    defaults that follow the site's shape rather than one host's (with_site_shape)."""
    agreed = site_values(list(hosts.values()))
    return with_site_shape({name: with_site_values(host, agreed)
                            for name, host in hosts.items()})


def with_site_shape(hosts: dict[str, Host]) -> dict[str, Host]:
    """vllm_kv_events left unset: on where the site has routers (they read the events)."""
    routed = any("router" in h.groups for h in hosts.values())
    return {name: host if host.config.vllm_kv_events is not None else dataclasses.replace(
        host, config=host.config.model_copy(update={"vllm_kv_events": routed}))
        for name, host in hosts.items()}


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    groups: frozenset[str]
    config: HostConfig
    sources: dict[str, str]
    geometry: ModelGeometry | None
    connection: dict[str, str] = field(default_factory=dict)  # ansible_user, _port, key, ...

    def source(self, key: str, fallback: str) -> str:
        return self.sources.get(key, fallback)

    @property
    def block_size(self) -> int:
        """The pinned --block-size: explicit, else the vLLM version's default per accelerator."""
        if self.config.vllm_block_size is not None:
            return self.config.vllm_block_size
        table = compat.vllm(self.config.vllm_version).default_block_size
        accelerator = self.config.vllm_accelerator or "cuda"
        if accelerator not in table:  # accelerator_supported reports it
            raise ValueError(f"vLLM {self.config.vllm_version} has no {accelerator} build")
        return table[accelerator]

    @property
    def workers(self) -> int:
        return self.config.vllm_tensor_parallel_size * self.config.vllm_pipeline_parallel_size


@dataclass(frozen=True)
class Site:
    name: str
    root: Path
    hosts_file: str
    hosts: dict[str, Host]
    secrets_locked: bool  # vault encrypted and no password given: secret values unknown
    rejected_groups: frozenset[str] = frozenset()  # groups of hosts left out for problems
    # what Ansible needs to read the inventory's vaulted files when deploykit reaches hosts
    vault: VaultSecrets = field(default_factory=VaultSecrets, repr=False)
    # what Ansible's -i gets: the directory (root), or the inventory file or script
    source: Path | None = None
    # every inventory source the site was opened from (several -i), in order
    sources: tuple[Path, ...] = ()
    # how Ansible reaches the hosts outside a playbook run (-u, --private-key, -b, ...)
    connection: tuple[str, ...] = ()

    @property
    def inventory_source(self) -> Path:
        return self.source or self.root

    @property
    def inventory_sources(self) -> tuple[Path, ...]:
        """What ansible-playbook's -i flags get: every source, or the one."""
        return self.sources if len(self.sources) > 1 else (self.inventory_source,)

    def group(self, name: str) -> list[Host]:
        return list(self._members.get(name, ()))

    @cached_property
    def _members(self) -> dict[str, tuple[Host, ...]]:
        """Each group's hosts in inventory order, indexed once: renderers ask per host, which
        scanned every host each time (quadratic on a 10,000-host site). Safe to keep: a Site
        is frozen and its hosts dict is never changed in place (limit/replace build a new
        Site, which indexes afresh)."""
        members: dict[str, list[Host]] = {}
        for host in self.hosts.values():
            for group in host.groups:
                members.setdefault(group, []).append(host)
        return {group: tuple(hosts) for group, hosts in members.items()}

    @cached_property
    def site_values(self) -> dict[str, SiteValue]:
        """Each site-wide key (SITE_KEYS) some host sets: its agreed value and its setters."""
        return site_values(list(self.hosts.values()))

    @cached_property
    def settings(self) -> HostConfig:
        """Site-wide values: SITE_KEYS at the value the hosts that set them agree on
        (rules_site.site_values_agree refuses two), the rest (PER_HOST_SETTINGS) the first
        gateway's."""
        first = self.group("rgw") or list(self.hosts.values())
        config = first[0].config if first else HostConfig()
        return config.model_copy(update={k: v.agreed for k, v in self.site_values.items()})

    def settings_source(self, key: str) -> str:
        """The file that sets a site-wide value (the hosts file for a default)."""
        if key in self.site_values:
            return self.site_values[key].source or self.hosts_file
        first = self.group("rgw") or list(self.hosts.values())
        return first[0].source(key, self.hosts_file) if first else self.hosts_file

    def limit(self, names: set[str]) -> Site:
        return dataclasses.replace(
            self, hosts={n: h for n, h in self.hosts.items() if n in names})


def _fix_for(error: dict[str, Any]) -> str:
    kind = error.get("type", "")
    ctx = error.get("ctx") or {}
    if kind == "literal_error":
        return f"use one of {ctx.get('expected', 'the allowed values')}"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return f"give a value of type {kind.split('_')[0]}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        return "give a value in range"
    if kind == "string_pattern_mismatch":
        return f"match {ctx.get('pattern')}"
    if kind == "extra_forbidden":
        return "remove it (see docs/settings.md for the supported keys)"
    if kind == "missing":
        return "add it"
    if kind == "value_error" and "|" in str(ctx.get("error", "")):
        return str(ctx["error"]).split("|", 1)[1].strip()
    return "see docs/settings.md for the accepted values"


def _model_dir_problem(model: Path, root: Path) -> str | None:
    real = model.resolve()
    if real in root.resolve().parents or real == root.resolve():
        return f"{model} holds the inventory"
    if len(real.parts) < 3 and not (real / "config.json").is_file():
        return f"{model} is a system directory, not a model"
    if real.exists() and not (real / "config.json").is_file():
        return f"{model} has no config.json: not a model directory"
    return None


def _geometry(raw_vars: dict[str, Any], config: HostConfig, root: Path, source: str,
              problems: list[Problem], hosts: tuple[str, ...] = ()) -> ModelGeometry | None:
    model_config = config.vllm_model_config
    if config.model_is_local and (why := _model_dir_problem(Path(config.vllm_model), root)):
        # the serving role copies this directory to every serving host: never `/`, never the
        # inventory (vault password, CA key) or anything that is not a model
        problems.append(Problem(source, "vllm_model", why, "give the model directory on the "
                                "controller (with its config.json)", hosts=hosts))
        return None
    if model_config is None and config.model_is_local:
        model_config = f"{config.vllm_model.rstrip('/')}/config.json"  # the staged directory's
        source_key = "vllm_model"
    else:
        source_key = "vllm_model_config"
    if model_config:
        path = Path(model_config)
        path = path if path.is_absolute() else root / path
        try:
            return from_hf_config(path)
        except (OSError, KeyError, ValueError, TypeError, ArithmeticError) as exc:
            detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            problems.append(Problem(source, source_key, f"cannot use {path}: {detail}",
                                    "point it at the model's config.json" if source_key ==
                                    "vllm_model_config" else "give the model directory on the "
                                    "controller (with its config.json)", hosts=hosts))
            return None
    geometry = find_preset(config.vllm_model)
    if geometry is None:
        problems.append(Problem(source, "vllm_model",
                                f"no built-in KV geometry for {config.vllm_model!r}",
                                "set vllm_model_config to the model's config.json",
                                hosts=hosts))
    return geometry


# Latin look-alikes of other scripts (Cyrillic, Greek) that make a key *look* like one of
# deploykit's (`vllм_model`) while Ansible and deploykit see an unrelated variable.
_CONFUSABLES = str.maketrans({
    "а": "a", "в": "b", "е": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c",
    "т": "t", "у": "y", "х": "x", "і": "i", "ј": "j", "ѕ": "s", "ԁ": "d", "ӏ": "l", "ɡ": "g",
    "α": "a", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t", "υ": "u",
    "χ": "x", "ℓ": "l", "ı": "i"})


def ascii_skeleton(key: str) -> str:
    """`key` with compatibility forms folded (NFKC) and look-alike letters mapped to ASCII."""
    folded = unicodedata.normalize("NFKC", key).lower().translate(_CONFUSABLES)
    # invisible format characters (a zero-width space, a BOM) make no visible difference
    return "".join(c for c in folded if unicodedata.category(c) != "Cf")


def _secret_origin(key: str, value: Any, rh: Any, raw: RawInventory, hosts_file: str
                   ) -> tuple[Any, bool, Problem | None]:
    """Follow `{{ var }}` references of a credentials value to where the literal is written.

    Returns (value, known, problem): a literal is accepted only from a vault-encrypted file;
    an env lookup or an unresolved reference (locked vault) is left to run time."""
    src = rh.sources.get(key, hosts_file)
    name = key
    for _ in range(9):
        if not isinstance(value, str) or not is_reference(value):
            break
        m = _REF_NAME.match(value)
        if m is None:  # an env lookup: resolved from the controller's environment
            resolved, ok = resolve_reference(value, rh.vars)
            return resolved, ok, None
        name = m.group(1)
        if name not in rh.vars:
            return None, False, None  # a locked vault (or Ansible) defines it at run time
        value = rh.vars[name]
        src = rh.sources.get(name, hosts_file)
    if src in raw.vault_files or (src, name) in raw.vaulted_keys:
        return value, True, None
    where = "in a file that is not vault-encrypted" if src in raw.plain_vault_files else \
        "inline"
    via = f" (reached from {key} through '{{{{ {name} }}}}')" if name != key else ""
    return None, False, Problem(
        src, name, f"secret written {where}{via}",
        ("ansible-vault encrypt " + src) if src in raw.plain_vault_files else
        "move it to group_vars/all/vault.yml (ansible-vault) and reference it as "
        "'{{ vault_" + key + " }}', or leave the keys to RGW (remove it)",
        hosts=(rh.name,))


# groups whose address is written into DNS records, Consul's bind_addr and host:port
# endpoints: an IPv4 address (the tier's records are A records, its endpoints unbracketed)
IPV4_GROUPS = frozenset({"rgw", "dns", "consul_servers"})


def address_problem(address: str, groups: frozenset[str] | set[str]) -> str | None:
    """Why a host address cannot be a service address (zones, Consul, HAProxy, health
    gates, verify's probes), or None."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        if groups & IPV4_GROUPS:
            return f"{address!r} is not an IPv4 address (it is written into DNS records)"
        return dns_name_problem(address, min_labels=1)
    if ip.is_unspecified or ip.is_multicast or ip.is_link_local or ip.is_reserved:
        kind = ("unspecified" if ip.is_unspecified else "multicast" if ip.is_multicast else
                "link-local" if ip.is_link_local else "reserved")
        return f"{address!r} is a {kind} address, which no other host can reach this one at"
    if ip.version == 6 and groups & IPV4_GROUPS:
        return (f"{address!r} is IPv6; the S3 tier's DNS records and gateway endpoints are "
                "IPv4 in this release")
    return None


def build_site(raw: RawInventory) -> tuple[Site, list[Problem]]:
    """Validate every host in one pass; hosts with problems are left out of the Site."""
    problems: list[Problem] = []
    owned = known_keys()
    memo: dict[int, Any] = {}  # settle_vars scans a value shared by many hosts once
    hosts: dict[str, Host] = {}
    rejected: set[str] = set()
    hosts_file = str(raw.hosts_file)
    for name, rh in sorted(raw.hosts.items()):
        values: dict[str, Any] = {}
        bad = False
        settled, unsettled = settle_vars(rh, raw, owned, problems, memo)  # Jinja, {{ var }}
        for key, value in settled.items():
            src = rh.sources.get(key, hosts_file)
            if not isinstance(key, str):
                problems.append(Problem(src, repr(key), "a variable name must be a string",
                                        "quote it or rename it", hosts=(name,)))
                continue
            if not key.startswith(OWNED_PREFIXES) and not key.isascii() and \
                    ascii_skeleton(key).startswith(OWNED_PREFIXES):
                looks = ascii_skeleton(key)
                close = difflib.get_close_matches(looks, owned, n=1)
                problems.append(Problem(src, ascii(key)[1:-1],
                                        f"looks like {looks} but contains non-ASCII characters "
                                        "(deploykit and Ansible would ignore it)",
                                        f"retype it in ASCII{': ' + close[0] if close else ''}",
                                        hosts=(name,)))
                continue
            if key.startswith(OWNED_PREFIXES) and key not in owned:
                close = difflib.get_close_matches(key, owned, n=1)
                problems.append(Problem(src, key, "unknown key",
                                        f"did you mean {close[0]}?" if close else
                                        "remove it (see docs/settings.md for the supported keys)",
                                        hosts=(name,)))
                continue
            if key not in owned:
                continue
            if key in SECRET_KEYS:
                value, ok, problem = _secret_origin(key, value, rh, raw, hosts_file)
                if problem:
                    problems.append(problem)
                if not ok:
                    continue  # locked vault or unset env: unknown until Ansible runs
            values[key] = value
        address = str(settled.get("deploykit_address") or rh.vars.get("ansible_host") or name)
        why = address_problem(address, rh.groups)
        if why:
            addr_key = "deploykit_address" if settled.get("deploykit_address") else \
                "ansible_host"
            problems.append(Problem(rh.sources.get(addr_key, hosts_file), addr_key, why,
                                    "give the host's IPv4 address in deploykit_address "
                                    "(ansible_host may stay what SSH uses)",
                                    hosts=(name,)))
            bad = True
            values.pop(addr_key, None)  # reported once, here: not again by the model
        for key in ("vllm_wheel_dir", "lmcache_wheel_dir", "router_wheel_dir"):
            # controller directories: relative to the inventory (as the TLS paths), never
            # to wherever deploykit or a role happens to run
            value = values.get(key)
            if isinstance(value, str) and value and not value.startswith(("/", "~")):
                values[key] = os.path.normpath(raw.root.resolve() / value)
        try:
            config = HostConfig.model_validate(values)
        except ValidationError as exc:
            failed: set[str] = set()
            for err in exc.errors():
                key = str(err["loc"][0]) if err["loc"] else "(host)"
                failed.add(key)
                detail = ".".join(str(p) for p in err["loc"][1:])
                message = str(err["msg"]).removeprefix("Value error, ").split("|", 1)[0]
                problems.append(Problem(rh.sources.get(key, hosts_file),
                                        f"{key}{'.' + detail if detail else ''}",
                                        message.strip(), _fix_for(dict(err)), hosts=(name,)))
            bad = True
            # keep checking the rest of the host (its other, independent problems) with the
            # bad values left at their defaults; the site is invalid either way
            try:
                config = HostConfig.model_validate(
                    {k: v for k, v in values.items() if k not in failed})
            except ValidationError:
                rejected.update(rh.groups)
                continue
        if unsettled or (bad and address_problem(address, rh.groups)):
            rejected.update(rh.groups)
            continue
        geometry = None
        if "vllm" in rh.groups:
            geometry = _geometry(rh.vars, config, raw.root,
                                 rh.sources.get("vllm_model_config"
                                                if config.vllm_model_config else "vllm_model",
                                                hosts_file), problems, (name,))
        connection = {k: str(v) for k, v in rh.vars.items() if k in CONNECTION_KEYS}
        hosts[name] = Host(name=name, address=address, groups=frozenset(rh.groups),
                           config=config, sources=dict(rh.sources), geometry=geometry,
                           connection=connection)
    site = Site(name=raw.root.name, root=raw.root, hosts_file=hosts_file,
                hosts=with_agreed_values(hosts), secrets_locked=bool(raw.locked_vault_files),
                rejected_groups=frozenset(rejected | raw.broken_groups),
                source=raw.source or raw.root)
    return site, problems
