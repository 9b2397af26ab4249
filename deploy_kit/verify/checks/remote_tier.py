"""The cross-host tier, proven and watched (pure): a prompt one host served is a hit on a
host that never saw it, and no serving process has LMCache's S3 breaker tripped.

LMCache turns S3 off for the life of the process after three connection errors in a row
(0.5.6: `s3_l2_adapter.py` in the server, `s3_connector.py` in process); DRAM still answers
repeats on the same host, so only a read on another host, or the journal, shows it."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.config.instances import host_of
from deploy_kit.verify.model import Finding, Observation, RemoteRead, S3LogEvent, Status, check

HEAL_HINT = ("`deploykit up` restarts a process whose breaker tripped (rolling, health-gated); "
             "a gateway or DNS outage trips it, so keep maintenance rolling")


def _breakers(obs: Observation) -> dict[str, S3LogEvent]:
    return {s.name: e for s in obs.serving for e in (s.s3_log or []) if e.kind == "breaker"}


def _suspect(r: RemoteRead, breakers: dict[str, S3LogEvent]) -> tuple[str, str]:
    """(target, why) for a pair whose reader got nothing: the journal's breaker first, then
    the third host that asked for the same prompt (rings of three or more)."""
    # the breaker is a host's (its LMCache server's journal), a pair's ends are endpoints
    # (`lab3/0` on a host of several instances)
    for end, role in ((r.writer, "stored nothing there"), (r.reader, "never reads there")):
        host = host_of(end)
        if host in breakers:
            e = breakers[host]
            return host, (f"{host}'s LMCache turned S3 off at {e.when} ({e.unit}), so it "
                          f"{role}; see lmcache-s3-breaker")
    if r.second_reader is not None and r.second_external:
        return r.reader, (f"{r.reader}'s reads do not reach S3 ({r.second_reader} got "
                          f"{r.second_external} tokens of the same prompt)")
    if r.second_reader is not None:
        return r.writer, (f"{r.writer}'s writes do not reach S3 ({r.second_reader} missed "
                          "the same prompt too)")
    return f"{r.writer}→{r.reader}", (f"{r.writer}'s writes or {r.reader}'s reads do not "
                                      "reach S3")


@check("lmcache-remote-tier", tags=("lmcache", "vllm", "s3"),
       summary="a prompt one serving host served is a hit on another that never saw it")
def remote_tier(obs: Observation) -> Iterator[Finding]:
    cid = "lmcache-remote-tier"
    breakers = _breakers(obs)
    for host, why in sorted(obs.remote_alone.items()):
        yield Finding(cid, Status.SKIP, host, f"skipped: {why}")
    for r in obs.remote:
        pair = f"{r.writer}→{r.reader}"
        if r.error is not None:
            yield Finding(cid, Status.FAIL, r.failed_host or pair,
                          f"cross-host probe {pair}: {r.error}", "see vllm-service")
        elif r.reader_external is None:
            yield Finding(cid, Status.FAIL, r.reader,
                          "vLLM's /metrics has no external prefix-cache counters: a remote "
                          "hit cannot be seen", "see vllm-external-prefix-metrics")
        elif r.reader_external > 0:
            ttft = f", TTFT {r.reader_ttft_s:.3f} s" if r.reader_ttft_s is not None else ""
            yield Finding(cid, Status.PASS, pair,
                          f"{r.reader} got {r.reader_external} of {r.expected_hit_tokens} "
                          f"tokens of a prompt only {r.writer} had served: from the remote "
                          f"tier{ttft}")
        else:
            target, why = _suspect(r, breakers)
            yield Finding(cid, Status.FAIL, target,
                          f"{r.reader} got 0 tokens of a {r.prompt_tokens}-token prompt "
                          f"{r.writer} had served {r.settle_s:.0f} s before: {why}",
                          HEAL_HINT if target in breakers else
                          "journalctl -u lmcache-server -u vllm on both hosts; see "
                          "lmcache-s3-settings, s3-credentials-valid, dns-client-resolution")


def _uses_s3(obs: Observation, host: str) -> bool:
    seen = next((s for s in obs.serving if s.name == host), None)
    remote = str((seen.lmcache_yaml or {}).get("remote_url", "")) if seen else ""
    return remote.startswith("s3://")


@check("lmcache-s3-breaker", tags=("lmcache", "vllm", "s3"),
       summary="no running LMCache has turned S3 off or lost uploads (its journal)")
def s3_breaker(obs: Observation) -> Iterator[Finding]:
    cid = "lmcache-s3-breaker"
    for s in obs.serving:
        if not s.reachable or s.s3_log is None or not _uses_s3(obs, s.name):
            continue
        kinds = {e.kind: e for e in s.s3_log}
        if (e := kinds.get("breaker")) is not None:
            yield Finding(cid, Status.FAIL, s.name,
                          f"{e.unit} at {e.when}: \"{e.text}\": this process skips S3 until "
                          "it restarts (no writes, no hits on other hosts' prefixes)",
                          HEAL_HINT)
        elif (e := kinds.get("store")) is not None:
            yield Finding(cid, Status.FAIL, s.name,
                          f"{e.count} lost upload(s) since {e.unit} started, the last at "
                          f"{e.when}: \"{e.text}\"",
                          "see s3-concentrator-reachable and s3-credentials-valid")
        elif (e := kinds.get("connection")) is not None:
            yield Finding(cid, Status.WARN, s.name,
                          f"{e.count} S3 connection error(s) since {e.unit} started, the "
                          f"last at {e.when}: \"{e.text}\"; three in a row turn S3 off",
                          "a gateway or DNS restart that was not rolling?")
        else:
            units = ", ".join(u for u in ("vllm", "lmcache-server") if u in s.units)
            yield Finding(cid, Status.PASS, s.name,
                          f"no S3 errors in the running {units or 'units'}' journal")
