"""One TLS handshake per concentrator, as LMCache makes it: SNI <bucket>.<fqdn>, the site CA
as the only trust anchor. Two handshakes: one that reads the certificate whatever it is
(names, expiry), one that verifies it the way a client does (chain + name + time)."""

from __future__ import annotations

import datetime
import socket
import ssl
from pathlib import Path

from cryptography import x509

from deploy_kit.verify.model import TlsEndpoint


def client_context(ca_file: Path | None) -> ssl.SSLContext:
    """What verify's S3 probes use over https: the site CA only (not the system store),
    hostname checked against the SNI/Host name."""
    ctx = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def _handshake(address: str, port: int, ctx: ssl.SSLContext, sni: str, timeout: float
               ) -> bytes:
    with socket.create_connection((address, port), timeout=timeout) as raw, \
            ctx.wrap_socket(raw, server_hostname=sni) as tls:
        return tls.getpeercert(binary_form=True) or b""


def probe(address: str, port: int, sni: str, ca_file: Path, timeout: float = 5.0,
          now: datetime.datetime | None = None) -> TlsEndpoint:
    result = TlsEndpoint(address=address, port=port, sni=sni)
    reader = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    reader.check_hostname = False
    reader.verify_mode = ssl.CERT_NONE
    try:
        der = _handshake(address, port, reader, sni, timeout)
        cert = x509.load_der_x509_certificate(der)
    except (OSError, ValueError) as exc:
        result.handshake_error = f"{type(exc).__name__}: {exc}"
        return result
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        result.dns_sans = list(ext.get_values_for_type(x509.DNSName))
        result.ip_sans = [str(a) for a in ext.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        pass
    result.issuer = cert.issuer.rfc4514_string()
    result.not_after = cert.not_valid_after_utc.isoformat()
    moment = now or datetime.datetime.now(datetime.UTC)
    result.days_left = (cert.not_valid_after_utc - moment).total_seconds() / 86400
    try:
        _handshake(address, port, client_context(ca_file), sni, timeout)
    except ssl.SSLCertVerificationError as exc:
        result.verify_error = exc.verify_message or str(exc)
    except (OSError, ssl.SSLError) as exc:
        result.verify_error = f"{type(exc).__name__}: {exc}"
    return result
