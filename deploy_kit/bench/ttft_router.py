"""`deploykit bench ttft --via-router`: what the router costs and what it saves, per context
length, in one run.

For each length L and repeat, with two fresh prompts P and Q of exactly L token ids:
  router_cold           P through one router (its address, the routers' name as Host); the
                        serving front that answered names its instance (X-Deploykit-Instance)
  router_repeat         P through the same router again: which instance answered, and whether
                        it is the cold request's (each router keeps its own prefix tree, so
                        every request of a run goes to the one router)
  direct_cold           Q straight to the instance that answered the router's repeat
  direct_repeat         Q to that instance again: the same kind of hit without the router
  direct_random_repeat  P straight to an instance picked at random: what a repeat gets
                        without a router (the instance holding P with probability 1/N)
router_repeat / direct_repeat (one instance, the same kind of hit) is the router's own cost
(its tokenize fan-out and the extra hop); the lab's acceptance is at most 1.5.

Nothing is restarted and nothing deleted: the prompts' chunks stay in the bucket until its
lifecycle rule expires them. Hit tokens are vLLM's counter deltas on the instance that
answered (every instance is read before a request through the router, since which one will
answer is known only afterwards); on a busy site they include other requests.
"""

from __future__ import annotations

import datetime
import os
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from deploy_kit.bench import ttft, ttft_report
from deploy_kit.bench.ttft import Target
from deploy_kit.config import names
from deploy_kit.config.instances import endpoints, host_of
from deploy_kit.config.site import Host, Site
from deploy_kit.core.errors import HostsUnreachable
from deploy_kit.render.serving_front import instance_tag
from deploy_kit.transport import openai as oa
from deploy_kit.transport.openai import api_key


def _counters(instances: dict[str, Target], tags: list[str]
              ) -> dict[str, dict[str, float] | None]:
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(tags)))) as pool:
        found = pool.map(lambda t: oa.metrics(instances[t].address, instances[t].port,
                                              instances[t].api_key), tags)
        return dict(zip(tags, found, strict=True))


def measure(sent_to: Target, instances: dict[str, Target], ids: list[int],
            max_tokens: int) -> dict[str, Any]:
    """One streamed completion, to a router (host_header set) or an instance; the instance
    that answered and its hit tokens."""
    via_router = sent_to.host_header is not None
    tags = sorted(instances) if via_router else [instance_tag(sent_to.name)]
    before = _counters(instances, [t for t in tags if t in instances])
    timed = oa.stream_completion(sent_to.address, sent_to.port, sent_to.model, ids,
                                 max_tokens, sent_to.api_key, host_header=sent_to.host_header)
    # a direct request's instance is known without the header
    tag = timed.instance or (None if via_router else instance_tag(sent_to.name))
    answered = instances.get(tag or "")
    hits = oa.delta(before.get(tag or ""), oa.metrics(answered.address, answered.port,
                                                      answered.api_key)) \
        if answered is not None else None
    name = answered.name if answered else \
        (f"unknown instance {tag}" if tag else "no instance named")
    return {"host": name, "instance": tag, "via": "router" if via_router else "direct",
            "ttft_s": timed.ttft_s, "tpot_s": timed.tpot_s, "total_s": timed.total_s,
            "prompt_tokens": timed.prompt_tokens, "completion_tokens": timed.completion_tokens,
            "hit_tokens": hits.external if hits else None,
            "local_hit_tokens": hits.local if hits else None, "error": timed.error}


def ratio(router_repeat: dict[str, Any], direct_repeat: dict[str, Any]) -> float | None:
    """Router repeat TTFT / direct repeat TTFT, where both went to the same instance."""
    if router_repeat["instance"] is None or \
            router_repeat["instance"] != direct_repeat["instance"]:
        return None
    a, b = router_repeat["ttft_s"], direct_repeat["ttft_s"]
    return a / b if a is not None and b else None


