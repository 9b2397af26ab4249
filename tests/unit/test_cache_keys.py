from datetime import UTC, datetime

from deploy_kit.cache.keys import (
    SERVER_DTYPE,
    StoredObject,
    aggregate,
    belongs_to,
    model_prefixes,
    parse_key,
)
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


def test_server_topology_names_parse_with_world_size_and_rank_from_the_kv_rank() -> None:
    """LMCache server's S3 L2 names: model as served, kv rank packed in 8 hex digits
    (TP=4 PP=2, global rank 5: 0x08050401), object group, sha256 hex, optional salt."""
    digest = "9f" * 32
    key = parse_key(f"/var/cache/deploykit/model-lab@08050401@0@{digest}")
    assert key is not None
    assert (key.model, key.world_size, key.rank, key.chunk_hash, key.dtype) == \
        ("/var/cache/deploykit/model-lab", 8, 5, digest, SERVER_DTYPE)
    salted = parse_key(f"Qwen/Qwen3-8B@01000100@1@{digest}@bfloat16")  # salt, not a dtype
    assert salted is not None and salted.world_size == 1 and salted.dtype == SERVER_DTYPE
    assert parse_key("M@0800@0@aa") is None  # too few hex digits for a kv rank
    groups, foreign = aggregate([
        StoredObject(f"M@01000000@0@{digest}", 7, datetime(2026, 1, 1, tzinfo=UTC)),
        StoredObject("M@1@0@aa@bfloat16", 5, datetime(2026, 1, 1, tzinfo=UTC))])
    assert [(g.model, g.world_size, g.dtype, g.bytes) for g in groups] == \
        [("M", 1, SERVER_DTYPE, 7), ("M", 1, "bfloat16", 5)] and not foreign


def test_model_prefix_and_canonical_query() -> None:
    assert model_prefixes("Qwen/Qwen3-8B") == ["Qwen_Qwen3-8B@", "Qwen/Qwen3-8B@",
                                               "Qwen_Qwen3-8B_"]
    assert model_prefixes("local-model") == ["local-model@", "local-model_"]
    assert canonical_query({"prefix": "Qwen_Qwen3-8B@", "list-type": "2"}) == \
        "list-type=2&prefix=Qwen_Qwen3-8B%40"


def test_nixl_object_names_parse_and_aggregate_with_the_connector_layout() -> None:
    """NIXL's dynamic mode names an object by the connector's key with '/'
    and '@' as '_', percent-encoded (LMCache 0.5.6 `_format_object_key_url_safe`)."""
    key = parse_key("Qwen_Qwen3-32B_2_1_-3f9a_bfloat16")
    assert key is not None and (key.model, key.world_size, key.rank, key.chunk_hash,
                                key.dtype) == ("Qwen_Qwen3-32B", 2, 1, "-3f9a", "bfloat16")
    fp8 = parse_key("org_my_model_4_3_ab12_fp8_e4m3fn")
    assert fp8 is not None and (fp8.model, fp8.world_size, fp8.dtype) == \
        ("org_my_model", 4, "fp8_e4m3fn")
    tagged = parse_key("Qwen_Qwen3-32B_2_0_ab_half_lora%25adapter1")
    assert tagged is not None and tagged.dtype == "half"
    assert parse_key("Qwen_Qwen3-32B_2_0_ab_notadtype") is None
    assert belongs_to("Qwen_Qwen3-32B_2_0_ab_half", "Qwen/Qwen3-32B")
    assert not belongs_to("Qwen_Qwen3-32B_Instruct_2_0_ab_half", "Qwen/Qwen3-32B")
    now = datetime(2026, 12, 5, tzinfo=UTC)
    groups, foreign = aggregate([
        StoredObject("Qwen_Qwen3-32B_2_0_ab_bfloat16", 10, now),
        StoredObject("Qwen_Qwen3-32B_2_1_ab_bfloat16", 10, now),
        StoredObject("Qwen_Qwen3-32B@2@0@cd@bfloat16", 10, now),
        StoredObject("notes.txt", 1, now)])
    assert [(g.model, g.world_size, g.objects, len(g.chunks)) for g in groups] == \
        [("Qwen_Qwen3-32B", 2, 3, 2)]
    assert [o.key for o in foreign] == ["notes.txt"]
