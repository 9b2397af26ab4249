"""LMCache serves hits for real: a repeated prompt comes back from the connector, and vLLM's
counters show the connector both asked and answered (pure: judges the cache probe)."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.core.patterns import EXTERNAL_HITS, EXTERNAL_QUERIES, LOCAL_HITS, LOCAL_QUERIES
from deploy_kit.verify.model import (
    CacheProbe,
    Finding,
    Observation,
    Status,
    check,
)

NO_HIT_HINT = ("LMCache in degraded mode (journalctl -u vllm: 'No supported cpu connector', "
               "'recompute'), the LMCache server down or restarted with another seed, "
               "PYTHONHASHSEED differing between processes, or chunk_size not a multiple of "
               "the block size")


def _ttft(probe: CacheProbe) -> str:
    if probe.first_ttft_s is None or probe.second_ttft_s is None:
        return ""
    return f"; TTFT {probe.first_ttft_s:.3f} s → {probe.second_ttft_s:.3f} s"


@check("lmcache-cache-hit", tags=("lmcache", "vllm"),
       summary="the same fresh prompt sent twice: the repeat gets its chunks from LMCache")
def cache_hit(obs: Observation) -> Iterator[Finding]:
    cid = "lmcache-cache-hit"
    for p in obs.cache:
        if not p.serving:
            yield Finding(cid, Status.SKIP, p.host,
                          f"skipped: vLLM not serving ({p.error}); see vllm-service")
        elif p.error:
            yield Finding(cid, Status.FAIL, p.host, f"cache probe: {p.error}",
                          "journalctl -u vllm on the host")
        elif p.second_external is None:
            yield Finding(cid, Status.FAIL, p.host,
                          "vLLM's /metrics has no external prefix-cache counters: "
                          "hits cannot be seen", "see vllm-external-prefix-metrics")
        elif p.second_external > 0:
            yield Finding(cid, Status.PASS, p.host,
                          f"repeat of a {p.prompt_tokens}-token prompt: {p.second_external} "
                          f"tokens from LMCache (full chunks: {p.expected_hit_tokens})"
                          + _ttft(p))
        elif p.other_host is not None and (p.other_external or 0) > 0:
            yield Finding(cid, Status.PASS, p.host,
                          f"vLLM's own prefix cache answered the repeat ({p.second_local} "
                          f"tokens); {p.other_host}, which never saw the prompt, got "
                          f"{p.other_external} tokens from the shared tier")
        elif p.other_host is not None:
            yield Finding(cid, Status.FAIL, p.host,
                          f"vLLM's own prefix cache answered the repeat; {p.other_host}, "
                          "which never saw the prompt, got 0 tokens from LMCache",
                          NO_HIT_HINT)
        elif p.second_local:
            yield Finding(cid, Status.WARN, p.host,
                          f"vLLM's own prefix cache answered the repeat ({p.second_local} "
                          "tokens) and no other serving host answers: LMCache not exercised",
                          "add a serving host, or run one with --no-enable-prefix-caching")
        else:
            yield Finding(cid, Status.FAIL, p.host,
                          f"the repeat of a {p.prompt_tokens}-token prompt got 0 tokens "
                          f"from LMCache (expected {p.expected_hit_tokens})" + _ttft(p),
                          NO_HIT_HINT)


@check("vllm-external-prefix-metrics", tags=("vllm", "lmcache"),
       summary="vLLM's counters: the KV connector is queried and has served hits")
def external_metrics(obs: Observation) -> Iterator[Finding]:
    cid = "vllm-external-prefix-metrics"
    for p in obs.cache:
        if not p.serving:
            continue
        counters = p.counters
        if counters is None:
            yield Finding(cid, Status.FAIL, p.host, "vLLM's /metrics does not answer",
                          "curl http://HOST:PORT/metrics")
            continue
        if EXTERNAL_HITS not in counters or EXTERNAL_QUERIES not in counters:
            yield Finding(cid, Status.FAIL, p.host,
                          "no vllm:external_prefix_cache_* counters: no KV connector metrics",
                          "a vLLM without connector stats; check --kv-transfer-config")
            continue
        hits, queries = int(counters[EXTERNAL_HITS]), int(counters[EXTERNAL_QUERIES])
        local = (f"; vLLM's own cache {int(counters.get(LOCAL_HITS, 0)):,} of "
                 f"{int(counters.get(LOCAL_QUERIES, 0)):,}")
        if queries == 0:
            yield Finding(cid, Status.FAIL, p.host,
                          "the KV connector was never queried (0 tokens, after the probe's "
                          "requests): no LMCache connector loaded",
                          "check --kv-transfer-config (kv_connector) in the vLLM unit")
        elif hits == 0:
            yield Finding(cid, Status.FAIL, p.host,
                          f"the KV connector was queried for {queries:,} tokens and never "
                          "hit", NO_HIT_HINT)
        else:
            yield Finding(cid, Status.PASS, p.host,
                          f"external prefix cache {hits:,} of {queries:,} queried tokens "
                          f"({100 * hits / queries:.0f}%)" + local)


@check("lmcache-instance-hit", tags=("lmcache", "vllm"),
       summary="on a host with several vLLM instances, a prompt one served is a hit on another")
def instance_hit(obs: Observation) -> Iterator[Finding]:
    cid = "lmcache-instance-hit"
    if obs.cache and not any(p.sibling for p in obs.cache):
        # not skipped for want of data: no host runs two instances, say so
        yield Finding(cid, Status.INFO, "site", "every serving host runs one vLLM instance: "
                      "no sibling to share a host's cache with")
    for p in obs.cache:
        if p.sibling is None or not p.serving or p.error:
            continue  # one instance on the host, or lmcache-cache-hit already names why
        if p.sibling_error or p.sibling_external is None:
            yield Finding(cid, Status.FAIL, p.host,
                          f"{p.sibling} did not answer the prompt {p.host} served: "
                          f"{p.sibling_error or 'no external prefix-cache counters'}",
                          "see vllm-service for that instance")
        elif p.sibling_external > 0:
            yield Finding(cid, Status.PASS, p.host,
                          f"{p.sibling}, which never saw the prompt, got {p.sibling_external} "
                          f"tokens from the tier both share (full chunks: "
                          f"{p.expected_hit_tokens})")
        else:
            yield Finding(cid, Status.FAIL, p.host,
                          f"{p.sibling}, which never saw the prompt {p.host} served, got 0 "
                          "tokens from LMCache: the instances do not share their cache",
                          "both instances must reach the host's LMCache server (lmcache.mp.port "
                          "in --kv-transfer-config) with one PYTHONHASHSEED; " + NO_HIT_HINT)
