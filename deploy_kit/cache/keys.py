"""LMCache object names and their aggregation (pure).

Two layouts share a bucket, one per topology (LMCache 0.5.6):
- in-process connector (`v1/storage_backend/connector/s3_connector.py`, CacheEngineKey):
  `<model with / as _>@<world size>@<rank>@<chunk hash hex>@<dtype>[@tag%value…]`
  (the hash may be negative);
- LMCache server's S3 L2 adapter (`v1/distributed/l2_adapters/s3_l2_adapter.py`,
  `_object_key_to_string`): `<model as served>@<kv rank, 8 hex>@<object group hex>@<chunk
  hash hex>[@<cache salt>]`, no dtype; the kv rank packs world size << 24 | global rank << 16
  | local world size << 8 | local rank (`v1/distributed/api.py` ComputeKVRank).

A third comes from the NIXL storage backend in dynamic mode (`lmcache_mode: nixl`,
`v1/storage_backend/nixl_storage_backend.py` `_format_object_key_url_safe`): the connector's
name with every `/` and `@` made `_`, then percent-encoded (`%` of a tag becomes `%25`):
`<model with / as _>_<world size>_<rank>_<chunk hash hex>_<dtype>[_tag%25value…]`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

_CONNECTOR_KEY = re.compile(r"^(?P<model>[^@]+)@(?P<world>\d+)@(?P<rank>\d+)"
                            r"@(?P<hash>-?[0-9a-f]+)@(?P<dtype>[A-Za-z0-9_]+)(?:@.*)?$")
# eight hex digits in the second field: no world size is written with eight digits, so a
# server key is never read as a connector key (its salt may look like a dtype)
_SERVER_KEY = re.compile(r"^(?P<model>[^@]+)@(?P<kv_rank>[0-9a-f]{8})@(?P<group>[0-9a-f]+)"
                         r"@(?P<hash>[0-9a-f]+)(?:@[^@]+)?$")
SERVER_DTYPE = "-"  # the server's names carry no dtype
# LMCache's dtype names (lmcache/utils.py TORCH_DTYPE_TO_STR_DTYPE): the NIXL layout has no
# separator of its own, so the dtype is what anchors it from the right
_DTYPES = ("half|bfloat16|float|double|int8|uint8|int16|int32|int64|bool|fp8_e4m3fn|"
           "fp8_e4m3fnuz|fp8_e5m2|fp8_e5m2fnuz")
_NIXL_KEY = re.compile(rf"^(?P<model>.+?)_(?P<world>\d+)_(?P<rank>\d+)_(?P<hash>-?[0-9a-f]+)"
                       rf"_(?P<dtype>{_DTYPES})(?:_[^_]+%25.*)?$")


@dataclass(frozen=True)
class CacheKey:
    model: str  # as stored: connector keys have '/' replaced by '_'
    world_size: int
    rank: int
    chunk_hash: str
    dtype: str  # SERVER_DTYPE for the server's layout


def parse_key(name: str) -> CacheKey | None:
    server = _SERVER_KEY.match(name)
    if server:
        kv_rank = int(server["kv_rank"], 16)
        return CacheKey(server["model"], kv_rank >> 24 & 0xFF, kv_rank >> 16 & 0xFF,
                        server["hash"], SERVER_DTYPE)
    m = _CONNECTOR_KEY.match(name) or (None if "@" in name else _NIXL_KEY.match(name))
    if not m:
        return None
    return CacheKey(m["model"], int(m["world"]), int(m["rank"]), m["hash"], m["dtype"])


def model_prefixes(model: str) -> list[str]:
    """Key prefixes of every object of a model string, all three layouts
    (`Qwen/Qwen3-8B` → `Qwen_Qwen3-8B@`, `Qwen/Qwen3-8B@`, NIXL's `Qwen_Qwen3-8B_`)."""
    flat = model.replace("/", "_")
    return list(dict.fromkeys([flat + "@", model + "@", flat.replace("@", "_") + "_"]))


def listed_under(key: str, prefix: str) -> bool:
    """Whether an object listed under one of `model_prefixes` is that model's: a NIXL
    prefix (`Qwen_Qwen3-8B_`) also lists `Qwen_Qwen3-8B_Instruct_…`, which parses to another
    model; the `@` prefixes end where the model name does."""
    if prefix.endswith("@"):
        return True
    parsed = parse_key(key)
    return parsed is not None and parsed.model == prefix[:-1]


def belongs_to(key: str, model: str) -> bool:
    return any(key.startswith(p) and listed_under(key, p) for p in model_prefixes(model))


@dataclass
class Group:
    model: str
    world_size: int
    dtype: str
    objects: int = 0
    bytes: int = 0
    chunks: set[str] = field(default_factory=set)
    oldest: datetime | None = None
    newest: datetime | None = None


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    modified: datetime


def aggregate(objects: list[StoredObject]) -> tuple[list[Group], list[StoredObject]]:
    """Group LMCache objects by (model, TP×PP, dtype); return the others apart."""
    groups: dict[tuple[str, int, str], Group] = {}
    foreign: list[StoredObject] = []
    for obj in objects:
        key = parse_key(obj.key)
        if key is None:
            foreign.append(obj)
            continue
        g = groups.setdefault((key.model, key.world_size, key.dtype),
                              Group(key.model, key.world_size, key.dtype))
        g.objects += 1
        g.bytes += obj.size
        g.chunks.add(key.chunk_hash)
        g.oldest = obj.modified if g.oldest is None else min(g.oldest, obj.modified)
        g.newest = obj.modified if g.newest is None else max(g.newest, obj.modified)
    return sorted(groups.values(), key=lambda g: (g.model, g.world_size, g.dtype)), foreign
