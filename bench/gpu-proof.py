#!/usr/bin/env python3
"""GPU proof: deploykit's own rendered vLLM + LMCache server, run on one GPU, timed.

What it does, in one run (at most --budget-s, default 570 s):

1. Builds a random-weight model of a real geometry in a work directory: config.json of
   Qwen3-8B (or Qwen3-32B), a byte-level tokenizer padded to the model's vocabulary, and no
   weights at all: vLLM loads with `--load-format dummy`, so nothing is downloaded.
2. Writes a one-host inventory (cuda, `lmcache_topology: server`, `lmcache_mode: dram` or
   `disk`, so no S3; ports of the caller's choosing, clients on loopback; the tiers deploykit
   insists on are stub hosts that are never contacted), opens it with deploykit's
   `open_site` (every validation rule runs) and renders the host with deploykit's own
   `vllm_argv`/`vllm_env` and `server_argv`/`server_env`. The venv in the inventory is the
   one `--python` lives in, so the rendered argv runs as rendered.
3. Runs them as local processes (no systemd): the LMCache server, then vLLM. Per length
   (default 4K, 16K, 32K) and repeat: a cold prompt (fresh random token ids), then the same
   prompt again (vLLM's own prefix cache). Then vLLM is stopped and started again while the
   LMCache server keeps running, and every prompt is sent once more: that hit can only come
   from the server's L1 (vLLM's counters `vllm:external_prefix_cache_*` say how many tokens).
4. Compares the cold TTFT with the planner's cold-prefill prediction for the accelerator
   model (deploy_kit/plan/breakeven.py) and writes `gpu-proof.json` and `gpu-proof.txt` to
   --out (default: $OUT when set, else runs/gpu-proof).

`--dry-run` does 1 and 2, prints the argv/env it would run and the prompts it would send,
and writes the result document from a fake measurement (marked `"fake": true`): it needs
neither a GPU nor vLLM.

It installs nothing (a lent GPU machine has no network): `--python` must name a Python in a
venv whose bin/ holds `vllm` and `lmcache` (vllm and lmcache importable, torch with CUDA).
This file itself needs deploykit importable (pydantic, pyyaml, jinja2: a vLLM venv has
them), e.g. `PYTHONPATH=. /opt/vllm/bin/python bench/gpu-proof.py --python
/opt/vllm/bin/python`, which bench/gpu-proof.sh does.

Exit codes: 0 done; 2 usage; 3 a precondition (no vllm/lmcache/CUDA in --python, no
deploykit here); 4 deploykit refused the generated inventory; 5 a process did not start;
6 a measurement failed (a request error, no LMCache hit after the restart); 7 out of time.
Every failure is one line on stderr; what was measured until then is still written.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "deploykit-gpu-proof/1"
REPO = Path(__file__).resolve().parent.parent

EXIT_PRECONDITION = 3
EXIT_INVENTORY = 4
EXIT_START = 5
EXIT_MEASURE = 6
EXIT_TIME = 7

# config.json of real models (the published values, as in deploy_kit/data/models.yaml; the
# planner's prefill_params there equal what geometry.from_hf_config counts from these).
# No weights: vLLM's dummy loader fills them with random values.
_QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "head_dim": 128,
          "num_key_value_heads": 8, "vocab_size": 151936, "max_position_embeddings": 40960,
          "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
          "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
          "use_sliding_window": False, "sliding_window": None, "initializer_range": 0.02,
          "use_cache": True, "torch_dtype": "bfloat16", "dtype": "bfloat16",
          "bos_token_id": 1, "eos_token_id": 2}
MODELS: dict[str, dict[str, Any]] = {
    # 16.4 GB of bf16 weights: loads in seconds, leaves an H100 room for 32K prompts
    "qwen3-8b": {**_QWEN3, "num_hidden_layers": 36, "hidden_size": 4096,
                 "intermediate_size": 12288, "num_attention_heads": 32,
                 "max_window_layers": 36},
    # 65.5 GB of weights: an H200 (or shorter lengths), not an H100 at 32K
    "qwen3-32b": {**_QWEN3, "num_hidden_layers": 64, "hidden_size": 5120,
                  "intermediate_size": 25600, "num_attention_heads": 64,
                  "max_window_layers": 64},
}
TOKEN_IDS = (1000, 31000)  # prompt ids: inside any real vocabulary, never special
WARMUP_TOKENS = 512


class Fail(Exception):
    """A precondition or step that failed: one line, one exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# --- the model directory -------------------------------------------------------------------
