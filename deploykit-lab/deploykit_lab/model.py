"""The lab's model: a small random-weight Llama and a byte-level tokenizer, built locally.

No model hub is reachable here, so the lab serves weights it makes itself: deterministic
(seeded), bf16 safetensors, a tokenizer of 256 byte tokens. The geometry is the one measured
in research/vllm-cpu-lmcache.md (8 KiB of KV per token, cold prefill slow enough on two
cores that a cache hit is unmistakable).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path
from typing import Any

from deploykit_lab.layout import CACHE_DIR

MODEL_VERSION = "1"  # bump when the recipe below changes
SMALL_VERSION = "2"  # the small variant's own: 2 since its geometry went to 2 layers
GEOMETRY = {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8,
            "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64,
            "vocab_size": 512}
# Where the CPU has no native bf16 (AVX2 only: no AVX512_BF16, no AMX) vLLM's CPU kernels
# emulate it and a 4K cold prefill of GEOMETRY took 55 s instead of 2.7 s: the lab serves a
# model of about a tenth of the compute there (half the width, a quarter of the layers),
# still bf16, so every name, dtype and code path stays the same and a hit still moves real
# chunks (1 KiB of KV per token: 256 KiB per 256-token chunk object, instead of 2 MiB).
# Measured on one CPU with native bf16, 4K cold prefill: full 7.36 s; half width with half
# the layers 1.28 s (0.17 of full: an AVX2-only CPU would be at about 9.6 s, too close to
# 10); this geometry 0.89 s (0.12: about 6.6 s there), the other-host hit 0.25 s.
SMALL_GEOMETRY = {**GEOMETRY, "hidden_size": 512, "intermediate_size": 1408,
                  "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2}
VARIANTS = {"full": GEOMETRY, "small": SMALL_GEOMETRY}
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
SPECIALS = ("<unk>", "<s>", "</s>")
MAX_POSITIONS = 16384


def cpu_flags(cpuinfo: str) -> set[str]:
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def choose_variant(flags: set[str], override: str | None = None) -> tuple[str, str]:
    """(variant, why): DEPLOYKIT_LAB_MODEL=full|small overrides the CPU's flags."""
    if override:
        if override not in VARIANTS:
            raise ValueError(f"DEPLOYKIT_LAB_MODEL={override!r}: use one of "
                             f"{', '.join(VARIANTS)}")
        return override, f"DEPLOYKIT_LAB_MODEL={override}"
    native = sorted(flags & set(NATIVE_BF16_FLAGS))
    if native:
        return "full", f"native bf16 on this CPU ({', '.join(native)})"
    return "small", "no native bf16 on this CPU (no avx512_bf16, no amx_bf16)"


def this_machines_variant() -> tuple[str, str]:
    return choose_variant(cpu_flags(Path("/proc/cpuinfo").read_text()),
                          os.environ.get("DEPLOYKIT_LAB_MODEL") or None)


def model_dir(variant: str = "full") -> Path:
    if variant == "full":
        return CACHE_DIR / f"model-lab-llama-{MODEL_VERSION}"
    return CACHE_DIR / f"model-lab-llama-{SMALL_VERSION}-{variant}"


def ensure_model(variant: str = "full") -> Path:
    """Build once; later lab ups reuse it (about 175 MB; the small variant about 10 MB)."""
    target = model_dir(variant)
    geometry = VARIANTS[variant]
    if (target / ".deploykit-ready").exists():
        return target
    work = target.with_name(target.name + ".tmp")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "config.json").write_text(json.dumps(model_config(geometry), indent=2) + "\n")
    (work / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}, indent=2) + "\n")
    (work / "tokenizer.json").write_text(json.dumps(tokenizer_json()) + "\n")
    (work / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2) + "\n")
    write_weights(work / "model.safetensors", geometry=geometry)
    shutil.rmtree(target, ignore_errors=True)
    work.rename(target)
    (target / ".deploykit-ready").write_text("ok\n")
    return target


def model_config(geometry: dict[str, int] = GEOMETRY) -> dict[str, Any]:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **geometry,
            "hidden_act": "silu", "max_position_embeddings": MAX_POSITIONS,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
            "bos_token_id": 1, "eos_token_id": 2, "dtype": "bfloat16",
            "torch_dtype": "bfloat16", "attention_bias": False, "mlp_bias": False}


def _byte_alphabet() -> list[str]:
    """GPT-2's printable stand-in for each byte (what a ByteLevel pre-tokenizer emits)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def tokenizer_json(vocab_size: int = GEOMETRY["vocab_size"]) -> dict[str, Any]:
    """One token per byte, no merges: every text tokenizes, token counts are byte counts.
    Padded to the model's vocabulary (bench/gpu-proof.py builds it for a real one)."""
    vocab: dict[str, int] = {name: i for i, name in enumerate(SPECIALS)}
    for char in _byte_alphabet():
        vocab[char] = len(vocab)
    while len(vocab) < vocab_size:  # ids the model can emit must decode
        vocab[f"<|reserved_{len(vocab)}|>"] = len(vocab)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": name, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, name in enumerate(SPECIALS)],
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }


def tokenizer_config() -> dict[str, Any]:
    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
            "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": MAX_POSITIONS,
            "clean_up_tokenization_spaces": False}


def tensor_shapes(g: dict[str, int] = GEOMETRY) -> list[tuple[str, tuple[int, ...]]]:
    hidden, heads, kv, dim = (g["hidden_size"], g["num_attention_heads"],
                              g["num_key_value_heads"], g["head_dim"])
    shapes: list[tuple[str, tuple[int, ...]]] = [
        ("model.embed_tokens.weight", (g["vocab_size"], hidden))]
    for i in range(g["num_hidden_layers"]):
        p = f"model.layers.{i}"
        shapes += [
            (f"{p}.input_layernorm.weight", (hidden,)),
            (f"{p}.self_attn.q_proj.weight", (heads * dim, hidden)),
            (f"{p}.self_attn.k_proj.weight", (kv * dim, hidden)),
            (f"{p}.self_attn.v_proj.weight", (kv * dim, hidden)),
            (f"{p}.self_attn.o_proj.weight", (hidden, heads * dim)),
            (f"{p}.post_attention_layernorm.weight", (hidden,)),
            (f"{p}.mlp.gate_proj.weight", (g["intermediate_size"], hidden)),
            (f"{p}.mlp.up_proj.weight", (g["intermediate_size"], hidden)),
            (f"{p}.mlp.down_proj.weight", (hidden, g["intermediate_size"])),
        ]
    return [*shapes, ("model.norm.weight", (hidden,)),
            ("lm_head.weight", (g["vocab_size"], hidden))]


def write_weights(path: Path, seed: int = 0, geometry: dict[str, int] = GEOMETRY) -> None:
    """safetensors by hand: an 8-byte header length, a JSON header, then raw bf16 data."""
    import numpy as np  # the controller's plotting dependency; only the lab needs it here

    shapes = tensor_shapes(geometry)
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes:
        size = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    rng = np.random.default_rng(seed)
    with path.open("wb") as out:
        out.write(struct.pack("<Q", len(blob)))
        out.write(blob)
        for name, shape in shapes:
            if name.endswith("norm.weight"):
                values = np.ones(shape, dtype=np.float32)
            else:
                values = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
            # bf16 is the top half of a float32
            out.write((values.view(np.uint32) >> 16).astype("<u2").tobytes())
