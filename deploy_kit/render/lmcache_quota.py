"""A team's quota in its hosts' LMCache servers (server topology, S3 mode): the L2 adapter
evicts per cache_salt (IsolatedLRU) against a quota that each server start sets over the
server's HTTP API (docs/teams.md).

LMCache counts a salt's bytes per server, from the objects that server stored, and keeps
quotas in memory only; a salt with no quota has a limit of 0 and is evicted within a second
(LMCache 0.5.6 v1/distributed/storage_controllers/eviction_controller.py:347-395,
v1/multiprocess/http_apis/quota_api.py:1-11). So each server gets its share of the team's
quota (team quota / the team's serving hosts), set again at every start by the unit's
ExecStartPost (agents/lmcache_quota.py), and only the team's salt keeps data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deploy_kit.config import names
from deploy_kit.config.models import Team
from deploy_kit.config.site import Host, Site
from deploy_kit.plan.serving import serving_host

# A salt is evicted once its bytes reach WATERMARK x its quota, by EVICTION_RATIO of its
# chunks (LRU first): it then holds 0.81-0.9 of its share, under the RGW bucket quota (the hard
# limit, on the same bytes) with room for the chunks in flight. LMCache's defaults (0.8, 0.2)
# would leave a third of the quota unused (l2_adapters/config.py:266-270 reads both as floats;
# distributed/config.py:474-478: fractions, 0.0-1.0).
WATERMARK = 0.9
EVICTION_RATIO = 0.1
# how long the server start waits for the quota API (the port is already open: the unit's
# first ExecStartPost, up to 240 s); both within the unit's TimeoutStartSec (300 s)
QUOTA_TIMEOUT_S = 30
GIB = 2**30


@dataclass(frozen=True)
class SaltQuota:
    salt: str
    limit_gb: float  # this server's share of its team's quota, in GiB (LMCache's "gb")


def team_hosts(site: Site, team: Team) -> list[Host]:
    """The serving hosts whose LMCache uses the team's identity and bucket."""
    return [h for h in site.group("vllm")
            if h.config.team is not None and h.config.team.name == team.name]


def team_quota_bytes(site: Site, team: Team) -> int:
    """The team's quota: its quota_bytes when set (0: none), else the bytes `plan` computes
    for the models its hosts serve (0 when none can be sized)."""
    from deploy_kit.plan.plan import cache_bytes

    if team.quota_bytes is not None:
        return team.quota_bytes
    try:
        return cache_bytes(site, {h.name for h in team_hosts(site, team)})
    except (ValueError, KeyError):  # a model plan cannot size: no quota rather than no render
        return 0


def salt_quota(site: Site, host: Host) -> SaltQuota | None:
    """This host's server's quota for its team's salt; None where no per-salt eviction runs:
    no team, in-process LMCache (it ignores cache_salt), no S3 L2, or no team quota (0: the
    bucket's lifecycle alone bounds it; a limit of 0 would evict every chunk)."""
    c = host.config
    team = c.team
    if team is None or serving_host(host).inprocess or c.lmcache_mode != "s3":
        return None
    quota = team_quota_bytes(site, team)
    if quota <= 0:
        return None
    return SaltQuota(team.salt, quota / len(team_hosts(site, team)) / GIB)


def eviction() -> dict[str, Any]:
    """The L2 adapter's `eviction` entry (l2_adapters/config.py:236-270)."""
    return {"eviction_policy": "IsolatedLRU", "trigger_watermark": WATERMARK,
            "eviction_ratio": EVICTION_RATIO}


def set_quota_argv(port: int, quota: SaltQuota) -> list[str]:
    """The unit's ExecStartPost: the installed agents/lmcache_quota.py (the serving venv's
    python), which fails the start when the server does not take the quota."""
    return [names.LMCACHE_QUOTA_SCRIPT, "--port", str(port), "--salt", quota.salt,
            "--limit-gb", repr(quota.limit_gb), "--timeout", str(QUOTA_TIMEOUT_S)]
