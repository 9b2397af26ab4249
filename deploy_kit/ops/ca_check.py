"""Every reason the site CA cannot vouch for the site, found without writing anything.

`site_tls_problems` (ops/tls.py) reports these as inventory problems, so validate, plan,
render and up exit 3 on them before a host is contacted. Unlike `load_ca` (which stops at
the first), every problem of the certificate and of the key is reported at once (a
missing certificate and a missing key are two lines).

Beyond "a readable CA whose key matches": a CA certificate (basicConstraints CA:TRUE, and
keyCertSign when it has a keyUsage), a key no one can forge with (RSA >= 2048, NIST P-256
or larger, EdDSA; no DSA), a signature hash that is not MD5 or SHA-1, valid now and for
the whole lifetime of the certificates it issues (issue() cuts them at the CA's end), and
name constraints (if any) that permit what those certificates name: the S3 name, every
bucket under it (`*.<fqdn>`) and each gateway's address.
"""

from __future__ import annotations

import datetime
import ipaddress
import warnings
from collections.abc import Callable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from deploy_kit.config.site import Site
from deploy_kit.core.errors import DeployKitError, Problem
from deploy_kit.render import tls as names
from deploy_kit.safe_read import UnreadableFile, read_bytes

# cryptography deprecates DSA and warns on every use of its classes: deploykit only names a
# DSA key to refuse it, so the classes are looked up once, without a warning on stderr
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    DSA_PRIVATE, DSA_PUBLIC = dsa.DSAPrivateKey, dsa.DSAPublicKey

MAX_PEM_BYTES = 1 << 20
MIN_RSA_BITS = 2048
CURVES = ("secp256r1", "secp384r1", "secp521r1")  # what TLS clients accept and trust
WEAK_HASHES = (hashes.MD5, hashes.SHA1)

CERT, KEY = "deploykit_tls_ca_cert", "deploykit_tls_ca_key"
PEM_HINT = "give a PEM CA certificate and its unencrypted key"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def ca_problems(site: Site, cert_path: Path, key_path: Path,
                check_key_file: Callable[[Path], None], signing: tuple[type, ...]
                ) -> list[Problem]:
    """`check_key_file` (ops/tls.py's: owner-only, no link) raises a DeployKitError for a
    key file it refuses; `signing`: the key types that may sign."""
    s = site.settings
    found: list[tuple[str, str, str]] = []  # (setting, problem, fix)
    cert = _load_cert(cert_path, found)
    key = _load_key(key_path, found, check_key_file, signing)
    if cert is not None:
        found += _cert_problems(site, cert, cert_path)
    if cert is not None and key is not None:
        pub = serialization.PublicFormat.SubjectPublicKeyInfo
        if cert.public_key().public_bytes(serialization.Encoding.PEM, pub) != \
                key.public_key().public_bytes(serialization.Encoding.PEM, pub):
            found.append((KEY, f"the CA key {key_path} does not belong to {cert_path}",
                          "give the key the CA certificate was made with"))
    # a CA deploykit created: its directory is the setting to name
    return [Problem(site.settings_source(k if s.deploykit_tls_ca_cert else "deploykit_tls_dir"),
                    k if s.deploykit_tls_ca_cert else "deploykit_tls_dir", message, fix)
            for k, message, fix in found]


def _load_cert(path: Path, found: list[tuple[str, str, str]]) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(read_bytes(path, MAX_PEM_BYTES))
    except (OSError, UnreadableFile, ValueError, TypeError) as exc:
        found.append((CERT, f"cannot load the CA {path}: {_reason(exc)}", PEM_HINT))
    return None


def _load_key(path: Path, found: list[tuple[str, str, str]],
              check_key_file: Callable[[Path], None], signing: tuple[type, ...]
              ) -> PrivateKeyTypes | None:
    try:
        check_key_file(path)
        key = serialization.load_pem_private_key(read_bytes(path, MAX_PEM_BYTES),
                                                 password=None)
    except DeployKitError as exc:
        found.append((KEY, exc.message, exc.hint or PEM_HINT))
        return None
    except (OSError, UnreadableFile, ValueError, TypeError) as exc:
        found.append((KEY, f"cannot load the CA key {path}: {_reason(exc)}", PEM_HINT))
        return None
    if isinstance(key, DSA_PRIVATE) or not isinstance(key, signing):
        found.append((KEY, f"the CA key {path} is a {type(key).__name__}: it cannot sign "
                      "certificates here", "an EC (P-256 or larger), RSA (2048 bits or "
                      "more) or Ed25519 CA key"))
        return None
    return key


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]


