"""What a host's converge record watches (roles/deploykit_common, plugins/modules/
deploykit_converged.py): the files deploykit writes there, the units it runs, and on the
Ceph admin host the cluster state the storage roles create. A re-run leaves a host out of
every play while its inputs are unchanged and all of these are as the last converge left
them; anything else converges it as before. Pure: ops/converged.py adds the versions the
host runs.

Listing a path or unit that a host turns out not to have costs nothing: a path is recorded
as absent, and only units that were active at the record are held to it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from deploy_kit.config import names
from deploy_kit.config.site import Host
from deploy_kit.core.patterns import S3_LOG_PATTERNS
from deploy_kit.plan.serving import serving_host

# The group whose hosts run each service (the playbooks' host patterns): which of
# role_paths() and role_units() a host's record watches.
CONSUL_HOSTS = names.CONSUL_AGENT_GROUPS


def role_paths(host: Host) -> dict[str, Any]:
    """The files the roles write from what only Ansible holds (keys, binaries, markers), so
    not in the rendered tree, under the settings.json names the roles' `dest:` reads. The
    converge record watches these same values (watched_paths), so the two cannot drift."""
    c = host.config
    serving = serving_host(host)
    return {
        "_consul_binary_path": names.CONSUL_BINARY_PATH,
        "_consul_secrets_path": names.CONSUL_SECRETS_PATH,
        # consul_tls_enabled: the Consul CA and this agent's certificate + key
        "_consul_tls_dir": names.CONSUL_TLS_DIR,
        "_consul_tls_ca_path": names.CONSUL_TLS_CA,
        "_consul_tls_pem_path": names.CONSUL_TLS_PEM,
        "_coredns_binary_path": names.COREDNS_BINARY_PATH,
        "_ceph_rgw_conf_path": names.RGW_CONF_PATH,
        "_ceph_rgw_haproxy_pem_path": names.HAPROXY_PEM_PATH,
        # secret files the render also names (their content never leaves Ansible)
        "_ceph_rgw_haproxy_stats_env_path": names.HAPROXY_STATS_ENV_PATH,
        "_vllm_secret_env_path": serving.secret_env_path if c.vllm_uses_api_key else None,
        "_vllm_api_keys_path": serving.api_keys_path if c.vllm_uses_api_key else None,
        # the serving front's key digests (render/serving_front.py key_digest); absent without a key
        "_vllm_front_keys_path": names.VLLM_FRONT_KEYS_PATH,
        "_ceph_rgw_keyring_paths": {
            name: names.rgw_keyring_path(name)
            for name in names.rgw_instance_names(host.name, c.ceph_rgw_count_per_host)},
        "_lmcache_ca_trust": names.CA_TRUST,
        "_lmcache_credentials_path": names.credentials_path(c),
        # written with lmcache_l2_encryption, removed without it
        "_lmcache_l2_master_key_path": names.lmcache_l2_master_key_path(c),
        "_serving_env_lock_marker_path": names.serving_env_lock_marker_path(c),
        "_serving_env_wheelhouse_marker_path": names.serving_env_wheelhouse_marker_path(c),
        "_vllm_model_staged_marker_path": (names.model_staged_marker_path(c)
                                           if c.model_is_local else None),
        # the agents the roles copy from deploy_kit/agents (their settings are rendered)
        "_serving_agent_script": names.SELF_HEAL_SCRIPT,
        "_serving_quota_script": names.LMCACHE_QUOTA_SCRIPT,
        # the router's venv records the lock it was built from; its front's key digests and
        # its instance key (secret) are written from what only Ansible holds
        "_router_lock_marker_path": names.router_lock_marker_path(c),
        "_router_front_keys_path": names.ROUTER_FRONT_KEYS_PATH,
        "_router_secret_env_path": (names.ROUTER_SECRET_ENV_PATH if c.vllm_uses_api_key
                                    else None),
        "_monitoring_s3_events_script": names.S3_EVENTS_SCRIPT,
    }


# Which of role_paths() each group's roles write (a name not listed for any of a host's groups
# is not watched there: cephadm, not deploykit, keeps the admin host's ceph.conf).
GROUP_PATH_NAMES: dict[str, tuple[str, ...]] = {
    "rgw": ("_ceph_rgw_conf_path", "_ceph_rgw_haproxy_pem_path", "_ceph_rgw_keyring_paths",
            "_ceph_rgw_haproxy_stats_env_path"),
    "consul": ("_consul_binary_path", "_consul_secrets_path", "_consul_tls_ca_path",
               "_consul_tls_pem_path"),
    "dns": ("_coredns_binary_path",),
    "vllm": ("_lmcache_ca_trust", "_lmcache_credentials_path", "_lmcache_l2_master_key_path",
             "_vllm_secret_env_path",
             "_vllm_api_keys_path", "_vllm_front_keys_path",
             "_serving_env_lock_marker_path", "_serving_env_wheelhouse_marker_path",
             "_vllm_model_staged_marker_path", "_serving_agent_script", "_serving_quota_script",
             "_monitoring_s3_events_script"),
    "router": ("_router_lock_marker_path", "_router_front_keys_path",
               "_router_secret_env_path"),
}


def _groups(host: Host) -> set[str]:
    return set(host.groups) | ({"consul"} if host.groups & CONSUL_HOSTS else set())


def _flat(value: Any) -> list[str]:
    """Every path in one role_paths() value (a path, None, {os: {path, command}}, {name: path})."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [p for v in value.values() for p in _flat(v["path"] if isinstance(v, dict) else v)]


