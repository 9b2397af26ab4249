"""Cache-hit probe observations for the check tests: a healthy one and the ways it breaks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from deploy_kit.core.patterns import EXTERNAL_HITS, EXTERNAL_QUERIES, LOCAL_HITS, LOCAL_QUERIES
from deploy_kit.verify.model import (
    CacheProbe,
    RemoteRead,
    S3LogEvent,
)


def cache_probe(name: str) -> CacheProbe:
    """What the lab's loopback vLLM + LMCache server really answered (2 chunks + 5 tokens)."""
    return CacheProbe(host=name, address=f"10.9.1.{name[-1]}", serving=True,
                      prompt_tokens=517, expected_hit_tokens=512, first_ttft_s=0.41,
                      second_ttft_s=0.055, first_external=0, second_external=512,
                      second_local=0,
                      counters={EXTERNAL_HITS: 6654.0, EXTERNAL_QUERIES: 13322.0,
                                LOCAL_HITS: 0.0, LOCAL_QUERIES: 0.0})


def instance_pair(host: str = "gpu3") -> list[CacheProbe]:
    """A host running two vLLM instances: each one's prompt was a hit on the other."""
    pair = [cache_probe(f"{host}/{i}") for i in (0, 1)]
    for i, probe in enumerate(pair):
        probe.sibling, probe.sibling_external = f"{host}/{1 - i}", 512
    return pair


def _siblings_apart(o: Any) -> None:
    """The second instance reaches another LMCache server (or none): nothing is shared."""
    o.cache[-2].sibling_external = 0


def remote_ring() -> list[RemoteRead]:
    """gpu1 and gpu2 each read the prompt the other served (what the lab's pair answered)."""
    return [RemoteRead(writer=w, reader=r, prompt_tokens=517, expected_hit_tokens=512,
                       reader_external=512, reader_ttft_s=0.12, settle_s=5.0)
            for w, r in (("gpu1", "gpu2"), ("gpu2", "gpu1"))]


BREAKER = S3LogEvent("lmcache-server", "breaker", 1, "2026-12-05T08:01:01+0000",
                     "LMCache ERROR: S3L2Adapter disabled after 3 consecutive connection "
                     "failures")


def _breaker_on_gpu2(o: Any) -> None:
    """The lab's measured outage: lmcache-server on gpu2 tripped; DRAM still answers
    repeats there, every read across hosts misses."""
    o.serving[1].s3_log = [BREAKER]
    for r in o.remote:
        r.reader_external = 0


def _breaker_on_an_instance_host(o: Any) -> None:
    """The same outage where gpu2 runs several instances: the ring's ends are endpoints
    (gpu2/0), the breaker line is gpu2's own; the finding still names gpu2 and the breaker."""
    _breaker_on_gpu2(o)
    for r in o.remote:
        r.writer, r.reader = (f"{e}/0" if e == "gpu2" else e for e in (r.writer, r.reader))


def _reader_misses(o: Any) -> None:
    """gpu1 -> gpu2 misses while gpu2 -> gpu1 works: in a ring of two, either gpu1's writes
    or gpu2's reads (no third host, no breaker line to tell)."""
    o.remote[0].reader_external = 0


def _lost_upload(o: Any) -> None:
    o.serving[0].s3_log = [S3LogEvent("vllm", "store", 2, "2026-12-05T08:02:00+0000",
                                      "Failed to upload k@1 to S3: AWS_ERROR_S3_INVALID")]


def _degraded(o: Any) -> None:
    """In-process LMCacheConnectorV1 on CPU: the connector is asked, never hits."""
    o.cache[1].second_external = 0
    assert o.cache[1].counters is not None
    o.cache[1].counters[EXTERNAL_HITS] = 0.0


def _masked_other_misses(o: Any) -> None:
    o.cache[0].second_external, o.cache[0].second_local = 0, 512
    o.cache[0].other_host, o.cache[0].other_external = "gpu2", 0


def _no_connector(o: Any) -> None:
    assert o.cache[0].counters is not None
    o.cache[0].counters[EXTERNAL_QUERIES] = o.cache[0].counters[EXTERNAL_HITS] = 0.0


def _old_vllm(o: Any) -> None:
    o.cache[1].counters = {LOCAL_HITS: 0.0}


CACHE_CASES: list[tuple[str, Callable[[Any], None], str, str]] = [
    ("lmcache-s3-breaker", _breaker_on_gpu2, "gpu2",
     "lmcache-server at 2026-12-05T08:01:01+0000: \"LMCache ERROR: S3L2Adapter disabled"),
    ("lmcache-s3-breaker", _lost_upload, "gpu1", "2 lost upload(s) since vllm started"),
    ("lmcache-remote-tier", _breaker_on_gpu2, "gpu2",
     "gpu2's LMCache turned S3 off at 2026-12-05T08:01:01+0000"),
    ("lmcache-remote-tier", _breaker_on_an_instance_host, "gpu2",
     "gpu2's LMCache turned S3 off at 2026-12-05T08:01:01+0000"),
    ("lmcache-remote-tier", _reader_misses, "gpu1→gpu2",
     "gpu1's writes or gpu2's reads do not reach S3"),
    ("lmcache-remote-tier",
     lambda o: (setattr(o.remote[1], "error", "gpu2: HTTP 500"),
                setattr(o.remote[1], "failed_host", "gpu2")), "gpu2", "HTTP 500"),
    ("lmcache-cache-hit", _degraded, "gpu2", "got 0 tokens from LMCache (expected 512)"),
    ("lmcache-cache-hit", _masked_other_misses, "gpu1", "gpu2, which never saw the prompt"),
    ("lmcache-cache-hit", lambda o: setattr(o.cache[0], "error", "completion failed: HTTP 500"),
     "gpu1", "HTTP 500"),
    ("lmcache-instance-hit", _siblings_apart, "gpu3/0",
     "gpu3/1, which never saw the prompt gpu3/0 served, got 0 tokens"),
    ("lmcache-instance-hit",
     lambda o: setattr(o.cache[-1], "sibling_error", "HTTP 503"), "gpu3/1",
     "gpu3/0 did not answer the prompt gpu3/1 served: HTTP 503"),
    ("vllm-external-prefix-metrics", _degraded, "gpu2", "never hit"),
    ("vllm-external-prefix-metrics", _no_connector, "gpu1", "no LMCache connector loaded"),
    ("vllm-external-prefix-metrics", _old_vllm, "gpu2", "no vllm:external_prefix_cache_"),
    ("vllm-external-prefix-metrics", lambda o: setattr(o.cache[0], "counters", None), "gpu1",
     "does not answer"),
]
