"""Upgrades as a flow (pure): which hosts a version change moves, whether it starts a new
LMCache key space (a cold cache), and the waves `up` rolls them in: a canary host per tier,
then the rest in batches, each wave verified before the next (flows/upgrade.py runs them).

What a host runs is what its converge record says it was last converged with: the record
(plugins/modules/deploykit_converged.py) keeps `versions` (host_versions below, rendered
into the host's settings beside the rest of what the record watches). The inventory says
what it should run. A host with no record, or a record from before versions were kept, is
a first install as far as this module knows: converged the ordinary way, never a canary.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from deploy_kit.config.site import Host, Site


@dataclass(frozen=True)
class Component:
    name: str  # as `plan` and the record say it
    setting: str  # the inventory setting that pins its version
    groups: frozenset[str]  # the hosts that run it


COMPONENTS = (
    Component("vllm", "vllm_version", frozenset({"vllm"})),
    Component("lmcache", "lmcache_version", frozenset({"vllm"})),
    # the Ceph release deploykit renders the gateways' config for (the site's mons and OSDs
    # are the site's to upgrade: cephadm, `ceph orch upgrade`)
    Component("ceph", "deploykit_ceph_version", frozenset({"rgw"})),
    Component("consul", "consul_version", frozenset({"consul_servers", "rgw"})),
    Component("coredns", "coredns_version", frozenset({"dns"})),
)
KEY_SPACE = "key_space"  # the record's entry for what names LMCache's objects

# What enters the name of every object LMCache 0.5 writes (deploy_kit/cache/keys.py has the
# three layouts), or what it hashes into the chunk hash in that name, or which objects a
# host can read at all. A change to any one starts a new key space: no host finds what the
# old settings wrote, hits start from zero, and the old objects stay until the bucket's
# lifecycle rule expires them.
KEY_SPACE_SETTINGS: dict[str, str] = {
    "lmcache_version": "LMCache's key format and chunk hashing are its own; deploykit "
                       "assumes no two releases share them",
    "vllm_version": "the in-process connector hashes vLLM's token blocks, and a new vLLM "
                    "may lay the KV out differently",
    "vllm_model": "the model is the first field of every key",
    "vllm_served_model_name": "the LMCache server names objects by the model as served",
    "vllm_tensor_parallel_size": "TP x PP is the world size in every key, one object per rank",
    "vllm_pipeline_parallel_size": "TP x PP is the world size in every key, one object per rank",
    "vllm_kv_cache_dtype": "the KV dtype is a key field (in-process and NIXL layouts)",
    "vllm_dtype": "with vllm_kv_cache_dtype auto, the KV dtype follows the weights'",
    "lmcache_chunk_size": "a chunk's hash covers chunk_size tokens",
    "lmcache_pre_caching_hash_algorithm": "the chunk hash itself",
    "vllm_python_hash_seed": "PYTHONHASHSEED seeds the first chunk hash of every prefix",
    "lmcache_topology": "the in-process connector and the LMCache server name objects "
                        "differently",
    "lmcache_mode": "s3 and nixl name objects differently; dram and disk share nothing",
    "lmcache_remote_serde": "objects keep their names but another serialiser cannot read "
                            "them",
    "deploykit_s3_bucket": "another bucket holds none of the old objects",
    # the host's sharing group (its team's bucket, lmcache_s3_bucket, else the site's): a
    # host moved into a team or another group reads a bucket without its old objects
    "cache_bucket": "another bucket holds none of the old objects",
}


def key_space(host: Host) -> dict[str, Any]:
    c = host.config
    values = {name: getattr(c, name) for name in KEY_SPACE_SETTINGS}
    values["vllm_served_model_name"] = c.served_model_name  # unset: the model
    return values


def host_versions(host: Host) -> dict[str, Any]:
    """What the converge record keeps of this host: each component's version where the host
    runs it, and on serving hosts the settings that name LMCache's objects."""
    versions: dict[str, Any] = {
        comp.name: str(getattr(host.config, comp.setting))
        for comp in COMPONENTS if host.groups & comp.groups}
    if "vllm" in host.groups:
        versions[KEY_SPACE] = key_space(host)
    return versions


@dataclass(frozen=True)
class Change:
    component: str
    old: str
    new: str
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class KeyChange:
    setting: str
    old: Any
    new: Any
    hosts: tuple[str, ...]

    @property
    def why(self) -> str:
        return KEY_SPACE_SETTINGS[self.setting]


