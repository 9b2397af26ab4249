"""LMCache object names and their aggregation (pure).

Names are `<model with / as _>@<world size>@<rank>@<chunk hash hex>@<dtype>[@tag%value…]`
(lmcache/utils.py CacheEngineKey.to_string; the hash may be negative).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

_KEY = re.compile(r"^(?P<model>[^@]+)@(?P<world>\d+)@(?P<rank>\d+)@(?P<hash>-?[0-9a-f]+)"
                  r"@(?P<dtype>[A-Za-z0-9_]+)(?:@.*)?$")


@dataclass(frozen=True)
class CacheKey:
    model: str  # as stored: '/' replaced by '_'
    world_size: int
    rank: int
    chunk_hash: str
    dtype: str


def parse_key(name: str) -> CacheKey | None:
    m = _KEY.match(name)
    if not m:
        return None
    return CacheKey(m["model"], int(m["world"]), int(m["rank"]), m["hash"], m["dtype"])


def model_prefix(model: str) -> str:
    """Key prefix of every object of a model string (`Qwen/Qwen3-8B` → `Qwen_Qwen3-8B@`)."""
    return model.replace("/", "_") + "@"


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
