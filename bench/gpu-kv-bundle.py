#!/usr/bin/env python3
"""The wheel bundle bench/gpu-kv-proof.py installs offline: LMCache 0.5.6 and what its
in-process S3 path imports, downloaded from PyPI for the Pythons named, plus the planner's
figures for the example's geometry (plan.json, from deploykit itself).

    python bench/gpu-kv-bundle.py [--out gpu-kv-bundle] [--pythons 3.12] [--full]

Two lists, both pinned to the versions the lab's LMCache 0.5.6 wheelhouse resolved:

- CORE: what the lent GPU machines' image ('cuda', /work/.library/device/KINDS.md, package
  list of 2026-11-17) lacks. The default bundle carries only these: it must fit the 64 MiB
  a device call brings along, with the working tree.
- IMAGE: what LMCache imports on this path that the image already holds (numpy, aiohttp,
  numba, transformers, ...). `--full` adds them, for a bare venv (the CPU test,
  `make test-gpu-proof`, which so proves that CORE + IMAGE is all the path needs). Without
  `--full` the proof checks, before it installs anything, that the machine has every one
  of them, and names the missing ones.

The lists were found by installing into a bare venv with `--no-index --no-deps` and
importing and running the proof until nothing was missing. Wheels already in --out are
not downloaded again. Prints the bundle's size; manifest.json records what is in it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
LMCACHE_VERSION = "0.5.6"

CORE: dict[str, str] = {
    "lmcache": LMCACHE_VERSION,
    "awscrt": "0.38.1",  # the S3 connector's client (CRT)
    "cachetools": "8.0.3",
    "msgspec": "0.23.0",
    "pyzmq": "27.3.0",
    "aiofile": "3.12.3",
    "caio": "0.12.10",
    "cryptography": "51.0.1",
    "cffi": "2.1.1",
    "pycparser": "3.12",
}
IMAGE: dict[str, str] = {
    "numpy": "2.2.6",
    "pyyaml": "6.0.4",
    "prometheus-client": "0.24.1",
    "py-cpuinfo": "9.0.0",
    "psutil": "7.2.2",
    "sortedcontainers": "2.4.0",
    "aiohttp": "3.14.5",
    "aiohappyeyeballs": "2.7.1",
    "aiosignal": "1.4.0",
    "attrs": "26.1.0",
    "frozenlist": "1.8.0",
    "multidict": "7.2.1",
    "propcache": "0.5.4",
    "yarl": "1.25.1",
    "idna": "3.21",
    "requests": "2.34.2",
    "urllib3": "2.8.0",
    "certifi": "2026.10.19.post1",
    "charset-normalizer": "3.5.3",
    "typing-extensions": "4.16.0",
    "numba": "0.65.0",
    "llvmlite": "0.47.0",
    "transformers": "5.19.0",
    "huggingface-hub": "2.4.0",
    "tokenizers": "0.23.3",
    "safetensors": "0.8.0",
    "regex": "2026.12.2",
    "tqdm": "4.70.1",
    "packaging": "26.4",
    "filelock": "4.3.2",
    "fsspec": "2026.9.0",
    "hf-xet": "1.8.0",
    "httpx2": "2.17.0",
    "httpcore2": "2.17.0",
    "h11": "0.16.0",
    "truststore": "0.10.5",
}
PLATFORMS = ["manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64",
             *(f"manylinux_2_{n}_x86_64" for n in range(5, 40))]
# a device call brings at most 64 MiB: the working tree and the carried paths together
DEVICE_LIMIT = 64 * 2**20


def download(out: Path, python: str, pins: dict[str, str]) -> None:
    major, minor = python.split(".")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--python-version", python,
           "--implementation", "cp", "--abi", f"cp{major}{minor}", "--abi", "abi3",
           "--abi", "none", *[f"--platform={p}" for p in PLATFORMS], "--platform=any",
           "-d", str(out), *[f"{name}=={version}" for name, version in sorted(pins.items())]]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"gpu-kv-bundle: pip download for Python {python} failed: {tail}")


def plan_figures() -> dict[str, Any] | None:
    """deploykit's own figures for the example's serving group: Qwen3-32B, TP 2, an H100,
    LMCache over S3, every setting at its default (chunk 256, deploykit_storage_gbps)."""
    try:
        from deploy_kit.config.models import HostConfig
        from deploy_kit.core.geometry import chunk_layout, find_preset, kv_dtype_bytes
        from deploy_kit.plan import breakeven
    except ImportError:
        return None
    model = "Qwen/Qwen3-32B"
    config = HostConfig(vllm_accelerator="cuda", vllm_accelerator_model="h100",
                        vllm_tensor_parallel_size=2, vllm_model=model, lmcache_mode="s3")
    geometry = find_preset(model)
    assert geometry is not None
    layout = chunk_layout(geometry, chunk_tokens=config.lmcache_chunk_size,
                          tensor_parallel=config.vllm_tensor_parallel_size,
                          dtype_bytes=kv_dtype_bytes(geometry, config.vllm_kv_cache_dtype))
    plan = breakeven.group_plan(model, geometry, config, ["gpu-kv-proof"])
    return {
        "source": "deploy_kit.plan.breakeven.group_plan + core.geometry.chunk_layout",
        "model": model, "device": plan.device, "tensor_parallel": plan.tensor_parallel,
        "chunk_tokens": layout.chunk_tokens, "bytes_per_token": layout.bytes_per_token,
        "object_bytes": layout.object_bytes, "objects_per_chunk": layout.objects_per_chunk,
        "chunk_bytes": layout.chunk_bytes, "storage_gbps": plan.storage_gbps,
        "effective_tflops": plan.effective_tflops, "tflops_source": plan.tflops_source,
        "breakeven_tokens": plan.breakeven_tokens,
        "rows": [{"context_tokens": r.context_tokens, "kv_bytes": r.kv_bytes,
                  "predicted_prefill_s": r.predicted_prefill_s, "storage_s": r.storage_s,
                  "breakeven_storage_gbps": r.breakeven_storage_gbps}
                 for r in plan.rows if r.context_tokens <= 40960]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", default=str(REPO / "gpu-kv-bundle"))
    parser.add_argument("--pythons", default="3.12",
                        help="comma-separated CPython versions (the lent image's is 3.12)")
    parser.add_argument("--full", action="store_true",
                        help="add what the GPU image already holds (a bare venv's needs)")
    args = parser.parse_args(argv)
    pythons = sorted({p.strip() for p in args.pythons.split(",") if p.strip()})
    out = Path(args.out)
    wheels = out / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pins = CORE | (IMAGE if args.full else {})
    for python in pythons:
        download(wheels, python, pins)
    names = sorted(p.name for p in wheels.glob("*.whl"))
    keep = {name for name in names
            if name.split("-", 1)[0].lower().replace("_", "-") in pins
            and name.split("-")[1] == pins[name.split("-", 1)[0].lower().replace("_", "-")]}
    for name in set(names) - keep:  # left from an earlier, other selection
        (wheels / name).unlink()
    sizes = {name: (wheels / name).stat().st_size for name in sorted(keep)}
    plan = plan_figures()
    if plan is not None:
        (out / "plan.json").write_text(json.dumps(plan, indent=2) + "\n")
    total = sum(sizes.values()) + sum(p.stat().st_size for p in out.glob("*.json")
                                      if p.name != "manifest.json")
    manifest = {
        "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "lmcache_version": LMCACHE_VERSION,
        "pythons": pythons, "full": args.full, "distributions": sorted(pins),
        "assumed_on_machine": [] if args.full else sorted(IMAGE),
        "pins": pins, "wheels": sizes, "bytes": total, "plan_json": plan is not None,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    mib = total / 2**20
    print(f"gpu-kv-bundle: {out} holds {len(sizes)} wheels for Python {', '.join(pythons)}, "
          f"{mib:.1f} MiB{'' if plan else ' (no plan.json: deploykit not importable)'}")
    if not args.full and total > DEVICE_LIMIT - 8 * 2**20:
        print(f"gpu-kv-bundle: warning: {mib:.1f} MiB leaves under 8 MiB of a device call's "
              "64 MiB for the working tree", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
