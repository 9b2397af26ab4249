"""The serving identities (pure): one per team (docs/teams.md), and one per model for the
hosts in no team; each one's RGW uid, the buckets it is granted in and the key prefixes its
chunks have.

A team's hosts hold its identity, `<owner>-team-<name>`, whatever models they serve: the
team's bucket is the team's alone (rules_teams), so the identity is granted the whole bucket
and nothing anywhere else. The rest of this docstring is about the per-model identities of
hosts in no team, which share a bucket with other models' hosts.

LMCache has no setting for a key prefix: the in-process connector sends the key as the
whole request path (0.5.6 s3_connector.py `_format_safe_path`, research/lmcache-vllm-facts.md
1.7), the server's S3 L2 adapter writes `<model>@…` under the virtual-hosted bucket
(s3_l2_adapter.py `_object_key_to_string`, its config has no prefix field), and
`s3_file_prefix` died with 0.3.10. Every key does start with the model LMCache was started
with, vLLM's `--model` (model_config.model: the Hugging Face id, or the staged local path),
in the layout of the host's topology and mode (cache/keys.py):

- in-process connector (`lmcache_mode: s3`, `lmcache_topology: inprocess`):
  `<model, / as _>@…`;
- LMCache server (`lmcache_mode: s3`, `lmcache_topology: server`): `<model>@…`, literal
  (the adapter refuses `@` in a model name), and the in-process connector's layout as well
  (verify's round trip drives that connector with the host's keys);
- NIXL storage backend (`lmcache_mode: nixl`): `<model, / and @ as _>_…`.

So each model's prefix is the one LMCache already writes: scoping an identity to it changes
no cache key, and a running site keeps its warm cache. The uid is readable and stable: the
owner's, `-serving-`, the model string made safe, and a digest of the exact model string
(two models that only differ in case or punctuation still get two identities).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass

from deploy_kit.config.models import HostConfig, team_bucket
from deploy_kit.config.names import LEASE_PREFIX
from deploy_kit.config.site import Host, Site

SERVING_INFIX = "-serving-"
TEAM_INFIX = "-team-"
# the uid before per-model identities: one for the whole site (removed by `up`)
LEGACY_SUFFIX = "-serving"
# what ceph_rgw_s3_user allows (config/models.py _ACCOUNT): the same bound for every uid
MAX_UID = 64
DIGEST_CHARS = 8
_UNSAFE = re.compile(r"[^a-z0-9]+")
# characters a bucket policy reads as a wildcard (`*`, `?`) or a variable (`${…}`) in a
# Resource or a StringLike value: a prefix holding one would grant more than itself
POLICY_SPECIAL = frozenset("*?$")
# the lease and verify's probe objects: deploykit's own prefixes, no model's
RESERVED_PREFIXES = (LEASE_PREFIX, "deploykit-verify-probe")


@dataclass(frozen=True)
class Identity:
    """A serving identity: its uid, the model string LMCache keys it by (a team's: its
    first), the key prefixes its hosts write, those hosts, the buckets it is granted in, and
    its team (None: a model's identity, granted its prefixes only)."""

    uid: str
    model: str
    slug: str
    prefixes: tuple[str, ...]
    hosts: tuple[str, ...]
    buckets: tuple[str, ...] = ()
    team: str | None = None


def model_key(c: HostConfig) -> str:
    """The model string LMCache puts in every key: vLLM's `--model`."""
    return c.model_path_on_host


def layout_prefix(c: HostConfig) -> str | None:
    """The key prefix this host's LMCache writes; None: no S3 tier (dram, disk)."""
    prefixes = layout_prefixes(c)
    return prefixes[0] if prefixes else None


def layout_prefixes(c: HostConfig) -> tuple[str, ...]:
    """Every key prefix written with this host's keys: its LMCache's, and on a server host
    the in-process connector's too (`deploykit verify --roundtrip` drives that connector
    with the host's profile: verify/roundtrip.py). None for dram or disk."""
    model = model_key(c)
    flat = model.replace("/", "_")
    if c.lmcache_mode == "nixl":
        return (flat.replace("@", "_") + "_",)
    if c.lmcache_mode != "s3":
        return ()
    return (model + "@", flat + "@") if c.lmcache_server else (flat + "@",)


def slug(model: str, room: int) -> str:
    """`Qwen/Qwen3-8B` -> `qwen-qwen3-8b-<8 hex>`, at most `room` characters (the digest is
    always whole: it is what keeps two names apart)."""
    digest = hashlib.sha256(model.encode()).hexdigest()[:DIGEST_CHARS]
    readable = _UNSAFE.sub("-", model.lower()).strip("-")[:max(0, room - DIGEST_CHARS - 1)]
    readable = readable.rstrip("-")
    return f"{readable}-{digest}" if readable else digest


def serving_slug(owner: str, model: str) -> str:
    """The model's part of its identity's uid (and of its lease's prefix)."""
    return slug(model, MAX_UID - len(owner) - len(SERVING_INFIX))


def serving_uid(owner: str, model: str) -> str:
    return f"{owner}{SERVING_INFIX}{serving_slug(owner, model)}"


def team_uid(owner: str, team: str) -> str:
    return f"{owner}{TEAM_INFIX}{team}"


def host_uid(c: HostConfig) -> str:
    """The uid whose keys a serving host holds: its team's, else its model's."""
    team = c.team
    if team is not None:
        return team_uid(c.ceph_rgw_s3_user, team.name)
    return serving_uid(c.ceph_rgw_s3_user, model_key(c))


def legacy_uid(owner: str) -> str:
    return f"{owner}{LEGACY_SUFFIX}"


def serving_hosts(site: Site) -> list[Host]:
    """The serving hosts whose LMCache has an S3 tier (they get an identity's keys)."""
    return [h for h in site.group("vllm") if layout_prefix(h.config) is not None]


def identities(site: Site) -> list[Identity]:
    """One identity per team with serving hosts and per model string of the hosts in no
    team, in the order its first host comes in the inventory. A model served in two
    buckets (two sharing groups) is one identity, granted in each."""
    owner = site.settings.ceph_rgw_s3_user
    found: dict[str, tuple[Identity, list[str], list[str], list[str]]] = {}
    for host in serving_hosts(site):
        c = host.config
        team = c.team
        if team is not None:
            first = Identity(team_uid(owner, team.name), model_key(c),
                             TEAM_INFIX.strip("-") + "-" + team.name, (), (), team=team.name)
        else:
            model = model_key(c)
            first = Identity(serving_uid(owner, model), model, serving_slug(owner, model),
                             (), ())
        _, prefixes, hosts, buckets = found.setdefault(first.uid, (first, [], [], []))
        prefixes.extend(p for p in layout_prefixes(c) if p not in prefixes)
        hosts.append(host.name)
        if c.cache_bucket not in buckets:
            buckets.append(c.cache_bucket)
    return [dataclasses.replace(first, prefixes=tuple(sorted(prefixes)), hosts=tuple(hosts),
                                buckets=tuple(buckets))
            for first, prefixes, hosts, buckets in found.values()]


def bucket_names(site: Site) -> list[str]:
    """Every bucket `up` creates: the site bucket (it holds the site lock, ops/site_lock.py,
    whether or not a host caches in it), each team's, then each sharing group's bucket."""
    s = site.settings
    names = [s.deploykit_s3_bucket, *(team_bucket(t, s.deploykit_s3_bucket) for t in s.teams)]
    names += [h.config.cache_bucket for h in serving_hosts(site)]
    return list(dict.fromkeys(names))


def uid_of(site: Site) -> dict[str, str]:
    """Serving host -> the uid whose keys it holds."""
    return {h: i.uid for i in identities(site) for h in i.hosts}


def lease_prefix(identity_slug: str) -> str:
    """Where a model's hosts keep their restart lease (render/self_heal.py): one per model,
    so no model's host can hold another model's hosts back from a heal."""
    return f"{LEASE_PREFIX}{identity_slug}/"


def overlaps(site: Site) -> list[tuple[Identity, str, Identity, str]]:
    """Pairs of model identities of one bucket where a prefix of one starts another's: the
    first could write the second's chunks (a NIXL prefix ends in `_`, which a longer model
    name may extend). A team's identity has its bucket to itself (rules_teams)."""
    ids = [i for i in identities(site) if i.team is None]
    return [(a, pa, b, pb) for a in ids for b in ids
            if a is not b and set(a.buckets) & set(b.buckets)
            for pa in a.prefixes for pb in b.prefixes if pb.startswith(pa)]
