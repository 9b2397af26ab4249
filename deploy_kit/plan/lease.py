"""The LMCache agent's restart lease (render/self_heal.py writes it into each serving host's
settings, plan/roll.py times the daily roll with it): which hosts share a lease, and how
many of them may restart at once (its slots).

A lease is one per model (its serving identity's prefix, render/s3_access.py) and failure
domain. The inventory has no rack, row or zone field, so the site is one failure domain
(DOMAIN); the lease keys carry it already. Each lease has two pools of `slots` slots: the
scheduled restarts' and the breaker heals'. The slots are sized from the fleet: one per
HOSTS_PER_SLOT hosts sharing the lease (a tenth of the model's hosts restarting at once, each
one instance at a time behind its health gate), at least one;
lmcache_scheduled_restart_slots sets them outright. vllm_serial does not bound them: it sizes
`up`'s converge batches, whose risk is a bad version on many hosts, not a planned restart of
a version already running."""

from __future__ import annotations

from deploy_kit.config import s3_identities
from deploy_kit.config.instances import instance_count
from deploy_kit.config.site import Host, Site

# the lease objects in the cache bucket, under their model's prefix (lease_key); no LMCache
# key starts with it (cache/keys.py)
LEASE_NAME = "serving-restart"
# the failure domain in the lease keys: the inventory knows no rack or zone, so one
DOMAIN = "site"
# hosts per slot before another is added (sized_slots)
HOSTS_PER_SLOT = 10
# how long a run waits for a slot at most, s: RGW processes lifecycle in
# rgw_lifecycle_work_time, 00:00-06:00 by default, and the day's roll follows its end
LOCK_WAIT_S = 21600


def applies(host: Host) -> bool:
    """A serving host whose LMCache has an S3 tier (s3, nixl): a breaker and a record."""
    return "vllm" in host.groups and host.config.lmcache_mode in ("s3", "nixl")


def restart_enabled(site: Site, host: Host) -> bool:
    """No lifecycle expiry (days 0, a site-wide value): nothing expires under a running
    process."""
    return applies(host) and host.config.lmcache_scheduled_restart \
        and site.settings.ceph_rgw_s3_lifecycle_days > 0


def lease_key(host: Host) -> str:
    """The lease of this host's model (its slots are under it, by failure domain), in the
    host's cache bucket (render/self_heal.py): a model served in two buckets has a lease in
    each, shared by that bucket's hosts only."""
    c = host.config
    slug = s3_identities.serving_slug(c.ceph_rgw_s3_user, s3_identities.model_key(c))
    return s3_identities.lease_prefix(slug) + LEASE_NAME


def _where(host: Host) -> str:
    """A lease's bucket and key: the hosts sharing one lease object."""
    return f"{host.config.cache_bucket}/{lease_key(host)}"


def lease_ttl(host: Host) -> int:
    """Longer than the longest restart the holder may make: every unit one after another,
    each up to its health timeout. A holder that died leaves a slot the next one takes
    over after this."""
    c = host.config
    return c.vllm_health_timeout * (instance_count(c) + 1) + 300


def lock_wait(host: Host) -> int:
    """How long a run waits for a slot, s: LOCK_WAIT_S, or one restart if longer."""
    return max(LOCK_WAIT_S, lease_ttl(host))


# the last site's lease groups and their slots: every host's render asks, so each is worked
# out once per site
_groups: tuple[Site, dict[str, list[Host]], dict[str, int]] | None = None


def _leases(site: Site) -> tuple[dict[str, list[Host]], dict[str, int]]:
    global _groups
    if _groups is None or _groups[0] is not site:
        groups: dict[str, list[Host]] = {}
        for other in site.group("vllm"):
            if applies(other):
                groups.setdefault(_where(other), []).append(other)
        _groups = (site, groups, {})
    return _groups[1], _groups[2]


def lease_group(site: Site, host: Host) -> list[Host]:
    """The hosts that share this host's lease (its model's agents in its failure domain)."""
    return _leases(site)[0].get(_where(host), [host])


def sized_slots(hosts: int) -> int:
    """Slots for `hosts` sharing a lease: one per HOSTS_PER_SLOT (rounded up), at least one."""
    return max(1, -(-hosts // HOSTS_PER_SLOT))


def slots(site: Site, host: Host) -> int:
    """Each pool's slots for this host's lease: lmcache_scheduled_restart_slots where a host
    of the lease sets it (the largest), else sized from the hosts sharing the lease."""
    key = _where(host)
    groups, known = _leases(site)
    if key not in known:
        group = groups.get(key, [host])
        chosen = [h.config.lmcache_scheduled_restart_slots for h in group
                  if h.config.lmcache_scheduled_restart_slots is not None]
        known[key] = max(chosen) if chosen else sized_slots(len(group))
    return known[key]
