#!/usr/bin/env python3
"""GPU KV proof: LMCache's own GPU connector and S3 path, KV of the example's geometry,
stored from (GPU) memory to an S3 endpoint on this machine and loaded back, timed.

Made for a lent GPU machine with no network (one GPU, PyTorch installed, no vLLM, no
LMCache, 64 MiB of files brought along): everything LMCache needs travels as wheels in a
bundle (`make gpu-kv-bundle`, bench/gpu-kv-bundle.py), the S3 endpoint is
bench/s3_test_server.py (stdlib, in memory, 127.0.0.1).

Two stages in one file:

1. setup (the machine's python3, the one with torch): checks that the bundle has wheels
   for this Python and installs them offline (`--no-index --no-deps`) into a directory
   put first on PYTHONPATH, so the machine's own torch and packages are used (a distribution
   the machine already has is kept; one the bundle leaves to the machine and the machine
   lacks is named, and nothing runs); `--torch-from WHEELHOUSE` instead makes a bare venv
   and installs torch there offline from that directory, then the whole bundle (the CPU
   test's way). Then it runs stage 2 with that Python.
2. proof: starts the S3 server (or uses --s3-url), builds
   LMCacheEngineConfig + LMCacheMetadata for Qwen3-32B's TP-2 rank (64 layers, 4 of its 8
   KV heads, head dim 128, bf16, chunk 256: one 32 MiB object per chunk),
   LMCacheEngineBuilder.get_or_create with the GPU connector LMCache gives vLLM
   (CreateGPUConnector -> VLLMPagedMemGPUConnectorV2, KV layout NHD as vLLM's
   FlashAttention), `remote_url: s3://127.0.0.1:PORT`, `local_cpu: False`. The KV cache is
   vLLM's paged layout (per layer [2, blocks, 16, heads, 128], random bf16 on the device).
   Per repeat: fresh tokens, engine.store() until every upload finished, the KV cache
   zeroed, engine.retrieve() into other blocks, and the loaded tokens compared with a copy
   of what was stored (torch.equal). Store and load times give GB/s, per chunk and per
   token, set against the planner's figures (the bundle's plan.json, from deploykit's
   plan/breakeven.py: chunk bytes, the assumed storage Gbit/s, the predicted prefill).

`--device cpu` runs the same path on CPU tensors: LMCache's CPU device ops (its pure-torch
multi_layer_kv_transfer) instead of CUDA's, and VLLMPagedMemGPUConnectorV2 with its two
CUDA-only statements replaced (CUDA streams; the `device.type == "cuda"` assert): see
HostPagedConnector.

Usage (bench/gpu-kv-proof.sh wraps it):
    python3 bench/gpu-kv-proof.py --bundle gpu-kv-bundle [--device cuda|cpu] [--layers N]
        [--chunks N] [--repeats N] [--budget-s S] [--out DIR] [--torch-from WHEELHOUSE]
        [--s3-url http://BUCKET.HOST:PORT]   (keys: AWS_ACCESS_KEY_ID/SECRET)

Output: gpu-kv-proof.json and gpu-kv-proof.txt in --out (default: $OUT when set, else
runs/gpu-kv-proof). Exit codes: 0 done; 2 usage; 3 a precondition (no wheels for this
Python, torch missing, no CUDA device, LMCache does not import); 5 the S3 endpoint did not
start; 6 a measurement failed (bytes differ, a chunk not stored or not loaded); 7 out of
time. Every failure is one line on stderr; what was measured until then is still written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

SCHEMA = "deploykit-gpu-kv-proof/1"
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
INNER = "DEPLOYKIT_GPU_KV_PROOF_INNER"  # set for stage 2

EXIT_USAGE = 2
EXIT_PRECONDITION = 3
EXIT_START = 5
EXIT_MEASURE = 6
EXIT_TIME = 7

# The example's model and its TP-2 rank (deploy_kit/data/models.yaml: Qwen/Qwen3-32B;
# inventory/example: vllm_tensor_parallel_size 2). tests/unit/test_gpu_kv_proof.py holds
# these to deploykit's own geometry and render.
MODEL = "Qwen/Qwen3-32B"
NUM_LAYERS = 64
NUM_KV_HEADS = 8
HEAD_DIM = 128
DTYPE_BYTES = 2  # bfloat16
TENSOR_PARALLEL = 2
KV_HEADS_PER_RANK = NUM_KV_HEADS // TENSOR_PARALLEL
CHUNK_TOKENS = 256  # lmcache_chunk_size
BLOCK_TOKENS = 16  # vLLM's block size
PYTHONHASHSEED = "67"  # the seed's start command: the same builtin hash in every process
# What deploykit renders into lmcache.yaml for lmcache_mode s3 (render/lmcache.py), less
# what this proof must set otherwise: enable_async_loading (the async path needs vLLM's
# scheduler-side lookup first) and pre_caching_hash_algorithm (sha256_cbor is looked up in
# vLLM; without vLLM LMCache falls back to builtin, so builtin is named here).
LMCACHE_CONFIG: dict[str, Any] = {
    "chunk_size": CHUNK_TOKENS, "local_cpu": False, "remote_serde": "naive",
    "pre_caching_hash_algorithm": "builtin", "save_unfull_chunk": False,
    "enable_async_loading": False, "blocking_timeout_secs": 100,
}
S3_EXTRA: dict[str, Any] = {"s3_region": "default", "s3_num_io_threads": 64,
                            "s3_prefer_http2": False, "s3_enable_s3express": False,
                            "disable_tls": True, "save_chunk_meta": False}
LMCACHE_VERSION = "0.5.6"


class Fail(Exception):
    """A precondition or step that failed: one line, one exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# --- pure arithmetic (unit-tested) ------------------------------------------------------------