def run_protocol(router: Target, instances: dict[str, Target], lengths: list[int],
                 repeats: int, *, max_tokens: int, token_ids: tuple[int, int], run_id: str,
                 pick: Callable[[list[str]], str],
                 log: Callable[[str], None] = lambda _: None
                 ) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows and notes. `instances`: instance tag -> the instance as a target; `pick`
    chooses the random instance from their sorted tags."""
    results: list[dict[str, Any]] = []
    notes: list[str] = []
    for length in lengths:
        for rep in range(repeats):
            def row(case: str, target: Target, prompt: list[int], length: int = length,
                    rep: int = rep) -> dict[str, Any]:
                log(f"{length:>7} tokens, repeat {rep + 1}/{repeats}: {case} via {target.name}")
                measured = {"context_tokens": length, "case": case, "repeat": rep,
                            **measure(target, instances, prompt, max_tokens)}
                results.append(measured)
                return measured

            p = oa.prompt_ids(length, f"{run_id}-{length}-{rep}-router", token_ids)
            q = oa.prompt_ids(length, f"{run_id}-{length}-{rep}-direct", token_ids)
            cold = row("router_cold", router, p)
            repeat = row("router_repeat", router, p)
            repeat["same_instance"] = None if cold["instance"] is None else \
                cold["instance"] == repeat["instance"]
            there = instances.get(repeat["instance"] or "")
            if there is None:
                there = instances[pick(sorted(instances))]
                notes.append(f"{length} tokens, repeat {rep}: the router's repeat named no "
                             f"instance of the site; direct rows went to {there.name}")
            row("direct_cold", there, q)
            direct = row("direct_repeat", there, q)
            repeat["vs_direct_repeat"] = ratio(repeat, direct)
            anyone = row("direct_random_repeat", instances[pick(sorted(instances))], p)
            anyone["holder"] = anyone["instance"] in {cold["instance"], repeat["instance"]}
    if any(r["via"] == "direct" and (r["error"] or "").startswith("HTTP 403")
           for r in results):
        notes.append("an instance refused a direct request (403): where the site has "
                     "routers, add this controller to vllm_direct_sources")
    return results, notes


def router_target(site: Site, model: str) -> Target:
    """The first router whose front answers /health 200, addressed by its address with the
    routers' name as Host."""
    routers = site.group("router")
    for host in routers:
        c = host.config
        status, _ = oa.get(host.address, c.router_port, "/health")
        if status == 200:
            return Target(host.name, host.address, c.router_port, model, api_key(host),
                          host_header=names.router_fqdn(c))
    raise HostsUnreachable(
        f"bench ttft --via-router needs a router whose front answers /health 200; none of "
        f"{', '.join(h.name for h in routers)} does",
        hint="`deploykit verify --check router-health` says why")


def instance_targets(hosts: list[Host]) -> tuple[dict[str, Target], list[oa.Served]]:
    """Every instance that answers /health and /v1/models, by its tag."""
    found: dict[str, Target] = {}
    seen: list[oa.Served] = []
    for host in hosts:
        for e in endpoints(host):
            served = oa.served(e.address, e.config.vllm_port, api_key(e))
            if served.health == 200 and served.models:
                found[instance_tag(e.name)] = ttft.target(e, served)
                seen.append(served)
    return found, seen


def run(site: Site, site_name: str, lengths: list[int] | None, repeats: int, out: Path,
        max_tokens: int = 16, log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    hosts = site.group("vllm")
    instances, seen = instance_targets(hosts)
    if not instances:
        raise HostsUnreachable("bench ttft --via-router needs a serving instance answering "
                               "/health and /v1/models directly; none does",
                               hint="start vLLM (`deploykit up`); where the site has routers, "
                                    "this controller must be in vllm_direct_sources")
    first = next(iter(instances.values()))
    router = router_target(site, first.model)
    c = hosts[0].config
    limits = [s.max_model_len for s in seen if s.max_model_len]
    chosen = lengths or ttft.default_lengths(c.vllm_accelerator,
                                             min(limits) if limits else None, max_tokens)
    token_ids = oa.token_range(c.vllm_accelerator)
    now = datetime.datetime.now(datetime.UTC)
    run_id = now.strftime("%Y%m%dT%H%M%SZ") + f"-{os.urandom(2).hex()}"
    rng = random.Random(run_id)
    results, notes = run_protocol(router, instances, chosen, repeats, max_tokens=max_tokens,
                                  token_ids=token_ids, run_id=run_id, pick=rng.choice, log=log)
    answered = {host_of(r["host"]) for r in results if r["instance"] in instances}
    doc = ttft_report.router_document(
        site=site_name, run_id=run_id, started=now.isoformat(timespec="seconds"),
        model=first.model, router={"router": router.name, "name": router.host_header or ""},
        instances=sorted(t.name for t in instances.values()), lengths=chosen, repeats=repeats,
        max_tokens=max_tokens, token_ids=token_ids,
        manifest=ttft.manifest(site, [h for h in hosts if h.name in answered]),
        results=results, notes=notes)
    return ttft.write(doc, out)
