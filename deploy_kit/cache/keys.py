"""LMCache object names and their aggregation (pure).

Two layouts share a bucket, one per topology (LMCache 0.5.6):
- in-process connector (`v1/storage_backend/connector/s3_connector.py`, CacheEngineKey):
  `<model with / as _>@<world size>@<rank>@<chunk hash hex>@<dtype>[@tag%value…]`
  (the hash may be negative);
- LMCache server's S3 L2 adapter (`v1/distributed/l2_adapters/s3_l2_adapter.py`,
  `_object_key_to_string`): `<model as served>@<kv rank, 8 hex>@<object group hex>@<chunk
  hash hex>[@<cache salt>]`, no dtype; the kv rank packs world size << 24 | global rank << 16
  | local world size << 8 | local rank (`v1/distributed/api.py` ComputeKVRank).
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
    m = _CONNECTOR_KEY.match(name)
    if not m:
        return None
    return CacheKey(m["model"], int(m["world"]), int(m["rank"]), m["hash"], m["dtype"])


def model_prefixes(model: str) -> list[str]:
    """Key prefixes of every object of a model string, both layouts
    (`Qwen/Qwen3-8B` → `Qwen_Qwen3-8B@`, `Qwen/Qwen3-8B@`)."""
    return list(dict.fromkeys([model.replace("/", "_") + "@", model + "@"]))


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
