"""The real HAProxy on the rendered serving front (vllm-front.cfg), in front of a stub
standing in for vLLM on its loopback port: each path's answer, and which requests reach
vLLM at all. vLLM's key guards /v1 only, so /invocations, /pooling, /score, /rerank and
/classify must be refused by the front, never forwarded. `haproxy -c` accepts every
variant. 127.0.0.3 stands in for the monitoring host, 127.0.0.4 for anyone else."""

from __future__ import annotations

import copy
import dataclasses
import http.client
import http.server
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from deploy_kit.config import names
from deploy_kit.config.instances import endpoints
from deploy_kit.ops.site import open_site
from deploy_kit.render.files import render_site
from deploy_kit.render.serving_front import key_digest
from deploy_kit.verify.checks.side_door import judge
from deploy_kit.verify.model import Status
from deploy_kit.verify.probes import side_door_probe
from tests.conftest import BASE_HOSTS, InventoryFactory
from tests.integration.test_consul_dns import free_port
from tests.tools import require_tool

KEY = "front-test-key"
MONITORING = "10.0.0.41"  # the inventory's monitoring host, replaced by MONITOR_LOCAL
MONITOR_LOCAL = "127.0.0.3"
STRANGER = "127.0.0.4"
SIDE_DOORS = ("/invocations", "/pooling", "/score", "/rerank", "/classify")


@dataclass
class Stub:
    """vLLM's stand-in: 200 and a JSON body for every request, each one recorded."""

    port: int
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    server: http.server.ThreadingHTTPServer | None = None

    def start(self) -> Stub:
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                stub.seen.append((self.command, self.path,
                                  {k.lower(): v for k, v in self.headers.items()}))
                body = b'{"stub": "vllm"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def paths(self) -> list[str]:
        return [p for _, p, _ in self.seen]


def _site_hosts(instances: int) -> dict[str, Any]:
    hosts: dict[str, Any] = copy.deepcopy(BASE_HOSTS)
    children = hosts["all"]["children"]
    children["monitoring"] = {"hosts": {"mon1": {"ansible_host": MONITORING}}}
    children["vllm"]["hosts"] = {"cpu1": {"ansible_host": "10.0.1.1",
                                          "vllm_accelerator": "cpu",
                                          "vllm_instances": instances}}
    return hosts


def _render(make_inventory: InventoryFactory, public: int, loopback: int, instances: int = 1,
            **vllm: object) -> tuple[str, Any]:
    root = make_inventory(_site_hosts(instances), vllm={
        "vllm_port": public, "vllm_loopback_port": loopback, "vllm_version": "0.32.0",
        "vllm_model": "Qwen/Qwen3-8B", **vllm})
    site = open_site(str(root))
    return render_site(site)["cpu1"][names.VLLM_FRONT_CFG_PATH].content, site


