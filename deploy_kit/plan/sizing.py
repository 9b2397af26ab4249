"""Host-side sizing: pinned DRAM, /dev/shm, bucket capacity, PG load, DNS answers."""

from __future__ import annotations

from dataclasses import dataclass

from deploy_kit.config.models import HostConfig, PoolSpec
from deploy_kit.core import compat

GIB = 1024**3

# LMCache's per-mode defaults when the inventory leaves local_cpu / max_local_cpu_size unset.
MODE_DEFAULTS: dict[str, tuple[bool, float]] = {
    "s3": (False, 5.0),
    "nixl": (False, 50.0),
    "dram": (True, 50.0),
    "disk": (True, 5.0),
}


def local_cpu(config: HostConfig) -> bool:
    if config.lmcache_local_cpu is not None:
        return config.lmcache_local_cpu
    return MODE_DEFAULTS[config.lmcache_mode][0]


def max_local_cpu_gb(config: HostConfig) -> float:
    if config.lmcache_max_local_cpu_size is not None:
        return config.lmcache_max_local_cpu_size
    return MODE_DEFAULTS[config.lmcache_mode][1]


def pinned_dram_bytes(config: HostConfig, workers: int) -> int:
    """LMCache allocates max_local_cpu_size GiB of pinned RAM in every TP/PP worker."""
    return int(workers * max_local_cpu_gb(config) * GIB)


def shm_bytes(config: HostConfig, workers: int, object_bytes: int) -> int:
    """/dev/shm LMCache needs: 0.3.x maps one chunk-sized file per in-flight S3 request.

    0.4+/0.5 write S3 downloads into the pinned pool instead, so they need none.
    """
    if config.lmcache_mode != "s3":
        return 0
    table = compat.lmcache(config.lmcache_version)
    if not table.s3_shm_files_per_worker:
        return 0
    return workers * config.lmcache_s3_max_inflight_reqs * object_bytes


def capacity_bytes(target_tokens: int, chunk_bytes: int, chunk_tokens: int) -> int:
    """Bucket bytes to keep target_tokens cached: whole chunks, every rank's object."""
    chunks = -(-target_tokens // chunk_tokens)
    return chunks * chunk_bytes


@dataclass(frozen=True)
class PoolLoad:
    total_pg_replicas: int
    pgs_per_osd: float | None


def pool_load(pools: list[PoolSpec], osd_count: int | None) -> PoolLoad:
    """PG replicas the pools add, and per OSD when the OSD count is known (target ~100-200)."""
    replicas = sum(p.pg_num * p.size for p in pools)
    return PoolLoad(replicas, replicas / osd_count if osd_count else None)


def expected_a_records(rgw_hosts: int) -> int:
    """One A record per healthy concentrator, i.e. per RGW host."""
    return rgw_hosts


# awscrt's S3 client splits transfers into parts of this size when the caller sets none, as
# LMCache 0.5.6 does (s3_l2_adapter.py and s3_connector.py build S3Client without part_size;
# aws-c-s3's default part size is 8 MiB): a larger object is uploaded as
# CreateMultipartUpload + parts + CompleteMultipartUpload and read as ranged GETs.
AWSCRT_PART_BYTES = 8 * 1024**2


@dataclass(frozen=True)
class S3Requests:
    put: int  # HTTP requests to store one object
    get: int  # HTTP requests to read it back


def s3_requests(object_bytes: int, part_bytes: int = AWSCRT_PART_BYTES) -> S3Requests:
    """What the concentrators and gateways see per object: one PUT and one GET up to a part,
    else the multipart sequence and one ranged GET per part."""
    if object_bytes <= part_bytes:
        return S3Requests(put=1, get=1)
    parts = -(-object_bytes // part_bytes)
    return S3Requests(put=parts + 2, get=parts)