# The lab's byte-level tokenizer (deploykit-lab, in this repository), padded to the model's
# vocabulary: prompts are sent as ids; it only has to detokenize what the model emits.
sys.path.insert(0, str(REPO / "deploykit-lab"))
from deploykit_lab.model import SPECIALS, tokenizer_json  # noqa: E402


def build_model_dir(root: Path, name: str) -> Path:
    """config.json, generation_config.json and the tokenizer; no weight file."""
    config = MODELS[name]
    target = root / f"{name}-random"
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (target / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}, indent=2) + "\n")
    (target / "tokenizer.json").write_text(json.dumps(tokenizer_json(config["vocab_size"])))
    (target / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
         "unk_token": "<unk>", "model_max_length": config["max_position_embeddings"],
         "clean_up_tokenization_spaces": False}, indent=2) + "\n")
    return target


# --- the inventory and deploykit's render ---------------------------------------------------

def venv_of(python: str) -> str:
    """The inventory's vllm_venv: the directory above the bin/ that holds --python (not
    resolved: a venv's python is a symlink out of the venv)."""
    return str(Path(python).absolute().parent.parent)


def inventory_vars(args: argparse.Namespace, model_dir: Path,
                   versions: dict[str, str]) -> dict[str, Any]:
    max_len = max(args.lengths) + 256  # the prompt, the tokens generated, a chunk to spare
    group: dict[str, Any] = {
        "vllm_accelerator": "cuda",
        "vllm_accelerator_model": args.accelerator_model,
        "lmcache_topology": "server",
        "lmcache_mode": args.lmcache_mode,
        "vllm_model": str(model_dir),
        "vllm_models_dir": str(model_dir.parent),  # model_path_on_host is the directory itself
        "vllm_venv": venv_of(args.python),
        # the venv --python lives in, as it is: nothing is installed (its LMCache may be a
        # site build, so PyPI's torch pairing is not deploykit's to judge here)
        "vllm_install": False,
        "lmcache_install": False,
        # vLLM listens on loopback at vllm_loopback_port (the proof runs no serving front
        # and talks to vLLM there); the public port only must not clash with it
        "vllm_loopback_port": args.port,
        "vllm_port": args.port + 4,
        "lmcache_server_port": args.port + 1,
        "lmcache_server_http_port": args.port + 2,
        "lmcache_server_metrics_port": args.port + 3,
        "lmcache_server_l1_size_gb": args.l1_gb,
        "vllm_max_model_len": max_len,
        "vllm_gpu_memory_utilization": args.gpu_memory_utilization,
        "vllm_enforce_eager": args.enforce_eager,
        "vllm_extra_args": ["--load-format", "dummy"],
    }
    if args.lmcache_mode == "disk":
        group["lmcache_disk_path"] = str(Path(args.out).absolute() / "work" / "lmcache-l2")
    group |= {f"{name}_version": value for name, value in versions.items()}
    return group


def write_inventory(root: Path, group: dict[str, Any]) -> Path:
    """One serving host on loopback; rgw, dns, Consul and Ceph admin are stubs that
    deploykit's rules ask for and nothing here contacts."""
    import yaml

    stubs = {"ceph_admin": "127.0.0.11", "rgw": "127.0.0.12", "consul_servers": "127.0.0.13",
             "dns": "127.0.0.14"}
    children: dict[str, Any] = {g: {"hosts": {f"stub-{g.replace('_', '-')}": {
                                    "ansible_host": address}}}
                                for g, address in stubs.items()}
    children["vllm"] = {"hosts": {"gpu-proof": {"ansible_host": "127.0.0.1"}}}
    (root / "group_vars").mkdir(parents=True, exist_ok=True)
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": children}}))
    (root / "group_vars" / "vllm.yml").write_text(yaml.safe_dump(group, sort_keys=True))
    return root