@dataclass
class Upgrade:
    """The difference between what the records say hosts run and what the inventory pins."""

    changes: list[Change] = field(default_factory=list)
    key_changes: list[KeyChange] = field(default_factory=list)
    moving: dict[str, frozenset[str]] = field(default_factory=dict)  # host: components
    # hosts whose record already matches the inventory (a stopped flow's upgraded hosts)
    current: set[str] = field(default_factory=set)
    unknown: dict[str, str] = field(default_factory=dict)  # host: why its versions are unknown

    @property
    def pending(self) -> bool:
        return bool(self.moving)

    @property
    def cold_cache(self) -> bool:
        return bool(self.key_changes)

    def lines(self) -> list[str]:
        """What `plan --upgrade` and `up` print: one line per version change, one cold-cache
        line when the key space moves."""
        out = [f"upgrade: {c.component} {c.old} → {c.new} on {_count(c.hosts)}"
               f" ({_names(c.hosts)})" for c in self.changes]
        if self.key_changes:
            settings = ", ".join(dict.fromkeys(
                f"{k.setting} {k.old} → {k.new}" for k in self.key_changes))
            hosts = sorted({h for k in self.key_changes for h in k.hosts})
            out.append(f"cold cache: new key space ({settings}) on {_count(hosts)}: LMCache "
                       "hits start from zero; the old objects are never read again and "
                       "expire by the bucket's lifecycle rule; while old and new hosts "
                       "serve side by side, a host hits only what hosts of its own key "
                       "space stored")
        return out


def _count(hosts: Iterable[str]) -> str:
    n = len(list(hosts))
    return f"{n} host{'s' if n != 1 else ''}"


def _names(hosts: tuple[str, ...], shown: int = 5) -> str:
    return ", ".join(hosts[:shown]) + (f", … {len(hosts) - shown} more"
                                       if len(hosts) > shown else "")


def _same(a: Any, b: Any) -> bool:
    return str(a) == str(b)


def detect(site: Site, recorded: Mapping[str, Mapping[str, Any] | str | None],
           hosts: Iterable[str] | None = None) -> Upgrade:
    """Compare each host's recorded versions (`recorded[host]`: the record's `versions`,
    {} for a record without them, None for no record, a string for why it could not be
    read) with the inventory's."""
    upgrade = Upgrade()
    changes: dict[tuple[str, str, str], list[str]] = {}
    keys: dict[tuple[str, str, str], tuple[Any, Any, list[str]]] = {}
    names = sorted(site.hosts) if hosts is None else sorted(hosts)
    for name in names:
        host = site.hosts[name]
        want = host_versions(host)
        if not want:
            continue  # runs none of the versioned components (the Ceph admin host)
        have = recorded.get(name)
        if isinstance(have, str):
            upgrade.unknown[name] = f"its converge record could not be read ({have})"
            continue
        if have is None:
            upgrade.unknown[name] = "no converge record (a first install)"
            continue
        if not have:
            upgrade.unknown[name] = "its converge record keeps no versions (an older deploykit)"
            continue
        moved: set[str] = set()
        for comp in COMPONENTS:
            if comp.name in want and comp.name in have and not _same(have[comp.name],
                                                                      want[comp.name]):
                changes.setdefault((comp.name, str(have[comp.name]), want[comp.name]),
                                   []).append(name)
                moved.add(comp.name)
        old_keys, new_keys = have.get(KEY_SPACE), want.get(KEY_SPACE)
        if isinstance(old_keys, dict) and new_keys is not None:
            for setting, new in new_keys.items():
                if setting in old_keys and not _same(old_keys[setting], new):
                    entry = keys.setdefault((setting, str(old_keys[setting]), str(new)),
                                            (old_keys[setting], new, []))
                    entry[2].append(name)
                    moved.add(KEY_SPACE)
        if moved:
            upgrade.moving[name] = frozenset(moved)
        else:
            upgrade.current.add(name)
    upgrade.changes = [Change(c, old, new, tuple(h)) for (c, old, new), h in changes.items()]
    upgrade.key_changes = [KeyChange(s, old, new, tuple(h))
                           for (s, _o, _n), (old, new, h) in keys.items()]
    return upgrade


# --- the waves ------------------------------------------------------------------------

@dataclass(frozen=True)
class Tier:
    name: str
    components: frozenset[str]
    groups: frozenset[str]
    # hosts per batch after the canary: a count, or a share of the tier ("10%")
    batch: str


# In the order their batches roll. Consul servers one at a time (a raft peer each; quorum
# holds with one away) before the agents; gateways one at a time (each carries a share of
# the S3 name's A records); serving hosts by a share of the fleet.
TIERS = (
    Tier("consul servers", frozenset({"consul"}), frozenset({"consul_servers"}), "1"),
    Tier("gateways", frozenset({"ceph", "consul", "coredns"}), frozenset({"rgw", "dns"}), "1"),
    Tier("serving", frozenset({"vllm", "lmcache", KEY_SPACE}), frozenset({"vllm"}), "10%"),
)
SERVING = "serving"
# canaries roll in this order: serving first (the version change operators make most, and
# the one whose failure a verify of one host shows)
CANARY_ORDER = (SERVING, "consul servers", "gateways")
_BATCH = re.compile(r"^([1-9][0-9]*)(%?)$")


class BatchError(ValueError):
    """A --batch that is not N or N%."""


def batch_size(spec: str, total: int) -> int:
    """Hosts per batch: N, or N% of the tier's hosts rounded up; at least 1."""
    m = _BATCH.match(spec.strip())
    if not m or (m[2] and int(m[1]) > 100):
        raise BatchError(f"--batch {spec!r}: give a number of hosts (5) or a share of "
                         "the tier (10%, at most 100%)")
    n = int(m[1])
    return max(1, math.ceil(total * n / 100)) if m[2] else n


