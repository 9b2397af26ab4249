"""A serving host's LMCache agent (pure): the script, its two services and two timers.

LMCache 0.5.6 turns its S3 tier off for the life of the process after three connection
errors (s3_l2_adapter.py:1022-1030 in the server, s3_connector.py:688-697 in process) and
trusts its record of what S3 stores for the life of the process (s3_l2_adapter.py:1127: a
lookup answers from `_object_size_cache` before any HEAD; its config, lines 330-400, has no
setting that expires or re-checks that record). Both heal only by a restart, so each serving
host runs one agent (deploy_kit/agents/lmcache_heal.py, installed by the serving role), two
ways:

- `heal` (deploykit-lmcache-heal.timer, every 30 s): restarts a process whose current
  invocation logged the breaker (the words and units `up`'s heal task reads), with backoff;
- `restart` (deploykit-lmcache-restart.timer, after each RGW lifecycle window): restarts the
  host whole, so no process trusts an object lifecycle expiry deleted.

Either way, a few hosts of each model and failure domain at a time: the script holds one
of its model's lease slots in the cache bucket. A slot is a run of numbered objects
`deploykit-lease/<model's identity>/serving-restart/<domain>/<pool>-<k>.<n>` (each model's
identity may write only its own prefix: render/s3_access.py, so no host can hold another
model's hosts back), each created with an S3 conditional write (If-None-Match: *: RGW
creates the RADOS object exclusively, so a second create of the same key gets 412), with the
host's own serving identity. The newest number of a slot is that slot's lease: a host takes
it by creating the next number while the newest is free or expired, and frees it by
overwriting its own. Nothing is deleted (the serving identity has no delete right; lifecycle
expiry removes old numbers).

Two pools of `slots` slots each (plan/lease.py: ceil(hosts sharing the lease / 10);
lmcache_scheduled_restart_slots overrides): `restart-<k>` for the scheduled restarts and
`heal-<k>` for the breaker heals.
A heal never takes, or waits for, a restart slot, and a scheduled restart does not start
while any heal slot is held: a tripped breaker never queues behind the daily roll. The
inventory has no rack, zone or row field, so the site is one failure domain (DOMAIN); the
keys already carry it (plan/lease.py). Why not a Consul lock: serving hosts run no Consul agent, the
servers' HTTP API listens on loopback only, and a site in static DNS mode has no Consul at
all; every serving host can reach S3 with the keys it already holds, and a heal needs S3 back
anyway (the lease's read is the reachability probe: S3 answers a signed request through the
name and port LMCache uses).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from deploy_kit.agents import lmcache_heal
from deploy_kit.config import names
from deploy_kit.config.site import Host, Site
from deploy_kit.core.patterns import REREGISTERED, S3_LOG_PATTERNS
from deploy_kit.plan.lease import (
    DOMAIN,
    applies,
    lease_key,
    lease_ttl,
    lock_wait,
    restart_enabled,
    slots,
)
from deploy_kit.render import lmcache_server, monitoring, vllm

# the agent, as the serving role installs it, and its settings, as the render writes them
SCRIPT = names.SELF_HEAL_SCRIPT
CONFIG = lmcache_heal.CONFIG
HEAL_UNIT = "/etc/systemd/system/deploykit-lmcache-heal.service"
HEAL_TIMER = "/etc/systemd/system/deploykit-lmcache-heal.timer"
RESTART_UNIT = "/etc/systemd/system/deploykit-lmcache-restart.service"
RESTART_TIMER = "/etc/systemd/system/deploykit-lmcache-restart.timer"
UNITS = (HEAL_UNIT, HEAL_TIMER, RESTART_UNIT, RESTART_TIMER)
STATE = "/var/lib/deploykit/lmcache-heal.json"
# the journal's SYSLOG_IDENTIFIER of every record (journalctl -t deploykit-heal)
IDENTIFIER = "deploykit-heal"
HEAL_INTERVAL_S = 30
# a trip of a unit the last heal restarted, seen within this many seconds of that heal's end,
# means the heal did not hold (storage still fails for LMCache): only then the backoff grows
SETTLE_S = 120
# LMCache's MP worker adapter pings its server every 10 s (heartbeat_interval, the ping's
# timeout too) and re-registers the engine's KV caches on the unhealthy->healthy edge only:
# the server stays down this long so that every instance sees one ping fail
SERVER_DOWN_S = 25
# how long the instances get to re-register before the agent restarts them after all
REREGISTER_WAIT_S = 60
# RGW processes lifecycle in rgw_lifecycle_work_time, 00:00-06:00 by default (deploykit
# leaves it alone): the restart follows its end
DEFAULT_CALENDAR = "*-*-* 06:00:00"


def server_only_heal(host: Host) -> bool:
    """A breaker heal restarts the LMCache server alone (GPU hosts of the server topology):
    the breaker is in that process, and vLLM's LMCacheMPConnector outlives it. Not on CPU
    hosts, whose instances Require= the server and restart with it anyway."""
    return bool(host.config.lmcache_server) and not vllm.restarts_with_server(host) \
        and host.config.lmcache_self_heal_server_only


def heal_enabled(host: Host) -> bool:
    return applies(host) and host.config.lmcache_self_heal


def calendar(host: Host) -> str:
    return host.config.lmcache_scheduled_restart_calendar or DEFAULT_CALENDAR


def agent_config(site: Site, host: Host) -> dict[str, Any]:
    """What the script acts on: its units and ports, the words, the S3 profile, the lease."""
    c = host.config
    # the units and words `up`'s heal task and verify read (ops/converged.breaker; a test
    # holds the two equal): the server, else every in-process instance
    server = PurePosixPath(lmcache_server.UNIT_PATH).stem if c.lmcache_server else None
    instances = vllm.host_instances(host)
    return {
        "host": host.name,
        "identifier": IDENTIFIER,
        "breaker_units": [server] if server else [i.unit for i in instances],
        "breaker_pattern": S3_LOG_PATTERNS["breaker"],
        "server": server,
        # CPU: the instances Require= the server, so its restart restarts them (roll.yml)
        "with_server": vllm.restarts_with_server(host),
        # vLLM's own port on loopback: the agent waits for the engine, not the front
        "instances": [{"unit": i.unit, "port": i.loopback_port} for i in instances],
        "health_timeout": c.vllm_health_timeout,
        "health_poll": 2,
        "backoff": c.lmcache_self_heal_backoff * 60,
        "backoff_cap": c.lmcache_self_heal_backoff * 60 * 16,
        "lock_wait": lock_wait(host),  # each waits its turn for a slot
        "lock_poll": 5,
        # a tripped host asks S3 every lock_poll for this long in one run (then the timer)
        "outage_wait": 600,
        "lease_ttl": lease_ttl(host),
        # the host's own sharing group's bucket: the only one its keys may write
        "bucket": c.cache_bucket,
        "lease_key": lease_key(host),
        "domain": DOMAIN,
        "slots": slots(site, host),
        "settle": SETTLE_S,
        # a breaker heal of the server topology (GPU): the server alone, then each instance
        # must log its re-registration (workers: one line per process of the instance)
        "server_only_heal": server_only_heal(host),
        "server_health_port": c.lmcache_server_http_port if server else None,
        "server_down": SERVER_DOWN_S,
        "reregister_pattern": REREGISTERED,
        "reregister_wait": REREGISTER_WAIT_S,
        "workers": host.workers,
        # a scheduled restart waiting for a slot asks this often (a heal: lock_poll)
        "restart_poll": 30,
        "profile": names.aws_profile(c),
        "aws_config": names.aws_config_path(c),
        "aws_credentials": names.credentials_path(c),
        "tls": bool(c.deploykit_s3_tls),
        "state": STATE,
        "local_lock": "/run/deploykit-lmcache-heal.lock",
        "textfile": f"{monitoring.TEXTFILE_DIR}/deploykit_lmcache_heal.prom",
    }


def render_config(config: dict[str, Any]) -> str:
    """The agent's settings file (lmcache_heal.CONFIG), in a stable order."""
    from deploy_kit.render.templating import settings_json

    return settings_json(config)