@pytest.fixture
def run_front(tmp_path: Path) -> Iterator[Any]:
    haproxy = require_tool("haproxy")
    procs: list[subprocess.Popen[bytes]] = []

    def start(cfg: str, ports: list[int]) -> None:
        keys = tmp_path / "vllm-front.keys"
        keys.write_text(key_digest(KEY) + "\n")
        keys.chmod(0o600)
        path = tmp_path / "vllm-front.cfg"
        # as on a host: the monitoring host's address is a local one here
        path.write_text(cfg.replace(names.VLLM_FRONT_KEYS_PATH, str(keys))
                        .replace(MONITORING, MONITOR_LOCAL))
        check = subprocess.run([haproxy, "-c", "-f", str(path)], capture_output=True,
                               text=True, timeout=30, check=False)
        assert check.returncode == 0, check.stdout + check.stderr  # haproxy -c accepts it
        procs.append(subprocess.Popen([haproxy, "-db", "-f", str(path)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 15
        for port in ports:
            while _ask(port, "GET", "/health")[0] is None:
                assert time.monotonic() < deadline, "the front never answered"
                time.sleep(0.1)

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=10)


def _ask(port: int, method: str, path: str, headers: dict[str, str] | None = None,
         source: str | None = None, address: str = "127.0.0.2") -> tuple[int | None, bytes]:
    conn = http.client.HTTPConnection(address, port, timeout=5,
                                      source_address=(source, 0) if source else None)
    try:
        body = b'{"model": "m", "prompt": "x", "max_tokens": 1}' if method == "POST" else None
        conn.request(method, path, body=body, headers={"Content-Type": "application/json",
                                                        **(headers or {})})
        response = conn.getresponse()
        return response.status, response.read()
    except OSError:
        return None, b""
    finally:
        conn.close()


BEARER = {"Authorization": f"Bearer {KEY}"}


def test_the_front_forwards_v1_health_and_metrics_and_refuses_the_side_doors(
        make_inventory: InventoryFactory, run_front: Any) -> None:
    public, loopback = free_port(), free_port()
    cfg, _ = _render(make_inventory, public, loopback)
    stub = Stub(loopback).start()
    run_front(cfg, [public])
    stub.seen.clear()
    for path in SIDE_DOORS:  # the measured hole: 200 and a completion on every pinned vLLM
        assert _ask(public, "POST", path)[0] == 404, path
        assert _ask(public, "POST", path, BEARER)[0] == 404, path  # the key opens nothing
    for path in ("//invocations", "/invocations?x=1", "/Invocations", "/docs", "/v1",
                 "/openapi.json", "/tokenize", "/v2/embed", "/ping"):
        assert _ask(public, "POST", path)[0] == 404, path
    assert _ask(public, "POST", "/v1/completions")[0] == 401  # no bearer: never reaches vLLM
    assert _ask(public, "POST", "/v1/completions", {"Authorization": "Basic eDp5"})[0] == 401
    assert stub.seen == []  # nothing above reached vLLM
    assert _ask(public, "POST", "/v1/completions", BEARER)[0] == 200
    assert _ask(public, "GET", "/health")[0] == 200
    command, path, headers = stub.seen[0]
    # vLLM gets the key and checks it itself; the client's address travels with it
    assert (command, path, headers["authorization"]) == ("POST", "/v1/completions",
                                                         BEARER["Authorization"])
    assert headers["x-forwarded-for"] == "127.0.0.1"
    stub.seen.clear()
    # /metrics: loopback and the monitoring host, or anyone with the key; else 403
    assert _ask(public, "GET", "/metrics", source="127.0.0.1")[0] == 200
    assert _ask(public, "GET", "/metrics", source=MONITOR_LOCAL)[0] == 200
    assert _ask(public, "GET", "/metrics", source=STRANGER)[0] == 403
    assert _ask(public, "GET", "/metrics", {"Authorization": "Bearer wrong"},
                source=STRANGER)[0] == 403
    assert _ask(public, "GET", "/metrics", BEARER, source=STRANGER)[0] == 200
    assert stub.paths() == ["/metrics"] * 3


def test_verify_judges_the_front_refused_and_an_open_vllm_failed(
        make_inventory: InventoryFactory, run_front: Any) -> None:
    """The check's own probe on the real front: every door refused (PASS); the same probe
    on a vLLM stand-in that listens openly (what every release before the front ran) FAILs
    naming /invocations."""
    public, loopback = free_port(), free_port()
    cfg, site = _render(make_inventory, public, loopback)
    stub = Stub(loopback).start()
    run_front(cfg, [public])
    endpoint = endpoints(site.hosts["cpu1"])[0]
    local = dataclasses.replace(endpoint, address="127.0.0.2")
    found = judge(side_door_probe.probe_endpoint(local))
    assert found.status == Status.PASS, found
    assert "/invocations 404" in found.message and "/v1/completions 401" in found.message
    opened = dataclasses.replace(local, config=local.config.model_copy(
        update={"vllm_port": loopback}), address="127.0.0.1")
    found = judge(side_door_probe.probe_endpoint(opened))
    assert found.status == Status.FAIL and "/invocations 200" in found.message
    assert "/invocations" in stub.paths()
    closed = dataclasses.replace(local, config=local.config.model_copy(
        update={"vllm_port": free_port()}))
    assert judge(side_door_probe.probe_endpoint(closed)).status == Status.WARN


def test_several_instances_each_reach_their_own_vllm(make_inventory: InventoryFactory,
                                                     run_front: Any) -> None:
    first, loopback = free_port(), free_port()
    second = first + 1
    cfg, _ = _render(make_inventory, first, loopback, instances=2)
    stubs = [Stub(loopback).start(), Stub(loopback + 1).start()]
    run_front(cfg, [first, second])
    assert _ask(first, "POST", "/v1/completions", BEARER)[0] == 200
    assert _ask(second, "POST", "/v1/completions", BEARER)[0] == 200
    assert _ask(second, "POST", "/invocations", BEARER)[0] == 404
    assert [s.paths() for s in stubs] == [["/health", "/v1/completions"],
                                          ["/health", "/v1/completions"]]


def test_a_site_without_a_key_still_refuses_the_side_doors(make_inventory: InventoryFactory,
                                                           run_front: Any) -> None:
    """vllm_api_key_required false: /v1 is open by the site's choice; the paths vLLM never
    guards stay refused, and /metrics stays the monitoring host's."""
    public, loopback = free_port(), free_port()
    cfg, _ = _render(make_inventory, public, loopback, vllm_api_key_required=False)
    assert "vllm-front.keys" not in cfg
    stub = Stub(loopback).start()
    run_front(cfg, [public])
    stub.seen.clear()
    for path in SIDE_DOORS:
        assert _ask(public, "POST", path)[0] == 404, path
    assert _ask(public, "GET", "/metrics", source=STRANGER)[0] == 403
    assert _ask(public, "POST", "/v1/completions")[0] == 200
    assert stub.paths() == ["/v1/completions"]
