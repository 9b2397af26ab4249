"""Plain HTTP probes of the concentrators (S3 port and monitor /health)."""

from __future__ import annotations

import http.client

from deploy_kit.verify.model import Concentrator


def status(address: str, port: int, path: str = "/", timeout: float = 3.0,
           host_header: str | None = None) -> tuple[int | None, bytes, str | None]:
    try:
        conn = http.client.HTTPConnection(address, port, timeout=timeout)
        conn.request("GET", path, headers={"Host": host_header or address})
        response = conn.getresponse()
        body = response.read(4096)
        conn.close()
        return response.status, body, None
    except OSError as exc:
        return None, b"", f"{type(exc).__name__}: {exc}"


def concentrator(address: str, s3_port: int, monitor_port: int) -> Concentrator:
    s3_status, _, err = status(address, s3_port)
    health, _, err2 = status(address, monitor_port, "/health")
    return Concentrator(address, s3_status, health, err or err2)
