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

