"""deploykit_consul (plugins/modules/deploykit_consul.py), the one Consul API client of the
roles and playbooks, against a stand-in agent on loopback: the path and query of each
action, the token only in the X-Consul-Token header (and never in the output), what each
action returns, check mode (reads run, writes send nothing), and which answers fail.
The module runs in this process (fast); two runs go through Ansible as a role runs it."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import types
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from ansible.module_utils.testing import patch_module_args

from plugins.module_utils import deploykit_consul_api
from tests.conftest import REPO
from tests.tools import ansible_module

TOKEN = "0b7f0c7e-token-not-real-4c1d"
CHECKS = {
    "service:s3-lab2": {"CheckID": "service:s3-lab2", "ServiceName": "s3", "Status": "critical"},
    "_service_maintenance:s3-lab2": {"CheckID": "_service_maintenance:s3-lab2",
                                     "ServiceName": "s3", "Status": "critical"},
    "service:web": {"CheckID": "service:web", "ServiceName": "web", "Status": "passing"},
}


class Agent:
    """What the stand-in agent answers (path without query -> status, JSON body) and what it
    was asked: (method, path with query, token header or None)."""

    def __init__(self, tmp: Path) -> None:
        self.answers: dict[str, tuple[int, Any]] = {}
        self.asked: list[tuple[str, str, str | None]] = []
        self.url = ""
        self.tmp = tmp

    def run(self, check: bool = False, ok: bool = True, **args: Any) -> dict[str, Any]:
        """One run of the module's main() in this process, as Ansible would start it."""
        module = _module()
        out = _Stdout()
        real, sys.stdout = sys.stdout, out  # type: ignore[assignment]
        try:
            with patch_module_args({"url": self.url, "token": TOKEN, **args,
                                    "_ansible_check_mode": check}):
                module.main()
        except SystemExit:
            pass
        finally:
            sys.stdout = real
        result: dict[str, Any] = json.loads(out.getvalue())
        assert bool(result.get("failed")) != ok, result
        assert TOKEN not in out.getvalue()
        return result

    def through_ansible(self, check: bool = False, **args: Any) -> dict[str, Any]:
        """One run as a role's task: the token from a secrets file (never shown)."""
        return ansible_module("deploykit_consul",
                              {"url": self.url, "token": "{{ consul_token }}", **args},
                              check=check, secrets={"consul_token": TOKEN}, tmp=self.tmp)


