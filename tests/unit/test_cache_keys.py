from datetime import UTC, datetime

from deploy_kit.cache.keys import StoredObject, aggregate, model_prefix, parse_key
from deploy_kit.cache.store import canonical_query


def test_parse_lmcache_keys_including_negative_hashes() -> None:
    key = parse_key("Qwen_Qwen3-8B@2@1@-7cfefdccc681b183@bfloat16")
    assert key is not None
    assert (key.model, key.world_size, key.rank, key.chunk_hash, key.dtype) == \
        ("Qwen_Qwen3-8B", 2, 1, "-7cfefdccc681b183", "bfloat16")
    assert parse_key("Qwen_Qwen3-8B@1@0@1be814944da4012e@bfloat16@tag%x") is not None
    assert parse_key("deploykit-verify-probe-10.99.0.11-ab12") is None


def test_aggregate_groups_by_model_tp_dtype() -> None:
    t1, t2 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    objects = [StoredObject("M@2@0@aa@bfloat16", 10, t1), StoredObject("M@2@1@aa@bfloat16", 10, t2),
               StoredObject("M@1@0@bb@bfloat16", 5, t1), StoredObject("other", 1, t1)]
    groups, foreign = aggregate(objects)
    assert [(g.model, g.world_size, g.objects, len(g.chunks), g.bytes) for g in groups] == \
        [("M", 1, 1, 1, 5), ("M", 2, 2, 1, 20)]
    assert groups[1].oldest == t1 and groups[1].newest == t2
    assert [o.key for o in foreign] == ["other"]


def test_model_prefix_and_canonical_query() -> None:
    assert model_prefix("Qwen/Qwen3-8B") == "Qwen_Qwen3-8B@"
    assert canonical_query({"prefix": "Qwen_Qwen3-8B@", "list-type": "2"}) == \
        "list-type=2&prefix=Qwen_Qwen3-8B%40"
