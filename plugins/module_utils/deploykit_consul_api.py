"""Consul's HTTP API on this host's agent, for deploykit's Consul modules (stdlib only: it runs
on the managed host). The token travels in the X-Consul-Token header, never in a URL or argv;
an empty token sends no header (Consul's anonymous token, as with ACLs off)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def call(url: str, token: str, method: str, path: str, body: Any = None,
         timeout: float = 15) -> tuple[int, Any]:
    """(status, parsed JSON or text); status 0 when the agent cannot be reached."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} | ({"X-Consul-Token": token} if token else {})
    request = urllib.request.Request(url.rstrip("/") + path, data=data, method=method,
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")[:300]
    except OSError as exc:
        return 0, str(exc)[:300]
    try:
        return status, json.loads(raw) if raw.strip() else None
    except ValueError:
        return status, raw.decode(errors="replace")[:300]