def object_bytes(layers: int, heads: int = KV_HEADS_PER_RANK, head_dim: int = HEAD_DIM,
                 chunk: int = CHUNK_TOKENS, dtype_bytes: int = DTYPE_BYTES) -> int:
    """One S3 object: one rank's K and V of every layer for one chunk (LMCache's KV_2LTD
    memory object, remote_serde naive: the raw bytes)."""
    return 2 * layers * heads * head_dim * chunk * dtype_bytes


def rates(nbytes: int, seconds: float, chunks: int, tokens: int) -> dict[str, float | None]:
    """GB/s (10^9), Gbit/s, seconds per chunk (one rank's object) and per token."""
    if seconds <= 0:
        return {"s": seconds, "gb_per_s": None, "gbit_per_s": None, "s_per_chunk": None,
                "us_per_token": None}
    return {"s": seconds, "gb_per_s": nbytes / seconds / 1e9,
            "gbit_per_s": nbytes * 8 / seconds / 1e9, "s_per_chunk": seconds / chunks,
            "us_per_token": seconds / tokens * 1e6}


def against_plan(plan: dict[str, Any] | None, load_gbps: float | None,
                 store_gbps: float | None) -> dict[str, Any]:
    """The measured single-rank rates set against the planner's figures: its assumed GET
    bandwidth per serving host, the time one full chunk (all ranks) takes at each rate, and
    per context length whether loading a rank's share at the measured rate beats the
    predicted prefill (a TP-2 host loads both shares at once, one per rank)."""
    if not plan:
        return {}
    chunk_bytes = plan["chunk_bytes"]
    gbps = plan["storage_gbps"]
    out: dict[str, Any] = {
        "plan_storage_gbps": gbps,
        "plan_chunk_s": chunk_bytes * 8 / (gbps * 1e9),
        "plan_us_per_token": plan["bytes_per_token"] * 8 / (gbps * 1e9) * 1e6,
        "measured_load_vs_plan": load_gbps / gbps if load_gbps else None,
        "measured_store_vs_plan": store_gbps / gbps if store_gbps else None,
        "chunk_s_at_measured_load": chunk_bytes * 8 / (load_gbps * 1e9) if load_gbps else None,
        "contexts": [],
    }
    for row in plan.get("rows", []):
        rank_bytes = row["kv_bytes"] / plan["tensor_parallel"]
        load_s = rank_bytes * 8 / (load_gbps * 1e9) if load_gbps else None
        predicted = row["predicted_prefill_s"]
        out["contexts"].append({
            "context_tokens": row["context_tokens"], "predicted_prefill_s": predicted,
            "plan_storage_s": row["storage_s"],
            "breakeven_storage_gbps": row["breakeven_storage_gbps"],
            "load_s_at_measured": load_s,
            "load_wins": (load_s < predicted) if load_s is not None and predicted else None})
    return out


def wheel_tags(name: str) -> tuple[str, str, str]:
    """(python tag, abi tag, platform tag) of a wheel file name."""
    parts = name[:-4].split("-")
    return parts[-3], parts[-2], parts[-1]


def wheel_fits(name: str, major: int, minor: int) -> bool:
    """Whether a manylinux x86_64 wheel installs on CPython major.minor: pure, abi3 from
    its version on, or built for exactly this version."""
    py, abi, plat = wheel_tags(name)
    if plat != "any" and "x86_64" not in plat:
        return False
    for tag in py.split("."):
        if tag in ("py3", f"py{major}", f"py{major}{minor}") and abi == "none":
            return True
        if tag == f"cp{major}{minor}":
            return True
        if (abi == "abi3" and tag.startswith(f"cp{major}")
                and int(tag[len(f"cp{major}"):] or 0) <= minor):
            return True
    return False


def dist_name(wheel: str) -> str:
    return wheel.split("-", 1)[0].lower().replace("_", "-")


def pick_wheels(names: list[str], major: int, minor: int) -> dict[str, str]:
    """distribution -> the bundle's wheel for this Python (an exact cpXY wheel over abi3
    over pure, as pip prefers)."""
    rank = {"cp": 0, "abi3": 1, "none": 2}
    chosen: dict[str, tuple[int, str]] = {}
    for name in sorted(names):
        if not name.endswith(".whl") or not wheel_fits(name, major, minor):
            continue
        _, abi, _ = wheel_tags(name)
        score = rank["abi3"] if abi == "abi3" else rank["none"] if abi == "none" else rank["cp"]
        dist = dist_name(name)
        if dist not in chosen or score < chosen[dist][0]:
            chosen[dist] = (score, name)
    return {dist: name for dist, (_, name) in chosen.items()}


# --- the result document ----------------------------------------------------------------------

