"""Names and paths derived from the settings, shared by every renderer."""

from __future__ import annotations

from deploy_kit.config.models import HostConfig

HEADER = "Managed by deploykit; local changes are overwritten."

# The serving hosts' restart lease in the cache bucket (render/self_heal.py): numbered
# objects under it, never deleted by the hosts (lifecycle expiry removes old ones); no
# LMCache key starts with it (cache/keys.py)
LEASE_PREFIX = "deploykit-lease/"


def endpoint_host(c: HostConfig) -> str:
    """`<fqdn>` or `<fqdn>:<port>` when the port is not the scheme's default."""
    default = 443 if c.deploykit_s3_tls else 80
    return c.deploykit_s3_fqdn if c.deploykit_s3_port == default else \
        f"{c.deploykit_s3_fqdn}:{c.deploykit_s3_port}"


def endpoint_url(c: HostConfig) -> str:
    scheme = "https" if c.deploykit_s3_tls else "http"
    return f"{scheme}://{endpoint_host(c)}"


def remote_url(c: HostConfig) -> str:
    """LMCache sends everything after s3:// as the Host header: virtual-hosted bucket, the
    host's sharing group's (its team's, lmcache_s3_bucket, else the site bucket)."""
    return f"s3://{c.cache_bucket}.{endpoint_host(c)}"


def aws_profile(c: HostConfig) -> str:
    return "lmcache"


def credentials_path(c: HostConfig) -> str:
    return f"{c.lmcache_config_dir}/aws/credentials"


def aws_config_path(c: HostConfig) -> str:
    return f"{c.lmcache_config_dir}/aws/config"


def lmcache_config_path(c: HostConfig) -> str:
    return f"{c.lmcache_config_dir}/lmcache.yaml"


def vllm_env_path(c: HostConfig, unit: str = "vllm") -> str:
    """A vLLM instance's environment file (instance 0's unit is `vllm`: vllm.env)."""
    return f"{c.lmcache_config_dir}/{unit}.env"


def vllm_unit_path(unit: str = "vllm") -> str:
    return f"/etc/systemd/system/{unit}.service"


def vllm_secret_env_path(c: HostConfig) -> str:
    """VLLM_API_KEY for the vLLM units (0600, written by the role from a key it holds)."""
    return f"{c.lmcache_config_dir}/vllm-secret.env"


def vllm_api_keys_path(c: HostConfig) -> str:
    """vLLM's --config file of API keys (render/vllm.py api_keys_path says why a file)."""
    return f"{c.lmcache_config_dir}/vllm-api-keys.yaml"


def lmcache_server_env_path(c: HostConfig) -> str:
    return f"{c.lmcache_config_dir}/lmcache-server.env"


def lmcache_l2_master_key_path(c: HostConfig) -> str:
    """lmcache_l2_master_key for the LMCache server's aesgcm serde (0600, vllm_user; written
    by the role from a key only Ansible holds: the render names the path, never the key)."""
    return f"{c.lmcache_config_dir}/lmcache-l2-master.key"


VLLM_UNIT_PATH = vllm_unit_path()
LMCACHE_SERVER_UNIT = "lmcache-server"
LMCACHE_SERVER_UNIT_PATH = f"/etc/systemd/system/{LMCACHE_SERVER_UNIT}.service"
HAPROXY_CFG_PATH = "/etc/haproxy/haproxy.cfg"
# the serving front (render/serving_front.py): its own HAProxy process and unit beside the
# concentrator's, so a host that is both gateway and serving host runs both
VLLM_FRONT_UNIT = "vllm-front"
VLLM_FRONT_UNIT_PATH = f"/etc/systemd/system/{VLLM_FRONT_UNIT}.service"
VLLM_FRONT_CFG_PATH = "/etc/haproxy/vllm-front.cfg"
# SHA-256 digests of the accepted `Authorization` values (0600, the role writes it)
VLLM_FRONT_KEYS_PATH = "/etc/haproxy/vllm-front.keys"
# the router (render/router.py): vllm-router on loopback, and its front (HAProxy) on
# router_port; the front's keys file has the serving front's format
ROUTER_UNIT = "vllm-router"
ROUTER_UNIT_PATH = f"/etc/systemd/system/{ROUTER_UNIT}.service"
ROUTER_DIR = "/etc/deploykit-router"
ROUTER_LAUNCHER_PATH = f"{ROUTER_DIR}/launch.py"
# VLLM_ROUTER_API_KEY (0600): the key the router sends on its own calls to the instances
ROUTER_SECRET_ENV_PATH = f"{ROUTER_DIR}/secret.env"
ROUTER_FRONT_UNIT = "vllm-router-front"
ROUTER_FRONT_UNIT_PATH = f"/etc/systemd/system/{ROUTER_FRONT_UNIT}.service"
ROUTER_FRONT_CFG_PATH = "/etc/haproxy/vllm-router-front.cfg"
ROUTER_FRONT_KEYS_PATH = "/etc/haproxy/vllm-router-front.keys"
CONSUL_ROUTER_SERVICE_PATH = "/etc/consul.d/llm-service.json"
# the host agents the roles copy from deploy_kit/agents (their settings are rendered)
SELF_HEAL_SCRIPT = "/usr/local/libexec/deploykit/lmcache-heal"
S3_EVENTS_SCRIPT = "/usr/local/libexec/deploykit/lmcache-s3-events"
# a team host's LMCache server start sets the team's quota (render/lmcache_quota.py)
LMCACHE_QUOTA_SCRIPT = "/usr/local/libexec/deploykit/lmcache-quota"
RGW_CONF_PATH = "/etc/ceph/ceph.conf"
COREDNS_UNIT_PATH = "/etc/systemd/system/coredns.service"
CONSUL_UNIT_PATH = "/etc/systemd/system/consul.service"
CONSUL_AGENT_PATH = "/etc/consul.d/consul.json"
CONSUL_SERVICE_PATH = "/etc/consul.d/s3-service.json"
# the groups whose hosts run a Consul agent: servers, the gateways (the s3 service) and the
# routers (the router name's service)
CONSUL_AGENT_GROUPS = frozenset({"rgw", "consul_servers", "router"})
COREDNS_DIR = "/etc/coredns"

