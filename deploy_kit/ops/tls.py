"""The site CA and the concentrator certificates, on the controller (I/O).

`ensure_site_tls` runs before Ansible starts (`deploykit up`, and the render play of a plain
`ansible-playbook playbooks/site.yml`): it takes the operator's CA (deploykit_tls_ca_cert /
_key) or creates one once per inventory in a private directory (default
`<inventory>/.deploykit-tls/`, 0700, git-ignored by a `.gitignore` of its own), and issues one
certificate per RGW host for `<fqdn>`, `*.<fqdn>` and the host's address. A certificate that
still fits (same CA, same names, more than RENEW_DAYS / a third of its lifetime left) is
kept byte for byte, so a second `up` changes nothing. Keys are written 0600 and never
printed; the roles copy `<host>.pem` with no_log (roles/ceph_rgw/tasks/tls.yml).

Keys are ECDSA P-256: HAProxy (OpenSSL), s2n (awscrt, LMCache's S3 client) and Python's
ssl all accept it, and signing is cheap on the concentrators.
"""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from deploy_kit.config.site import Host, Site
from deploy_kit.core.errors import DeployKitError, InventoryError, Problem
from deploy_kit.core.exit_codes import ExitCode
from deploy_kit.render import tls as names
from deploy_kit.safe_read import read_bytes

MAX_PEM_BYTES = 1 << 20  # a CA certificate or key is a few KiB
# what may sign the concentrator certificates (DSA and X25519 cannot, or should not)
SIGNING_KEYS = (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey,
                ed448.Ed448PrivateKey)

CA_DAYS = 3650
CA_LOCK = ".ca.lock"  # beside ca.key: serialises the CA's creation
SITE_CA = "(site CA)"  # the Issued.host of a CA check mode would create


class TlsError(DeployKitError):
    """The CA or a certificate on the controller cannot be used (bad file, unsafe key)."""

    exit_code = ExitCode.INVALID_INVENTORY


@dataclass(frozen=True)
class Issued:
    host: str
    path: Path
    not_after: datetime.datetime
    action: str  # issued | kept; check mode: would issue | would create (the CA)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write 0600 from the start (never briefly readable), atomically (rename). The temp
    name is unique (mkstemp: O_EXCL, 0600), so two writers never share or unlink it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if mode != 0o600:
                os.fchmod(handle.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    ignore = path / ".gitignore"
    if not ignore.exists():  # the directory ignores itself, whatever the repository's rules
        _write_private(ignore, b"# deploykit's CA and certificate keys: never commit\n*\n", 0o644)


def check_key_file(path: Path) -> None:
    """A CA key readable or writable by anyone but its owner is refused (as OpenSSH refuses
    such identity files): it signs certificates every serving host trusts."""
    try:
        st = path.lstat()
    except OSError as exc:
        raise TlsError(f"cannot read the CA key {path}: {exc.strerror}",
                       hint="set deploykit_tls_ca_key to a readable file") from None
    if stat.S_ISLNK(st.st_mode):  # its target's mode is what protects it: name that file
        raise TlsError(f"the CA key {path} is a symlink",
                       hint="set deploykit_tls_ca_key to the key file itself")
    if not stat.S_ISREG(st.st_mode):
        raise TlsError(f"the CA key {path} is not a regular file")
    if st.st_mode & 0o077:
        raise TlsError(f"the CA key {path} is accessible to others (mode "
                       f"{stat.S_IMODE(st.st_mode):04o})", hint=f"chmod 600 {path}")


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def name_constraints(fqdn: str, networks: list[str]) -> x509.NameConstraints:
    """What the site CA may vouch for: the S3 name and its bucket names (a DNS subtree), and
    the gateway networks when the inventory names them (ceph_rgw_networks). It sits in each
    serving host's system trust store, so without this its key could vouch for any site."""
    permitted: list[x509.GeneralName] = [x509.DNSName(fqdn)]
    permitted += [x509.IPAddress(ipaddress.ip_network(n, strict=False)) for n in networks]
    return x509.NameConstraints(permitted_subtrees=permitted, excluded_subtrees=None)


def create_ca(site_name: str, days: int = CA_DAYS,
              constraints: x509.NameConstraints | None = None,
              kind: str = "CA") -> tuple[bytes, bytes]:
    """A self-signed CA that may sign server certificates only (path length 0), for the
    names `constraints` permits (RFC 5280: a critical extension); `kind` names it apart
    from the site's other CA ("Consul CA")."""
    key = _new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "deploykit"),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"deploykit {kind} {site_name}")])
    now = _now()
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False))
    if constraints is not None:
        cert = cert.add_extension(constraints, critical=True)
    signed = cert.sign(key, hashes.SHA256())
    return signed.public_bytes(serialization.Encoding.PEM), _key_pem(key)


