"""Does the cross-host tier work? Serving hosts that share a model and its KV settings form
a ring: each host serves a fresh prompt, and after a settle time (LMCache writes S3 after
the request) the next host in the ring, which never saw that prompt, asks for it. Its DRAM
cannot answer and neither can vLLM's own prefix cache: only the remote tier can. Each host
writes once and reads once, so a host whose S3 is broken fails both of its pairs (the
check tells writers from readers with that, and with the journal's breaker lines).

Writes run side by side, then reads: each host serves one request per phase, so vLLM's
counter deltas are that request's own. On a host with several vLLM instances the first one
writes and the last one reads, so both ends of a pair are on different hosts (the instances
of one host share its LMCache server, which would answer without the remote tier). Each
pair leaves two chunks in the bucket (its lifecycle rule expires them).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor

from deploy_kit.config.instances import endpoints
from deploy_kit.config.site import Host
from deploy_kit.plan.serving import accelerator_of
from deploy_kit.transport import openai as oa
from deploy_kit.verify.model import RemoteRead
from deploy_kit.verify.probes.cache_probe import (
    EXTRA_TOKENS,
    hit_tokens,
    request_with_hits,
    salt,
)

SETTLE_S = 5.0  # LMCache stores a finished request's chunks in S3 in the background
REMOTE_MODES = ("s3", "nixl")  # the lmcache_mode values with a tier other hosts read


def tier_key(host: Host) -> Hashable:
    """What must match for one host to read another's chunks: the object name's model and
    ranks, the token hashing (seed), the chunking and the KV layout, and the topology (the
    in-process connector and the LMCache server name objects differently), the bucket (a
    sharing group shares nothing with another) and the team's cache_salt (in every key)."""
    c = host.config
    return (c.cache_bucket, salt(host), c.lmcache_topology, c.lmcache_mode, c.model_path_on_host,
            c.vllm_tensor_parallel_size, c.vllm_pipeline_parallel_size, c.vllm_kv_cache_dtype,
            c.lmcache_chunk_size, c.vllm_python_hash_seed, accelerator_of(c))


def ring(hosts: list[Host]) -> tuple[list[tuple[Host, Host, Host | None]], dict[str, str]]:
    """(writer, reader, third) per host, a ring per group of hosts that share their KV keys
    (third: the host after the reader, asked only when the reader misses; None in a ring of
    two); hosts alone in their group, with why."""
    groups: dict[Hashable, list[Host]] = defaultdict(list)
    alone: dict[str, str] = {}
    for host in hosts:
        if host.config.lmcache_mode not in REMOTE_MODES:  # dram/disk: nothing is shared
            alone[host.name] = (f"lmcache_mode {host.config.lmcache_mode}: no remote tier "
                                "to prove")
            continue
        groups[tier_key(host)].append(host)
    pairs: list[tuple[Host, Host, Host | None]] = []
    for members in groups.values():
        if len(members) < 2:
            alone[members[0].name] = ("no other serving host shares its model and KV "
                                      "settings: nothing to read its chunks back")
            continue
        n = len(members)
        pairs += [(w, members[(i + 1) % n], members[(i + 2) % n] if n > 2 else None)
                  for i, w in enumerate(members)]
    return pairs, alone


def probe(hosts: list[Host], models: dict[str, str], run_id: str,
          settle_s: float = SETTLE_S, workers: int = 8) -> tuple[list[RemoteRead], dict[str, str]]:
    """`hosts`: the serving hosts that answer; `models`: each endpoint's served model name
    (by instance name)."""
    host_pairs, alone = ring(hosts)
    if not host_pairs:
        return [], alone
    pairs = [(endpoints(w)[0], endpoints(r)[-1], endpoints(t)[-1] if t is not None else None)
             for w, r, t in host_pairs]
    reads: list[RemoteRead] = []
    prompts: list[list[int]] = []
    for writer, reader, third in pairs:
        hits = hit_tokens(writer, reader, *([third] if third is not None else []))
        reads.append(RemoteRead(writer=writer.name, reader=reader.name,
                                prompt_tokens=hits + EXTRA_TOKENS,
                                expected_hit_tokens=hits, settle_s=settle_s))
        prompts.append(oa.prompt_ids(hits + EXTRA_TOKENS,
                                     f"verify-remote-{run_id}-{writer.name}",
                                     oa.token_range(writer.config.vllm_accelerator)))

    def write(i: int) -> None:
        writer = pairs[i][0]
        try:
            timed, _ = request_with_hits(writer, models[writer.name], prompts[i])
            error = timed.error
        except Exception as exc:  # a host that stops answering is a finding
            error = f"{type(exc).__name__}: {exc}"
        if error:
            reads[i].error, reads[i].failed_host = f"{writer.name}: {error}", writer.name

    def read(i: int) -> None:
        reader = pairs[i][1]
        try:
            timed, hits = request_with_hits(reader, models[reader.name], prompts[i])
        except Exception as exc:
            reads[i].error = f"{reader.name}: {type(exc).__name__}: {exc}"
            reads[i].failed_host = reader.name
            return
        if timed.error:
            reads[i].error, reads[i].failed_host = f"{reader.name}: {timed.error}", reader.name
            return
        reads[i].reader_ttft_s = timed.ttft_s
        reads[i].reader_external = hits.external if hits is not None else None

    def second_read(i: int) -> None:
        third = pairs[i][2]
        assert third is not None
        try:
            timed, hits = request_with_hits(third, models[third.name], prompts[i])
        except Exception:  # a third host that fails decides nothing
            return
        if timed.error is None and hits is not None:
            reads[i].second_reader, reads[i].second_external = third.name, hits.external

    with ThreadPoolExecutor(max_workers=min(workers, len(pairs))) as pool:
        list(pool.map(write, range(len(pairs))))
        time.sleep(settle_s)
        list(pool.map(read, [i for i, r in enumerate(reads) if r.error is None]))
    # one at a time: a third host may be another pair's reader too
    for i, r in enumerate(reads):
        if r.error is None and r.reader_external == 0 and pairs[i][2] is not None:
            second_read(i)
    return reads, alone
