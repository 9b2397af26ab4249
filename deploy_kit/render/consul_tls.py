"""Consul TLS names and paths (pure): the Consul CA and agent certificates on the controller,
where the consul role installs them, and the names each agent's certificate carries.

Consul's internal RPC (agents to servers, servers to each other) runs mutual TLS when
consul_tls_enabled: every agent presents a certificate from the Consul CA, and with
verify_server_hostname an agent talks RPC only to a peer whose certificate names
`server.<datacenter>.consul`, which only servers get. A client agent's certificate names
`client.<datacenter>.consul`, so a compromised gateway host cannot pose as a server.

The Consul CA is deploykit's own, beside the site CA (same private directory), and is
name-constrained to the `consul` domain: the site CA cannot serve here (its name constraints
permit only the S3 name, so Go refuses a `server.dc1.consul` it signed), and a CA every
serving host trusts for S3 should not vouch for Consul servers either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deploy_kit.config import names
from deploy_kit.config.models import HostConfig
from deploy_kit.config.site import Host
from deploy_kit.render.tls import Sources, tls_dir

DOMAIN = "consul"  # Consul's default domain; deploykit does not set another
CA_CERT = "consul-ca.crt"
CA_KEY = "consul-ca.key"
CERT_DIR = "consul"  # under the TLS directory: <host>.pem, the certificate and its key
# On the agents: config/names.py says where and why
HOST_DIR = names.CONSUL_TLS_DIR
HOST_CA = names.CONSUL_TLS_CA
HOST_PEM = names.CONSUL_TLS_PEM


def enabled(host: Host) -> bool:
    """This host runs a Consul agent with TLS on."""
    c = host.config
    return (c.consul_tls_enabled and c.deploykit_dns_mode == "consul"
            and bool(host.groups & names.CONSUL_AGENT_GROUPS))


def ca_cert_path(root: Path, c: HostConfig) -> Path:
    return tls_dir(root, c) / CA_CERT


def ca_key_path(root: Path, c: HostConfig) -> Path:
    return tls_dir(root, c) / CA_KEY


def agent_pem_path(root: Path, c: HostConfig, host_name: str) -> Path:
    return tls_dir(root, c) / CERT_DIR / f"{host_name}.pem"


def agent_names(host: Host) -> list[str]:
    """server.<dc>.consul for a server (what verify_server_hostname checks), else
    client.<dc>.consul (Consul's own `consul tls cert create -client` convention)."""
    role = "server" if "consul_servers" in host.groups else "client"
    return [f"{role}.{host.config.consul_datacenter}.{DOMAIN}"]


def tls_stanza() -> dict[str, Any]:
    """Consul 1.16's `tls` block: mutual TLS with hostname checks on internal RPC. No HTTPS
    or gRPC-TLS port is opened (ports.https stays -1), so the API callers (the roles,
    verify, the health gates) keep using plain HTTP on loopback."""
    return {
        "defaults": {"ca_file": HOST_CA, "cert_file": HOST_PEM, "key_file": HOST_PEM,
                     "verify_incoming": True, "verify_outgoing": True,
                     "tls_min_version": "TLSv1_2"},
        "internal_rpc": {"verify_server_hostname": True},
    }


def issued_paths(root: Path, host: Host, sources: Sources | None = None) -> dict[str, str] | None:
    """Controller paths of this agent's CA certificate and certificate+key (None with Consul
    TLS off here): settings.json carries the paths, never the material; `sources`: a
    check-mode run's would-be material in its scratch directory."""
    if not enabled(host):
        return None
    c = host.config
    ca = (sources.consul_ca if sources else None) or ca_cert_path(root, c)
    pem = (sources.consul_pems.get(host.name) if sources else None) \
        or agent_pem_path(root, c, host.name)
    return {"_consul_tls_ca_src": str(ca), "_consul_tls_pem_src": str(pem)}
