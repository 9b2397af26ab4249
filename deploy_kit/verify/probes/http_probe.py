"""HTTP(S) probes of the concentrators (S3 port and monitor /health)."""

from __future__ import annotations

import http.client
import ssl

from deploy_kit.verify.model import Concentrator


def status(address: str, port: int, path: str = "/", timeout: float = 3.0,
           host_header: str | None = None, tls: ssl.SSLContext | None = None
           ) -> tuple[int | None, bytes, str | None]:
    try:
        conn = http.client.HTTPSConnection(address, port, timeout=timeout, context=tls) \
            if tls is not None else http.client.HTTPConnection(address, port, timeout=timeout)
        conn.request("GET", path, headers={"Host": host_header or address})
        response = conn.getresponse()
        body = response.read(4096)
        conn.close()
        return response.status, body, None
    except OSError as exc:
        return None, b"", f"{type(exc).__name__}: {exc}"


def reachability_context() -> ssl.SSLContext:
    """TLS without verification: reachability only; s3-tls-certificate judges the
    certificate, so a bad one is not also reported as a down concentrator."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def concentrator(address: str, s3_port: int, monitor_port: int, tls: bool = False
                 ) -> Concentrator:
    s3_status, _, err = status(address, s3_port,
                               tls=reachability_context() if tls else None)
    health, _, err2 = status(address, monitor_port, "/health")
    return Concentrator(address, s3_status, health, err or err2)
