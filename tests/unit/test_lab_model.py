"""The lab's random-weight Llama: a valid safetensors file, a byte tokenizer, its geometry."""

from __future__ import annotations

import hashlib
import json
import math
import struct
from pathlib import Path

import pytest

from deploy_kit.core.geometry import bytes_per_token, from_hf_config
from deploykit_lab import model


def test_weights_are_valid_safetensors_and_deterministic(tmp_path: Path) -> None:
    first, second = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    # the small variant: the same writer and layout, a fraction of the bytes to hash
    geometry = model.SMALL_GEOMETRY
    model.write_weights(first, geometry=geometry)
    model.write_weights(second, geometry=geometry)
    data = first.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    assert length % 8 == 0 and header.pop("__metadata__") == {"format": "pt"}
    offset = 0
    for name, shape in model.tensor_shapes(geometry):
        entry = header[name]
        size = 2
        for dim in shape:
            size *= dim
        assert entry["dtype"] == "BF16" and entry["shape"] == list(shape)
        assert entry["data_offsets"] == [offset, offset + size]
        offset += size
    assert len(data) == 8 + length + offset
    norm = header["model.norm.weight"]["data_offsets"][0] + 8 + length
    assert data[norm:norm + 2] == struct.pack("<H", 0x3F80)  # bf16 1.0
    assert hashlib.sha256(data).digest() == hashlib.sha256(second.read_bytes()).digest()


def test_tokenizer_has_one_token_per_byte_and_fills_the_vocab() -> None:
    vocab = model.tokenizer_json()["model"]["vocab"]
    assert sorted(vocab.values()) == list(range(model.GEOMETRY["vocab_size"]))
    alphabet = model._byte_alphabet()
    assert len(set(alphabet)) == 256 and all(vocab[c] >= len(model.SPECIALS) for c in alphabet)


def test_geometry_is_eight_kib_per_token(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(model.model_config()))
    geometry = from_hf_config(tmp_path / "config.json")
    assert bytes_per_token(geometry, 2) == 2 * 8 * 4 * 64 * 2


def test_the_small_variant_is_a_tenth_of_the_compute_and_one_kib_per_token(
        tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(model.model_config(model.SMALL_GEOMETRY)))
    geometry = from_hf_config(tmp_path / "config.json")
    assert bytes_per_token(geometry, 2) == 2 * 2 * 2 * 64 * 2
    # the linear layers' compute: a sixteenth of the full model's (width² × layers)
    full, small = model.GEOMETRY, model.SMALL_GEOMETRY
    assert (small["hidden_size"] ** 2 * small["num_hidden_layers"] * 16 ==
            full["hidden_size"] ** 2 * full["num_hidden_layers"])
    assert model.model_dir("small") != model.model_dir("full")
    weights = {v: sum(math.prod(s) for _, s in model.tensor_shapes(g))
               for v, g in model.VARIANTS.items()}
    assert weights["small"] * 3 < weights["full"]  # the embeddings do not shrink with layers


@pytest.mark.parametrize(("flags", "variant"), [
    ({"avx2", "avx512f", "avx512_bf16"}, "full"),
    ({"avx2", "amx_tile", "amx_bf16"}, "full"),
    ({"avx2", "avx512f"}, "small"),  # AVX-512 without bf16 emulates it too
    ({"avx2", "fma"}, "small"),
])
def test_the_variant_follows_native_bf16(flags: set[str], variant: str) -> None:
    chosen, why = model.choose_variant(flags)
    assert chosen == variant and why


def test_the_override_wins_and_a_bad_one_is_refused() -> None:
    assert model.choose_variant({"amx_bf16"}, "small")[0] == "small"
    with pytest.raises(ValueError, match="DEPLOYKIT_LAB_MODEL"):
        model.choose_variant(set(), "tiny")


def test_cpu_flags_are_read_from_cpuinfo() -> None:
    text = "processor\t: 0\nflags\t\t: fpu avx2 amx_bf16\nbugs\t\t: none\n"
    assert model.cpu_flags(text) == {"fpu", "avx2", "amx_bf16"}
