"""The storage tier: RGW pools, multisite names, daemons per host, the S3 name and bucket,
and what packages-mode gateways need from the cluster."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.site import Site
from deploy_kit.core.errors import Problem

RULES, rule = collector()


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@rule
def pools_sane(site: Site) -> Iterator[Problem]:
    """Pool min_size <= size and pg_num a power of two (Ceph warns on anything else)."""
    for host in site.group("ceph_admin")[:1]:
        src = _src(site, host, "ceph_rgw_pools_list")
        names = [p.name for p in host.config.ceph_rgw_pools_list]
        for dup in sorted({n for n in names if names.count(n) > 1}):
            yield Problem(src, f"ceph_rgw_pools_list[{dup}]", "pool listed twice",
                          "keep one entry per pool")
        for pool in host.config.ceph_rgw_pools_list:
            key = f"ceph_rgw_pools_list[{pool.name}]"
            if pool.min_size > pool.size:
                yield Problem(src, f"{key}.min_size", f"{pool.min_size} > size {pool.size}",
                              f"use min_size <= {pool.size}")
            for field in ("pg_num", "pgp_num"):
                value = getattr(pool, field)
                if value is not None and not is_power_of_two(value):
                    lower = 1 << (value.bit_length() - 1)
                    yield Problem(src, f"{key}.{field}", f"{value} is not a power of two",
                                  f"use {lower} or {lower * 2}")


@rule
def rgw_multisite_complete(site: Site) -> Iterator[Problem]:
    """cephadm needs realm, zonegroup and zone together or none of them."""
    s = site.settings
    names = {"ceph_rgw_realm": s.ceph_rgw_realm, "ceph_rgw_zonegroup": s.ceph_rgw_zonegroup,
             "ceph_rgw_zone": s.ceph_rgw_zone}
    given = [k for k, v in names.items() if v]
    if given and len(given) < 3:
        missing = [k for k in names if k not in given]
        yield Problem(site.settings_source(given[0]), given[0],
                      f"set without {' and '.join(missing)} (cephadm fails the RGW service "
                      "on a missing one)", "set all three, or none for a single site")


@rule
def rgw_fits_cores(site: Site) -> Iterator[Problem]:
    """RGW daemons per host must fit the host's cores."""
    for host in site.group("rgw"):
        cpus = host.config.ceph_rgw_host_cpus
        if cpus is not None and host.config.ceph_rgw_count_per_host > cpus:
            yield Problem(_src(site, host, "ceph_rgw_count_per_host"),
                          "ceph_rgw_count_per_host",
                          f"{host.config.ceph_rgw_count_per_host} daemons on {host.name} "
                          f"with {cpus} cores", f"use at most {cpus}")


@rule
def s3_name_consistent(site: Site) -> Iterator[Problem]:
    """The S3 name must be a DNS name under which <bucket>.<fqdn> can exist."""
    fqdn = site.settings.deploykit_s3_fqdn
    labels = fqdn.split(".")
    if len(labels) < 2 or not all(labels) or any(len(x) > 63 for x in labels):
        yield Problem(site.settings_source("deploykit_s3_fqdn"), "deploykit_s3_fqdn",
                      f"{fqdn!r} is not a fully qualified name",
                      "use a name such as s3.example.com")
    if "." in site.settings.deploykit_s3_bucket:
        yield Problem(site.settings_source("deploykit_s3_bucket"), "deploykit_s3_bucket",
                      "a dot in the bucket breaks virtual-hosted addressing",
                      "use letters, digits and dashes")


@rule
def packages_mode_knows_cluster(site: Site) -> Iterator[Problem]:
    """Packages-mode gateways write their own ceph.conf: they need the fsid and mon host."""
    for host in site.group("rgw")[:1]:
        c = host.config
        if c.ceph_rgw_mode != "packages":
            continue
        for key in ("deploykit_ceph_fsid", "deploykit_ceph_mon_host"):
            if not getattr(c, key):
                yield Problem(_src(site, host, key), key,
                              "required with ceph_rgw_mode: packages",
                              "copy it from `ceph config generate-minimal-conf`")


@rule
def concentrator_choice_valid(site: Site) -> Iterator[Problem]:
    """The cephadm concentrator is a cephadm spec field: packages mode has only deploykit's."""
    for host in site.group("rgw")[:1]:
        c = host.config
        if c.ceph_rgw_concentrator == "cephadm" and c.ceph_rgw_mode != "cephadm":
            yield Problem(_src(site, host, "ceph_rgw_concentrator"), "ceph_rgw_concentrator",
                          "cephadm with ceph_rgw_mode: packages",
                          "use ceph_rgw_concentrator: deploykit")



@rule
def model_identities_apart(site: Site) -> Iterator[Problem]:
    """Each model's S3 identity is scoped to the keys its LMCache writes (config/
    s3_identities.py): no two models may share or nest those prefixes, no prefix may hold a
    character a bucket policy reads as a pattern, and none may fall under deploykit's own."""
    from deploy_kit.config import s3_identities as ids

    hosts = {h.name: h for h in ids.serving_hosts(site)}
    seen: set[tuple[str, str]] = set()
    for a, pa, b, pb in ids.overlaps(site):
        if (b.uid, a.uid) in seen:
            continue
        seen.add((a.uid, b.uid))
        ha, hb = hosts[a.hosts[0]], hosts[b.hosts[0]]
        same = "the same key prefix" if pa == pb else f"a prefix of {hb.name}'s ({pb!r})"
        yield Problem(_src(site, ha, "vllm_model"), "vllm_model",
                      f"{ha.name}'s model {a.model!r} writes LMCache keys under {pa!r}, "
                      f"{same} (model {b.model!r}, {_src(site, hb, 'vllm_model')}): one "
                      "model's S3 identity could write the other's chunks",
                      "serve one of them under a name that does not extend the other's "
                      "(a local model directory of another name)", (ha.name, hb.name))
    for identity in ids.identities(site):
        host = hosts[identity.hosts[0]]
        for prefix in identity.prefixes:
            special = sorted(set(prefix) & ids.POLICY_SPECIAL)
            if special or prefix.startswith(ids.RESERVED_PREFIXES):
                what = f"holds {' '.join(special)}, which a bucket policy reads as a " \
                    "pattern" if special else "falls under deploykit's own objects"
                yield Problem(_src(site, host, "vllm_model"), "vllm_model",
                              f"LMCache's keys for {identity.model!r} start {prefix!r}, "
                              f"which {what}", "rename the model directory",
                              identity.hosts)
        room = ids.MAX_UID - len(ids.SERVING_INFIX) - ids.DIGEST_CHARS
        if len(identity.uid) > ids.MAX_UID:
            yield Problem(site.settings_source("ceph_rgw_s3_user"), "ceph_rgw_s3_user",
                          f"{site.settings.ceph_rgw_s3_user!r} leaves no room for the "
                          f"serving identities' names ({identity.uid!r} is longer than "
                          f"{ids.MAX_UID})", f"use at most {room} characters")
            break
