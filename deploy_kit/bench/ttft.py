"""`deploykit bench ttft`: the seed's TTFT protocol, per context length, in one run.

For each length L (and each repeat, with a fresh random prompt P of exactly L token ids):
  cold                   P to host A (nothing holds it: hit_tokens 0)
  dram_hit               P to A again (LMCache's DRAM, L1, in the same processes)
  (wait until P's chunks are in the bucket; restart vLLM and lmcache-server on A: DRAM gone)
  remote_hit_restart     P to A (chunks from the remote tier, S3)
  remote_hit_other_host  P to host B, which never saw it (remote tier only)
  dram_only_control      a fresh prompt of length L to B: what B pays when no tier shared
                         by the hosts holds the prompt, i.e. what a DRAM-only deployment
                         pays after a restart or on another host (a cold prefill on B)
  then every object the length added to the bucket is deleted, so the next starts cold.
TTFT is timed on the controller (first streamed chunk carrying a choice); hit tokens are
vLLM's counter deltas on the host that served the request.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from deploy_kit.bench import ttft_report
from deploy_kit.config.site import Host, Site
from deploy_kit.core.errors import DeployKitError, HostsUnreachable
from deploy_kit.plan.serving import accelerator_of
from deploy_kit.transport import openai as oa
from deploy_kit.transport.openai import api_key, model_name

CPU_LENGTHS = [1024, 2048, 4096, 8192]
GPU_LENGTHS = [4096, 8192, 16384, 32768, 65536, 131072]
WARMUP_TOKENS = 64  # after a restart, before the measured request: under one chunk


@dataclass(frozen=True)
class Target:
    name: str
    address: str
    port: int
    model: str
    api_key: str | None = None
    host_header: str | None = None  # a router: the routers' name, sent to its address


class Tier(Protocol):
    """What the protocol needs besides HTTP to vLLM: restart a host, see and purge the
    remote tier's objects."""

    def restart(self, target: Target) -> None: ...
    def objects(self) -> set[str]: ...
    def purge(self, keys: set[str]) -> int: ...


def default_lengths(accelerator: str | None, max_model_len: int | None,
                    max_tokens: int) -> list[int]:
    lengths = CPU_LENGTHS if accelerator == "cpu" else GPU_LENGTHS
    if max_model_len is None:
        return list(lengths)
    return [n for n in lengths if n + max_tokens <= max_model_len]


def measure(target: Target, ids: list[int], max_tokens: int) -> dict[str, Any]:
    before = oa.metrics(target.address, target.port, target.api_key)
    timed = oa.stream_completion(target.address, target.port, target.model, ids, max_tokens,
                                 target.api_key)
    hits = oa.delta(before, oa.metrics(target.address, target.port, target.api_key))
    return {"host": target.name, "ttft_s": timed.ttft_s, "tpot_s": timed.tpot_s,
            "total_s": timed.total_s, "prompt_tokens": timed.prompt_tokens,
            "completion_tokens": timed.completion_tokens,
            "hit_tokens": hits.external if hits else None,
            "local_hit_tokens": hits.local if hits else None, "error": timed.error}


