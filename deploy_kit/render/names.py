"""Names and paths derived from the settings, shared by every renderer."""

from __future__ import annotations

from deploy_kit.config.models import HostConfig

HEADER = "Managed by deploykit; local changes are overwritten."


def endpoint_host(c: HostConfig) -> str:
    """`<fqdn>` or `<fqdn>:<port>` when the port is not the scheme's default."""
    default = 443 if c.deploykit_s3_tls else 80
    return c.deploykit_s3_fqdn if c.deploykit_s3_port == default else \
        f"{c.deploykit_s3_fqdn}:{c.deploykit_s3_port}"


def endpoint_url(c: HostConfig) -> str:
    scheme = "https" if c.deploykit_s3_tls else "http"
    return f"{scheme}://{endpoint_host(c)}"


def remote_url(c: HostConfig) -> str:
    """LMCache sends everything after s3:// as the Host header: virtual-hosted bucket."""
    return f"s3://{c.deploykit_s3_bucket}.{endpoint_host(c)}"


def aws_profile(c: HostConfig) -> str:
    return "lmcache"


def credentials_path(c: HostConfig) -> str:
    return f"{c.lmcache_config_dir}/aws/credentials"


def aws_config_path(c: HostConfig) -> str:
    return f"{c.lmcache_config_dir}/aws/config"


def lmcache_config_path(c: HostConfig) -> str:
    return f"{c.lmcache_config_dir}/lmcache.yaml"


def vllm_env_path(c: HostConfig) -> str:
    return f"{c.lmcache_config_dir}/vllm.env"


VLLM_UNIT_PATH = "/etc/systemd/system/vllm.service"
HAPROXY_CFG_PATH = "/etc/haproxy/haproxy.cfg"
RGW_CONF_PATH = "/etc/ceph/ceph.conf"
COREDNS_UNIT_PATH = "/etc/systemd/system/coredns.service"
CONSUL_UNIT_PATH = "/etc/systemd/system/consul.service"
CONSUL_AGENT_PATH = "/etc/consul.d/consul.json"
CONSUL_SERVICE_PATH = "/etc/consul.d/s3-service.json"
COREDNS_DIR = "/etc/coredns"


def rgw_instance_names(host_name: str, count: int) -> list[str]:
    """Instance names for Debian's ceph-radosgw@.service (it runs `--name client.%i`)."""
    return [f"rgw.{host_name}.{i}" for i in range(count)]
