#!/usr/bin/env bash
# GPU smoke test: the TTFT protocol (`deploykit bench ttft`) on a GPU inventory whose serving
# tier `deploykit up` has deployed (vLLM + LMCache on two or more CUDA/ROCm/Gaudi hosts, the
# RGW bucket behind the S3 name). Per context length (default 4K..128K, capped by the served
# max_model_len): cold, LMCache DRAM hit, remote hit after restarting vLLM + lmcache-server,
# remote hit on another host, DRAM-only control; the length's objects are purged after it.
#
#   bench/gpu-smoke.sh INVENTORY [deploykit bench ttft options, e.g. --lengths 4096,32768]
#
# Output: $OUT/bench-ttft/ttft.json and ttft.png (OUT defaults to runs/). One GPU host only:
# pass --allow-single-host (no remote_hit_other_host rows). Exit 7 on a cpu inventory (use
# `deploykit bench ttft` there), otherwise deploykit's own exit code.
set -euo pipefail
cd "$(dirname "$0")/.."
INV=${1:?usage: bench/gpu-smoke.sh INVENTORY [deploykit bench ttft options]}
shift
OUT="${OUT:-runs}"
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
"$PY" - "$INV" <<'PY' || exit 7
import sys
from deploy_kit.ops.site import open_site
hosts = open_site(sys.argv[1]).group("vllm")
cpu = [h.name for h in hosts if h.config.vllm_accelerator == "cpu"]
if not hosts or cpu:
    sys.exit(f"gpu-smoke: {sys.argv[1]} is not a GPU inventory (cpu serving hosts: "
             f"{', '.join(cpu) or 'no serving host at all'}); run `deploykit bench ttft`")
PY
exec "$PY" -m deploy_kit bench ttft -i "$INV" --out "$OUT/bench-ttft" "$@"
