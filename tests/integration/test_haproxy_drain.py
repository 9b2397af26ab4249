"""The gateway drain of a rolling restart (roles/ceph_rgw/tasks/roll_gateway.yml) against the
real HAProxy running the rendered haproxy.cfg: deploykit_haproxy_server, run through
Ansible, drains one gateway only once its open request has finished, sends everything else
to the other gateway meanwhile, reports check mode without acting, and puts it back."""

from __future__ import annotations

import copy
import http.server
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy_kit.config.names import rgw_instance_names
from deploy_kit.ops.site import open_site
from deploy_kit.render.files import render_site
from tests.conftest import BASE_HOSTS, InventoryFactory
from tests.integration.test_consul_dns import free_port
from tests.integration.test_haproxy_tls import start_rendered_haproxy
from tests.tools import ansible_module, require_tool

HOLD_S = 3.0


class _Gateway(http.server.BaseHTTPRequestHandler):
    """RGW stand-in: health check; /slow answers after HOLD_S; the body names its port."""

    def do_GET(self) -> None:
        if self.path == "/slow":
            time.sleep(HOLD_S)
        body = str(self.server.server_address[1]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def two_free_ports() -> int:
    """A port p with p + 1 free too: the gateways listen on frontend_port + n."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two consecutive free ports")


@pytest.fixture
def concentrator(make_inventory: InventoryFactory, tmp_path: Path) -> Iterator[dict]:
    haproxy = require_tool("haproxy")
    first, s3, monitor = two_free_ports(), free_port(), free_port()
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", first + i), _Gateway)
               for i in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["rgw"]["hosts"] = {"rgw1": {"ansible_host": "127.0.0.1"}}
    site = open_site(str(make_inventory(hosts, all={
        "deploykit_s3_port": s3, "ceph_rgw_mode": "packages",
        "deploykit_ceph_fsid": "00000000-0000-0000-0000-000000000000",
        "deploykit_ceph_mon_host": "127.0.0.1", "ceph_rgw_count_per_host": 2,
        "ceph_rgw_frontend_port": first, "ceph_rgw_concentrator_monitor_port": monitor,
        "ceph_rgw_concentrator_maxconn": 4096})))  # this machine's fd limit is 20000
    sock = tmp_path / "admin.sock"
    proc = start_rendered_haproxy(
        haproxy, render_site(site)["rgw1"]["/etc/haproxy/haproxy.cfg"].content, tmp_path)
    try:
        deadline = time.monotonic() + 15
        while not sock.exists():
            assert time.monotonic() < deadline and proc.poll() is None, proc.stdout
            time.sleep(0.1)
        yield {"socket": str(sock), "s3": s3, "ports": [first, first + 1],
               "names": rgw_instance_names("rgw1", 2)}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for server in servers:
            server.shutdown()
            server.server_close()


def busy_gateway(sock: str, names: list[str], timeout: float = 10) -> int:
    """Which of rgw1's two gateways HAProxy has a session open on (`show stat` scur)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(sock)
            conn.sendall(b"show stat\n")
            text = b"".join(iter(lambda: conn.recv(65536), b"")).decode()
        scur = {row[1]: row[4] for row in (r.split(",") for r in text.splitlines())
                if len(row) > 4 and row[0] == "rgw"}  # pxname, svname, qcur, qmax, scur
        busy = [i for i, name in enumerate(names) if scur.get(name) not in (None, "", "0")]
        if len(busy) == 1:
            return busy[0]
        time.sleep(0.1)
    raise AssertionError("no gateway holds the open request")


def get(port: int, path: str = "/") -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        return int(r.read())


def test_a_drain_waits_for_open_requests_and_sends_new_ones_elsewhere(concentrator: dict
                                                                       ) -> None:
    c = concentrator
    args = {"backend": "rgw", "socket": c["socket"], "timeout": 30}
    for name in c["names"]:  # both gateways pass HAProxy's check first
        up = ansible_module("deploykit_haproxy_server",
                            {**args, "server": name, "state": "ready", "wait_up": True})
        assert up["changed"] is False and up["status"].startswith("UP"), up

    served: list[int] = []
    slow = threading.Thread(target=lambda: served.append(get(c["s3"], "/slow")))
    slow.start()
    busy = busy_gateway(c["socket"], c["names"])  # the gateway holding the open request
    other = 1 - busy
    started = time.monotonic()
    drained = ansible_module("deploykit_haproxy_server",
                             {**args, "server": c["names"][busy], "state": "drain",
                              "wait_idle": True})
    waited = time.monotonic() - started
    slow.join(timeout=30)
    assert served == [c["ports"][busy]], served  # the open request finished where it was
    assert drained["changed"] is True and drained["status"].startswith("DRAIN"), drained
    assert drained["sessions"] == 0
    assert waited >= HOLD_S - 1.5, f"returned after {waited:.1f} s with a request open"
    assert {get(c["s3"]) for _ in range(10)} == {c["ports"][other]}  # nothing new there

    checked = ansible_module("deploykit_haproxy_server",
                             {**args, "server": c["names"][busy], "state": "ready"}, check=True)
    assert checked["changed"] is True and checked["status"].startswith("DRAIN"), checked

    back = ansible_module("deploykit_haproxy_server",
                          {**args, "server": c["names"][busy], "state": "ready", "wait_up": True})
    assert back["changed"] is True and back["status"].startswith("UP"), back
    again = ansible_module("deploykit_haproxy_server",
                           {**args, "server": c["names"][busy], "state": "ready"})
    assert again["changed"] is False

    missing = ansible_module("deploykit_haproxy_server",
                             {**args, "server": "rgw.nowhere.9", "state": "drain"}, ok=False)
    assert "HAProxy has no server rgw/rgw.nowhere.9" in missing["msg"], missing