@dataclass
class Units:
    server_argv: list[str]
    server_env: dict[str, str]
    vllm_argv: list[str]
    vllm_env: dict[str, str]
    model: str  # --served-model-name
    vllm_port: int
    server_http_port: int
    geometry: dict[str, Any]
    planner: dict[str, Any]
    predicted_s: dict[int, float | None] = field(default_factory=dict)


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def render(inventory: Path, lengths: list[int]) -> Units:
    """deploykit's own path: open_site (all rules), the render functions, the planner."""
    try:
        from deploy_kit.core.errors import InventoryError
        from deploy_kit.ops.site import open_site
        from deploy_kit.plan import breakeven
        from deploy_kit.render import lmcache_server, vllm
    except ImportError as exc:
        raise Fail(EXIT_PRECONDITION, f"cannot import deploykit ({exc}): run with "
                   f"PYTHONPATH={REPO} and a Python that has pydantic, pyyaml and jinja2 "
                   "(a vLLM venv has them)") from None
    try:
        site = open_site(str(inventory))
    except InventoryError as exc:
        lines = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise Fail(EXIT_INVENTORY, f"deploykit refused the generated inventory {inventory}: "
                   f"{lines}") from None
    (host,) = site.group("vllm")
    if host.geometry is None:
        raise Fail(EXIT_INVENTORY, "deploykit read no geometry from the model's config.json")
    plan = breakeven.group_plan(host.config.vllm_model, host.geometry, host.config,
                                [host.name], tuple(lengths))
    argv = vllm.vllm_argv(host)
    server = lmcache_server.server_argv(host.config)
    g = host.geometry
    return Units(
        server_argv=server, server_env=lmcache_server.server_env(host.config),
        vllm_argv=argv, vllm_env=vllm.vllm_env(host),
        model=flag(argv, "--served-model-name"), vllm_port=int(flag(argv, "--port")),
        server_http_port=int(flag(server, "--http-port")),
        geometry={"num_layers": g.num_layers, "num_kv_heads": g.num_kv_heads,
                  "head_dim": g.head_dim, "dtype": g.dtype,
                  "prefill_params": g.prefill_params, "attention_dim": g.attention_dim},
        planner={"device": plan.device, "tensor_parallel": plan.tensor_parallel,
                 "effective_tflops": plan.effective_tflops,
                 "tflops_source": plan.tflops_source},
        predicted_s={r.context_tokens: r.predicted_prefill_s for r in plan.rows})


# --- prompts ---------------------------------------------------------------------------------

def prompt_ids(length: int, seed: str, ids: tuple[int, int] = TOKEN_IDS) -> list[int]:
    """A reproducible random prompt of exactly `length` ids; another seed shares no chunk."""
    rng = random.Random(seed)
    return [rng.randrange(ids[0], ids[1]) for _ in range(length)]


def prompts(nonce: str, lengths: list[int], repeats: int) -> dict[tuple[int, int], list[int]]:
    return {(n, r): prompt_ids(n, f"gpu-proof/{nonce}/{n}/{r}")
            for n in lengths for r in range(repeats)}


def check_prompts(table: dict[tuple[int, int], list[int]], vocab_size: int,
                  chunk: int = 256) -> None:
    """Exact lengths, ids inside the vocabulary, and no two prompts sharing their first
    chunk (a shared prefix would turn a cold row into a hit)."""
    firsts: set[tuple[int, ...]] = set()
    for (length, _), ids in table.items():
        if len(ids) != length:
            raise ValueError(f"a {length}-token prompt has {len(ids)} ids")
        if min(ids) < len(SPECIALS) or max(ids) >= vocab_size:
            raise ValueError(f"prompt ids outside [{len(SPECIALS)}, {vocab_size})")
        first = tuple(ids[:chunk])
        if first in firsts:
            raise ValueError(f"two prompts share their first {chunk} tokens")
        firsts.add(first)


# --- processes and HTTP ----------------------------------------------------------------------