def wait_ready(target: Target, timeout: float, poll: float = 2.0) -> float:
    """Seconds until /health and /v1/models both answer 200."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        seen = oa.served(target.address, target.port, target.api_key)
        if seen.health == 200 and seen.models:
            return time.monotonic() - start
        time.sleep(poll)
    raise DeployKitError(f"{target.name}: vLLM not ready {timeout:.0f} s after the restart",
                         hint=f"journalctl -u vllm -u lmcache-server on {target.name}")


def settle(tier: Tier, before: set[str], timeout: float = 90.0, poll: float = 1.5,
           want_new: bool = True) -> set[str]:
    """The objects added since `before`, once their number stops growing (LMCache writes its
    L2 asynchronously). With want_new, waits (up to timeout) for at least one."""
    start, last = time.monotonic(), -1
    while True:
        new = tier.objects() - before
        if len(new) == last and (new or not want_new):
            return new
        if time.monotonic() - start > timeout:
            return new
        last = len(new)
        time.sleep(poll)


def run_protocol(a: Target, b: Target | None, lengths: list[int], repeats: int, tier: Tier,
                 *, max_tokens: int, token_ids: tuple[int, int], run_id: str,
                 ready_timeout: float, log: Callable[[str], None] = lambda _: None
                 ) -> tuple[list[dict[str, Any]], dict[int, int], list[str]]:
    results: list[dict[str, Any]] = []
    purged: dict[int, int] = {}
    notes: list[str] = []
    control = b or a
    for length in lengths:
        purged[length] = 0
        for rep in range(repeats):
            before = tier.objects()
            ids = oa.prompt_ids(length, f"{run_id}-{length}-{rep}", token_ids)

            def row(case: str, target: Target, prompt: list[int], length: int = length,
                    rep: int = rep) -> dict[str, Any]:
                log(f"{length:>7} tokens, repeat {rep + 1}/{repeats}: {case} on {target.name}")
                measured = {"context_tokens": length, "case": case, "repeat": rep,
                            **measure(target, prompt, max_tokens)}
                results.append(measured)
                return measured

            cold = row("cold", a, ids)
            if cold["hit_tokens"]:
                notes.append(f"{length} tokens, repeat {rep}: the cold request hit "
                             f"{cold['hit_tokens']} tokens (the bucket was not cold)")
            row("dram_hit", a, ids)
            stored = settle(tier, before)
            if not stored:
                notes.append(f"{length} tokens, repeat {rep}: no object reached the remote "
                             "tier before the restart")
            # host B first, while A is idle: after A's restart, A's engine start and first
            # requests share the machine's cores (the lab's hosts share one CPU) and B read
            # 2-5x slower than an independent client measured
            if b is not None:
                row("remote_hit_other_host", b, ids)
            log(f"restarting vLLM and lmcache-server on {a.name} "
                f"({len(stored)} objects in the remote tier)")
            tier.restart(a)
            waited = wait_ready(a, ready_timeout)
            log(f"{a.name} ready {waited:.0f} s after the restart")
            # one short fresh request first: what a new engine pays once (lazy kernel and
            # graph set-up) is not the remote tier's cost
            measure(a, oa.prompt_ids(WARMUP_TOKENS, f"{run_id}-{length}-{rep}-warmup",
                                     token_ids), 1)
            row("remote_hit_restart", a, ids)
            fresh = oa.prompt_ids(length, f"{run_id}-{length}-{rep}-control", token_ids)
            row("dram_only_control", control, fresh)
            new = settle(tier, before, timeout=30.0, want_new=False)
            deleted = tier.purge(new)
            purged[length] += deleted
            if deleted < len(new):
                notes.append(f"{length} tokens, repeat {rep}: purged {deleted} of {len(new)} "
                             "new objects (the next length may not start cold)")
            log(f"purged {deleted} of {len(new)} objects of {length}-token prompts")
    return results, purged, notes


# ---- the site: SSH restarts, the bucket through the S3 name ------------------------------

def restart_script(units: list[str]) -> str:
    """Every vLLM instance of the host stops, the LMCache server (its DRAM tier) restarts,
    then the instances start: the measured instance's hit can only come from the bucket,
    and no sibling is left talking to a server that went away under it."""
    listed = " ".join(units)
    return f"""set -e
