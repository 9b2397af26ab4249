#!/usr/bin/env python3
"""Calibrate deploykit's planner on one accelerator: PyTorch alone, no vLLM, no network.

Measures (1) the prefill time of a real model geometry: a few decoder layers with random
weights (attention with causal SDPA and grouped KV heads, a gated MLP), timed at the given
context length and extrapolated to the model's depth; and (2) host-to-device bandwidth for
chunk-sized pinned buffers (what a remote KV hit copies onto the device). Writes a JSON
document whose `vllm_prefill_tflops` is what the planner divides by (set it on the serving
group in the inventory: `plan` then predicts from this measurement instead of peak x 0.5).

Copy this one file to the GPU host and run, e.g. for Qwen3-32B at 4K tokens on one GPU:

  python3 gpu-prefill.py --layers 64 --hidden 5120 --heads 64 --kv-heads 8 --head-dim 128 \\
      --intermediate 25600 --tokens 4096 --chunk-mib 32 --out gpu-prefill.json

It stays within --budget-s (default 300 s): fewer repeats when a pass is slow.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from typing import Any


def prefill_flops(layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int,
                  intermediate: int, tokens: int) -> float:
    """The planner's FLOP model (deploy_kit/core/geometry.py prefill_flops with
    dense_prefill_params), repeated here so this file runs without deploykit."""
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    params = layers * (attention + 3 * hidden * intermediate)
    return 2.0 * params * tokens + 2.0 * layers * tokens * tokens * heads * head_dim


def _sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elif device.startswith("hpu"):
        torch.hpu.synchronize()


def build_layers(torch: Any, args: argparse.Namespace, dtype: Any) -> list[dict[str, Any]]:
    def weight(rows: int, cols: int) -> Any:
        return torch.randn(rows, cols, device=args.device, dtype=dtype) * 0.02

    q = args.heads * args.head_dim
    kv = args.kv_heads * args.head_dim
    return [{"qkv": weight(args.hidden, q + 2 * kv), "o": weight(q, args.hidden),
             "gate_up": weight(args.hidden, 2 * args.intermediate),
             "down": weight(args.intermediate, args.hidden)}
            for _ in range(args.sample_layers)]


def forward(torch: Any, args: argparse.Namespace, layers: list[dict[str, Any]], x: Any) -> Any:
    """One prefill pass through the sampled layers (norms and rotary embedding left out:
    a few element-wise passes, no matmul)."""
    functional = torch.nn.functional
    tokens = x.shape[0]
    q_width = args.heads * args.head_dim
    kv_width = args.kv_heads * args.head_dim
    for layer in layers:
        qkv = x @ layer["qkv"]
        q, k, v = qkv.split([q_width, kv_width, kv_width], dim=-1)
        q = q.view(tokens, args.heads, args.head_dim).transpose(0, 1)
        k = k.view(tokens, args.kv_heads, args.head_dim).transpose(0, 1)
        v = v.view(tokens, args.kv_heads, args.head_dim).transpose(0, 1)
        group = args.heads // args.kv_heads
        k = k.repeat_interleave(group, dim=0)
        v = v.repeat_interleave(group, dim=0)
        attended = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + attended.transpose(0, 1).reshape(tokens, q_width) @ layer["o"]
        gate, up = (x @ layer["gate_up"]).chunk(2, dim=-1)
        x = x + (functional.silu(gate) * up) @ layer["down"]
    return x


def time_prefill(torch: Any, args: argparse.Namespace, deadline: float) -> list[float]:
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    layers = build_layers(torch, args, dtype)
    x = torch.randn(args.tokens, args.hidden, device=args.device, dtype=dtype)
    times = []
    with torch.inference_mode():
        forward(torch, args, layers, x)  # warm-up: kernels chosen, memory allocated
        _sync(torch, args.device)
        for _ in range(args.repeats):
            start = time.perf_counter()
            forward(torch, args, layers, x)
            _sync(torch, args.device)
            times.append(time.perf_counter() - start)
            if time.perf_counter() > deadline:
                break
    return times


def host_to_device_gbps(torch: Any, args: argparse.Namespace, deadline: float) -> float | None:
    """GB/s of pinned chunk-sized copies onto the device (None on a CPU run)."""
    if args.device == "cpu":
        return None
    size = int(args.chunk_mib * 2**20)
    source = torch.empty(size, dtype=torch.uint8).pin_memory()
    target = torch.empty(size, dtype=torch.uint8, device=args.device)
    target.copy_(source, non_blocking=True)
    _sync(torch, args.device)
    copies, start = 0, time.perf_counter()
    while copies < 64 and time.perf_counter() < deadline:
        target.copy_(source, non_blocking=True)
        copies += 1
        _sync(torch, args.device)
    return copies * size / (time.perf_counter() - start) / 1e9


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, required=True, help="the model's depth")
    parser.add_argument("--hidden", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--kv-heads", type=int, required=True)
    parser.add_argument("--head-dim", type=int, required=True)
    parser.add_argument("--intermediate", type=int, required=True,
                        help="MLP width (MoE: the active experts' widths added up)")
    parser.add_argument("--tokens", type=int, default=4096, help="context length timed")
    parser.add_argument("--sample-layers", type=int, default=2,
                        help="layers built and timed; the result is scaled to --layers")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:1, hpu or cpu")
    parser.add_argument("--chunk-mib", type=float, default=32.0,
                        help="one KV chunk object per rank (deploykit plan: object bytes)")
    parser.add_argument("--budget-s", type=float, default=300.0)
    parser.add_argument("--out", default="gpu-prefill.json")
    args = parser.parse_args(argv)
    if args.heads % args.kv_heads or not 0 < args.sample_layers <= args.layers:
        parser.error("--heads must be a multiple of --kv-heads and 0 < --sample-layers <= "
                     "--layers")
    import torch

    started = time.perf_counter()
    deadline = started + args.budget_s * 0.8  # what is left is set-up and the copy test
    times = time_prefill(torch, args, deadline)
    best = min(times)
    full_s = best / args.sample_layers * args.layers
    flops = prefill_flops(args.layers, args.hidden, args.heads, args.kv_heads, args.head_dim,
                          args.intermediate, args.tokens)
    device_name = (torch.cuda.get_device_name(args.device) if args.device.startswith("cuda")
                   else args.device)
    result = {
        "device": device_name, "torch": torch.__version__, "host": platform.node(),
        "dtype": args.dtype, "tokens": args.tokens,
        "geometry": {"layers": args.layers, "hidden": args.hidden, "heads": args.heads,
                     "kv_heads": args.kv_heads, "head_dim": args.head_dim,
                     "intermediate": args.intermediate},
        "sample_layers": args.sample_layers, "repeats": len(times),
        "sample_prefill_s": times,
        "prefill_s_full_model": full_s,
        "prefill_s_per_token": full_s / args.tokens,
        "flops": flops,
        "vllm_prefill_tflops": flops / full_s / 1e12,
        "h2d_gbps": host_to_device_gbps(torch, args, started + args.budget_s),
        "chunk_mib": args.chunk_mib,
        "seconds": time.perf_counter() - started,
    }
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
        handle.write("\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
