"""Who shares what (docs/teams.md): the sharing groups (the serving hosts of one bucket, which
must agree on one key format), the teams (each its RGW identity, bucket, cache_salt and
quota), each bucket's quota, and what a team on in-process hosts does not get."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from deploy_kit.config import s3_identities
from deploy_kit.config.models import HostConfig, team_bucket
from deploy_kit.config.site import Site


@dataclass
class SharingGroupPlan:
    bucket: str
    team: str | None
    topology: str  # inprocess, server, or both names where the rules refuse the mix
    key_format: str
    hosts: list[str]


@dataclass
class TeamPlan:
    name: str
    bucket: str
    uid: str
    salt: str
    quota_bytes: int
    hosts: list[str]


def key_format(c: HostConfig) -> str:
    """The S3 object names this host's LMCache writes (cache/keys.py): the in-process
    connector's carry no cache_salt; the server's L2 adapter appends it (0.5.6
    distributed/l2_adapters/s3_l2_adapter.py _object_key_to_string)."""
    if c.lmcache_mode == "nixl":
        return "<model, / and @ as _>_<world>_<rank>_<hash>_<dtype>"
    if c.lmcache_server:
        return "<model>@<kv_rank>@<group>@<hash>[@<cache_salt>]"
    return "<model, / as _>@<world>@<rank>@<hash>@<dtype>"


def sharing_groups(site: Site) -> list[SharingGroupPlan]:
    """Each bucket a serving host caches in, with its hosts (buckets in `up`'s order)."""
    groups: dict[str, list[HostConfig]] = {}
    names: dict[str, list[str]] = {}
    for host in s3_identities.serving_hosts(site):
        groups.setdefault(host.config.cache_bucket, []).append(host.config)
        names.setdefault(host.config.cache_bucket, []).append(host.name)
    order = s3_identities.bucket_names(site)
    out = []
    for bucket, configs in sorted(groups.items(), key=lambda kv: order.index(kv[0])):
        team = configs[0].team
        out.append(SharingGroupPlan(
            bucket=bucket, team=team.name if team else None,
            topology=" + ".join(dict.fromkeys(c.lmcache_topology for c in configs)),
            key_format=" | ".join(dict.fromkeys(key_format(c) for c in configs)),
            hosts=names[bucket]))
    return out


def bucket_quota(site: Site, bucket: str, sized: Callable[[str], int]) -> int:
    """A bucket's quota. A team's: its quota_bytes when set (0: none), else `sized` (the
    bytes `plan` computes for the models its hosts serve). Any other bucket (the site's, a
    sharing group's): ceph_rgw_s3_quota_bytes when set (0: none), else `sized` (the models
    served in it). 0 when no model is known."""
    s = site.settings
    team = next((t for t in s.teams if team_bucket(t, s.deploykit_s3_bucket) == bucket), None)
    explicit = team.quota_bytes if team is not None else s.ceph_rgw_s3_quota_bytes
    if explicit is not None:
        return explicit
    try:
        return sized(bucket)
    except (ValueError, KeyError):  # a model plan cannot size: no quota rather than no render
        return 0


def teams(site: Site, sized: Callable[[str], int]) -> list[TeamPlan]:
    """Each team with its bucket's quota (`sized`: plan's bytes for a bucket's models)."""
    s = site.settings
    out = []
    for team in s.teams:
        bucket = team_bucket(team, s.deploykit_s3_bucket)
        out.append(TeamPlan(
            name=team.name, bucket=bucket,
            uid=s3_identities.team_uid(s.ceph_rgw_s3_user, team.name), salt=team.salt,
            quota_bytes=bucket_quota(site, bucket, sized),
            hosts=[h.name for h in site.group("vllm")
                   if h.config.team is not None and h.config.team.name == team.name]))
    return out


def warnings(site: Site) -> list[str]:
    """A team's in-process hosts: the connector neither sends nor keys by cache_salt, so the
    team's isolation there is its RGW identity and bucket alone (no per-salt keys, quota or
    encryption key)."""
    out = []
    for team in site.settings.teams:
        inprocess = [h.name for h in site.group("vllm") if h.config.team is not None
                     and h.config.team.name == team.name and not h.config.lmcache_server]
        if inprocess:
            out.append(f"team {team.name}: {', '.join(inprocess)} run LMCache in-process, "
                       f"which ignores cache_salt {team.salt!r} (no per-salt keys, quota or "
                       "encryption key there; the team's bucket and identity still hold)")
    return out
