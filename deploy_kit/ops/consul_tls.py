"""The Consul CA and one certificate per Consul agent, on the controller (I/O).

With consul_tls_enabled, `deploykit up` (and the render play of a plain ansible-playbook
run) creates the Consul CA once per inventory in the TLS directory (beside the site CA,
0700), name-constrained to the `consul` domain, and issues each agent a certificate
(render/consul_tls.py names them) for both TLS server and client use. The rules of the
site's RGW certificates hold: one that still fits (same CA, same names, outside its renewal
window, 0600) is kept byte for byte; keys are written 0600 and never printed; check mode
and `render` write nothing beside the inventory.
"""

from __future__ import annotations

import stat
from dataclasses import replace
from pathlib import Path

from cryptography import x509

from deploy_kit.config.site import Host, Site
from deploy_kit.ops import tls
from deploy_kit.render import consul_tls as names
from deploy_kit.render import tls as tls_names
from deploy_kit.render.tls import Sources


def agents(site: Site) -> list[Host]:
    return sorted((h for h in site.hosts.values() if names.enabled(h)), key=lambda h: h.name)


def ca_constraints() -> x509.NameConstraints:
    """The Consul CA vouches for names under `consul` only, and for no address."""
    return x509.NameConstraints(permitted_subtrees=[x509.DNSName(names.DOMAIN)],
                                excluded_subtrees=None)


def _create_ca(site: Site, cert_path: Path, key_path: Path) -> None:
    cert_pem, key_pem = tls.create_ca(site.name, constraints=ca_constraints(),
                                      kind="Consul CA")
    tls._write_private(key_path, key_pem)  # key first: the certificate marks "CA exists"
    tls._write_private(cert_path, cert_pem, 0o644)


def ensure_ca(site: Site) -> tls.CA:
    s = site.settings
    cert_path, key_path = names.ca_cert_path(site.root, s), names.ca_key_path(site.root, s)
    if not cert_path.exists():
        tls._private_dir(cert_path.parent)
        with tls._ca_lock(cert_path.parent):  # two first runs: one creates, one reads
            if not cert_path.exists():
                _create_ca(site, cert_path, key_path)
    return tls.load_ca(cert_path, key_path)


def ensure_consul_tls(site: Site) -> list[tls.Issued]:
    """Create or take the Consul CA, then issue (or keep) each agent's certificate."""
    hosts = agents(site)
    if not hosts:
        return []
    ca = ensure_ca(site)
    out_dir = names.agent_pem_path(site.root, site.settings, "x").parent
    tls._private_dir(out_dir)
    return _agent_certs(site, ca, hosts, out_dir, "issued")


def check_consul_tls(site: Site, scratch: Path, sources: Sources | None
                     ) -> tuple[list[tls.Issued], Sources | None]:
    """Check mode: what `ensure_consul_tls` would do, writing nothing beside the inventory
    (a CA still to create and each certificate still to issue are made in `scratch`);
    returns `sources` (the S3 side's, or none) with the Consul material added."""
    hosts = agents(site)
    if not hosts:
        return [], sources
    s = site.settings
    cert_path, key_path = names.ca_cert_path(site.root, s), names.ca_key_path(site.root, s)
    tls._private_dir(scratch)
    out: list[tls.Issued] = []
    if not cert_path.exists():
        would_be = cert_path
        cert_path, key_path = scratch / names.CA_CERT, scratch / names.CA_KEY
        _create_ca(site, cert_path, key_path)
        ca = tls.load_ca(cert_path, key_path)
        out.append(tls.Issued("(Consul CA)", would_be, ca.cert.not_valid_after_utc,
                              "would create"))
    else:
        ca = tls.load_ca(cert_path, key_path)
    issued = _agent_certs(site, ca, hosts, scratch, "would issue")
    pems = {i.host: i.path for i in issued if i.action == "would issue"}
    base = sources or Sources(tls_names.ca_cert_path(site.root, s), {})  # S3 side unused
    return out + issued, replace(base, consul_ca=cert_path, consul_pems=pems)


def _agent_certs(site: Site, ca: tls.CA, hosts: list[Host], write_dir: Path,
                 action: str) -> list[tls.Issued]:
    days = site.settings.deploykit_tls_cert_days
    out: list[tls.Issued] = []
    for host in hosts:
        path = names.agent_pem_path(site.root, site.settings, host.name)
        dns = names.agent_names(host)
        current = tls.still_fits(path.read_bytes(), ca, dns, []) if path.exists() else None
        if current is not None and stat.S_IMODE(path.stat().st_mode) == 0o600:
            out.append(tls.Issued(host.name, path, current.not_valid_after_utc, "kept"))
            continue
        cert_pem, key_pem = tls.issue(ca, dns, [], days, client_auth=True)
        target = write_dir / path.name
        tls._write_private(target, cert_pem + key_pem)
        cert = x509.load_pem_x509_certificate(cert_pem)
        out.append(tls.Issued(host.name, target, cert.not_valid_after_utc, action))
    return out