TOP_KEYS: dict[str, type | tuple[type, ...]] = {
    "schema": str, "status": str, "device": str, "started": str, "seconds": float,
    "environment": dict, "geometry": dict, "lmcache": dict, "s3": dict, "repeats": list,
    "summary": dict, "plan": dict, "vs_plan": dict, "notes": list,
    "error": (str, type(None)), "exit_code": int}


def schema_problems(doc: dict[str, Any]) -> list[str]:
    problems = [f"{key}: missing or not {kind}" for key, kind in TOP_KEYS.items()
                if not isinstance(doc.get(key), kind)]
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema is {doc.get('schema')!r}, not {SCHEMA}")
    for i, rep in enumerate(doc.get("repeats") or []):
        for key in ("store", "load", "identical", "tokens", "chunks"):
            if key not in rep:
                problems.append(f"repeats[{i}].{key}: missing")
    return problems


def summarise(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the repeats of each rate, and whether every repeat matched."""
    out: dict[str, Any] = {"repeats": len(repeats),
                           "all_identical": bool(repeats) and all(r["identical"]
                                                                  for r in repeats)}
    for phase in ("store", "load"):
        values: dict[str, Any] = {}
        for key in ("s", "gb_per_s", "gbit_per_s", "s_per_chunk", "us_per_token"):
            got = [r[phase][key] for r in repeats if r[phase].get(key) is not None]
            values[key] = statistics.median(got) if got else None
        out[phase] = values
    return out


def text_table(doc: dict[str, Any]) -> str:
    def f(value: Any, spec: str = ".3f") -> str:
        return "-" if value is None else format(value, spec)

    env, geo, s = doc["environment"], doc["geometry"], doc["summary"]
    lines = [f"gpu-kv-proof {doc['status']} on {doc['device']} "
             f"({env.get('device_name') or platform.machine()}): LMCache "
             f"{doc['lmcache'].get('version', '?')}, torch {env.get('torch', '?')}, "
             f"Python {env.get('python', '?')}",
             f"geometry: {geo.get('model')} TP {geo.get('tensor_parallel')} rank: "
             f"{geo.get('layers')} layers x {geo.get('kv_heads')} KV heads x "
             f"{geo.get('head_dim')}, bf16, chunk {geo.get('chunk_tokens')} tokens = "
             f"{f((geo.get('object_bytes') or 0) / 2**20, '.1f')} MiB per object",
             f"extension: {doc['lmcache'].get('extension')}"]
    if s.get("store"):
        lines.append(f"{'phase':>6} {'GB/s':>8} {'Gbit/s':>8} {'ms/chunk':>9} {'us/token':>9}"
                     f"   (medians of {s['repeats']}; identical: {s['all_identical']})")
        for phase in ("store", "load"):
            p = s[phase]
            ms = p["s_per_chunk"] * 1e3 if p["s_per_chunk"] is not None else None
            lines.append(f"{phase:>6} {f(p['gb_per_s']):>8} {f(p['gbit_per_s'], '.2f'):>8} "
                         f"{f(ms, '.2f'):>9} {f(p['us_per_token'], '.2f'):>9}")
    vs = doc["vs_plan"]
    if vs:
        lines.append(f"plan: {vs['plan_storage_gbps']:g} Gbit/s per serving host, a full "
                     f"chunk (all ranks) in {vs['plan_chunk_s'] * 1e3:.1f} ms; measured load "
                     f"{f(vs['measured_load_vs_plan'], '.2f')} x plan, store "
                     f"{f(vs['measured_store_vs_plan'], '.2f')} x plan")
        for c in vs["contexts"]:
            lines.append(f"  {c['context_tokens']:>6} tokens: prefill "
                         f"{f(c['predicted_prefill_s'])} s predicted, rank share loaded in "
                         f"{f(c['load_s_at_measured'])} s at the measured rate "
                         f"(load wins: {c['load_wins']})")
    lines += [f"note: {n}" for n in doc["notes"]]
    if doc["error"]:
        lines.append(f"error: {doc['error']}")
    return "\n".join(lines) + "\n"


def write_result(out: Path, doc: dict[str, Any], error: Fail | None) -> int:
    if error is not None:
        doc["status"], doc["error"], doc["exit_code"] = "failed", str(error), error.code
    problems = schema_problems(doc)
    if problems and error is None:
        error = Fail(EXIT_MEASURE, f"the result does not match {SCHEMA}: {problems[:3]}")
        doc["status"], doc["error"], doc["exit_code"] = "failed", str(error), error.code
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-kv-proof.json").write_text(json.dumps(doc, indent=2) + "\n")
    text = text_table(doc)
    (out / "gpu-kv-proof.txt").write_text(text)
    if error is not None:
        print(f"gpu-kv-proof: {error}", file=sys.stderr)
        return error.code
    print(text, end="")
    return 0


def new_doc(args: argparse.Namespace, started_iso: str) -> dict[str, Any]:
    return {"schema": SCHEMA, "status": "ok", "device": args.device, "started": started_iso,
            "seconds": 0.0, "environment": {"python": platform.python_version()},
            "geometry": {}, "lmcache": {}, "s3": {}, "repeats": [], "summary": {},
            "plan": {}, "vs_plan": {}, "notes": [], "error": None, "exit_code": 0}


# --- stage 1: setup ---------------------------------------------------------------------------

def load_manifest(bundle: Path) -> dict[str, Any]:
    path = bundle / "manifest.json"
    if not path.is_file():
        raise Fail(EXIT_PRECONDITION, f"no bundle at {bundle} (manifest.json missing): build "
                   "it with `make gpu-kv-bundle` and carry it along")
    manifest: dict[str, Any] = json.loads(path.read_text())
    return manifest


def machine_has() -> set[str]:
    """Distributions this Python already has, normalised names."""
    import importlib.metadata

    return {(d.metadata["Name"] or "").lower().replace("_", "-")
            for d in importlib.metadata.distributions()}


def pip(python: Path, *args: str, timeout: float) -> None:
    cmd = [str(python), "-m", "pip", "install", "-q", "--no-index",
           "--disable-pip-version-check", *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False,
                              timeout=max(10.0, timeout))
    except subprocess.TimeoutExpired:
        raise Fail(EXIT_TIME, f"pip install did not finish in {timeout:.0f} s") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise Fail(EXIT_PRECONDITION, f"offline pip install failed: {tail}")


def setup(args: argparse.Namespace, doc: dict[str, Any],
          deadline: float) -> tuple[list[str], dict[str, str]]:
    """The bundle installed offline; returns the command that runs stage 2 and what it adds
    to the environment. On the machine's Python (the lent image's python3 is itself a
    venv, /opt/torch/.venv, whose packages a `venv --system-site-packages` would not see):
    the wheels go into a --target directory put first on PYTHONPATH, only those of
    distributions the machine lacks, lmcache always. With --torch-from: a bare venv, torch
    installed there from that wheel directory, then every wheel of the bundle."""
    bundle = Path(args.bundle).absolute()
    manifest = load_manifest(bundle)
    major, minor = sys.version_info[:2]
    have = sorted(manifest.get("pythons", []))
    version = f"{major}.{minor}"
    if version not in have:
        raise Fail(EXIT_PRECONDITION, f"the bundle {bundle} has no wheels for Python "
                   f"{version} (it has {', '.join(have) or 'none'}): rebuild it with `make "
                   f"gpu-kv-bundle GPU_KV_PYTHONS={version}` or run a Python it has")
    wheels = pick_wheels([p.name for p in (bundle / "wheels").glob("*.whl")], major, minor)
    missing = [d for d in manifest.get("distributions", []) if d not in wheels]
    if missing:
        raise Fail(EXIT_PRECONDITION, f"the bundle lacks wheels of {', '.join(missing)} for "
                   f"Python {version}: rebuild it with `make gpu-kv-bundle`")
    work = Path(args.work).absolute()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    extra_env: dict[str, str] = {}
    if args.torch_from:
        venv = work / "venv"
        made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True,
                              text=True, check=False)
        if made.returncode != 0:
            raise Fail(EXIT_PRECONDITION, f"python -m venv {venv} failed: "
                       f"{(made.stderr.strip().splitlines() or ['?'])[-1]}")
        python = venv / "bin" / "python"
        pip(python, "--find-links", str(Path(args.torch_from).absolute()),
            f"torch=={args.torch_version}", timeout=deadline - time.monotonic())
        present: set[str] = set()
        target: list[str] = []
    else:
        python = Path(sys.executable)
        present = machine_has()
        site = work / "site"
        target = ["--target", str(site)]
        extra_env["PYTHONPATH"] = os.pathsep.join(
            [str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    lacking = [d for d in manifest.get("assumed_on_machine", []) if d not in present]
    if lacking:
        raise Fail(EXIT_PRECONDITION, f"the bundle leaves {', '.join(lacking)} to the machine "
                   f"and {sys.executable} lacks {'it' if len(lacking) == 1 else 'them'}: "
                   "rebuild it with `make gpu-kv-bundle GPU_KV_FULL=1`")
    install = [name for dist, name in sorted(wheels.items())
               if dist == "lmcache" or dist not in present]
    pip(python, "--no-deps", "--no-compile", *target,
        *[str(bundle / "wheels" / n) for n in install], timeout=deadline - time.monotonic())
    doc["environment"]["bundle"] = {"path": str(bundle), "pythons": have,
                                    "installed": install, "into": target[-1] if target
                                    else str(python.parent.parent),
                                    "kept_from_machine": sorted(set(wheels) - {
                                        dist_name(n) for n in install}),
                                    "plan_json": (bundle / "plan.json").is_file()}
    return [str(python), str(Path(__file__).resolve()), *args.passthrough], extra_env


# --- stage 2: the proof -----------------------------------------------------------------------

def start_s3(deadline: float, logs: Path) -> tuple[subprocess.Popen[bytes], str]:
    port_file = logs / "s3.port"
    port_file.unlink(missing_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / "s3-server.log").open("ab") as log:
        proc = subprocess.Popen([sys.executable, str(HERE / "s3_test_server.py"),
                                 "--port", "0", "--port-file", str(port_file)],
                                stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    until = min(deadline, time.monotonic() + 20)
    while time.monotonic() < until:
        if proc.poll() is not None:
            raise Fail(EXIT_START, f"the S3 test server exited {proc.returncode} "
                       f"(log {logs / 's3-server.log'})")
        with contextlib.suppress(OSError, ValueError):
            port = int(port_file.read_text().strip())
            return proc, f"127.0.0.1:{port}"
        time.sleep(0.05)
    proc.kill()
    raise Fail(EXIT_START, "the S3 test server did not listen within 20 s")


def s3_stats(endpoint: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{endpoint}/?x-deploykit-stats", timeout=10) as r:
        stats: dict[str, Any] = json.loads(r.read())
    return stats


def extension_status(torch: Any, device_ops: Any) -> dict[str, Any]:
    """Whether LMCache's compiled CUDA ops are in use, and why not (the import error)."""
    # LMCache sets _native_bound before it tries the import: it says "tried", not "loaded"
    info: dict[str, Any] = {"device_ops": type(device_ops).__name__,
                            "native_tried": bool(getattr(device_ops, "_native_bound", False))}
    try:
        import lmcache.cuda_ops  # noqa: F401

        info["cuda_ops_import"] = "ok"
    except ImportError as exc:
        info["cuda_ops_import"] = f"{type(exc).__name__}: {exc}"
    kernel = getattr(device_ops, "multi_layer_kv_transfer", None)
    module = getattr(kernel, "__module__", "") or ""
    info["kv_transfer_from"] = module or type(kernel).__name__
    info["compiled"] = "cuda_ops" in module or module.startswith("lmcache.cuda_ops") or (
        info["cuda_ops_import"] == "ok" and type(device_ops).__name__ == "CudaDeviceOps"
        and not module.startswith("lmcache.v1.platform"))
    return info