S=; [ "$(id -u)" = 0 ] || S="sudo -n"
$S systemctl stop {listed}
if systemctl cat lmcache-server >/dev/null 2>&1; then $S systemctl restart lmcache-server; fi
$S systemctl start {listed}
echo __restarted__
"""


def object_path(key: str) -> str:
    """The request path of an object as LMCache's S3 L2 adapter writes it: the key URL-quoted
    with `/` kept (its keys start with the model name, a local path in the lab), which is
    also the canonical URI SigV4 signs."""
    import urllib.parse

    return "/" + urllib.parse.quote(key, safe="/-_.~")


class SiteTier:
    """Restarts through Ansible (systemctl); the bucket with its owner's keys, read from RGW
    on the admin host: the serving hosts' identity may not delete chunks (its bucket policy,
    render/s3_access.py), and the purge between lengths must."""

    def __init__(self, site: Site, hosts: dict[str, Host], prefixes: list[str],
                 since: datetime.datetime) -> None:
        from deploy_kit.cache.store import open_bucket

        self.site, self.hosts = site, hosts
        # a live bucket: only this model's keys, written since the run began (less a minute
        # of clock skew between the controller and RGW), are listed, and only those purged
        self.prefixes, self.since = prefixes, since - datetime.timedelta(seconds=60)
        self.bucket = open_bucket(site)

    def restart(self, target: Target) -> None:
        from deploy_kit.config.instances import instances
        from deploy_kit.transport.hosts import run_on

        host = self.hosts[target.name]
        units = [i.unit for i in instances(host.name, host.config)]
        output = run_on(self.site, host, restart_script(units), timeout=300)
        if "__restarted__" not in output:
            raise DeployKitError(f"{target.name}: restarting vllm / lmcache-server failed",
                                 hint=f"systemctl status vllm lmcache-server on {target.name}")

    def objects(self) -> set[str]:
        from deploy_kit.cache.keys import listed_under
        from deploy_kit.cache.store import list_objects

        return {o.key for prefix in self.prefixes for o in list_objects(self.bucket, prefix)
                if o.modified >= self.since and listed_under(o.key, prefix)}

    def purge(self, keys: set[str]) -> int:
        from concurrent.futures import ThreadPoolExecutor

        from deploy_kit.transport.sigv4 import request

        b = self.bucket

        def delete(key: str) -> int:
            status, _ = request(b.address, b.port, "DELETE", object_path(key), b.host,
                                b.region, b.credentials)
            return 1 if status in (200, 204) else 0

        with ThreadPoolExecutor(max_workers=8) as pool:
            return sum(pool.map(delete, sorted(keys)))


def manifest(site: Site, hosts: list[Host]) -> dict[str, Any]:
    """vLLM's /version and what is installed on each host (LMCache, vLLM, torch, driver)."""
    from deploy_kit.verify.probes import serving_probe

    out: dict[str, Any] = {}
    for host, seen in zip(hosts, serving_probe.probe_all(site, hosts, []), strict=True):
        api = oa.served(host.address, host.config.vllm_port, api_key(host))
        out[host.name] = {"vllm_api_version": api.version, **seen.versions,
                          "accelerator": accelerator_of(host.config),
                          "lmcache_topology": getattr(host.config, "lmcache_topology",
                                                      "inprocess"),
                          "max_model_len": api.max_model_len}
    return out


def run_prefixes(host: Host, served: str) -> list[str]:
    """The key prefixes this run's objects have (either topology's layout names the model
    as served or by its path on the host)."""
    from deploy_kit.cache.keys import model_prefixes

    return list(dict.fromkeys(model_prefixes(served)
                              + model_prefixes(host.config.model_path_on_host)))


def plan_notice(site: Site) -> str:
    """What a run will do to a live site, said before it starts: which host's vLLM and LMCache
    server it restarts (the first serving host that answers, each repeat of each length) and
    which objects it deletes."""
    hosts = site.group("vllm")
    prefixes = list(dict.fromkeys(p for h in hosts
                                  for p in run_prefixes(h, h.config.served_model_name)))
    return (f"bench ttft restarts vllm and lmcache-server on the first of "
            f"{', '.join(h.name for h in hosts) or '-'} that answers, and deletes the objects "
            f"its own prompts add (keys {', '.join(prefixes) or '-'}…, newer than the run)")


def target(host: Host, seen: oa.Served) -> Target:
    return Target(host.name, host.address, host.config.vllm_port, model_name(host, seen),
                  api_key(host))