def probe(python: str) -> dict[str, Any]:
    """What --python has: vllm and lmcache (importable, their versions), torch's CUDA device."""
    code = r"""
import importlib.metadata as md, importlib.util as iu, json, sys
out = {"python": sys.version.split()[0], "missing": []}
for name in ("vllm", "lmcache", "torch"):
    if iu.find_spec(name) is None:
        out["missing"].append(name)
        continue
    try:
        out[name] = md.version(name)
    except md.PackageNotFoundError:
        out[name] = "unknown"
if "torch" not in out["missing"]:
    import torch
    out["cuda"] = bool(torch.cuda.is_available())
    if out["cuda"]:
        p = torch.cuda.get_device_properties(0)
        out["device"] = p.name
        out["device_memory_gib"] = round(p.total_memory / 2**30, 1)
        out["device_count"] = torch.cuda.device_count()
        out["torch_cuda"] = torch.version.cuda
print(json.dumps(out))
"""
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True,
                              timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Fail(EXIT_PRECONDITION, f"--python {python} did not run: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise Fail(EXIT_PRECONDITION, f"--python {python} failed its probe: {tail}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if found["missing"]:
        raise Fail(EXIT_PRECONDITION, f"--python {python} cannot import "
                   f"{', '.join(found['missing'])}: install vllm and lmcache (and their torch) "
                   "into that venv first; this script installs nothing")
    if not found.get("cuda"):
        raise Fail(EXIT_PRECONDITION, f"--python {python}: torch {found.get('torch')} sees no "
                   "CUDA device")
    return found


def local_version(version: str) -> str:
    """0.34.0+cu130 -> 0.34.0 (compat.yaml keys are release versions)."""
    return version.split("+", 1)[0]


def run_env(rendered: dict[str, str], python: str) -> dict[str, str]:
    """This shell's environment with the unit's on top (systemd would start from an empty
    one; CUDA, HOME and PATH are kept here), the venv's bin/ first on PATH. PYTHONPATH is
    dropped: it points at this repository (tests/ is a package there), a unit has none."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{Path(python).absolute().parent}{os.pathsep}{env.get('PATH', '')}"
    return env | rendered


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    if not os.access(argv[0], os.X_OK):
        raise Fail(EXIT_PRECONDITION, f"{argv[0]} (the rendered argv[0]) is not an executable: "
                   "--python must be the python of the venv whose bin/ holds vllm and lmcache")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n# {time.strftime('%H:%M:%S')} {shlex.join(argv)}\n".encode())
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def stop(proc: subprocess.Popen[bytes] | None, grace: float = 60.0) -> None:
    """SIGTERM to the process group (vLLM's engine cores are children), SIGKILL after
    `grace`, and wait until the group is gone, so the GPU memory is free again."""
    if proc is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def tail(log: Path, lines: int = 5) -> str:
    with contextlib.suppress(OSError):
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
    return ""


def http_get(port: int, path: str, timeout: float = 5.0) -> tuple[int | None, bytes]:
    from deploy_kit.transport.openai import get

    return get("127.0.0.1", port, path, timeout=timeout)

def wait_ready(proc: subprocess.Popen[bytes], port: int, path: str, what: str, log: Path,
               deadline: float) -> float:
    """Seconds until GET path answers 200; Fail if the process exits or time runs out."""
    started = time.monotonic()
    while True:
        if proc.poll() is not None:
            raise Fail(EXIT_START, f"{what} exited {proc.returncode} before it answered "
                       f"{path} (log {log}: {tail(log)})")
        if http_get(port, path)[0] == 200:
            return time.monotonic() - started
        if time.monotonic() > deadline:
            raise Fail(EXIT_TIME, f"{what} did not answer {path} on port {port} within the "
                       f"budget (log {log}: {tail(log)})")
        time.sleep(1.0)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


COUNTERS = {"external_hits": "vllm:external_prefix_cache_hits_total",
            "external_queries": "vllm:external_prefix_cache_queries_total",
            "local_hits": "vllm:prefix_cache_hits_total"}


def counters(port: int) -> dict[str, float]:
    """vLLM's prefix-cache counters, summed over label sets; empty if /metrics is silent."""
    status, body = http_get(port, "/metrics", timeout=10.0)
    out: dict[str, float] = {}
    if status != 200:
        return out
    names = {v: k for k, v in COUNTERS.items()}
    for line in body.decode(errors="replace").splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            with contextlib.suppress(ValueError, IndexError):
                out[names[name]] = out.get(names[name], 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def completion(port: int, model: str, ids: list[int], timeout: float) -> dict[str, Any]:
    """One streamed completion of 2 tokens: TTFT is the first chunk carrying a choice."""
    before = counters(port)
    body = json.dumps({"model": model, "prompt": ids, "max_tokens": 2, "temperature": 0,
                       "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    result: dict[str, Any] = {"ttft_s": None, "total_s": None, "prompt_tokens": None,
                              "error": None}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        sent = time.perf_counter()
        conn.request("POST", "/v1/completions", body=body,
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            result["error"] = f"HTTP {response.status}: {response.read(300).decode('replace')}"
            return result
        for raw in response:
            line = raw.strip()
            if not line.startswith(b"data:") or line[5:].strip() in (b"", b"[DONE]"):
                continue
            data = json.loads(line[5:])
            if data.get("choices") and result["ttft_s"] is None:
                result["ttft_s"] = time.perf_counter() - sent
            if data.get("usage"):
                result["prompt_tokens"] = data["usage"].get("prompt_tokens")
        result["total_s"] = time.perf_counter() - sent
        if result["ttft_s"] is None:
            result["error"] = "the stream carried no choice"
    except (OSError, http.client.HTTPException, ValueError) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    after = counters(port)
    for key in COUNTERS:
        result[key] = int(after[key] - before.get(key, 0.0)) if key in after else None
    return result


# --- the protocol ----------------------------------------------------------------------------

@dataclass
class Run:
    args: argparse.Namespace
    units: Units
    table: dict[tuple[int, int], list[int]]
    nonce: str
    deadline: float
    logs: Path
    measured: dict[str, Any] = field(default_factory=dict)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def send(self, key: str, ids: list[int]) -> dict[str, Any]:
        if self.left() < 5:
            raise Fail(EXIT_TIME, f"out of time before {key}")
        result = completion(self.units.vllm_port, self.units.model, ids,
                            timeout=max(5.0, self.left()))
        self.measured.setdefault("requests", {})[key] = result
        if result["error"]:
            raise Fail(EXIT_MEASURE, f"{key}: {result['error']}")
        return result


def measure(run: Run) -> None:
    u, args = run.units, run.args
    for port in (u.vllm_port, u.server_http_port, int(flag(u.server_argv, "--port")),
                 int(flag(u.server_argv, "--prometheus-port"))):
        if not port_free(port):
            raise Fail(EXIT_PRECONDITION, f"port {port} on 127.0.0.1 is taken: pass --port")
    server_log, vllm_log = run.logs / "lmcache-server.log", run.logs / "vllm.log"
    server = vllm_proc = None
    startup = run.measured.setdefault("startup_s", {})
    try:
        server = start(u.server_argv, run_env(u.server_env, args.python), server_log)
        startup["lmcache_server"] = wait_ready(server, u.server_http_port, "/healthcheck",
                                               "the LMCache server", server_log, run.deadline)
        for phase in ("first", "restart"):
            vllm_proc = start(u.vllm_argv, run_env(u.vllm_env, args.python), vllm_log)
            startup[f"vllm_{phase}"] = wait_ready(vllm_proc, u.vllm_port, "/health", "vLLM",
                                                  vllm_log, run.deadline)
            # kernels chosen, graphs warmed: the first measured request pays no first-use cost
            run.send(f"warmup/{phase}",
                     prompt_ids(WARMUP_TOKENS, f"gpu-proof/{run.nonce}/warmup/{phase}"))
            for (n, r), ids in run.table.items():
                if phase == "first":
                    run.send(f"cold/{n}/{r}", ids)
                    run.send(f"vllm_prefix_hit/{n}/{r}", ids)
                else:
                    run.send(f"restart_hit/{n}/{r}", ids)
            if phase == "first":
                time.sleep(args.settle_s)  # the server's stores of the last prompts finish
                run.measured["lmcache_status_before_restart"] = server_status(u)
                stop(vllm_proc)
                vllm_proc = None
                _clean_shm()
            if server.poll() is not None:
                raise Fail(EXIT_START, f"the LMCache server exited {server.returncode} during "
                           f"the {phase} phase (log {server_log}: {tail(server_log)})")
        run.measured["lmcache_status_end"] = server_status(u)
    finally:
        stop(vllm_proc)
        _clean_shm()
        stop(server)


def _clean_shm() -> None:
    """What the rendered unit's ExecStopPost does after vLLM stops (server topology)."""
    for leftover in Path("/dev/shm").glob("lmcache_kv_*"):
        with contextlib.suppress(OSError):
            leftover.unlink()


def server_status(u: Units) -> Any:
    status, body = http_get(u.server_http_port, "/status", timeout=10.0)
    if status != 200:
        return {"http_status": status}
    text = body.decode(errors="replace")
    try:
        return json.loads(text) if len(text) < 65536 else {"truncated": text[:65536]}
    except ValueError:
        return {"text": text[:4096]}


def fake_measurement(units: Units, lengths: list[int], repeats: int) -> dict[str, Any]:
    """What a run records, with made-up times (cold = 1.25 x predicted, hit = 0.1 x cold):
    the dry run exercises assembly, schema and table with it. Hit tokens as the lab's vLLM
    counts them: all but the prompt's last token (docs/benchmarks.md, 4,095 of 4,096)."""
    requests: dict[str, Any] = {}
    for n in lengths:
        cold = 1.25 * (units.predicted_s.get(n) or 1.0)
        hit_tokens = n - 1
        for r in range(repeats):
            base = {"prompt_tokens": n, "error": None, "external_queries": n}
            requests[f"cold/{n}/{r}"] = base | {"ttft_s": cold, "total_s": cold + 0.02,
                                                "external_hits": 0, "local_hits": 0}
            requests[f"vllm_prefix_hit/{n}/{r}"] = base | {
                "ttft_s": 0.03, "total_s": 0.05, "external_hits": 0, "local_hits": n - 64}
            requests[f"restart_hit/{n}/{r}"] = base | {
                "ttft_s": 0.1 * cold, "total_s": 0.1 * cold + 0.02,
                "external_hits": hit_tokens, "local_hits": 0}
    return {"fake": True, "startup_s": {"lmcache_server": 20.0, "vllm_first": 90.0,
                                        "vllm_restart": 45.0}, "requests": requests}


def rows(units: Units, measured: dict[str, Any], lengths: list[int],
         repeats: int) -> list[dict[str, Any]]:
    requests = measured.get("requests", {})
    out = []
    for n in lengths:
        for r in range(repeats):
            cold = requests.get(f"cold/{n}/{r}", {})
            local = requests.get(f"vllm_prefix_hit/{n}/{r}", {})
            hit = requests.get(f"restart_hit/{n}/{r}", {})
            predicted = units.predicted_s.get(n)
            cold_s, hit_s = cold.get("ttft_s"), hit.get("ttft_s")
            hits = hit.get("external_hits")
            out.append({
                "context_tokens": n, "repeat": r,
                "cold_ttft_s": cold_s,
                "vllm_prefix_hit_ttft_s": local.get("ttft_s"),
                "restart_hit_ttft_s": hit_s,
                "restart_hit_tokens": hits,
                "restart_hit_fraction": hits / n if hits is not None else None,
                "predicted_prefill_s": predicted,
                "cold_vs_predicted": cold_s / predicted if cold_s and predicted else None,
                # what vllm_prefill_tflops would be, were this cold TTFT all prefill
                "implied_tflops": (units.planner["effective_tflops"] * predicted / cold_s
                                   if cold_s and predicted else None),
                "hit_speedup": cold_s / hit_s if cold_s and hit_s else None,
            })
    return out


def summary(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("cold_ttft_s", "vllm_prefix_hit_ttft_s", "restart_hit_ttft_s", "restart_hit_tokens",
            "predicted_prefill_s", "cold_vs_predicted", "implied_tflops", "hit_speedup")
    out = []
    for n in sorted({row["context_tokens"] for row in table}):
        mine = [row for row in table if row["context_tokens"] == n]
        entry: dict[str, Any] = {"context_tokens": n, "n": len(mine)}
        for key in keys:
            values = [row[key] for row in mine if row[key] is not None]
            entry[key] = statistics.median(values) if values else None
        out.append(entry)
    return out


ROW_KEYS: dict[str, type] = {
    "context_tokens": int, "repeat": int, "cold_ttft_s": float, "vllm_prefix_hit_ttft_s": float,
    "restart_hit_ttft_s": float, "restart_hit_tokens": int, "restart_hit_fraction": float,
    "predicted_prefill_s": float, "cold_vs_predicted": float, "implied_tflops": float,
    "hit_speedup": float}
TOP_KEYS: dict[str, type | tuple[type, ...]] = {
    "schema": str, "status": str, "dry_run": bool, "started": str, "seconds": float,
    "model": dict, "inventory": str, "versions": dict, "planner": dict, "units": dict,
    "lengths": list, "repeats": int, "token_ids": list, "startup_s": dict, "rows": list,
    "summary": list, "notes": list, "error": (str, type(None)), "exit_code": int}


def schema_problems(doc: dict[str, Any]) -> list[str]:
    """What is missing or mistyped in a result document (empty: it conforms)."""
    problems = [f"{key}: missing or not {kind}" for key, kind in TOP_KEYS.items()
                if not isinstance(doc.get(key), kind)]
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema is {doc.get('schema')!r}, not {SCHEMA}")
    for i, row in enumerate(doc.get("rows") or []):
        for key, kind in ROW_KEYS.items():
            value = row.get(key, "absent")
            ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                                   if kind is float else isinstance(value, kind))
            if not ok or value == "absent":
                problems.append(f"rows[{i}].{key}: {value!r} is not {kind.__name__} or null")
    for name in ("vllm", "lmcache_server"):
        unit = (doc.get("units") or {}).get(name) or {}
        if not isinstance(unit.get("argv"), list) or not isinstance(unit.get("env"), dict):
            problems.append(f"units.{name}: needs argv (list) and env (object)")
    return problems


def assemble(args: argparse.Namespace, units: Units | None, measured: dict[str, Any],
             versions: dict[str, Any], inventory: Path, started: float, started_iso: str,
             error: Fail | None) -> dict[str, Any]:
    table = rows(units, measured, args.lengths, args.repeats) if units else []
    notes = []
    if measured.get("fake"):
        notes.append("dry run: the times are made up (cold = 1.25 x predicted, hit = 0.1 x "
                     "cold); nothing ran")
    low = [row for row in table if row["restart_hit_fraction"] is not None
           and row["restart_hit_fraction"] < 0.9]
    if low:
        notes.append(f"{len(low)} restart rows took under 90% of their prompt from LMCache")
    if any(row["restart_hit_ttft_s"] is not None and row["restart_hit_tokens"] is None
           for row in table):
        notes.append("vLLM exported no vllm:external_prefix_cache_hits_total: the restart "
                     "rows' source is told by their TTFT alone")
    return {
        "schema": SCHEMA,
        "status": "failed" if error else ("dry-run" if args.dry_run else "ok"),
        "dry_run": bool(args.dry_run), "started": started_iso,
        "seconds": round(time.monotonic() - started, 3),
        "model": {"name": args.model, "config": MODELS[args.model], "load_format": "dummy",
                  "deploykit_geometry": units.geometry if units else None},
        "inventory": str(inventory), "versions": versions,
        "planner": units.planner if units else {},
        "units": {"lmcache_server": {"argv": units.server_argv, "env": units.server_env},
                  "vllm": {"argv": units.vllm_argv, "env": units.vllm_env}} if units else {},
        "lengths": args.lengths, "repeats": args.repeats, "token_ids": list(TOKEN_IDS),
        "startup_s": measured.get("startup_s", {}), "rows": table, "summary": summary(table),
        "requests": measured.get("requests", {}),
        "lmcache_status": {k: v for k, v in measured.items() if k.startswith("lmcache_status")},
        "notes": notes, "error": str(error) if error else None,
        "exit_code": error.code if error else 0,
    }


def text_table(doc: dict[str, Any]) -> str:
    def f(value: Any, spec: str = ".3f") -> str:
        return "-" if value is None else format(value, spec)

    p = doc["planner"]
    planner = (f", planner {p['device']} at {p['effective_tflops']:.0f} TFLOPS "
               f"({p['tflops_source']})" if p else "")
    lines = [f"gpu-proof {doc['status']}: {doc['model']['name']} (random weights){planner}; "
             f"medians of {doc['repeats']}",
             f"{'tokens':>7} {'cold s':>8} {'pred s':>8} {'cold/pred':>9} {'TFLOPS':>7} "
             f"{'vLLM hit':>8} {'restart':>8} {'speedup':>7} {'LMCache tok':>11}"]
    for s in doc["summary"]:
        lines.append(f"{s['context_tokens']:>7} {f(s['cold_ttft_s']):>8} "
                     f"{f(s['predicted_prefill_s']):>8} {f(s['cold_vs_predicted'], '.2f'):>9} "
                     f"{f(s['implied_tflops'], '.0f'):>7} {f(s['vllm_prefix_hit_ttft_s']):>8} "
                     f"{f(s['restart_hit_ttft_s']):>8} {f(s['hit_speedup'], '.1f'):>7} "
                     f"{f(s['restart_hit_tokens'], '.0f'):>11}")
    startup = doc["startup_s"]
    if startup:
        lines.append("startup s: " + ", ".join(f"{k} {v:.1f}" for k, v in startup.items()))
    lines += [f"note: {n}" for n in doc["notes"]]
    if doc["error"]:
        lines.append(f"error: {doc['error']}")
    return "\n".join(lines) + "\n"


# --- main ------------------------------------------------------------------------------------

def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable,
                        help="the serving venv's python (its bin/ holds vllm and lmcache)")
    parser.add_argument("--model", choices=sorted(MODELS), default="qwen3-8b")
    parser.add_argument("--lengths", default="4096,16384,32768",
                        help="prompt lengths in tokens, comma-separated")
    parser.add_argument("--repeats", type=int, default=2, help="prompts per length")
    parser.add_argument("--accelerator-model", choices=("h100", "h200"), default="h100",
                        help="the planner's device (vllm_accelerator_model)")
    parser.add_argument("--lmcache-mode", choices=("dram", "disk"), default="dram")
    parser.add_argument("--l1-gb", type=float, default=32.0,
                        help="LMCache server L1 (lmcache_server_l1_size_gb): every prompt fits")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    parser.add_argument("--enforce-eager", action="store_true",
                        help="vllm_enforce_eager: true (faster start, slower prefill)")
    parser.add_argument("--port", type=int, default=18000,
                        help="vLLM's (loopback) port; the LMCache server takes the next three")
    parser.add_argument("--settle-s", type=float, default=5.0,
                        help="wait before stopping vLLM, for the server's last stores")
    parser.add_argument("--budget-s", type=float, default=570.0)
    parser.add_argument("--vllm-version", help="render for this vLLM (default: installed)")
    parser.add_argument("--lmcache-version", help="render for this LMCache (default: installed)")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "runs/gpu-proof"))
    parser.add_argument("--dry-run", action="store_true",
                        help="render and print what would run; fake measurement; no GPU")
    args = parser.parse_args(argv)
    try:
        args.lengths = sorted({int(x) for x in args.lengths.split(",") if x.strip()})
    except ValueError:
        parser.error(f"--lengths {args.lengths!r}: comma-separated integers")
    limit = MODELS[args.model]["max_position_embeddings"] - 256
    if not args.lengths or args.lengths[0] < 512 or args.lengths[-1] > limit:
        parser.error(f"--lengths: each between 512 and {limit} ({args.model}'s positions, "
                     "less a chunk)")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    # a bare name (python3) is looked up on PATH: the venv is where that file lives
    args.python = shutil.which(args.python) or args.python
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started, started_iso = time.monotonic(), time.strftime("%Y-%m-%dT%H:%M:%S%z")
    deadline = started + args.budget_s
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    inventory = work / "inventory"
    versions: dict[str, Any] = {}
    units: Units | None = None
    measured: dict[str, Any] = {}
    error: Fail | None = None
    try:
        if not args.dry_run:
            versions = probe(args.python)
        pins = {"vllm": args.vllm_version or (local_version(versions["vllm"]) if versions
                                              else None),
                "lmcache": args.lmcache_version or (local_version(versions["lmcache"])
                                                    if versions else None)}
        model_dir = build_model_dir(work / "models", args.model)
        write_inventory(inventory, inventory_vars(
            args, model_dir, {k: v for k, v in pins.items() if v}))
        units = render(inventory, args.lengths)
        if args.lmcache_mode == "disk":  # the server's fs L2 writes into it
            (work / "lmcache-l2").mkdir(parents=True, exist_ok=True)
        nonce = f"{time.time_ns():x}"
        table = prompts(nonce, args.lengths, args.repeats)
        check_prompts(table, MODELS[args.model]["vocab_size"])
        if args.dry_run:
            print(json.dumps({
                "inventory": str(inventory),
                "lmcache_server": {"argv": units.server_argv, "env": units.server_env,
                                   "command": shlex.join(units.server_argv)},
                "vllm": {"argv": units.vllm_argv, "env": units.vllm_env,
                         "command": shlex.join(units.vllm_argv)},
                "prompts": {f"{n}/{r}": {"tokens": len(ids), "first_ids": ids[:8]}
                            for (n, r), ids in table.items()},
                "predicted_prefill_s": {str(k): v for k, v in units.predicted_s.items()},
                "planner": units.planner}, indent=2))
            measured = fake_measurement(units, args.lengths, args.repeats)
        else:
            run = Run(args, units, table, nonce, deadline, out / "logs", measured)
            measure(run)
            low = [k for k, v in measured["requests"].items() if k.startswith("restart_hit/")
                   and v.get("external_hits") is not None
                   and v["external_hits"] < int(k.split("/")[1]) // 2]
            if low:
                raise Fail(EXIT_MEASURE, f"no LMCache hit after the vLLM restart for {low} "
                           f"(vllm:external_prefix_cache_hits_total; logs in {out / 'logs'})")
    except Fail as exc:
        error = exc
    except KeyboardInterrupt:
        error = Fail(EXIT_TIME, "interrupted")
    doc = assemble(args, units, measured, versions, inventory, started, started_iso, error)
    problems = schema_problems(doc)
    if problems and error is None:
        error = Fail(EXIT_MEASURE, f"the result does not match {SCHEMA}: {problems[:3]}")
        doc["status"], doc["error"], doc["exit_code"] = "failed", str(error), error.code
    (out / "gpu-proof.json").write_text(json.dumps(doc, indent=2) + "\n")
    text = text_table(doc)
    (out / "gpu-proof.txt").write_text(text)
    if error is not None:
        print(f"gpu-proof: {error}", file=sys.stderr)
        return error.code
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
