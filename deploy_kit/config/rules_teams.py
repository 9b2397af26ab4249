"""Teams sharing the tier (docs/teams.md): each team's name, cache_salt, RGW uid and bucket
are its own, every host belongs to at most one team without guessing, and a team's bucket
holds its hosts' chunks only (its identity may delete anything in it)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from deploy_kit.config import s3_identities
from deploy_kit.config.models import team_bucket
from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.site import Site
from deploy_kit.core.errors import Problem

RULES, rule = collector()

# S3's bound on a bucket name (and the model's on Team.bucket)
MAX_BUCKET = 63


@rule
def teams_apart(site: Site) -> Iterator[Problem]:
    """No two teams share a name (their uid and bucket would be one) or a cache_salt (their
    LMCache keys, quotas and encryption keys would be one)."""
    teams = site.settings.teams
    where = site.settings_source("teams")
    for name, count in Counter(t.name for t in teams).items():
        if count > 1:
            yield Problem(where, "teams", f"team {name!r} is listed {count} times",
                          "give each team its own name (or merge the entries)")
    for salt, count in Counter(t.salt for t in teams).items():
        if count > 1:
            owners = ", ".join(t.name for t in teams if t.salt == salt)
            yield Problem(where, "teams", f"teams {owners} send one cache_salt {salt!r}",
                          "give each team its own cache_salt (unset: the team's name)")


@rule
def team_buckets_own(site: Site) -> Iterator[Problem]:
    """A team's bucket is the team's alone: not the site bucket, not another team's, not a
    sharing group's (lmcache_s3_bucket of hosts in no team), and a valid S3 name."""
    s = site.settings
    where = site.settings_source("teams")
    seen: dict[str, str] = {}
    shared = {h.config.lmcache_s3_bucket: h for h in site.group("vllm")
              if h.config.team is None and h.config.lmcache_s3_bucket}
    for team in s.teams:
        bucket = team_bucket(team, s.deploykit_s3_bucket)
        if team.bucket is None and len(bucket) > MAX_BUCKET:
            yield Problem(where, "teams", f"team {team.name!r}'s bucket {bucket!r} is "
                          f"{len(bucket)} characters, S3 allows {MAX_BUCKET}",
                          "set the team's bucket: (or a shorter name)")
        if bucket == s.deploykit_s3_bucket:
            yield Problem(where, "teams", f"team {team.name!r}'s bucket is the site bucket "
                          f"{bucket!r}, which hosts in no team share",
                          "give the team a bucket of its own (or leave bucket: unset)")
        elif bucket in seen and seen[bucket] != team.name:
            yield Problem(where, "teams", f"teams {seen[bucket]!r} and {team.name!r} share "
                          f"bucket {bucket!r}", "give each team a bucket of its own")
        if bucket in shared:
            host = shared[bucket]
            yield Problem(_src(site, host, "lmcache_s3_bucket"), "lmcache_s3_bucket",
                          f"{host.name} (in no team) shares {bucket!r}, team "
                          f"{team.name!r}'s bucket", "use another lmcache_s3_bucket for "
                          "hosts in no team, or put the host in the team (lmcache_team)",
                          (host.name,))
        seen.setdefault(bucket, team.name)


@rule
def team_uids_fit(site: Site) -> Iterator[Problem]:
    """A team's RGW uid, `<ceph_rgw_s3_user>-team-<name>`, fits RGW's bound."""
    owner = site.settings.ceph_rgw_s3_user
    for team in site.settings.teams:
        uid = s3_identities.team_uid(owner, team.name)
        if len(uid) > s3_identities.MAX_UID:
            yield Problem(site.settings_source("teams"), "teams",
                          f"team {team.name!r}'s identity {uid!r} is longer than "
                          f"{s3_identities.MAX_UID}", "use a shorter team name (or "
                          "ceph_rgw_s3_user)")


@rule
def teams_models_served(site: Site) -> Iterator[Problem]:
    """Every model a team lists is served by a vllm host: a model name off by one character
    would leave that model's hosts in no team, in the shared site bucket, silently."""
    served = {h.config.vllm_model for h in site.group("vllm")}
    for team in site.settings.teams:
        for model in team.models:
            if model not in served:
                yield Problem(site.settings_source("teams"), "teams",
                              f"team {team.name!r} lists {model!r}, which no vllm host serves",
                              "list the vllm_model value of the team's hosts exactly (or "
                              "remove the model from the team)")


@rule
def hosts_in_one_team(site: Site) -> Iterator[Problem]:
    """Each serving host's team is unambiguous and real, and a team's host caches in the
    team's bucket (lmcache_s3_bucket is for hosts in no team)."""
    names = {t.name for t in site.settings.teams}
    for host in site.group("vllm"):
        c = host.config
        if c.lmcache_team is not None and c.lmcache_team not in names:
            yield Problem(_src(site, host, "lmcache_team"), "lmcache_team",
                          f"{host.name} names team {c.lmcache_team!r}, which teams does not "
                          "list", f"use one of: {', '.join(sorted(names)) or '(no teams)'}",
                          (host.name,))
            continue
        listing = [t.name for t in c.teams if c.vllm_model in t.models]
        if c.lmcache_team is None and c.lmcache_s3_bucket is None and len(listing) > 1:
            yield Problem(_src(site, host, "vllm_model"), "lmcache_team",
                          f"{host.name}'s model {c.vllm_model!r} is listed by teams "
                          f"{', '.join(listing)}", "set lmcache_team on the host, or "
                          "lmcache_s3_bucket to keep it out of the teams (or list the model "
                          "in one team)", (host.name,))
        if c.team is not None and c.lmcache_s3_bucket is not None:
            yield Problem(_src(site, host, "lmcache_s3_bucket"), "lmcache_s3_bucket",
                          f"{host.name} is in team {c.team.name!r}, which caches in its own "
                          f"bucket, and sets lmcache_s3_bucket {c.lmcache_s3_bucket!r}",
                          "unset lmcache_s3_bucket on the team's hosts (set the team's "
                          "bucket: instead)", (host.name,))
