"""How long the daily scheduled restart takes across the site, against the time each host
waits for its turn.

The scheduled restart of a host (render/self_heal.py) waits for one of its lease's restart
slots (plan/lease.py) for at most lock_wait (6 h unless one restart takes longer) and gives
up for that day after it; so the hosts sharing a lease (a model's, in a failure domain) must
all get through their slots in that window. A host's restart is its running instances one
at a time behind their health gates (on CPU server hosts all at once with the server), so
it takes about instances × one instance's restart.

Nothing in deploykit measures one instance's restart yet, so the plan uses an estimate, per
accelerator, that `journalctl -t deploykit-heal` (`heal-done ... seconds=`) can correct:
a start-up (runtime, compile, CUDA graph capture or Gaudi warm-up; START_S) plus the
weights of one device read at WEIGHTS_BYTES_PER_S. The figures are judgement, not
measurement: vLLM on a 32B model starts in two to three minutes on H100 and MI300X once its
compile cache is warm, and vllm-gaudi's warm-up of its shape buckets takes ten minutes or
more (the 2026-12-07 review's "10–20 min per 4-instance host" for the example)."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from deploy_kit.config.instances import instance_count
from deploy_kit.config.site import Host, Site
from deploy_kit.core.geometry import weight_bytes
from deploy_kit.plan import lease
from deploy_kit.plan.serving import accelerator_of, serving_host

GIB = 1 << 30
# one instance's start-up before it answers /health, s (estimates: see the module's text)
START_S = {"cpu": 60, "cuda": 120, "rocm": 150, "gaudi3": 600}
# vllm_gaudi_skip_warmup: the warm-up skipped (development only)
GAUDI_NO_WARMUP_S = 120
# the weights of one device, read from the host's disk or page cache
WEIGHTS_BYTES_PER_S = 1 * GIB
# the LMCache server's own restart (server topology)
SERVER_S = 30


@dataclass
class RollPlan:
    model: str
    hosts: list[str]
    slots: int
    instance_seconds: int  # the slowest host's one instance (estimate)
    host_seconds: int  # the slowest host's whole restart (estimate)
    roll_seconds: int  # every host's restart, spread over the slots
    window_seconds: int  # how long a host waits for a slot (lock_wait)
    slots_needed: int  # the fewest slots whose roll fits the window
    fits: bool  # roll_seconds <= window_seconds


def instance_seconds(host: Host) -> int:
    """One instance's restart until /health answers (estimate)."""
    c = host.config
    accelerator = accelerator_of(c)
    start = START_S.get(accelerator, START_S["cuda"])
    if accelerator == "gaudi3" and c.vllm_gaudi_skip_warmup:
        start = GAUDI_NO_WARMUP_S
    weights = weight_bytes(host.geometry, c.vllm_dtype) if host.geometry else None
    load = (weights or 0) / max(1, host.workers) / WEIGHTS_BYTES_PER_S
    return int(start + load)


def host_seconds(host: Host) -> int:
    """The host's scheduled restart (lmcache_heal.restart): the server first where there is
    one, then each instance behind its gate; a CPU server host's instances restart with
    the server, at once."""
    one = instance_seconds(host)
    count = instance_count(host.config)
    served = serving_host(host)
    if served.restarts_with_server:
        return SERVER_S + one
    return (SERVER_S if served.has_server else 0) + count * one


def roll_seconds(times: list[int], slots: int) -> int:
    """The hosts' restarts spread over the slots: each free slot takes the next host (the
    longest first, as a bound the random order rarely beats by much)."""
    ends = [0] * max(1, min(slots, len(times)))
    for seconds in sorted(times, reverse=True):
        heapq.heapreplace(ends, ends[0] + seconds)
    return max(ends)


def slots_needed(times: list[int], window: int) -> int:
    """The fewest slots whose roll fits `window` (more slots never lengthen it); one per
    host when even that does not."""
    low, high = 1, max(1, len(times))
    while low < high:
        middle = (low + high) // 2
        if roll_seconds(times, middle) <= window:
            high = middle
        else:
            low = middle + 1
    return low


def rolls(site: Site) -> list[RollPlan]:
    """Each lease whose hosts run the scheduled restart: its roll against its window."""
    out = []
    seen: set[int] = set()
    for host in site.group("vllm"):
        if id(host) in seen or not lease.applies(host):
            continue
        shared = lease.lease_group(site, host)
        seen |= {id(h) for h in shared}
        group = [h for h in shared if lease.restart_enabled(site, h)]
        if not group:
            continue
        host = group[0]
        slots = lease.slots(site, host)
        each = {h.name: host_seconds(h) for h in group}
        times = list(each.values())
        window = max(lease.lock_wait(h) for h in group)
        needed = slots_needed(times, window)
        longest = max(times)
        slowest = next(h for h in group if each[h.name] == longest)
        total = roll_seconds(times, slots)
        out.append(RollPlan(
            model=host.config.vllm_model, hosts=sorted(h.name for h in group), slots=slots,
            instance_seconds=instance_seconds(slowest), host_seconds=host_seconds(slowest),
            roll_seconds=total, window_seconds=window, slots_needed=needed,
            fits=total <= window))
    return out


def warnings(plans: list[RollPlan]) -> list[str]:
    """A roll longer than its window, with the fix."""
    out = []
    for r in plans:
        if r.fits:
            continue
        out.append(
            f"daily restart of {r.model} ({len(r.hosts)} hosts): about "
            f"{hours(r.roll_seconds)} with {r.slots} slot(s), longer than the "
            f"{hours(r.window_seconds)} a host waits for one, so some hosts skip it that "
            f"day: let {r.slots_needed} hosts restart at once "
            f"(lmcache_scheduled_restart_slots: {r.slots_needed})")
    return out


def hours(seconds: int) -> str:
    if seconds < 3600:
        return f"{math.ceil(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"
