"""Words deploykit reads in other programs' output, shared by whoever writes a probe, a check,
an alert or a watch list for them, so that all of them match the same thing."""

from __future__ import annotations

# LMCache 0.5.6's own words for S3 trouble (awk EREs), in the running process's journal:
# the breaker (s3_l2_adapter.py:1030 server, s3_connector.py:697 in process) never resets;
# lost uploads (s3_connector.py:590, s3_l2_adapter.py "failed to launch PUT"); connection-
# class errors, three in a row trip the breaker (s3_l2_adapter.py:1022, s3_connector.py:688)
S3_LOG_PATTERNS = {
    "breaker": "S3L2Adapter disabled after|S3 connection disabled after",
    "store": "Failed to upload .* to S3|failed to launch (S3 )?PUT",
    "connection": "S3L2Adapter connection error|S3 connection error",
}

# vLLM's prefix-cache counters (Prometheus names), read by the cache probe and its checks
EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"
EXTERNAL_QUERIES = "vllm:external_prefix_cache_queries_total"
LOCAL_HITS = "vllm:prefix_cache_hits_total"
LOCAL_QUERIES = "vllm:prefix_cache_queries_total"
