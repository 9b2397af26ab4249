"""Consul API parsing (members, health entries), and the probe's own script, run here
against a loopback stand-in of a Consul agent's API as it runs on a Consul server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deploy_kit.transport.hosts import ShellResult
from deploy_kit.verify.model import ConsulView
from deploy_kit.verify.probes.consul_probe import (
    from_output,
    parse_health,
    parse_members,
    script,
)
from tests.tools import run_script_here

MEMBERS = [{"Name": "lab3", "Addr": "10.99.0.13", "Status": 1},
           {"Name": "lab1", "Addr": "10.99.0.11", "Status": 4},
           {"Name": "lab2", "Addr": "10.99.0.12", "Status": 3}]
HEALTH = [
    {"Node": {"Node": "lab1", "Address": "10.99.0.11"},
     "Service": {"Service": "s3", "Address": "10.99.0.11"},
     "Checks": [{"CheckID": "serfHealth", "Status": "passing", "Output": "Agent alive"},
                {"CheckID": "s3-lab1-concentrator", "Status": "critical",
                 "Output": "Get \"http://10.99.0.11:1967/health\": connection refused"}]},
    {"Node": {"Node": "lab2", "Address": "10.99.0.12"},
     "Service": {"Service": "s3", "Address": ""},
     "Checks": [{"CheckID": "serfHealth", "Status": "passing"},
                {"CheckID": "s3-lab2-concentrator", "Status": "passing"}]},
]


def test_members_map_serf_status_codes() -> None:
    assert [(m.name, m.status) for m in parse_members(MEMBERS)] == \
        [("lab3", "alive"), ("lab1", "failed"), ("lab2", "left")]


def test_health_takes_the_worst_check_and_its_output() -> None:
    lab1, lab2 = parse_health(HEALTH)
    assert (lab1.node, lab1.address, lab1.status) == ("lab1", "10.99.0.11", "critical")
    assert "connection refused" in lab1.output
    assert (lab2.address, lab2.status, lab2.output) == ("10.99.0.12", "passing", "")


class _Api(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.server.refuse:  # type: ignore[attr-defined]  # a default token that may not read
            self.send_response(403)
            self.end_headers()
            self.wfile.write(b"Permission denied")
            return
        body = {"/v1/agent/members": MEMBERS, "/v1/health/service/s3": HEALTH}.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def api() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    server.refuse = False  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def run_on_server(server: str, port: int) -> tuple[str, ShellResult]:
    return server, run_script_here(server, script(port, "s3"))


def _view() -> ConsulView:
    return ConsulView(server="-", service="s3", expected_nodes=["lab1", "lab2", "lab3"],
                      rgw_nodes={"lab1": "10.99.0.11", "lab2": "10.99.0.12"})


def test_the_script_reads_the_local_agent_and_falls_back_to_the_next_server(
        api: ThreadingHTTPServer) -> None:
    port = int(api.server_address[1])
    down = ("lab1", ShellResult("lab1", error="UNREACHABLE: ssh: connect to host lab1"))
    view = from_output(_view(), [down, run_on_server("lab2", port)])
    assert view.error is None and view.server == "lab2"
    assert len(view.members) == 3 and len(view.instances) == 2


def test_a_refusal_is_reported_with_its_status_for_every_server(
        api: ThreadingHTTPServer) -> None:
    api.refuse = True  # type: ignore[attr-defined]
    port = int(api.server_address[1])
    view = from_output(_view(), [run_on_server("lab1", port), run_on_server("lab2", 1)])
    assert view.error is not None
    assert "lab1: members: HTTP 403 Permission denied" in view.error, view.error
    assert "lab2: members: URLError" in view.error and "refused" in view.error, view.error
