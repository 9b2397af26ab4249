"""KV encryption at rest (lmcache_l2_encryption): only where LMCache can do it (the server
topology's S3 adapter), the same on every host of a bucket, and one master key."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.site import Host, Site
from deploy_kit.config.site_secrets import L2_MASTER_KEY, is_set, needs, value_problem
from deploy_kit.core.errors import Problem

RULES, rule = collector()
KEY = "lmcache_l2_encryption"


@rule
def l2_encryption_where_supported(site: Site) -> Iterator[Problem]:
    """The aesgcm serde is an L2 adapter's (LMCache 0.5.6 l2_adapters/config.py:507), and
    only the standalone server has L2 adapters: in-process LMCache would write plaintext
    while the inventory says encrypted. Of the server's tiers only S3 is at rest off the
    host; dram has no L2 and disk is the host's own."""
    for host in site.group("vllm"):
        c = host.config
        if not c.lmcache_l2_encryption:
            continue
        if not c.lmcache_server:
            yield Problem(_src(site, host, KEY), KEY,
                          "true on an in-process LMCache host: in-process LMCache has no "
                          "encrypting L2 adapter and would store plaintext",
                          "set lmcache_topology: server (CUDA, ROCm, CPU hosts), or "
                          "lmcache_l2_encryption: false for this host and a bucket of its "
                          "own (lmcache_s3_bucket)", hosts=(host.name,))
        elif c.lmcache_mode != "s3":
            yield Problem(_src(site, host, KEY), KEY,
                          f"true with lmcache_mode {c.lmcache_mode}: only the S3 adapter "
                          "encrypts (the server's nixl, dram and disk tiers "
                          "store no chunk off the host through it)",
                          "use lmcache_mode: s3, or lmcache_l2_encryption: false",
                          hosts=(host.name,))


@rule
def l2_encryption_agrees_per_bucket(site: Site) -> Iterator[Problem]:
    """Every host of a bucket encrypts alike: a host without the serde reads a frame (29
    bytes longer, ciphertext) as KV, and a host with other AES bits fails every tag."""
    groups: dict[str, list[Host]] = {}
    for host in site.group("vllm"):
        if host.config.lmcache_mode == "s3":
            groups.setdefault(host.config.cache_bucket, []).append(host)
    for bucket, hosts in sorted(groups.items()):
        for key in (KEY, "lmcache_l2_encryption_aes_bits"):
            if key != KEY and not all(h.config.lmcache_l2_encryption for h in hosts):
                continue
            values: dict[object, list[Host]] = {}
            for h in hosts:
                values.setdefault(getattr(h.config, key), []).append(h)
            if len(values) < 2:
                continue
            common = max(values, key=lambda v: len(values[v]))
            odd = sorted(h.name for v, hs in values.items() if v != common for h in hs)
            first = next(h for h in hosts if h.name == odd[0])
            yield Problem(_src(site, first, key), key,
                          f"{str(getattr(first.config, key)).lower()} differs from the "
                          f"{str(common).lower()} of the other hosts of bucket {bucket}: "
                          "they read each other's chunks",
                          f"use {str(common).lower()} on every host of {bucket}, or give "
                          "the odd ones a bucket of their own (lmcache_s3_bucket)",
                          hosts=tuple(odd))


@rule
def l2_master_key_one_value(site: Site) -> Iterator[Problem]:
    """The master key, when the inventory gives it, is 32 bytes of base64 and given to
    every encrypting host (else `up` generates one for the rest: two keys, each host unable
    to read the others' chunks)."""
    hosts = [h for h in site.hosts.values() if needs(h, L2_MASTER_KEY)]
    given = [h for h in hosts if is_set(h, L2_MASTER_KEY)]
    if given and len(given) < len(hosts):
        lacking = sorted({h.name for h in hosts} - {h.name for h in given})
        yield Problem(_src(site, given[0], L2_MASTER_KEY), L2_MASTER_KEY,
                      f"is set for {given[0].name} but not for {', '.join(lacking[:3])}"
                      + (f" and {len(lacking) - 3} more" if len(lacking) > 3 else ""),
                      "set it once for every serving host (group_vars/vllm, in the vault), "
                      "or nowhere to let deploykit generate it", hosts=tuple(lacking))
    for host in given[:1]:
        value = host.config.lmcache_l2_master_key
        why = value_problem(L2_MASTER_KEY, value.get_secret_value()) if value else None
        if why:
            yield Problem(_src(site, host, L2_MASTER_KEY), L2_MASTER_KEY, why,
                          "generate one with `openssl rand -base64 32` and keep it in the "
                          "vault")