def host_connector_class(base: Any, torch: Any) -> Any:
    """VLLMPagedMemGPUConnectorV2 for CPU tensors: its CUDA streams become no-op objects
    and _initialize_pointers is LMCache 0.5.6's body without the `device.type == "cuda"`
    assert. Everything else (format detection, the pointer table, LMCache's
    multi_layer_kv_transfer for D2H and H2D, MemoryObj formats) is LMCache's own."""
    from lmcache.utils import EngineType
    from lmcache.v1.gpu_connector import gpu_connectors as g

    class HostStream:
        def synchronize(self) -> None:
            pass

    class HostPagedConnector(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            real = torch.cuda.Stream
            torch.cuda.Stream = HostStream
            try:
                super().__init__(*args, **kwargs)
            finally:
                torch.cuda.Stream = real

        def _initialize_pointers(self, kv_caches: Any) -> Any:
            self.device = kv_caches[0].device
            idx = self.device.index
            if idx in self.kv_cache_pointers_on_gpu:
                return self.kv_cache_pointers_on_gpu[idx]
            self.engine_kv_format, kv_caches = g.normalize_kv_and_discover_format(
                kv_caches, EngineType.VLLM, layout_hints=self.layout_hints)
            self.kv_cache_pointers.numpy()[:] = [t.data_ptr() for t in kv_caches]
            self.kv_cache_pointers_on_gpu[idx] = torch.empty(
                self.num_layers, dtype=torch.int64, device=self.device)
            self.kv_cache_pointers_on_gpu[idx].copy_(self.kv_cache_pointers)
            self.num_blocks = g.get_num_blocks(kv_caches, self.engine_kv_format)
            self.block_size = g.get_block_size(kv_caches, self.engine_kv_format)
            self.page_buffer_size = self.num_blocks * self.block_size
            self.head_size = g.get_head_size(kv_caches, self.engine_kv_format)
            self.block_stride_elems = g.resolve_block_stride_and_log_layout(
                kv_caches, self.engine_kv_format, layer_idx=0, group_idx=0) or 0
            return self.kv_cache_pointers_on_gpu[idx]

    return HostPagedConnector


def proof(args: argparse.Namespace, doc: dict[str, Any], deadline: float) -> None:
    os.environ.setdefault("PYTHONHASHSEED", PYTHONHASHSEED)
    env = doc["environment"]
    try:
        import torch
    except ImportError as exc:
        raise Fail(EXIT_PRECONDITION, f"torch does not import in {sys.executable}: {exc}"
                   ) from None
    env["torch"] = torch.__version__
    env["torch_cuda"] = torch.version.cuda
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise Fail(EXIT_PRECONDITION, f"torch {torch.__version__} sees no CUDA device "
                       "(--device cpu runs the CPU path)")
        props = torch.cuda.get_device_properties(0)
        env["device_name"] = props.name
        env["device_memory_gib"] = round(props.total_memory / 2**30, 1)
    try:
        import lmcache
        from lmcache import device_ops
        from lmcache.utils import mock_up_broadcast_fn, mock_up_broadcast_object_fn
        from lmcache.v1.cache_engine import LMCacheEngineBuilder
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.gpu_connector import CreateGPUConnector
        from lmcache.v1.gpu_connector.gpu_connectors import VLLMPagedMemGPUConnectorV2
        from lmcache.v1.metadata import LMCacheMetadata
    except ImportError as exc:
        raise Fail(EXIT_PRECONDITION, f"LMCache does not import in {sys.executable}: {exc}"
                   ) from None
    device_ops.ensure_native()
    ext = extension_status(torch, device_ops)
    doc["lmcache"] = {"version": getattr(lmcache, "__version__", "unknown"),
                      "extension": "compiled cuda_ops" if ext["compiled"] else
                      f"pure-torch fallback ({ext['device_ops']})", "extension_detail": ext}
    if args.device == "cuda" and not ext["compiled"]:
        doc["notes"].append("LMCache's cuda_ops extension did not load "
                            f"({ext['cuda_ops_import']}): the copies ran on its pure-torch "
                            "fallback ('compiled extension not found')")

    layers = args.layers
    obj_bytes = object_bytes(layers)
    tokens_n = args.chunks * CHUNK_TOKENS
    doc["geometry"] = {"model": MODEL, "tensor_parallel": TENSOR_PARALLEL, "rank": 0,
                       "layers": layers, "model_layers": NUM_LAYERS,
                       "kv_heads": KV_HEADS_PER_RANK, "model_kv_heads": NUM_KV_HEADS,
                       "head_dim": HEAD_DIM, "dtype": "bfloat16",
                       "chunk_tokens": CHUNK_TOKENS, "block_tokens": BLOCK_TOKENS,
                       "object_bytes": obj_bytes, "full_model_object_bytes":
                       object_bytes(NUM_LAYERS), "chunks_per_repeat": args.chunks,
                       "tokens_per_repeat": tokens_n, "kv_layout": "NHD"}
    plan_path = Path(args.bundle).absolute() / "plan.json" if args.bundle else None
    if plan_path and plan_path.is_file():
        doc["plan"] = json.loads(plan_path.read_text())

    server = None
    logs = Path(args.out) / "logs"
    if args.s3_url:
        # LMCache's S3 connector addresses the bucket by its host name (virtual-host
        # style), as deploykit's remote_url does: the URL names the bucket's endpoint
        endpoint = args.s3_url.split("://", 1)[-1].rstrip("/")
        remote = f"s3://{endpoint}"
        keys = {"aws_access_key_id": os.environ.get("AWS_ACCESS_KEY_ID"),
                "aws_secret_access_key": os.environ.get("AWS_SECRET_ACCESS_KEY")}
        doc["s3"] = {"endpoint": args.s3_url, "server": "external", "remote_url": remote}
    else:
        server, endpoint = start_s3(deadline, logs)
        remote = f"s3://{endpoint}"
        # the test server accepts any signature; the CRT client still signs every request
        keys = {"aws_access_key_id": "deploykit-test", "aws_secret_access_key": "deploykit-test"}
        doc["s3"] = {"endpoint": f"http://{endpoint}", "remote_url": remote,
                     "server": "bench/s3_test_server.py (in memory, 127.0.0.1)"}
    engine = None
    try:
        max_cpu_gb = max(0.5, round(obj_bytes * (args.chunks + 2) * 2 / 1e9 + 0.25, 2))
        cfg_dict = LMCACHE_CONFIG | {"max_local_cpu_size": max_cpu_gb, "remote_url": remote,
                                     "extra_config": S3_EXTRA | keys}
        config = LMCacheEngineConfig.from_dict(cfg_dict)
        doc["lmcache"]["config"] = {k: v for k, v in cfg_dict.items() if k != "extra_config"} | {
            "extra_config": S3_EXTRA | {"aws_access_key_id": "(set)"}}
        metadata = LMCacheMetadata(
            model_name=MODEL, world_size=TENSOR_PARALLEL, local_world_size=TENSOR_PARALLEL,
            worker_id=0, local_worker_id=0, kv_dtype=torch.bfloat16,
            kv_shape=(layers, 2, CHUNK_TOKENS, KV_HEADS_PER_RANK, HEAD_DIM),
            chunk_size=CHUNK_TOKENS)
        hints = {"kv_layout": "NHD"}  # vLLM's FlashAttention layout on CUDA
        if args.device == "cuda":
            from lmcache.utils import EngineType

            connector = CreateGPUConnector(config, metadata, EngineType.VLLM,
                                           layout_hints=hints)
        else:
            connector = host_connector_class(VLLMPagedMemGPUConnectorV2, torch).from_metadata(
                metadata, use_gpu=False, device=torch.device("cpu"), layout_hints=hints)
        doc["lmcache"]["connector"] = type(connector).__name__
        engine = LMCacheEngineBuilder.get_or_create(
            "gpu-kv-proof", config, metadata, connector, mock_up_broadcast_fn,
            mock_up_broadcast_object_fn)
        engine.post_init()
        backends = engine.storage_manager.storage_backends
        remote_backend = backends.get("RemoteBackend")
        if remote_backend is None:
            raise Fail(EXIT_MEASURE, f"LMCache built no RemoteBackend for {remote} "
                       f"(backends: {', '.join(backends)})")
        doc["lmcache"]["backends"] = list(backends)
        run_repeats(args, doc, torch, engine, remote_backend, deadline, obj_bytes, tokens_n,
                    endpoint if server else None)
    finally:
        if engine is not None:
            # 0.5.6's RemoteBackend.close waits on the S3 connector's executor and may not
            # return: close in a thread, give it 10 s; the process exits with os._exit
            closer = threading.Thread(target=LMCacheEngineBuilder.destroy,
                                      args=("gpu-kv-proof",), daemon=True)
            closer.start()
            closer.join(10)
            if closer.is_alive():
                doc["notes"].append("LMCacheEngineBuilder.destroy did not return within 10 s "
                                    "(RemoteBackend.close); the process exit ended it")
        if server is not None:
            server.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(5)


def run_repeats(args: argparse.Namespace, doc: dict[str, Any], torch: Any, engine: Any,
                remote_backend: Any, deadline: float, obj_bytes: int, tokens_n: int,
                stats_endpoint: str | None) -> None:
    device = torch.device("cuda:0" if args.device == "cuda" else "cpu")
    blocks_needed = tokens_n // BLOCK_TOKENS
    num_blocks = 2 * blocks_needed + 16  # room for the load to land in other blocks
    gen = torch.Generator(device="cpu").manual_seed(args.seed)  # tokens and block tables
    gen_kv = torch.Generator(device=device).manual_seed(args.seed)  # the KV, on the device
    # vLLM's paged KV cache (FlashAttention, NHD): per layer [2, blocks, block, heads, dim]
    kv = [torch.empty((2, num_blocks, BLOCK_TOKENS, KV_HEADS_PER_RANK, HEAD_DIM),
                      dtype=torch.bfloat16, device=device) for _ in range(args.layers)]
    doc["geometry"]["kv_cache_bytes"] = sum(t.numel() * t.element_size() for t in kv)
    doc["seed"] = args.seed

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def slots_for(blocks: Any) -> Any:
        offsets = torch.arange(BLOCK_TOKENS).repeat(len(blocks))
        return (blocks.repeat_interleave(BLOCK_TOKENS) * BLOCK_TOKENS + offsets).to(
            device=device, dtype=torch.long)

    def gather(slots: Any) -> Any:
        return torch.stack([t.view(2, num_blocks * BLOCK_TOKENS, KV_HEADS_PER_RANK,
                                   HEAD_DIM)[:, slots] for t in kv])

    def wait_uploads(what: str) -> None:
        while remote_backend.put_tasks:
            if time.monotonic() > deadline:
                raise Fail(EXIT_TIME, f"{what}: uploads still running at the budget's end")
            time.sleep(0.0005)

    def one(label: str, chunks: int) -> dict[str, Any]:
        n = chunks * CHUNK_TOKENS
        for t in kv:  # random bf16, made on the device
            t.normal_(generator=gen_kv)
        perm = torch.randperm(num_blocks, generator=gen)
        src_slots = slots_for(perm[: n // BLOCK_TOKENS])
        dst_slots = slots_for(perm[n // BLOCK_TOKENS: 2 * (n // BLOCK_TOKENS)])
        tokens = torch.randint(1000, 31000, (n,), generator=gen)  # on the host, as vLLM's
        stored_copy = gather(src_slots).clone()
        sync()
        t0 = time.perf_counter()
        engine.store(tokens, kvcaches=kv, slot_mapping=src_slots)
        t_call = time.perf_counter()
        wait_uploads(label)
        t_stored = time.perf_counter()
        for t in kv:
            t.zero_()
        sync()
        t1 = time.perf_counter()
        mask = engine.retrieve(tokens, kvcaches=kv, slot_mapping=dst_slots)
        sync()
        t_loaded = time.perf_counter()
        loaded = int(mask.sum())
        identical = bool(torch.equal(gather(dst_slots), stored_copy))
        return {"label": label, "chunks": chunks, "tokens": n, "loaded_tokens": loaded,
                "identical": identical, "bytes": chunks * obj_bytes,
                "store_call_s": t_call - t0,
                "store": rates(chunks * obj_bytes, t_stored - t0, chunks, n),
                "load": rates(chunks * obj_bytes, t_loaded - t1, chunks, n)}

    warm = one("warm-up", 1)  # first connections, allocator and pointer tables
    doc["warmup"] = warm
    if not warm["identical"] or warm["loaded_tokens"] != warm["tokens"]:
        raise Fail(EXIT_MEASURE, f"warm-up chunk: loaded {warm['loaded_tokens']} of "
                   f"{warm['tokens']} tokens, identical {warm['identical']}")
    for r in range(args.repeats):
        if time.monotonic() > deadline - args.reserve_s:
            doc["notes"].append(f"stopped after {r} of {args.repeats} repeats: budget")
            break
        rep = one(f"repeat {r}", args.chunks)
        doc["repeats"].append(rep)
        if rep["loaded_tokens"] != rep["tokens"]:
            raise Fail(EXIT_MEASURE, f"repeat {r}: LMCache loaded {rep['loaded_tokens']} of "
                       f"{rep['tokens']} tokens back from S3")
        if not rep["identical"]:
            raise Fail(EXIT_MEASURE, f"repeat {r}: the loaded KV differs from what was stored")
    if not doc["repeats"]:
        raise Fail(EXIT_TIME, "no repeat fitted in the budget after the warm-up")
    if stats_endpoint:
        stats = s3_stats(stats_endpoint)
        doc["s3"]["stats"] = stats
        expected = (1 + args.chunks * len(doc["repeats"]))
        if stats.get("objects") != expected or stats.get("bytes") != expected * obj_bytes:
            raise Fail(EXIT_MEASURE, f"the S3 endpoint holds {stats.get('objects')} objects "
                       f"({stats.get('bytes')} bytes), not {expected} of {obj_bytes}")
        if not stats.get("requests", {}).get("GetObject"):
            raise Fail(EXIT_MEASURE, "the load sent no GET to the S3 endpoint")


def assemble(doc: dict[str, Any], started: float) -> None:
    doc["summary"] = summarise(doc["repeats"])
    load = (doc["summary"].get("load") or {}).get("gbit_per_s")
    store = (doc["summary"].get("store") or {}).get("gbit_per_s")
    doc["vs_plan"] = against_plan(doc["plan"] or None, load, store)
    if doc["device"] == "cpu":
        doc["notes"].append("CPU mode: CPU tensors, LMCache's CPU device ops (pure torch) and "
                            "its vLLM connector without CUDA streams; no GPU figure")
    if doc.get("s3", {}).get("server", "").startswith("bench/"):
        doc["notes"].append("the S3 endpoint is a Python test server in memory on this "
                            "machine: the rates are LMCache's path against that server (it "
                            "caps them), not a Ceph RGW's")
    if doc["geometry"].get("layers") != NUM_LAYERS:
        doc["notes"].append(f"{doc['geometry'].get('layers')} of {NUM_LAYERS} layers: objects "
                            "are that share of the example's 32 MiB; rates are per byte")
    doc["seconds"] = round(time.monotonic() - started, 3)


# --- main -------------------------------------------------------------------------------------

def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--bundle", default=str(REPO / "gpu-kv-bundle"),
                        help="the wheel bundle (make gpu-kv-bundle)")
    parser.add_argument("--work", default=str(Path(os.environ.get("TMPDIR", "/tmp"))
                                              / "deploykit-gpu-kv"),
                        help="made anew: the installed wheels (site/) or the bare venv "
                        "(venv/); not under $OUT, whose files come back")
    parser.add_argument("--torch-from", help="install torch offline from this wheel "
                        "directory into a bare venv (CPU test); default: the machine's torch")
    parser.add_argument("--torch-version", default="2.13.0")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--layers", type=int, default=NUM_LAYERS,
                        help=f"layers of the KV (default {NUM_LAYERS}, the model's)")
    parser.add_argument("--chunks", type=int, default=16, help="chunks per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, help="of the tokens and the KV (default: from "
                        "the clock, so a run against a kept endpoint writes new keys)")
    parser.add_argument("--s3-url", help="a real S3 endpoint instead of the bundled test "
                        "server: the bucket's virtual-host URL, http://BUCKET.HOST[:PORT] "
                        "(deploykit's remote_url, e.g. http://lmcache.s3.cephlab.com:80); "
                        "keys from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; plain HTTP")
    parser.add_argument("--budget-s", type=float, default=540.0)
    parser.add_argument("--reserve-s", type=float, default=20.0,
                        help="no new repeat starts with less than this left")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "runs/gpu-kv-proof"))
    parser.add_argument("--no-setup", action="store_true",
                        help="run the proof in this Python as it is (LMCache installed)")
    args = parser.parse_args(argv)
    if not 1 <= args.layers <= NUM_LAYERS:
        parser.error(f"--layers: 1 to {NUM_LAYERS}")
    if args.chunks < 1 or args.repeats < 1:
        parser.error("--chunks and --repeats: at least 1")
    if args.s3_url and not args.s3_url.startswith("http://"):
        parser.error("--s3-url: http://BUCKET.HOST[:PORT] (the proof disables TLS)")
    args.passthrough = list(argv if argv is not None else sys.argv[1:])
    if args.seed is None:
        args.seed = time.time_ns() % 2**31
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started, started_iso = time.monotonic(), time.strftime("%Y-%m-%dT%H:%M:%S%z")
    deadline = started + args.budget_s
    out = Path(args.out)
    doc = new_doc(args, started_iso)
    error: Fail | None = None
    inner = os.environ.get(INNER) == "1" or args.no_setup
    try:
        if not inner:
            command, extra_env = setup(args, doc, deadline)
            env = dict(os.environ, **{INNER: "1", "PYTHONHASHSEED": PYTHONHASHSEED}, **extra_env)
            env.pop("PYTHONHOME", None)
            # no usage report from LMCache: the machine has no network, and this one's
            # traffic stays on loopback
            env |= {"LMCACHE_TRACK_USAGE": "false", "DO_NOT_TRACK": "1"}
            left = max(1.0, deadline - time.monotonic())
            (out / "logs").mkdir(parents=True, exist_ok=True)
            (out / "setup.json").write_text(json.dumps(doc["environment"], indent=2) + "\n")
            try:
                done = subprocess.run([*command, "--budget-s", f"{left:.0f}"], env=env,
                                      check=False, timeout=left + 30)
            except subprocess.TimeoutExpired:
                raise Fail(EXIT_TIME, "the proof ran past its budget") from None
            return done.returncode
        setup_file = out / "setup.json"
        if setup_file.is_file():
            doc["environment"] |= json.loads(setup_file.read_text())
        proof(args, doc, deadline)
    except Fail as exc:
        error = exc
    except KeyboardInterrupt:
        error = Fail(EXIT_TIME, "interrupted")
    except Exception as exc:  # LMCache's own failures: one line, the traceback in the log
        import traceback

        (out / "logs").mkdir(parents=True, exist_ok=True)
        (out / "logs" / "traceback.txt").write_text(traceback.format_exc())
        error = Fail(EXIT_MEASURE, f"{type(exc).__name__}: {exc} (traceback in "
                     f"{out / 'logs' / 'traceback.txt'})")
    assemble(doc, started)
    code = write_result(out, doc, error)
    if inner:  # LMCache's and the CRT's threads may never end: exit without joining them
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