def render(site: Site, host: Host) -> dict[str, tuple[str, int]]:
    """path -> (text, mode). A timer is rendered only where it runs: the role enables the
    ones rendered and stops and disables the others (tasks/self_heal.yml)."""
    from deploy_kit.render.templating import render_template

    config = agent_config(site, host)
    # a run may wait its turn, then restart every unit behind its gate (the script keeps
    # time itself; this only stops a run that hung)
    timeout = config["lease_ttl"] + config["lock_wait"]
    files = {
        CONFIG: (render_config(config), 0o644),
        HEAL_UNIT: (render_template(
            "lmcache-heal.service.j2", script=SCRIPT, mode="heal",
            identifier=IDENTIFIER, timeout=timeout,
            description="restart an LMCache whose S3 breaker tripped, once S3 answers"), 0o644),
        HEAL_TIMER: (render_template(
            "lmcache-heal.timer.j2", interval=f"{HEAL_INTERVAL_S}s",
            calendar=None, delay=0,
            description=f"look for a tripped LMCache S3 breaker every {HEAL_INTERVAL_S}s"),
            0o644),
        RESTART_UNIT: (render_template(
            "lmcache-heal.service.j2", script=SCRIPT, mode="restart",
            identifier=IDENTIFIER, timeout=timeout,
            description="restart LMCache and vLLM after RGW's lifecycle window, a few hosts "
                        "of each model at a time"), 0o644),
        RESTART_TIMER: (render_template(
            "lmcache-heal.timer.j2", interval=None, calendar=calendar(host),
            delay=host.config.lmcache_scheduled_restart_delay,
            description="restart LMCache after each RGW lifecycle window"), 0o644),
    }
    if not heal_enabled(host):
        del files[HEAL_TIMER]
    if not restart_enabled(site, host):
        del files[RESTART_TIMER]
    return files