# Written by the roles from what only Ansible holds (keys, binaries, markers), so not in the
# rendered tree: settings.json carries each under its own name, the roles' `dest:` reads that
# name, and the converge record watches the same value (plan/watch.py).
CONSUL_BINARY_PATH = "/usr/local/bin/consul"
CONSUL_SECRETS_PATH = "/etc/consul.d/secrets.json"
COREDNS_BINARY_PATH = "/usr/local/bin/coredns"
# On the RGW hosts: the certificate, its chain and its key in one file, as HAProxy's
# `bind ... ssl crt` reads it (0600 root: it holds the key).
HAPROXY_PEM_PATH = "/etc/haproxy/deploykit-s3.pem"
HAPROXY_STATS_ENV_PATH = "/etc/haproxy/deploykit-stats.env"
# On the Consul agents (under /etc/consul.d, so `down` removes them with it; Consul loads only
# *.json / *.hcl from the config directory and skips subdirectories)
CONSUL_TLS_DIR = "/etc/consul.d/tls"
CONSUL_TLS_CA = f"{CONSUL_TLS_DIR}/ca.pem"
# the certificate and its key in one 0600 file: Go's X509KeyPair takes the certificate
# blocks from cert_file and the key block from key_file, skipping the others
CONSUL_TLS_PEM = f"{CONSUL_TLS_DIR}/agent.pem"
# Where each OS family keeps local trust anchors, and what rebuilds the bundle awscrt reads
# (Debian: /etc/ssl/certs/ca-certificates.crt; RHEL family: /etc/pki/tls/certs/ca-bundle.crt,
# one of awscrt's compiled-in default locations too). The serving role tells them apart by the
# anchors directory, so no fact gathering is needed.
CA_TRUST = {
    "debian": {"path": "/usr/local/share/ca-certificates/deploykit-ca.crt",
               "command": ["update-ca-certificates"]},
    "redhat": {"path": "/etc/pki/ca-trust/source/anchors/deploykit-ca.crt",
               "command": ["update-ca-trust", "extract"]},
}


def rgw_keyring_path(instance: str) -> str:
    return f"/etc/ceph/ceph.client.{instance}.keyring"


def serving_env_lock_marker_path(c: HostConfig) -> str:
    """The requirements.lock digest the serving role last installed (its environment phase)."""
    return f"{c.lmcache_config_dir}/serving-env.lock-sha256"


def serving_env_wheelhouse_marker_path(c: HostConfig) -> str:
    """What the serving role installed into the venv."""
    return f"{c.vllm_venv}/.deploykit-wheelhouse"


def router_lock_marker_path(c: HostConfig) -> str:
    """The digest of the router lock the router venv was installed from."""
    return f"{c.router_venv}/.deploykit-router-lock"


def model_staged_marker_path(c: HostConfig) -> str:
    """The digest of the controller model directory last staged on the host."""
    return f"{c.model_path_on_host}/.deploykit-staged"


def rgw_instance_names(host_name: str, count: int) -> list[str]:
    """Instance names for Debian's ceph-radosgw@.service (it runs `--name client.%i`)."""
    return [f"rgw.{host_name}.{i}" for i in range(count)]


def router_fqdn(c: HostConfig) -> str:
    """The name clients send requests to: router_fqdn, else `llm.` in the S3 name's domain."""
    if c.router_fqdn:
        return c.router_fqdn
    domain = c.deploykit_s3_fqdn.partition(".")[2]
    return f"llm.{domain}" if domain else "llm"