class _Stdout:
    """What the module prints (its JSON result), as text; AnsibleModule writes str."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> None:
        self.parts.append(text)

    def flush(self) -> None:
        pass

    def getvalue(self) -> str:
        return "".join(self.parts)


def _module() -> types.ModuleType:
    """plugins/modules/deploykit_consul.py, its collection import served by the checkout's
    module_utils (Ansible ships it to the host the same way)."""
    name = "ansible_collections.deploykit.kvcache.plugins.module_utils.deploykit_consul_api"
    spec = importlib.util.spec_from_file_location(
        "deploykit_consul_module", REPO / "plugins" / "modules" / "deploykit_consul.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with mock.patch.dict(sys.modules, {name: deploykit_consul_api}):
        spec.loader.exec_module(module)
    return module


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    state = Agent(tmp_path)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            state.asked.append((self.command, self.path, self.headers.get("X-Consul-Token")))
            status, body = state.answers.get(self.path.split("?")[0], (404, "no such path"))
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_PUT = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def test_reads_return_what_the_roles_test_and_run_in_check_mode(agent: Agent) -> None:
    state = agent
    state.answers = {
        "/v1/health/service/s3": (200, [{"Node": {"Node": "lab1"}}, {"Node": {"Node": "lab2"}}]),
        "/v1/agent/checks": (200, CHECKS),
        "/v1/catalog/node/lab2": (200, None),  # Consul's `null`: the catalog forgot it
        "/v1/catalog/service/s3": (200, [{"Node": "lab1"}]),
        "/v1/status/leader": (200, ""),  # no leader yet
        "/v1/status/peers": (200, ["10.0.0.21:8300", "10.0.0.22:8300"]),
    }
    assert state.run(action="leader", token="")["leader"] == ""
    assert state.run(action="peers", token="")["peers"] == ["10.0.0.21:8300", "10.0.0.22:8300"]
    passing = state.run(check=True, action="passing", service="s3")
    assert passing["nodes"] == ["lab1", "lab2"] and not passing["changed"]
    checks = state.run(action="checks", service="s3")
    assert checks["checks"] == {"service:s3-lab2": "critical"} and checks["failing"]
    node = state.run(action="node", node="lab2")
    assert node["status"] == 200 and not node["listed"]
    assert state.run(action="service_nodes", service="s3")["nodes"] == ["lab1"]
    assert state.asked == [("GET", "/v1/status/leader", None), ("GET", "/v1/status/peers", None),
                           ("GET", "/v1/health/service/s3?passing=1", TOKEN),
                           ("GET", "/v1/agent/checks", TOKEN),
                           ("GET", "/v1/catalog/node/lab2", TOKEN),
                           ("GET", "/v1/catalog/service/s3", TOKEN)]


def test_the_flag_is_lifted_only_once_every_own_check_fails(agent: Agent) -> None:
    state = agent
    passing = {**CHECKS, "service:s3-lab2:2": {"CheckID": "service:s3-lab2:2",
                                               "ServiceName": "s3", "Status": "passing"}}
    state.answers = {"/v1/agent/checks": (200, passing)}
    assert not state.run(action="checks", service="s3")["failing"]
    # a token that sees no check of the service never counts as "all failing"
    state.answers = {"/v1/agent/checks": (200, {"service:web": CHECKS["service:web"]})}
    assert not state.run(action="checks", service="s3")["failing"]


def test_writes_send_nothing_in_check_mode(agent: Agent) -> None:
    state = agent
    state.answers = {"/v1/agent/service/maintenance/s3-lab2": (200, None),
                     "/v1/agent/force-leave/lab2": (200, None)}
    would = state.run(check=True, action="maintenance", service="s3-lab2",
                   reason="deploykit remove")
    assert would["changed"] and state.asked == []
    on = state.run(action="maintenance", service="s3-lab2", reason="deploykit rolling restart")
    off = state.run(action="maintenance", service="s3-lab2", enable=False)
    forced = state.run(action="force_leave", node="lab2")
    assert on["changed"] and off["changed"] and forced["changed"]
    assert state.asked == [
        ("PUT", "/v1/agent/service/maintenance/s3-lab2?enable=true"
                "&reason=deploykit+rolling+restart", TOKEN),
        ("PUT", "/v1/agent/service/maintenance/s3-lab2?enable=false", TOKEN),
        ("PUT", "/v1/agent/force-leave/lab2?prune=1", TOKEN)]


def test_refusals_fail_reads_and_writes_but_not_a_leave(agent: Agent) -> None:
    state = agent
    state.answers = {"/v1/health/service/s3": (403, "Permission denied"),
                     "/v1/agent/leave": (403, "Permission denied")}
    denied = state.run(ok=False, action="passing", service="s3")
    assert denied["status"] == 403 and "HTTP 403" in denied["msg"]
    assert state.run(ok=False, action="maintenance", service="s3-lab2")["status"] == 404
    leave = state.run(action="leave")  # the caller forces the node out from a server
    assert leave["status"] == 403 and not leave["changed"] and not leave.get("failed")
    state.answers["/v1/agent/leave"] = (200, None)
    assert state.run(action="leave")["changed"]


def test_as_a_role_runs_it_the_token_goes_only_in_the_header(agent: Agent) -> None:
    state = agent
    state.answers = {"/v1/health/service/s3": (200, [{"Node": {"Node": "lab1"}}])}
    assert state.through_ansible(check=True, action="passing", service="s3")["nodes"] == ["lab1"]
    would = state.through_ansible(check=True, action="force_leave", node="lab2")
    assert would["changed"]
    assert state.asked == [("GET", "/v1/health/service/s3?passing=1", TOKEN)]


def test_without_acls_no_token_header_is_sent(agent: Agent) -> None:
    state = agent
    state.answers = {"/v1/catalog/service/s3": (200, [])}
    state.run(action="service_nodes", service="s3", token="")
    assert state.asked == [("GET", "/v1/catalog/service/s3", None)]