def watched_paths(host: Host, rendered: Iterable[str]) -> list[str]:
    written = role_paths(host)
    paths = set(rendered)
    for group in _groups(host) & GROUP_PATH_NAMES.keys():
        for name in GROUP_PATH_NAMES[group]:
            paths.update(_flat(written[name]))
    return sorted(paths)


def role_units(host: Host) -> dict[str, Any]:
    """The units the roles run, under the settings.json names their systemd tasks read (the
    record watches the same values). A unit deploykit renders is named after its file; one a
    package ships (haproxy, the Prometheus family) is named here once."""
    c = host.config
    return {
        # Debian's ceph-radosgw@.service runs `--name client.%i`: one unit per instance
        "_ceph_rgw_instance_units": {
            name: f"ceph-radosgw@{name}"
            for name in names.rgw_instance_names(host.name, c.ceph_rgw_count_per_host)},
        "_ceph_rgw_haproxy_unit": "haproxy",
        "_consul_unit": "consul",
        "_coredns_unit": "coredns",
        "_lmcache_server_unit": names.LMCACHE_SERVER_UNIT,
        # one unit per vLLM instance (config/instances.py), by instance name
        "_vllm_instance_units": serving_host(host).instance_units,
        # the serving front on the instances' public ports (render/serving_front.py)
        "_vllm_front_unit": names.VLLM_FRONT_UNIT,
        # vllm-router on loopback and its front on router_port (render/router.py)
        "_router_unit": names.ROUTER_UNIT,
        "_router_front_unit": names.ROUTER_FRONT_UNIT,
        "_monitoring_node_exporter_unit": "prometheus-node-exporter",
        "_monitoring_s3_events_unit": "deploykit-lmcache-s3-events.timer",
        "_monitoring_prometheus_unit": "prometheus",
        "_monitoring_blackbox_unit": "prometheus-blackbox-exporter",
        "_monitoring_alertmanager_unit": "prometheus-alertmanager",
    }


GROUP_UNIT_NAMES: dict[str, tuple[str, ...]] = {
    "rgw": ("_ceph_rgw_instance_units", "_ceph_rgw_haproxy_unit"),
    "consul": ("_consul_unit",),
    "dns": ("_coredns_unit",),
    "vllm": ("_lmcache_server_unit", "_vllm_instance_units", "_vllm_front_unit",
             "_monitoring_node_exporter_unit",
             "_monitoring_s3_events_unit"),
    "monitoring": ("_monitoring_prometheus_unit", "_monitoring_blackbox_unit",
                   "_monitoring_alertmanager_unit"),
    "router": ("_router_unit", "_router_front_unit"),
}


def watched_units(host: Host) -> list[str]:
    units = role_units(host)
    watched: set[str] = set()
    for group in _groups(host) & GROUP_UNIT_NAMES.keys():
        for name in GROUP_UNIT_NAMES[group]:
            value = units[name]
            watched.update([value] if isinstance(value, str) else value.values())
    return sorted(watched)


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


def breaker(host: Host) -> tuple[list[str], str | None]:
    """On a serving host: the units whose processes hold LMCache's S3 circuit breaker (the
    LMCache server, or every in-process vLLM instance), and the journal words it logs when it
    trips (the words verify reads too). The heal task and the converge record both read
    these, so they name the same units and words."""
    serving = serving_host(host)
    if not serving.serves:
        return [], None
    return serving.lmcache_units, S3_LOG_PATTERNS["breaker"]
