"""`deploykit doctor "<symptom>"`: known failures of the cache tier mapped to the checks
that explain them (from the reference design's "known failures" and LMCache's sources)."""

from __future__ import annotations

import re

SYMPTOMS: list[tuple[str, str, tuple[str, ...]]] = [
    (r"401|403|unauthori[sz]ed|access ?denied|signaturedoesnotmatch|invalidaccesskeyid",
     "the S3 keys are wrong: RGW user keys, not the Ceph admin key; or the serving "
     "identity lacks the bucket policy's grants (rerun `deploykit up`)",
     ("s3-credentials-valid", "lmcache-s3-settings", "s3-serving-least-privilege")),
    (r"quota|quotaexceeded|bucket.*full",
     "the cache bucket is at (or near) its quota: every model's stores fail until lifecycle "
     "expiry; `deploykit cache stats` shows which model's bytes are far above its plan",
     ("s3-roundtrip", "s3-serving-model-isolation")),
    (r"local proxy failed|connection refused|socket|unreachable|timed? ?out|dns",
     "the endpoint is unreachable: concentrator down, too few DNS records, or resolver",
     ("s3-concentrator-reachable", "dns-answer-count", "dns-client-resolution",
      "dns-resolver-points-at-coredns", "lmcache-remote-url", "lmcache-memory")),
    (r"(gateway|rgw|radosgw).*(down|dead|failed|missing)|fewer gateways",
     "a radosgw daemon behind a concentrator is down: HAProxy sends its share elsewhere",
     ("ceph-rgw-daemons", "s3-concentrator-reachable", "dns-answer-count")),
    (r"reading choices|connector.*not found|no module named|kv_connector|unexpected keyword",
     "vLLM and LMCache disagree: versions mismatched or connector name misspelt",
     ("vllm-connector-name", "lmcache-keys-known", "versions-manifest")),
    (r"(hits?|cache).*(stopped|gone|dropped).*(maintenance|restart|outage|upgrade)|"
     r"after (maintenance|an? outage|a restart)|zero hits on other hosts|other hosts?.*(miss|"
     r"no hits?|zero)|cross-host|circuit|breaker|disabled after|connection disabled",
     "LMCache turned S3 off after a gateway or DNS outage (its breaker never resets), or "
     "one host's writes or reads do not reach S3; `deploykit up` restarts a tripped process",
     ("lmcache-s3-breaker", "lmcache-remote-tier", "s3-concentrator-reachable",
      "dns-answer-count")),
    (r"hit rate|no hits?|zero hits|cache miss|misses",
     "keys differ between hosts: seed, model string, TP, dtype or chunk size",
     ("lmcache-fleet-consistent", "lmcache-remote-tier", "lmcache-chunk-aligned",
      "lmcache-s3-settings", "s3-credentials-valid", "lmcache-cache-hit",
      "vllm-external-prefix-metrics")),
    (r"degraded mode|recompute|no supported cpu connector|failed to create (remote )?backend",
     "LMCache runs without a working connector or tier and recomputes every prefix",
     ("lmcache-degraded", "lmcache-cache-hit", "vllm-external-prefix-metrics",
      "vllm-connector-name")),
    (r"slow|extension not found|cuda_ops|c_ops|undefined symbol",
     "LMCache copies KV on its pure-torch fallback (its compiled extension did not load "
     "under this torch), or runs degraded",
     ("lmcache-degraded", "versions-manifest")),
    (r"ttft.*(high|slow|worse)|slower with remote|bandwidth",
     "remote reads are slow: one DNS record (one gateway) or a polluted benchmark",
     ("dns-answer-count", "s3-concentrator-reachable", "s3-roundtrip")),
    (r"bus error|/dev/shm|no space left|shm",
     "shared memory is short: /dev/shm smaller than LMCache's files or the CPU KV cache, "
     "or leaked lmcache_kv segments",
     ("dev-shm-capacity", "lmcache-memory")),
    (r"not running|inactive|failed with result|503|health",
     "vLLM or the LMCache server is not running where it should",
     ("vllm-service", "lmcache-server-service", "accelerator-count", "versions-manifest")),
    (r"instance|same host|sibling|other gpus?|cuda out of memory|out of memory",
     "one of a host's vLLM instances misses what another computed, or has no devices of its "
     "own: the instances must share the host's LMCache server and own their device sets",
     ("lmcache-instance-hit", "accelerator-count", "vllm-service", "lmcache-server-service")),
    (r"certificate|x509|tls|ssl|handshake|unknown ca|self[- ]signed|hostname mismatch",
     "TLS: the concentrator's certificate is not trusted, names the wrong host or expired, "
     "or one side speaks plain HTTP (deploykit_s3_tls, disable_tls)",
     ("s3-tls-certificate", "lmcache-s3-settings", "s3-concentrator-reachable")),
    (r"ceph.*(slow|latency|degraded|recover|backfill|pg|unavailable|inactive)",
     "Ceph itself is slow or recovering (slow ops, a slow OSD, degraded or inactive PGs): "
     "RGW requests wait on it; check the pools and the gateways, then `ceph health detail`",
     ("ceph-pools", "ceph-rgw-daemons", "s3-roundtrip")),
    (r"router|routing|not sticky|lands? (on|at) (a |an )?(different|other|another) "
     r"instance|llm\.",
     "the routers: the name answers a router that cannot serve, a router's front passes its "
     "admin paths or unkeyed requests, or a router sends a repeated prompt to another "
     "instance than the one that holds it",
     ("router-dns", "router-health", "routing-sticky", "vllm-service")),
    (r"\bteams?\b|tenant|another team|other team|cross-team",
     "teams share the tier: a team's identity reaches another team's bucket (its bucket "
     "policy, or a host holding another team's keys), or a team's clients get no hits",
     ("team-isolation", "team-cache-hit", "s3-credentials-valid")),
    (r"over quota|evict|isolatedlru|cache_salt|\bsalt\b|/quota|limit_gb",
     "a team's LMCache quota: the server evicts a cache_salt over its quota, and every salt "
     "without one (requests without the team's cache_salt, or a start whose quota PUT "
     "failed: journalctl -u lmcache-server)",
     ("team-cache-hit", "lmcache-server-service", "lmcache-cache-hit")),
    (r"encrypt|plaintext|\baes\b|gcm|at rest|serde",
     "LMCache's L2 encryption: the stored chunks are not AES-GCM frames (the server runs "
     "without the `serde` adapter setting, or they predate it)",
     ("encryption", "lmcache-server-service")),
    (r"s3_region|region",
     "LMCache's S3 connector needs s3_region or it turns the remote tier off silently",
     ("lmcache-s3-settings",)),
]


def diagnose(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """Explanations and the check ids to run, most specific first; empty when unknown."""
    lowered = text.lower()
    return [(why, checks) for pattern, why, checks in SYMPTOMS if re.search(pattern, lowered)]
