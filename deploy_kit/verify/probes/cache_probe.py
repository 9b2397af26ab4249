"""Does LMCache really serve hits? Each serving host gets one fresh prompt (two full LMCache
chunks and a few tokens) twice; vLLM's counters around each request say how many prompt
tokens came from the connector. Hosts are probed one after another so the deltas of one
do not include another's probe (other clients' traffic can only add to them).

Where vLLM's own prefix cache is on, the repeat is answered from it and the connector is
not asked; the prompt then goes to another serving host, which never saw it, so only the
shared tier can supply its chunks. Each probe leaves two chunks in the bucket (its
lifecycle rule expires them).

A host that runs several vLLM instances is probed per instance, and the prompt one instance
served then goes to its sibling on the same host, which never saw it either: only what the
instances share (the host's LMCache server, or the remote tier) can answer it there.
"""

from __future__ import annotations

import os
import time

from deploy_kit.config.instances import endpoints
from deploy_kit.config.site import Host
from deploy_kit.plan.breakeven import min_retrieve_tokens
from deploy_kit.transport import openai as oa
from deploy_kit.transport.openai import api_key, model_name
from deploy_kit.verify.model import CacheProbe

EXTRA_TOKENS = 5  # past the last full chunk: a prompt that is not a multiple of the chunk


def hit_tokens(*hosts: Host) -> int:
    """The full-chunk prefix a probe prompt carries: two chunks, or as many as LMCache's
    min_retrieve_tokens on any of these hosts asks for (LMCache reports no external hit
    below it: lmcache 0.5.6 vllm_v1_adapter.py:1460-1461,1527), within vLLM's context."""
    chunk = int(hosts[0].config.lmcache_chunk_size)
    floor = max((min_retrieve_tokens(h.config, h.geometry) or 0) for h in hosts)
    chunks = max(2, -(-floor // chunk))
    limits = [h.config.vllm_max_model_len for h in hosts if h.config.vllm_max_model_len]
    if limits:
        chunks = max(2, min(chunks, (min(limits) - EXTRA_TOKENS - 2) // chunk))
    return chunks * chunk
SETTLE_S = 1.0  # LMCache stores a request's chunks when it finishes


def salt(host: Host) -> str | None:
    """The cache_salt the host's team's clients send (None: no team)."""
    team = host.config.team
    return team.salt if team is not None else None


def same_tier(host: Host, other: Host) -> bool:
    """`other` reads what `host` stored: one bucket (sharing group) and one salt."""
    return other.config.cache_bucket == host.config.cache_bucket and salt(other) == salt(host)


def request_with_hits(host: Host, model: str, ids: list[int]
                      ) -> tuple[oa.Timing, oa.Hits | None]:
    """One streamed completion, as the host's team's clients send it, and the prefix-cache
    hits vLLM's counters moved by."""
    port = host.config.vllm_port
    before = oa.metrics(host.address, port, api_key(host))
    timed = oa.stream_completion(host.address, port, model, ids, 2, api_key(host),
                                 timeout=600, cache_salt=salt(host))
    after = oa.metrics(host.address, port, api_key(host))
    return timed, oa.delta(before, after)


def probe_host(host: Host, run_id: str, others: list[Host],
               sibling: Host | None = None) -> CacheProbe:
    c = host.config
    port = c.vllm_port
    team = host.config.team
    result = CacheProbe(host=host.name, address=host.address,
                        team=team.name if team is not None else None)
    seen = oa.served(host.address, port, api_key(host))
    result.serving = seen.health == 200 and bool(seen.models)
    if not result.serving:
        result.error = f"/health {seen.health}, /v1/models {'ok' if seen.models else 'none'}"
        return result
    prefix = hit_tokens(host, *others, *([sibling] if sibling else []))
    result.prompt_tokens = prefix + EXTRA_TOKENS
    result.expected_hit_tokens = prefix
    ids = oa.prompt_ids(result.prompt_tokens, f"verify-{run_id}-{host.name}",
                        oa.token_range(c.vllm_accelerator))
    model = model_name(host, seen)
    result.model = model
    first, hits1 = request_with_hits(host, model, ids)
    time.sleep(SETTLE_S)
    second, hits2 = request_with_hits(host, model, ids)
    result.first_ttft_s, result.second_ttft_s = first.ttft_s, second.ttft_s
    result.counters = oa.metrics(host.address, port, api_key(host))
    if first.error or second.error:
        result.error = f"completion failed: {first.error or second.error}"
        return result
    if hits1 is not None and hits2 is not None:
        result.first_external, result.second_external = hits1.external, hits2.external
        result.second_local = hits2.local
    if sibling is not None:
        # the sibling serves what this instance serves (one host's model, staged once): the
        # name this one answered, not the inventory's (a staged directory is served by its
        # own name)
        timed, hits = request_with_hits(sibling, model, ids)
        result.sibling = sibling.name
        result.sibling_external = hits.external if timed.error is None and hits else None
        result.sibling_error = timed.error
    if hits2 is not None and hits2.external == 0 and hits2.local > 0:
        for other in others:
            if other.name == host.name or not same_tier(host, other):
                continue  # another bucket or salt: its miss would say nothing
            timed, hits = request_with_hits(other, model_name(other), ids)
            if timed.error is None and hits is not None:
                result.other_host, result.other_external = other.name, hits.external
                break
    return result


def probe(hosts: list[Host]) -> list[CacheProbe]:
    """Every instance of every host, one after another; each instance's prompt then goes to
    the next instance of its host (the last one's to the first)."""
    run_id = f"{int(time.time())}-{os.urandom(3).hex()}"
    per_host = [endpoints(h) for h in hosts]
    everyone = [e for group in per_host for e in group]
    out: list[CacheProbe] = []
    for group in per_host:
        for i, endpoint in enumerate(group):
            sibling = group[(i + 1) % len(group)] if len(group) > 1 else None
            try:
                out.append(probe_host(endpoint, run_id, everyone, sibling))
            except Exception as exc:  # an unreachable host is a finding, not a crash
                out.append(CacheProbe(host=endpoint.name, address=endpoint.address,
                                      error=f"{type(exc).__name__}: {exc}"))
    return out