@dataclass(frozen=True)
class CA:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey | object  # any key type cryptography can sign with
    pem: bytes

    @property
    def self_signed(self) -> bool:
        return self.cert.issuer == self.cert.subject


def load_ca(cert_path: Path, key_path: Path) -> CA:
    check_key_file(key_path)
    try:
        # bounded: a FIFO or a device named as the CA must not hang or exhaust memory
        pem = read_bytes(cert_path, MAX_PEM_BYTES)
        cert = x509.load_pem_x509_certificate(pem)
        key = serialization.load_pem_private_key(read_bytes(key_path, MAX_PEM_BYTES),
                                                 password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise TlsError(f"cannot load the CA {cert_path} / {key_path}: {exc}",
                       hint="PEM certificate and an unencrypted PEM key") from None
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(serialization.Encoding.PEM, pub) != \
            key.public_key().public_bytes(serialization.Encoding.PEM, pub):
        raise TlsError(f"the CA key {key_path} does not belong to {cert_path}")
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise TlsError(f"{cert_path} is no CA certificate (basicConstraints CA:TRUE missing)")
    if cert.not_valid_after_utc <= _now():
        raise TlsError(f"the CA {cert_path} expired on {cert.not_valid_after_utc:%Y-%m-%d}",
                       hint="give a valid CA (every certificate it issued is invalid too)")
    if cert.not_valid_before_utc > _now():
        raise TlsError(f"the CA {cert_path} is not valid before "
                       f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC",
                       hint="check this machine's clock, or give a CA valid now")
    if not isinstance(key, SIGNING_KEYS):
        raise TlsError(f"the CA key {key_path} is a {type(key).__name__}: it cannot sign "
                       "certificates here", hint="an EC, RSA or Ed25519 CA key")
    return CA(cert, key, pem)


def signature_hash(key: object) -> hashes.SHA256 | None:
    """Ed25519/Ed448 sign without a separate hash; EC and RSA with SHA-256."""
    return None if isinstance(key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey) \
        else hashes.SHA256()


def refuse_bad_ca(site: Site) -> None:
    """Exit 3 (an inventory problem, nothing contacted) for a CA `up` could not use."""
    problems = site_tls_problems(site)
    if problems:
        raise InventoryError(problems)


def site_tls_problems(site: Site) -> list[Problem]:
    """What `up` would refuse about the site's CA, found without writing anything, so that
    validate, plan and render exit 3 on it (a CA deploykit will create is no problem)."""
    s = site.settings
    if not s.deploykit_s3_tls:
        return []
    cert_path, key_path = names.ca_cert_path(site.root, s), names.ca_key_path(site.root, s)
    if s.deploykit_tls_ca_cert is None and not cert_path.exists():
        return []
    from deploy_kit.ops.ca_check import ca_problems  # every problem, not the first

    return ca_problems(site, cert_path, key_path, check_key_file, SIGNING_KEYS)


def issue(ca: CA, dns: list[str], ips: list[str], days: int,
          client_auth: bool = False) -> tuple[bytes, bytes]:
    """A server certificate for `dns` + `ips`, valid `days` (never past the CA);
    `client_auth`: also a TLS client's (a Consul agent presents it both ways)."""
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] + \
        ([ExtendedKeyUsageOID.CLIENT_AUTH] if client_auth else [])
    key = _new_key()
    now = _now()
    not_after = min(now + datetime.timedelta(days=days), ca.cert.not_valid_after_utc)
    san: list[x509.GeneralName] = [x509.DNSName(n) for n in dns]
    san += [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
    ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value \
        if _has(ca.cert, x509.SubjectKeyIdentifier) else None
    aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski) if ski else \
        x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.cert.public_key())  # type: ignore[arg-type]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns[0])]))
            .issuer_name(ca.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectAlternativeName(san), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(aki, critical=False)
            .sign(ca.key, signature_hash(ca.key)))  # type: ignore[arg-type]
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _has(cert: x509.Certificate, ext: type[x509.ExtensionType]) -> bool:
    try:
        cert.extensions.get_extension_for_class(ext)
        return True
    except x509.ExtensionNotFound:
        return False


