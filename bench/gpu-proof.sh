#!/usr/bin/env bash
# GPU proof on a lent GPU machine (no network): deploykit's rendered vLLM + LMCache server
# units run as local processes with a random-weight Qwen3-8B, cold prefill vs an LMCache hit
# after a vLLM restart, against the planner's prediction (bench/gpu-proof.py says how).
#
#   bench/gpu-proof.sh PYTHON [bench/gpu-proof.py options, e.g. --dry-run, --lengths 4096]
#
# PYTHON: the python of a venv whose bin/ holds vllm and lmcache (nothing is installed
# here). Output: $OUT/gpu-proof.json and gpu-proof.txt ($OUT unset: runs/gpu-proof/).
# Exit codes: bench/gpu-proof.py's (3 a precondition, 4 inventory refused, 5 a process did
# not start, 6 a measurement failed, 7 out of time).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:?usage: bench/gpu-proof.sh PYTHON [bench/gpu-proof.py options]}
shift
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" bench/gpu-proof.py --python "$PY" "$@"