def run(site: Site, site_name: str, lengths: list[int] | None, repeats: int, out: Path,
        max_tokens: int = 16, allow_single_host: bool = False,
        log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    hosts = site.group("vllm")
    answering = []
    for host in hosts:
        seen = oa.served(host.address, host.config.vllm_port, api_key(host))
        if seen.health == 200 and seen.models:
            answering.append((host, seen))
    if not answering or (len(answering) < 2 and not allow_single_host):
        raise HostsUnreachable(
            f"bench ttft needs 2 serving hosts answering /health and /v1/models, "
            f"{len(answering)} of {len(hosts)} do "
            f"({', '.join(h.name for h, _ in answering) or 'none'})",
            hint="start vLLM (`deploykit up`), or --allow-single-host to skip the "
                 "other-host case")
    (host_a, seen_a), rest = answering[0], answering[1:]
    a = target(host_a, seen_a)
    b = target(*rest[0]) if rest else None
    limits = [s.max_model_len for _, s in answering[:2] if s.max_model_len]
    c = host_a.config
    chosen = lengths or default_lengths(c.vllm_accelerator, min(limits) if limits else None,
                                        max_tokens)
    if not chosen:
        raise DeployKitError("no context length fits the served max_model_len")
    token_ids = oa.token_range(c.vllm_accelerator)
    now = datetime.datetime.now(datetime.UTC)
    run_id = now.strftime("%Y%m%dT%H%M%SZ") + f"-{os.urandom(2).hex()}"
    by_name = {h.name: h for h, _ in answering}
    tier = SiteTier(site, by_name, run_prefixes(host_a, a.model), now)
    results, purged, notes = run_protocol(
        a, b, chosen, repeats, tier, max_tokens=max_tokens, token_ids=token_ids,
        run_id=run_id, ready_timeout=float(c.vllm_health_timeout), log=log)
    skipped = {} if b else {"remote_hit_other_host": "one serving host answers"}
    storage = storage_floor_input(site, out, log)
    if storage.get("error"):
        notes.append(f"no storage floor: GET throughput not measured ({storage['error']})")
    doc = ttft_report.document(
        site=site_name, run_id=run_id, started=now.isoformat(timespec="seconds"), model=a.model,
        hosts={"a": a.name, "b": b.name if b else None}, lengths=chosen, repeats=repeats,
        max_tokens=max_tokens, token_ids=token_ids,
        manifest=manifest(site, [h for h, _ in answering[:2]]), results=results, purged=purged,
        notes=notes, skipped_cases=skipped, storage=storage)
    return write(doc, out)


def storage_floor_input(site: Site, out: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """The GET throughput `bench storage` measures (awscrt, chunk-sized objects through the
    S3 name, from a serving host) in this same run, and the model's KV bytes per token: what
    each remote row's storage floor divides. A failed measurement is said, not guessed."""
    from deploy_kit.bench import storage as storage_bench
    from deploy_kit.plan.plan import build_plan

    plan = build_plan(site)
    if not plan.models:
        return {"error": "no serving model in the plan"}
    log("measuring GET throughput through the S3 name for the storage floor…")
    try:
        measured = storage_bench.run(site, [4], 8, out / "storage")
    except DeployKitError as exc:
        return {"error": str(exc)}
    gets = [r["gb_per_s"] for r in measured["results"]
            if r.get("op") == "GET" and r.get("client") == "awscrt"]
    if not gets:
        return {"error": "the awscrt GET step returned no figure"}
    return {"get_gb_per_s": max(gets), "object_bytes": measured["object_bytes"],
            "bytes_per_token": plan.models[0].bytes_per_token,
            "measured_from": measured["measured_from"]}


def write(doc: dict[str, Any], out: Path) -> dict[str, Any]:
    import json

    out.mkdir(parents=True, exist_ok=True)
    (out / "ttft.json").write_text(json.dumps(doc, indent=2) + "\n")
    ttft_report.plot(doc, out / "ttft.png")
    doc["files"] = [str(out / "ttft.json"), str(out / "ttft.png")]
    return doc
