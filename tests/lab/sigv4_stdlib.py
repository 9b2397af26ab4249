"""A stdlib-only SigV4 signer and S3 request, for the lab's client on hosts that have no
botocore (a gateway host, a host without the serving venv): sent over SSH stdin before
s3_client.py. The product signs with botocore (deploy_kit/transport/sigv4.py); a check
test keeps this one equal to botocore's signature."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import ssl
from dataclasses import dataclass

UNSIGNED = "UNSIGNED-PAYLOAD"


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str

    def __repr__(self) -> str:  # never print the secret
        return f"Credentials(access_key={self.access_key[:4]}…)"


def signed_headers(method: str, path: str, host: str, region: str, creds: Credentials,
                   now: datetime.datetime | None = None, query: str = "") -> dict[str, str]:
    now = now or datetime.datetime.now(datetime.UTC)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"host": host, "x-amz-content-sha256": UNSIGNED, "x-amz-date": amz_date}
    names = ";".join(sorted(headers))
    canonical = "\n".join([method, path, query, *(f"{k}:{headers[k]}" for k in sorted(headers)),
                           "", names, UNSIGNED])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + creds.secret_key).encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, "
                                f"SignedHeaders={names}, Signature={signature}")
    return headers


class SNIConnection(http.client.HTTPSConnection):
    """HTTPS to an explicit address with SNI (and the name check) for `server_name`, as a
    client that resolved `server_name` to this address would connect."""

    def __init__(self, address: str, port: int, server_name: str, context: ssl.SSLContext,
                 timeout: float) -> None:
        super().__init__(address, port, timeout=timeout, context=context)
        self._dk_server_name, self._dk_context = server_name, context

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._dk_context.wrap_socket(self.sock, server_hostname=self._dk_server_name)


def request(address: str, port: int, method: str, path: str, host: str, region: str,
            creds: Credentials | None, body: bytes = b"", query: str = "",
            timeout: float = 120.0, tls: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    """One S3 request; `tls`: over HTTPS with SNI = the Host header (deploykit_s3_tls)."""
    headers = signed_headers(method, path, host, region, creds, query=query) if creds else \
        {"host": host}
    conn = SNIConnection(address, port, host, tls, timeout) if tls is not None else \
        http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        conn.request(method, path + (f"?{query}" if query else ""), body=body or None,
                     headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()
