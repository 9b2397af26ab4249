#!/usr/bin/env bash
# GPU KV proof on a lent GPU machine (no network): LMCache's own GPU connector and S3 path
# store Qwen3-32B TP-2 KV from GPU memory to an S3 test server on that machine and load it
# back, bytes compared, rates against deploykit's plan (bench/gpu-kv-proof.py says how).
#
#   bench/gpu-kv-proof.sh [bench/gpu-kv-proof.py options, e.g. --layers 8, --device cpu]
#
# Needs: python3 with torch (on the lent image, the plain python3 holds it; PYTHON=...
# names another) and the wheel bundle gpu-kv-bundle/ (make gpu-kv-bundle; carry it).
# Nothing is downloaded. Output: $OUT/gpu-kv-proof.json and gpu-kv-proof.txt ($OUT unset:
# runs/gpu-kv-proof/). Exit codes: bench/gpu-kv-proof.py's (3 a precondition, 5 the S3
# endpoint did not start, 6 a measurement failed, 7 out of time).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONUNBUFFERED=1 exec "${PYTHON:-python3}" bench/gpu-kv-proof.py "$@"
