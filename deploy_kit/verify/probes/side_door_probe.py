"""The serving front from outside: each vLLM instance's public address, sent a completion
body without the API key on every path vLLM serves without one (its key guards only /v1,
/v2, /inference, /cohere), and on /v1/completions. The front must refuse each before vLLM
sees it (render/serving_front.py); an open one runs the one-token completion it was sent."""

from __future__ import annotations

import http.client
import json

from deploy_kit.config.instances import endpoints
from deploy_kit.config.site import Host
from deploy_kit.transport.openai import model_name
from deploy_kit.verify.model import GUARDED, SIDE_DOORS, SideDoorProbe

PATHS = (*SIDE_DOORS, GUARDED)
# an open door answers a one-token completion in well under this; no answer is a failure
TIMEOUT_S = 15.0


def post(address: str, port: int, path: str, body: bytes, timeout: float = TIMEOUT_S
         ) -> tuple[int | None, str | None, bool]:
    """(HTTP status, why none, whether the connection was refused): no Authorization."""
    conn = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read(4096)
        return response.status, None, False
    except ConnectionRefusedError as exc:
        return None, f"connection refused ({exc.strerror or exc})", True
    except (OSError, http.client.HTTPException) as exc:
        return None, f"{type(exc).__name__}: {exc}", False
    finally:
        conn.close()


def probe_endpoint(endpoint: Host) -> SideDoorProbe:
    """One instance (an endpoint view of its host: its port is vllm_port)."""
    c = endpoint.config
    seen = SideDoorProbe(endpoint=endpoint.name, address=endpoint.address, port=c.vllm_port,
                         keyed=c.vllm_uses_api_key)
    body = json.dumps({"model": model_name(endpoint), "prompt": "deploykit side-door probe",
                       "max_tokens": 1}).encode()
    for path in PATHS:
        status, error, refused = post(endpoint.address, c.vllm_port, path, body)
        seen.answers[path] = status
        if error:
            seen.errors[path] = error
        if refused:
            seen.closed.add(path)
    return seen


def probe_jobs(hosts: list[Host]) -> list[Host]:
    """Every instance of these serving hosts, as an endpoint to probe."""
    return [e for h in hosts for e in endpoints(h)]
