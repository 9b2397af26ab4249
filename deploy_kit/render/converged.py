"""What a host's converge record watches (roles/deploykit_common, plugins/modules/
deploykit_converged.py): the files deploykit writes there, the units it runs, and on the
Ceph admin host the cluster state the storage roles create. A re-run leaves a host out of
every play while its inputs are unchanged and all of these are as the last converge left
them; anything else converges it as before.

Listing a path or unit that a host turns out not to have costs nothing: a path is recorded
as absent, and only units that were active at the record are held to it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from deploy_kit.config.site import Host
from deploy_kit.core.patterns import S3_LOG_PATTERNS
from deploy_kit.render import names
from deploy_kit.render.tls import HAPROXY_PEM_PATH

# Written by the roles from what only Ansible holds (keys, binaries, markers), so not in the
# rendered tree. The rendered tree's own paths (secret files included) are added per host.
GROUP_PATHS: dict[str, tuple[str, ...]] = {
    "rgw": ("/etc/ceph/ceph.conf", HAPROXY_PEM_PATH, "/etc/consul.d/secrets.json",
            "/usr/local/bin/consul"),
    "consul_servers": ("/etc/consul.d/secrets.json", "/usr/local/bin/consul"),
    "dns": ("/usr/local/bin/coredns",),
    "vllm": ("/usr/local/share/ca-certificates/deploykit-ca.crt",
             "/etc/pki/ca-trust/source/anchors/deploykit-ca.crt"),
}
GROUP_UNITS: dict[str, tuple[str, ...]] = {
    "rgw": ("consul", "haproxy"),
    "consul_servers": ("consul",),
    "dns": ("coredns",),
    "vllm": ("lmcache-server", "vllm", "prometheus-node-exporter",
             "deploykit-lmcache-s3-events.timer"),
    "monitoring": ("prometheus", "prometheus-blackbox-exporter", "prometheus-alertmanager"),
}


def watched_paths(host: Host, rendered: Iterable[str]) -> list[str]:
    c = host.config
    paths = set(rendered)
    for group in host.groups & GROUP_PATHS.keys():
        paths.update(GROUP_PATHS[group])
    if "rgw" in host.groups:
        paths.update(f"/etc/ceph/ceph.client.{name}.keyring"
                     for name in names.rgw_instance_names(host.name, c.ceph_rgw_count_per_host))
    if "vllm" in host.groups:
        paths.add(names.credentials_path(c))
        paths.add(f"{c.lmcache_config_dir}/serving-env.lock-sha256")
        paths.add(f"{c.vllm_venv}/.deploykit-wheelhouse")  # what serving_env installed
        if c.model_is_local:  # the digest of what was staged: a re-staged model changes it
            paths.add(f"{c.model_path_on_host}/.deploykit-staged")
    return sorted(paths)


def watched_units(host: Host) -> list[str]:
    units = {unit for group in host.groups & GROUP_UNITS.keys() for unit in GROUP_UNITS[group]}
    if "rgw" in host.groups:
        units.update(f"ceph-radosgw@{name}" for name in
                     names.rgw_instance_names(host.name, host.config.ceph_rgw_count_per_host))
    return sorted(units)


def cluster_probes(host: Host) -> list[list[str]]:
    """On the Ceph admin host: what the pools and S3 roles create lives in the cluster, not
    in a file (read-only commands; any other answer converges the whole site)."""
    if "ceph_admin" not in host.groups:
        return []
    c = host.config
    conf = c.deploykit_ceph_conf
    return [
        ["ceph", "--conf", conf, "osd", "pool", "ls"],
        ["radosgw-admin", "--conf", conf, "user", "info", "--uid", c.ceph_rgw_s3_user],
        ["radosgw-admin", "--conf", conf, "metadata", "get",
         f"bucket:{c.deploykit_s3_bucket}"],
    ]


def watch(host: Host, rendered: Iterable[str]) -> dict[str, Any]:
    serving = "vllm" in host.groups
    return {
        "paths": watched_paths(host, rendered),
        "units": watched_units(host),
        "probes": cluster_probes(host),
        # the unit whose process holds LMCache's S3 breaker (roles/lmcache/tasks/heal.yml)
        "breaker_unit": (("lmcache-server" if host.config.lmcache_topology == "server"
                          else "vllm") if serving else None),
        "breaker_pattern": S3_LOG_PATTERNS["breaker"] if serving else None,
    }
