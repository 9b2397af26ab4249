"""Words deploykit reads in other programs' output, shared by whoever writes a probe, a check,
an alert or a watch list for them, so that all of them match the same thing."""

from __future__ import annotations

# The breaker's line, whole, as LMCache's own logger writes it: a restart trigger, so words a
# client controls (a prompt echoed by vLLM's request logging) must never match it. Both calls
# are `logger.error(...)` on `init_logger(__name__)` (LMCache/LMCache lmcache/logging.py:
# build_format, "{color}[%(asctime)s] LMCache %(levelname)s:{reset} %(message)s
# {underline}(%(filename)s:%(lineno)d:%(name)s){reset}"):
#   lmcache/v1/storage_backend/connector/s3_connector.py (in process):
#     "S3 connection disabled after %s consecutive failures. All future S3 operations will be
#     skipped."
#   lmcache/v1/distributed/l2_adapters/s3_l2_adapter.py (server):
#     "S3L2Adapter disabled after %d consecutive connection failures"
# So the line starts with LMCache's prefix (after the color code, or after journalctl's
# `time host ident[pid]: ` in short output) and ends with its logger's (file:line:name); a
# request log starts with vLLM's own prefix, and repr() keeps a prompt's newlines escaped.
# POSIX ERE (awk reads it too): no intervals, no \x escapes; [^ ]* takes the color codes.
BREAKER = (
    r"^([^ ]+ [^ ]+ [^ ]+: )?[^ ]*\[[0-9-]+ [0-9:,]+\] LMCache ERROR:[^ ]* "
    r"(S3 connection disabled after [0-9]+ consecutive failures\. All future S3 operations "
    r"will be skipped\.|S3L2Adapter disabled after [0-9]+ consecutive connection failures) "
    r"[^ ]*\((s3_connector\.py:[0-9]+:lmcache\.v1\.storage_backend\.connector\.s3_connector|"
    r"s3_l2_adapter\.py:[0-9]+:lmcache\.v1\.distributed\.l2_adapters\.s3_l2_adapter)\)"
    r"[^ ]*$")

# A vLLM instance's LMCacheMPConnector re-registered its KV caches with an LMCache server that
# came back (LMCache 0.5.6 lmcache/integration/vllm/vllm_multi_process_adapter.py
# `_reregister_kv_caches_callback`: logger.warning("Finished re-registering KV caches after
# server recovery"), once per worker process; vLLM may put its own `(Worker_TP0 pid=N) ` in
# front). The LMCache agent waits for it after restarting the server alone
# (render/self_heal.py); an instance that does not log it is restarted after all.
REREGISTERED = (
    r"^([^ ]+ [^ ]+ [^ ]+: )?(\([A-Za-z0-9_]+ pid=[0-9]+\) )?[^ ]*\[[0-9-]+ [0-9:,]+\] "
    r"LMCache WARNING:[^ ]* Finished re-registering KV caches after server recovery "
    r"[^ ]*\(vllm_multi_process_adapter\.py:[0-9]+:"
    r"lmcache\.integration\.vllm\.vllm_multi_process_adapter\)[^ ]*$")

# LMCache 0.5.6's own words for S3 trouble (awk EREs), in the running process's journal:
# the breaker above never resets; lost uploads (s3_connector.py:590, s3_l2_adapter.py "failed
# to launch PUT"); connection-class errors, three in a row trip the breaker
# (s3_l2_adapter.py:1022, s3_connector.py:688). Only the breaker restarts anything; the
# other two are counted (render/monitoring.py)
S3_LOG_PATTERNS = {
    "breaker": BREAKER,
    "store": "Failed to upload .* to S3|failed to launch (S3 )?PUT",
    "connection": "S3L2Adapter connection error|S3 connection error",
}

# vLLM's prefix-cache counters (Prometheus names), read by the cache probe and its checks
EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"
EXTERNAL_QUERIES = "vllm:external_prefix_cache_queries_total"
LOCAL_HITS = "vllm:prefix_cache_hits_total"
LOCAL_QUERIES = "vllm:prefix_cache_queries_total"

# A running LMCache that serves without its fast path or without a tier, in its own words
# (lmcache 0.5.6 wheel), each behind LMCache's logger prefix as BREAKER is, so a prompt that
# vLLM's request log echoes cannot raise one (verify's lmcache-degraded, doctor "slow"):
#   extension: v1/platform/devices/cuda/device_ops.py:128, logger.warning: the compiled
#     `lmcache.cuda_ops` did not import (a torch it was not built against), KV copies run on
#     the pure-torch ops
#   init: v1/manager.py:107 and :235, logger.error: the manager failed to start (no GPU
#     connector for the device, a backend that raised, ...): "System will operate in
#     degraded mode (recompute)"
#   backend: v1/storage_backend/__init__.py:108 and :281, logger.error: a configured
#     storage backend (NIXL, the S3 remote) was refused and LMCache runs without it
#   server: integration/vllm/vllm_multi_process_adapter.py:614, logger.warning: vLLM's MP
#     connector lost the LMCache server; cleared by its :1751 "Finished re-registering KV
#     caches after server recovery" (DEGRADED_CLEARED), so a restarted server is not one
_LMCACHE_PREFIX = r"^([^ ]+ [^ ]+ [^ ]+: )?[^ ]*\[[0-9-]+ [0-9:,]+\] LMCache "
DEGRADED_LOG_PATTERNS = {
    "extension": _LMCACHE_PREFIX + r"WARNING:[^ ]* lmcache\.cuda_ops compiled extension not "
                 r"found",
    "init": _LMCACHE_PREFIX + r"ERROR:[^ ]* (Failed to initialize LMCacheManager components|"
            r"Failed during post_init): ",
    "backend": _LMCACHE_PREFIX + r"ERROR:[^ ]* Failed to create (remote )?backend ",
    "server": _LMCACHE_PREFIX + r"WARNING:[^ ]* LMCache server is unhealthy",
}
DEGRADED_CLEARED = {
    "server": _LMCACHE_PREFIX + r"WARNING:[^ ]* Finished re-registering KV caches after "
              r"server recovery",
}