def _cert_problems(site: Site, cert: x509.Certificate, path: Path
                   ) -> list[tuple[str, str, str]]:
    s = site.settings
    found: list[tuple[str, str, str]] = []
    ext = cert.extensions
    basic = _extension(ext, x509.BasicConstraints)
    if not isinstance(basic, x509.BasicConstraints) or not basic.ca:
        found.append((CERT, f"{path} is no CA certificate (basicConstraints CA:TRUE missing)",
                      "give the certificate of a CA, not a server certificate"))
    usage = _extension(ext, x509.KeyUsage)
    if isinstance(usage, x509.KeyUsage) and not usage.key_cert_sign:
        found.append((CERT, f"{path} may not sign certificates (its keyUsage lacks "
                      "keyCertSign): every client would refuse what it issues",
                      "give a CA whose keyUsage includes keyCertSign"))
    public = cert.public_key()
    if isinstance(public, rsa.RSAPublicKey) and public.key_size < MIN_RSA_BITS:
        found.append((CERT, f"{path} has a {public.key_size}-bit RSA key (forgeable; "
                      "clients refuse it)", f"give a CA with an RSA key of {MIN_RSA_BITS} "
                      "bits or more, or EC P-256"))
    elif isinstance(public, ec.EllipticCurvePublicKey) and public.curve.name not in CURVES:
        found.append((CERT, f"{path} has an EC key on {public.curve.name}, which TLS clients "
                      "do not trust", "give a CA on P-256, P-384 or P-521"))
    elif isinstance(public, DSA_PUBLIC):
        found.append((CERT, f"{path} has a DSA key, which TLS 1.2+ clients refuse",
                      "give an EC (P-256), RSA (2048+) or Ed25519 CA"))
    try:
        algorithm = cert.signature_hash_algorithm
    except Exception:  # an algorithm cryptography does not know (UnsupportedAlgorithm)
        algorithm = None
    if isinstance(algorithm, WEAK_HASHES):
        found.append((CERT, f"{path} is signed with {algorithm.name.upper()}, which clients "
                      "refuse (collisions are practical)", "give a CA signed with SHA-256 "
                      "or stronger"))
    # deploykit's own CA outlives the longest certificate when made (CA_DAYS): only an
    # operator's CA is held to the certificates' lifetime
    days = s.deploykit_tls_cert_days if s.deploykit_tls_ca_cert else 0
    found += _validity(cert, path, days)
    found += _name_constraints(site, cert, path)
    return found


def _extension(ext: x509.Extensions, kind: type[x509.ExtensionType]) -> object | None:
    try:
        return ext.get_extension_for_class(kind).value
    except x509.ExtensionNotFound:
        return None


def _validity(cert: x509.Certificate, path: Path, days: int) -> list[tuple[str, str, str]]:
    now = _now()
    end, start = cert.not_valid_after_utc, cert.not_valid_before_utc
    if end <= now:
        return [(CERT, f"the CA {path} expired on {end:%Y-%m-%d}",
                 "give a valid CA (every certificate it issued is invalid too)")]
    if start > now:
        return [(CERT, f"the CA {path} is not valid before {start:%Y-%m-%d %H:%M} UTC",
                 "check this machine's clock, or give a CA valid now")]
    if days and end < now + datetime.timedelta(days=days):
        left = (end - now).days
        return [(CERT, f"the CA {path} expires on {end:%Y-%m-%d}, in {left} days, before "
                 f"the {days}-day concentrator certificates it would issue (they end with "
                 "it, and up would reissue them on every run)",
                 f"renew the CA, or lower deploykit_tls_cert_days below {max(left, 2)}")]
    return []


def _dns_within(name: str, base: str) -> bool:
    """RFC 5280 dNSName constraint: `base` and its subdomains; `.base` subdomains only."""
    name, base = name.lower().rstrip("."), base.lower().rstrip(".")
    if base.startswith("."):
        return name.endswith(base)
    return not base or name == base or name.endswith("." + base)


def _name_constraints(site: Site, cert: x509.Certificate, path: Path
                      ) -> list[tuple[str, str, str]]:
    constraints = _extension(cert.extensions, x509.NameConstraints)
    if not isinstance(constraints, x509.NameConstraints):
        return []
    s = site.settings
    # the names every concentrator certificate carries (a wildcard is checked as a name
    # under the S3 name: constraints apply to the labels below it)
    dns = [n.replace("*", "bucket") for n in names.dns_names(s)]
    ips = sorted({ip for host in site.group("rgw") for ip in names.ip_names(host)})
    permitted = list(constraints.permitted_subtrees or [])
    excluded = list(constraints.excluded_subtrees or [])
    refused: list[str] = []
    allowed_dns = [g.value for g in permitted if isinstance(g, x509.DNSName)]
    barred_dns = [g.value for g in excluded if isinstance(g, x509.DNSName)]
    for name in dns:
        if (allowed_dns and not any(_dns_within(name, b) for b in allowed_dns)) or \
                any(_dns_within(name, b) for b in barred_dns):
            refused.append(name.replace("bucket.", "*.", 1) if name != s.deploykit_s3_fqdn
                           else name)
    allowed_ip = [g.value for g in permitted if isinstance(g, x509.IPAddress)]
    barred_ip = [g.value for g in excluded if isinstance(g, x509.IPAddress)]
    for text in ips:
        ip = ipaddress.ip_address(text)
        within = [n for n in allowed_ip if isinstance(n, ipaddress.IPv4Network |
                                                      ipaddress.IPv6Network)
                  and n.version == ip.version and ip in n]
        if (allowed_ip and not within) or any(
                isinstance(n, ipaddress.IPv4Network | ipaddress.IPv6Network)
                and n.version == ip.version and ip in n for n in barred_ip):
            refused.append(text)
    if not refused:
        return []
    shown = ", ".join(refused[:6]) + (f" and {len(refused) - 6} more" if len(refused) > 6
                                      else "")
    return [(CERT, f"the name constraints of {path} do not permit {shown}, which the "
             "concentrator certificates name: every client would refuse them",
             "give a CA whose name constraints include the S3 name (deploykit_s3_fqdn) and "
             "the gateways' network, or one without name constraints")]