def tier_of(host: Host, components: frozenset[str]) -> Tier:
    """The most careful tier among those whose components move on this host (a Consul
    server that also serves rolls one at a time, as a Consul server)."""
    for tier in TIERS:
        if host.groups & tier.groups and components & tier.components:
            if tier.name == "consul servers" or tier.name == "gateways":
                # consul on a serving-only host is not a gateway's change
                relevant = {c.name for c in COMPONENTS
                            if c.name in components & tier.components
                            and host.groups & c.groups & tier.groups}
                if not relevant:
                    continue
            return tier
    return TIERS[-1]


@dataclass(frozen=True)
class Wave:
    tier: str
    hosts: tuple[str, ...]
    canary: bool = False
    # serving hosts in this wave whose vLLM or LMCache moves: the wave restarts them even if
    # an interrupted earlier try already wrote their files (up --restart-serving, limited)
    restart_serving: bool = False

    def title(self, index: int, total: int) -> str:
        what = "canary" if self.canary else "batch"
        return f"wave {index}/{total}: {self.tier} {what}, {_count(self.hosts)} " \
               f"({_names(self.hosts)})"


class FlowError(ValueError):
    """Flow options that do not fit the upgrade (a canary that does not move)."""


def plan_waves(site: Site, upgrade: Upgrade, canary: str | None = None,
               no_canary: bool = False, batch: str | None = None) -> list[Wave]:
    """Every moving host exactly once: per tier a canary (unless the tier already has a host
    at the new versions: a resumed flow), then batches, tiers in TIERS order; serving batches
    are `batch` (default the tier's) of the whole tier, so a resume keeps the batch size."""
    by_tier: dict[str, list[str]] = {}
    for name in sorted(upgrade.moving):
        by_tier.setdefault(tier_of(site.hosts[name], upgrade.moving[name]).name,
                           []).append(name)
    if canary is not None:
        if canary not in site.hosts:
            raise FlowError(f"--canary {canary}: no such host in the inventory")
        if canary not in upgrade.moving:
            raise FlowError(f"--canary {canary}: nothing moves on that host (moving: "
                            f"{', '.join(sorted(upgrade.moving)) or 'none'})")
    canaries: dict[str, str] = {}
    for tier_name, hosts in by_tier.items():
        tier = next(t for t in TIERS if t.name == tier_name)
        if no_canary or _resumed(site, upgrade, tier, hosts):
            continue
        chosen = canary if canary in hosts else None
        canaries[tier_name] = chosen or hosts[0]
    waves = [_wave(site, upgrade, tier_name, (canaries[tier_name],), canary=True)
             for tier_name in CANARY_ORDER if tier_name in canaries]
    for tier in TIERS:
        rest = [h for h in by_tier.get(tier.name, []) if h != canaries.get(tier.name)]
        if not rest:
            continue
        total = len(by_tier[tier.name]) + len([h for h in upgrade.current
                                              if site.hosts[h].groups & tier.groups])
        size = batch_size(batch if batch is not None and tier.name == SERVING
                          else tier.batch, total)
        waves += [_wave(site, upgrade, tier.name, tuple(rest[i:i + size]))
                  for i in range(0, len(rest), size)]
    return waves


def _resumed(site: Site, upgrade: Upgrade, tier: Tier, hosts: list[str]) -> bool:
    """A tier that already has a host at the versions its moving hosts move to: a flow
    stopped after its canary (or a batch); the canary is not rolled again. A host that
    simply was not asked to change (another version pinned for it) does not count."""
    def at(name: str, moving: frozenset[str]) -> str:
        want = host_versions(site.hosts[name])
        return json.dumps({k: want.get(k) for k in sorted(moving)}, sort_keys=True,
                          default=str)

    done = [h for h in upgrade.current if site.hosts[h].groups & tier.groups]
    if not done:
        return False
    targets = {(upgrade.moving[h] & tier.components, at(h, upgrade.moving[h] & tier.components))
               for h in hosts}
    return any(at(h, moving) == target for moving, target in targets for h in done)


def _wave(site: Site, upgrade: Upgrade, tier: str, hosts: tuple[str, ...],
          canary: bool = False) -> Wave:
    serving_moves = any(upgrade.moving[h] & {"vllm", "lmcache", KEY_SPACE}
                        and "vllm" in site.hosts[h].groups for h in hosts)
    return Wave(tier, hosts, canary, serving_moves)


def resume_hint(inventory: str, options: str = "") -> str:
    """How to go on after a stopped flow: the same `up` (the records skip what is done)."""
    extra = f" {options}" if options else ""
    return (f"resume with `deploykit up -i {inventory}{extra}`: each host's converge record "
            "says whether it already runs the new versions, so the hosts done are skipped "
            "and the flow goes on from the next one (no canary again); or roll back by "
            "setting the old versions and running the same command")
