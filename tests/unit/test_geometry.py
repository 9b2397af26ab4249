import json
from pathlib import Path

import pytest

from deploy_kit.core.geometry import (
    ModelGeometry,
    bytes_per_token,
    chunk_layout,
    find_preset,
    from_hf_config,
    presets,
)

MIB = 1024 * 1024

# (model, tp, bytes/token all ranks, object bytes per 256-token chunk, objects per chunk)
# Figures from LMCache's own LMCacheMetadata.get_shapes() (research/lmcache-vllm-facts.md §5).
CASES = [
    ("Qwen/Qwen3-32B", 1, 262_144, 67_108_864, 1),
    ("Qwen/Qwen3-32B", 2, 262_144, 33_554_432, 2),
    ("Qwen/Qwen3-8B", 1, 147_456, 37_748_736, 1),
    ("Qwen/Qwen3-8B", 2, 147_456, 18_874_368, 2),
    ("meta-llama/Llama-3.1-8B-Instruct", 2, 131_072, 16_777_216, 2),
    ("meta-llama/Llama-3.1-70B-Instruct", 1, 327_680, 83_886_080, 1),
    ("Qwen/Qwen2.5-72B-Instruct", 2, 327_680, 41_943_040, 2),
    ("deepseek-ai/DeepSeek-V3", 1, 70_272, 17_989_632, 1),
    ("deepseek-ai/DeepSeek-V3", 2, 70_272, 17_989_632, 1),  # MLA: rank 0 only
]


@pytest.mark.parametrize(("model", "tp", "per_token", "object_bytes", "objects"), CASES)
def test_chunk_layout_matches_lmcache(model: str, tp: int, per_token: int, object_bytes: int,
                                      objects: int) -> None:
    geometry = presets()[model]
    layout = chunk_layout(geometry, chunk_tokens=256, tensor_parallel=tp, dtype_bytes=2)
    assert layout.bytes_per_token == per_token
    assert layout.object_bytes == object_bytes
    assert layout.objects_per_chunk == objects


def test_qwen3_32b_is_64_mib_not_62_5() -> None:
    layout = chunk_layout(presets()["Qwen/Qwen3-32B"], chunk_tokens=256, tensor_parallel=1)
    assert layout.chunk_bytes == 64 * MIB


def test_fp8_kv_halves_every_figure() -> None:
    g = presets()["Qwen/Qwen3-32B"]
    assert bytes_per_token(g, 1) * 2 == bytes_per_token(g, 2)


def test_tp_beyond_kv_heads_replicates_heads() -> None:
    g = ModelGeometry(num_layers=2, num_kv_heads=2, head_dim=4)
    layout = chunk_layout(g, chunk_tokens=1, tensor_parallel=4, dtype_bytes=1)
    # each rank keeps one whole head, so the bucket holds twice the model's KV
    assert layout.object_bytes == 2 * 2 * 1 * 4
    assert layout.chunk_bytes == 2 * layout.bytes_per_token


def test_pipeline_parallel_splits_layers() -> None:
    g = presets()["Qwen/Qwen3-32B"]
    layout = chunk_layout(g, chunk_tokens=256, tensor_parallel=2, pipeline_parallel=2)
    assert layout.objects_per_chunk == 4
    assert layout.object_bytes == 16 * MIB


def test_preset_matches_local_path_by_basename() -> None:
    assert find_preset("/models/Qwen3-32B") == presets()["Qwen/Qwen3-32B"]
    assert find_preset("org/unknown-model") is None


def test_from_hf_config_standard_and_mla(tmp_path: Path) -> None:
    std = tmp_path / "std.json"
    std.write_text(json.dumps({"num_hidden_layers": 64, "num_attention_heads": 64,
                               "num_key_value_heads": 8, "hidden_size": 5120, "head_dim": 128,
                               "torch_dtype": "bfloat16"}))
    assert from_hf_config(std) == presets()["Qwen/Qwen3-32B"]
    mla = tmp_path / "mla.json"
    mla.write_text(json.dumps({"num_hidden_layers": 61, "kv_lora_rank": 512,
                               "qk_rope_head_dim": 64, "num_attention_heads": 128,
                               "hidden_size": 7168}))
    assert from_hf_config(mla) == presets()["deepseek-ai/DeepSeek-V3"]
    no_head_dim = tmp_path / "llama.json"
    no_head_dim.write_text(json.dumps({"num_hidden_layers": 32, "num_attention_heads": 32,
                                       "num_key_value_heads": 8, "hidden_size": 4096}))
    assert from_hf_config(no_head_dim).head_dim == 128


@pytest.mark.parametrize("bad", [{"num_layers": 0, "num_kv_heads": 8, "head_dim": 128},
                                 {"num_layers": 4, "num_kv_heads": 0, "head_dim": 128},
                                 {"num_layers": 4, "mla": True},
                                 {"num_layers": 4, "num_kv_heads": 8, "head_dim": 8,
                                  "dtype": "int3"}])
def test_bad_geometry_rejected(bad: dict) -> None:
    with pytest.raises(ValueError):
        ModelGeometry(**bad)