def sans(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return (list(ext.get_values_for_type(x509.DNSName)),
            [str(a) for a in ext.get_values_for_type(x509.IPAddress)])


def _renew_before(cert: x509.Certificate) -> datetime.timedelta:
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    return min(datetime.timedelta(days=names.RENEW_DAYS), lifetime / 3)


def still_fits(pem: bytes, ca: CA, dns: list[str], ips: list[str]) -> x509.Certificate | None:
    """The certificate in `pem` when it can stay: issued by this CA, for exactly these
    names, its key present, and not within its renewal window."""
    try:
        cert = x509.load_pem_x509_certificate(pem)
        key = serialization.load_pem_private_key(
            pem[pem.index(b"-----BEGIN PRIVATE KEY-----"):], password=None)
        cert.verify_directly_issued_by(ca.cert)
    except (ValueError, TypeError, InvalidSignature):
        return None
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(serialization.Encoding.PEM, pub) != \
            cert.public_key().public_bytes(serialization.Encoding.PEM, pub):
        return None
    if sans(cert) != (dns, ips):
        return None
    if cert.not_valid_after_utc - _now() < _renew_before(cert):
        return None
    return cert


def ensure_ca(site: Site) -> CA:
    s = site.settings
    cert_path, key_path = names.ca_cert_path(site.root, s), names.ca_key_path(site.root, s)
    if s.deploykit_tls_ca_cert is None and not cert_path.exists():
        _private_dir(cert_path.parent)
        with _ca_lock(cert_path.parent):  # two first runs: one creates, the other reads it
            if not cert_path.exists():
                cert_pem, key_pem = create_ca(site.name, constraints=name_constraints(
                    s.deploykit_s3_fqdn, s.ceph_rgw_networks))
                # key first, certificate last: the certificate is the "CA exists" mark, so
                # whoever sees it also sees its key (a crash in between leaves no cert and
                # the next run starts over)
                _write_private(key_path, key_pem)
                _write_private(cert_path, cert_pem, 0o644)  # public, under a 0700 directory
    return load_ca(cert_path, key_path)


@contextmanager
def _ca_lock(directory: Path) -> Iterator[None]:
    """An exclusive flock in the CA's private directory while a CA is created; released
    when the process ends, whatever happens, so it never goes stale."""
    fd = os.open(directory / CA_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def host_pem(ca: CA, host: Host, days: int) -> tuple[bytes, x509.Certificate]:
    cert_pem, key_pem = issue(ca, names.dns_names(host.config), names.ip_names(host), days)
    chain = b"" if ca.self_signed else ca.pem  # an intermediate CA is sent along
    return cert_pem + chain + key_pem, x509.load_pem_x509_certificate(cert_pem)


def ensure_site_tls(site: Site) -> list[Issued]:
    """Create or take the CA, then issue (or keep) each RGW host's certificate."""
    s = site.settings
    if not s.deploykit_s3_tls:
        return []
    ca = ensure_ca(site)
    _private_dir(names.tls_dir(site.root, s))
    return _host_certs(site, ca, names.tls_dir(site.root, s), "issued")


def check_site_tls(site: Site, scratch: Path) -> tuple[list[Issued], names.Sources | None]:
    """Check mode: what `ensure_site_tls` would do, writing nothing beside the inventory.
    The CA and every certificate that still fits are used where they are; a CA still to
    create and each certificate still to issue are made in `scratch` (a private directory
    the caller removes after the run), so the roles have a file to compare and the run
    reports the change. Returns the would-be actions and where the roles copy from."""
    s = site.settings
    if not s.deploykit_s3_tls:
        return [], None
    cert_path, key_path = names.ca_cert_path(site.root, s), names.ca_key_path(site.root, s)
    _private_dir(scratch)
    out: list[Issued] = []
    if s.deploykit_tls_ca_cert is None and not cert_path.exists():
        cert_pem, key_pem = create_ca(site.name, constraints=name_constraints(
            s.deploykit_s3_fqdn, s.ceph_rgw_networks))
        would_be = cert_path
        cert_path, key_path = scratch / names.CA_CERT, scratch / names.CA_KEY
        _write_private(key_path, key_pem)
        _write_private(cert_path, cert_pem, 0o644)
        ca = load_ca(cert_path, key_path)
        out.append(Issued(SITE_CA, would_be, ca.cert.not_valid_after_utc, "would create"))
    else:
        ca = load_ca(cert_path, key_path)
    out += _host_certs(site, ca, scratch, "would issue")
    pems = {i.host: i.path for i in out if i.host != SITE_CA}
    return out, names.Sources(cert_path, pems)


def _host_certs(site: Site, ca: CA, write_dir: Path, action: str) -> list[Issued]:
    """Keep each RGW host's certificate that still fits; issue the others into write_dir."""
    s = site.settings
    out: list[Issued] = []
    for host in sorted(site.group("rgw"), key=lambda h: h.name):
        path = names.host_pem_path(site.root, s, host.name)
        dns, ips = names.dns_names(host.config), names.ip_names(host)
        current = still_fits(path.read_bytes(), ca, dns, ips) if path.exists() else None
        if current is not None and stat.S_IMODE(path.stat().st_mode) == 0o600:
            out.append(Issued(host.name, path, current.not_valid_after_utc, "kept"))
            continue
        pem, cert = host_pem(ca, host, s.deploykit_tls_cert_days)
        target = write_dir / path.name
        _write_private(target, pem)
        out.append(Issued(host.name, target, cert.not_valid_after_utc, action))
    return out
