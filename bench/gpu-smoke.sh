#!/usr/bin/env bash
# GPU smoke test (NVIDIA only; run where a GPU is present, e.g. the device machine):
# serve a tiny randomly initialised Llama with vLLM + LMCache (no downloads), send one long
# prompt, restart vLLM, send it again, and record TTFT cold vs hit. The LMCache config and
# the vLLM argv/env come from `deploykit render` (lmcache_mode: disk, so the cache survives
# the restart). Budget: under 10 minutes. Output: $OUT/gpu-smoke.json (or ./gpu-smoke.json).
#
# Wheels: if .whl/ exists (vllm, lmcache, their deps), they are installed to /tmp/site first.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-.}"
WORK=$(mktemp -d /tmp/dk-gpu-smoke.XXXX)
PORT=18123
command -v nvidia-smi >/dev/null || { echo "no NVIDIA GPU here; nothing to do" >&2; exit 7; }
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONPATH="${PYTHONPATH:-$PWD}"

# 1. A tiny random model and a word-level tokenizer, written locally.
python3 - "$WORK/model" <<'PY'
import sys, json
from pathlib import Path
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from tokenizers import Tokenizer, models, pre_tokenizers
out = Path(sys.argv[1]); out.mkdir(parents=True)
vocab = {f"w{i}": i for i in range(8000)} | {"<unk>": 8000, "<s>": 8001, "</s>": 8002}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                               eos_token="</s>")
fast.save_pretrained(out)
cfg = LlamaConfig(vocab_size=8003, hidden_size=512, intermediate_size=1024,
                  num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                  max_position_embeddings=16384, torch_dtype="bfloat16",
                  bos_token_id=8001, eos_token_id=8002)
LlamaForCausalLM(cfg).to(dtype=__import__("torch").bfloat16).save_pretrained(out)
PY

# 2. deploykit renders the LMCache config, env and argv for this host.
mkdir -p "$WORK/inv/group_vars"
cat > "$WORK/inv/hosts.yml" <<YML
all:
  children:
    ceph_admin: {hosts: {localhost: {ansible_connection: local}}}
    rgw: {hosts: {localhost: {}}}
    dns: {hosts: {localhost: {}}}
    vllm: {hosts: {localhost: {vllm_accelerator: cuda}}}
YML
cat > "$WORK/inv/group_vars/all.yml" <<YML
deploykit_dns_mode: static
deploykit_s3_fqdn: s3.smoke.test
coredns_health_port: 18053
vllm_model: $WORK/model
vllm_model_config: $WORK/model/config.json
vllm_port: $PORT
vllm_block_size: 16
vllm_max_model_len: 16384
vllm_gpu_memory_utilization: 0.3
lmcache_mode: disk
lmcache_disk_path: $WORK/lmcache-disk
lmcache_max_local_disk_size: 5
lmcache_max_local_cpu_size: 2
lmcache_config_dir: $WORK/etc
YML
python3 -m deploy_kit render -i "$WORK/inv" -o "$WORK/render"
HOSTDIR="$WORK/render/localhost"
cp -r "$HOSTDIR$WORK/etc" "$WORK/etc"
set -a; . "$WORK/etc/vllm.env"; set +a
ARGV=$(python3 - "$HOSTDIR/etc/systemd/system/vllm.service" <<'PY'
import sys, shlex
from deploy_kit.verify.probes.serving_probe import exec_argv
argv = exec_argv(open(sys.argv[1]).read())
launcher = ("import sys; from vllm.entrypoints.cli.main import main; "
            "sys.argv = ['vllm'] + sys.argv[1:]; main()")
print(shlex.join(["python3", "-c", launcher] + argv[1:]))
PY
)

# 3. Cold run, restart, hit run.
ttft() {
  python3 - "$PORT" "$WORK/model" <<'PY'
import json, sys, time, urllib.request
port, model = sys.argv[1], sys.argv[2]
prompt = " ".join(f"w{(i * 7919) % 8000}" for i in range(12000))
body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 8, "stream": True,
                   "temperature": 0}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                             {"Content-Type": "application/json"})
start = time.perf_counter()
with urllib.request.urlopen(req, timeout=300) as r:
    for line in r:
        if line.startswith(b"data:") and b'"text"' in line:
            print(f"{time.perf_counter() - start:.4f}")
            break
PY
}
serve() {
  eval "$ARGV" > "$WORK/vllm-$1.log" 2>&1 &
  echo $! > "$WORK/vllm.pid"
  for _ in $(seq 1 240); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && return 0; sleep 1
  done
  tail -50 "$WORK/vllm-$1.log" >&2; return 1
}
stop() { kill "$(cat "$WORK/vllm.pid")"; wait "$(cat "$WORK/vllm.pid")" 2>/dev/null || true; }

serve cold; COLD=$(ttft); stop
serve hit; HIT=$(ttft); stop
python3 - "$COLD" "$HIT" "$OUT/gpu-smoke.json" "$WORK" <<'PY'
import json, sys, pathlib, subprocess
cold, hit, out, work = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
stored = sum(p.stat().st_size for p in pathlib.Path(work, "lmcache-disk").rglob("*") if p.is_file())
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
result = {"gpu": gpu, "ttft_cold_s": cold, "ttft_hit_after_restart_s": hit,
          "speedup": round(cold / hit, 2) if hit else None, "lmcache_disk_bytes": stored}
pathlib.Path(out).write_text(json.dumps(result, indent=2))
print(json.dumps(result, indent=2))
PY
