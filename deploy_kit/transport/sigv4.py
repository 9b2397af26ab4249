"""S3 requests to an explicit address with a virtual-hosted Host header, signed by
botocore's SigV4 (no DNS lookups).

verify connects to each resolved address itself, so it needs the Host header and the TCP
target kept apart; that is what LMCache's requests look like on the wire. The signature is
botocore's own (S3SigV4Auth); only the connection is ours.
"""

from __future__ import annotations

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
                   query: str = "") -> dict[str, str]:
    """Headers of a request signed as LMCache's awscrt client signs it: SigV4 for service
    s3, UNSIGNED-PAYLOAD, `host` signed. `path` and `query` are already URI-encoded."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.config import Config
    from botocore.credentials import Credentials as BotoCredentials

    # https in the URL only so that botocore honours payload_signing_enabled=False; the
    # URL is never connected to
    request = AWSRequest(method=method, url=f"https://{host}{path}"
                         + (f"?{query}" if query else ""), headers={"host": host})
    request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    S3SigV4Auth(BotoCredentials(creds.access_key, creds.secret_key), "s3",
                region).add_auth(request)
    return {k: str(v) for k, v in request.headers.items()}


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
            timeout: float = 120.0, tls: ssl.SSLContext | None = None,
            unsigned: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One S3 request; `tls`: over HTTPS with SNI = the Host header (deploykit_s3_tls);
    `unsigned`: headers sent outside the signature (SigV4 needs only `host` signed)."""
    headers = signed_headers(method, path, host, region, creds, query=query) if creds else \
        {"host": host}
    headers |= unsigned or {}
    conn = SNIConnection(address, port, host, tls, timeout) if tls is not None else \
        http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        conn.request(method, path + (f"?{query}" if query else ""), body=body or None,
                     headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()
