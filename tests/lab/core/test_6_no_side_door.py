"""No side door on the serving edge. vLLM's API key guards only /v1 (and /v2, /inference,
/cohere); `POST /invocations` ran a completion without it on the converged lab (401 for an
unkeyed /v1/completions to lab3:8000, 200 for the same body to /invocations). Now vLLM
listens on 127.0.0.1 only and the serving front (vllm-front, HAProxy) on each instance's
public port refuses every path but /v1/..., /health and /metrics: an unkeyed POST to
/invocations, /pooling, /score, /rerank and /classify on every serving port is refused,
the keyed /v1/completions still answers, vLLM's own port is unreachable from outside, and
`verify` has the check and it passes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.lab.conftest import Lab, lab_model
from tests.lab.vllm_http import SERVING, complete, headers

pytestmark = pytest.mark.lab

# every vLLM instance's public port (lab3 runs two: vllm_instances 2, the serving profile)
PORTS = {"lab3": (8000, 8001), "lab4": (8000,)}
LOOPBACK = {"lab3": (18000, 18001), "lab4": (18000,)}  # vllm_loopback_port + i
SIDE_DOORS = ("/invocations", "/pooling", "/score", "/rerank", "/classify")
REFUSED = {401, 403, 404, 405}


def post(address: str, port: int, path: str, extra: dict[str, str] | None = None) -> int:
    """The status of an unkeyed (unless `extra` says otherwise) one-token completion body;
    0 when nothing answered."""
    body = json.dumps({"model": lab_model().name, "prompt": [7] * 8, "max_tokens": 1}).encode()
    request = urllib.request.Request(f"http://{address}:{port}{path}", data=body,
                                     headers={"Content-Type": "application/json",
                                              **(extra or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def test_an_unkeyed_side_door_is_refused_on_every_serving_port(converged: Lab) -> None:
    for name, address in SERVING.items():
        for port in PORTS[name]:
            answers = {path: post(address, port, path) for path in SIDE_DOORS}
            # the front's own refusal: the request never reaches vLLM
            assert answers == dict.fromkeys(SIDE_DOORS, 404), (name, port, answers)
            assert post(address, port, "/v1/completions") == 401, (name, port)
            # the key opens /v1 only: the side doors stay shut with it
            keyed = post(address, port, "/invocations", headers(address))
            assert keyed in REFUSED, (name, port, keyed)


def test_the_keyed_completion_answers_through_the_front(converged: Lab) -> None:
    for name, address in SERVING.items():
        for port in PORTS[name]:
            result = complete(address, [7] * 40, port)
            assert result["usage"]["prompt_tokens"] == 40, (name, port, result)


def test_vllm_itself_listens_on_loopback_only(converged: Lab) -> None:
    for name, address in SERVING.items():
        assert converged.ssh(address, "systemctl is-active vllm-front").strip() == "active"
        listening = converged.ssh(address, "ss -Hltn").split()
        for port in LOOPBACK[name]:
            assert f"127.0.0.1:{port}" in listening, (name, port, listening)
            assert f"0.0.0.0:{port}" not in listening and f"*:{port}" not in listening
            assert post(address, port, "/invocations") == 0, (name, port)  # refused
        # the front holds the public ports, vLLM none of them
        owners = converged.ssh(address, "ss -Hltnp")
        for port in PORTS[name]:
            line = next(x for x in owners.splitlines() if f":{port} " in x)
            assert "haproxy" in line and "python" not in line, line


def test_metrics_need_the_key_outside_the_monitoring_hosts(converged: Lab) -> None:
    """The core profile has no monitoring group: the controller reads /metrics only with
    the key (what verify's cache probe does); on the host itself, loopback reads it."""
    for name, address in SERVING.items():
        request = urllib.request.Request(f"http://{address}:8000/metrics")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 403, name
        keyed = urllib.request.Request(f"http://{address}:8000/metrics", headers=headers(address))
        with urllib.request.urlopen(keyed, timeout=10) as response:
            assert b"vllm:" in response.read(), name
        on_host = converged.ssh(address, "curl -s -o /dev/null -w '%{http_code}' "
                                         "http://127.0.0.1:8000/metrics")
        assert on_host.strip() == "200", (name, on_host)


def test_verify_lists_the_check(converged: Lab) -> None:
    """verify's own run of the check on every instance is asserted with the full verify of
    the lab (test_2_verify.py): one verify run, not two."""
    listed = converged.deploykit("verify", "--list-checks").stdout
    assert "vllm-no-side-door" in listed
