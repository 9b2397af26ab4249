"""TLS names and paths (pure): where the site CA and the issued certificates live on the
controller, where the roles install them, and what each concentrator certificate names.

The key material itself never passes through the rendered tree: `deploykit up` (and the
render play of a plain ansible-playbook run) issues it into the controller's TLS directory
(deploy_kit/ops/tls.py), and the roles copy it from there with no_log. The tree only carries
these paths (settings.json `_deploykit_tls_ca_cert_src`, `_ceph_rgw_tls_pem_src`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_kit.config import names
from deploy_kit.config.models import HostConfig
from deploy_kit.config.site import Host

DEFAULT_DIR = ".deploykit-tls"
CA_CERT = "ca.crt"
CA_KEY = "ca.key"
# On the RGW hosts: HAProxy's certificate, chain and key in one file (config/names.py)
HAPROXY_PEM_PATH = names.HAPROXY_PEM_PATH
# On the serving hosts: Debian's local CA directory; update-ca-certificates folds it into
# /etc/ssl/certs/ca-certificates.crt, the file awscrt (LMCache's S3 client) reads.
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# Reissue (up) and warn (verify) when a certificate has less than this left.
RENEW_DAYS = 30


def _resolve(root: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else root / path


def tls_dir(root: Path, c: HostConfig) -> Path:
    return _resolve(root, c.deploykit_tls_dir or DEFAULT_DIR)


def ca_cert_path(root: Path, c: HostConfig) -> Path:
    return _resolve(root, c.deploykit_tls_ca_cert) if c.deploykit_tls_ca_cert \
        else tls_dir(root, c) / CA_CERT


def ca_key_path(root: Path, c: HostConfig) -> Path:
    return _resolve(root, c.deploykit_tls_ca_key) if c.deploykit_tls_ca_key \
        else tls_dir(root, c) / CA_KEY


def host_pem_path(root: Path, c: HostConfig, host_name: str) -> Path:
    return tls_dir(root, c) / f"{host_name}.pem"


def dns_names(c: HostConfig) -> list[str]:
    """`<fqdn>` and `*.<fqdn>`: LMCache sends only virtual-hosted requests, so every Host is
    `<bucket>.<fqdn>`; a wildcard covers exactly one label (bucket names carry no dot,
    rules_storage.s3_name_consistent)."""
    return [c.deploykit_s3_fqdn, f"*.{c.deploykit_s3_fqdn}"]


def ip_names(host: Host) -> list[str]:
    """The gateway host's own address as well, so an operator (or a health check) can
    reach one concentrator by address and still verify it."""
    try:
        return [str(ipaddress.ip_address(host.address))]
    except ValueError:
        return []


@dataclass(frozen=True)
class Sources:
    """Where the roles copy the CA and the host certificates from when it is not the TLS
    directory: a check-mode run's would-be material in a private scratch directory."""

    ca_cert: Path
    host_pems: dict[str, Path]
    # the same for the Consul CA and agent certificates (render/consul_tls.py)
    consul_ca: Path | None = None
    consul_pems: dict[str, Path] = field(default_factory=dict)


def issued_paths(root: Path, host: Host, sources: Sources | None = None) -> dict[str, Any] | None:
    """A host's TLS material on the controller (None with TLS off): what the roles copy from
    (settings.json carries these paths, never the material), and where they install it."""
    c = host.config
    if not c.deploykit_s3_tls:
        return None
    ca = sources.ca_cert if sources else ca_cert_path(root, c)
    out: dict[str, Any] = {"ca_cert": str(ca), "haproxy_pem_path": HAPROXY_PEM_PATH}
    if "rgw" in host.groups:
        pem = sources.host_pems.get(host.name) if sources else None
        out["host_pem"] = str(pem or host_pem_path(root, c, host.name))
    return out
