"""Consul mode for real on loopback: the Consul agent and CoreDNS the lab builds, with the
`s3` service files, DNS settings and Corefile deploykit renders.

A dev-mode Consul agent (its own ports, 127.0.0.1 only) loads both RGW hosts' rendered
`s3-service.json`; each check targets a small HTTP server on 127.0.1.x standing in for that
host's HAProxy monitor (/health). CoreDNS forwards to the agent's DNS port. The test turns
one monitor unhealthy, measures how long until CoreDNS stops answering that address (bound:
check interval + TTL), restores it, and reads Consul's view the way `verify` does.
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import dns.message
import dns.query
import dns.rcode
import pytest

from deploy_kit.ops.site import open_site
from deploy_kit.render import consul as consul_render
from deploy_kit.render.files import render_site
from deploy_kit.verify.model import ConsulView
from deploy_kit.verify.probes.consul_probe import from_output, script
from tests.conftest import BASE_HOSTS, REPO, InventoryFactory
from tests.tools import ansible_module, run_script_here

RGW = {"rgw1": "127.0.1.1", "rgw2": "127.0.1.2"}
INTERVAL_S, TTL_S = 1, 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Monitor:
    """HAProxy's monitor URI stand-in on one address: 200 while `healthy`, else 503."""

    def __init__(self, address: str, port: int) -> None:
        self.healthy = True
        monitor = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200 if monitor.healthy else 503)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer((address, port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_http(url: str, proc: subprocess.Popen[bytes], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            assert proc.poll() is None, f"{what} exited: " + (
                proc.stdout.read().decode(errors="replace") if proc.stdout else "")
            assert time.monotonic() < deadline, f"{what} never answered {url}"
            time.sleep(0.2)


def answer(name: str, port: int, transport: str = "udp") -> tuple[list[str], int | None]:
    send = dns.query.udp if transport == "udp" else dns.query.tcp
    reply = send(dns.message.make_query(name, "A"), "127.0.0.1", port=port, timeout=3)
    if reply.rcode() != dns.rcode.NOERROR or not reply.answer:
        return [], None
    [rrset] = reply.answer
    assert rrset.name.to_text() == name  # rewritten back from s3.service.consul.
    return sorted(r.address for r in rrset), rrset.ttl


@pytest.fixture(scope="module")
def binaries() -> tuple[Path, Path]:
    from tests.tools import require_tool

    require_tool("go")  # both are built from the Go module proxy when not cached
    from deploykit_lab.consul import ensure_consul
    from deploykit_lab.coredns import ensure_coredns

    return ensure_consul(), ensure_coredns()


@pytest.fixture
def stack(make_inventory: InventoryFactory, binaries: tuple[Path, Path],
          tmp_path: Path) -> Iterator[dict]:
    consul_bin, coredns_bin = binaries
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["rgw"] = {"hosts": {n: {"ansible_host": a} for n, a in RGW.items()}}
    hosts["all"]["children"]["consul_servers"] = {"hosts": {"c1": {"ansible_host": "127.0.0.1"}}}
    # CoreDNS binds the DNS host's own address (and 127.0.0.1): one this machine has
    hosts["all"]["children"]["dns"] = {"hosts": {"dns1": {"ansible_host": "127.0.0.31"}}}
    ports = {k: free_port() for k in ("dns", "http", "serf_lan", "serf_wan", "server",
                                      "coredns", "ready", "health", "metrics", "monitor")}
    site = open_site(str(make_inventory(hosts, all={
        "deploykit_s3_fqdn": "s3.deploykit.test", "deploykit_dns_mode": "consul",
        "deploykit_dns_ttl": TTL_S, "consul_check_interval": f"{INTERVAL_S}s",
        "consul_check_timeout": "1s", "consul_dns_port": ports["dns"],
        "ceph_rgw_concentrator_monitor_port": ports["monitor"],
        "coredns_port": ports["coredns"], "coredns_health_port": ports["health"],
        "coredns_ready_port": ports["ready"], "coredns_metrics_port": ports["metrics"],
        "coredns_upstream": []})))
    tree = render_site(site)
    conf = tmp_path / "consul.d"
    conf.mkdir()
    for name in RGW:  # the rendered service definitions, byte for byte
        (conf / f"s3-{name}.json").write_text(tree[name]["/etc/consul.d/s3-service.json"].content)
    rendered_agent = json.loads(tree["c1"]["/etc/consul.d/consul.json"].content)
    (conf / "dev.json").write_text(json.dumps({
        "dns_config": rendered_agent["dns_config"], "node_name": "c1",
        "ports": {"dns": ports["dns"], "http": ports["http"], "serf_lan": ports["serf_lan"],
                  "serf_wan": ports["serf_wan"], "server": ports["server"], "grpc": -1,
                  "grpc_tls": -1}}))
    corefile = tmp_path / "Corefile"
    corefile.write_text(tree["dns1"]["/etc/coredns/Corefile"].content)
    monitors = {n: Monitor(a, ports["monitor"]) for n, a in RGW.items()}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        consul = subprocess.Popen(
            [str(consul_bin), "agent", "-dev", "-bind", "127.0.0.1", "-client", "127.0.0.1",
             "-config-dir", str(conf)], cwd=tmp_path, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT)
        procs.append(consul)
        coredns = subprocess.Popen([str(coredns_bin), "-conf", str(corefile)], cwd=tmp_path,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.append(coredns)
        wait_http(f"http://127.0.0.1:{ports['http']}/v1/status/leader", consul, "consul")
        wait_http(f"http://127.0.0.1:{ports['ready']}/ready", coredns, "coredns")
        yield {"ports": ports, "monitors": monitors, "consul_bin": consul_bin}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for m in monitors.values():
            m.close()


def wait_answer(name: str, port: int, expected: list[str], timeout: float) -> float:
    start = time.monotonic()
    while True:
        got, _ = answer(name, port)
        if got == expected:
            return time.monotonic() - start
        assert time.monotonic() - start < timeout, f"{name}: {got}, waited for {expected}"
        time.sleep(0.05)


def test_consul_build_is_the_pinned_mpl_release(binaries: tuple[Path, Path]) -> None:
    out = subprocess.run([str(binaries[0]), "version"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    assert out.splitlines()[0] == "Consul v1.16.3", out


def test_names_answer_with_consuls_passing_set_and_a_failed_check_leaves_dns(
        stack: dict) -> None:
    port = stack["ports"]["coredns"]
    both = sorted(RGW.values())
    names = ("s3.deploykit.test.", "lmcache.s3.deploykit.test.", "any-bucket.s3.deploykit.test.")
    wait_answer(names[0], port, both, timeout=15)  # both checks passed once
    for name in names:
        for transport in ("udp", "tcp"):
            got, ttl = answer(name, port, transport)
            assert got == both and ttl == TTL_S, (name, transport, got, ttl)
    outside = dns.query.udp(dns.message.make_query("s3.other.test.", "A"), "127.0.0.1",
                            port=port, timeout=3)
    assert outside.rcode() == dns.rcode.REFUSED  # no upstream configured: not answered

    stack["monitors"]["rgw2"].healthy = False
    gone = wait_answer(names[1], port, [RGW["rgw1"]], timeout=INTERVAL_S + TTL_S + 5)
    assert gone <= INTERVAL_S + TTL_S, f"left DNS after {gone:.2f} s"
    # verify's own script, as it runs on a consul server (the API is on loopback there)
    view = from_output(ConsulView(server="-", service="s3", expected_nodes=["c1"],
                                  rgw_nodes=RGW),
                       [("c1", run_script_here("c1", script(stack["ports"]["http"], "s3")))])
    assert view.error is None, view.error
    assert [m.status for m in view.members] == ["alive"]
    status = {i.address: i.status for i in view.instances}
    assert status == {RGW["rgw1"]: "passing", RGW["rgw2"]: "critical"}

    stack["monitors"]["rgw2"].healthy = True
    back = wait_answer(names[1], port, both, timeout=INTERVAL_S + TTL_S + 5)
    assert back <= INTERVAL_S + TTL_S, f"came back after {back:.2f} s"
    print(f"\nloopback consul: left DNS after {gone:.2f} s, back after {back:.2f} s "
          f"(bound {INTERVAL_S + TTL_S} s)")


def maintenance(stack: dict, service_id: str, enable: bool) -> None:
    """What roles/ceph_rgw/tasks/roll.yml does before and after a gateway host restarts."""
    url = (f"http://127.0.0.1:{stack['ports']['http']}/v1/agent/service/maintenance/"
           f"{service_id}?enable={str(enable).lower()}&reason=deploykit+rolling+restart")
    with urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=5) as r:
        assert r.status == 200


def test_a_drained_gateway_leaves_dns_and_the_drain_gate_sees_it(stack: dict) -> None:
    """The rolling restart's drain, through Ansible: Consul's maintenance mode on the rendered
    service id (s3-<host>) takes the host out of CoreDNS's answers, deploykit_dns_wait
    returns only once no server names it, times out while one still does, and sees it
    come back."""
    port = stack["ports"]["coredns"]
    server = f"127.0.0.1:{port}"
    both = sorted(RGW.values())
    wait_answer("s3.deploykit.test.", port, both, timeout=15)
    gate = {"name": "s3.deploykit.test", "address": RGW["rgw2"],
            "servers": [server, "127.0.0.1:1"], "timeout": 2}  # the second answers nothing
    still = ansible_module("deploykit_dns_wait", {**gate, "state": "absent"}, ok=False)
    assert "still answer with 127.0.1.2" in still["msg"], still
    assert sorted(still["answers"][server]) == both and still["answers"]["127.0.0.1:1"] is None

    maintenance(stack, "s3-rgw2", enable=True)
    gone = ansible_module("deploykit_dns_wait", {**gate, "state": "absent", "timeout": 30})
    assert gone["changed"] is False and gone["answers"][server] == [RGW["rgw1"]], gone
    assert answer("s3.deploykit.test.", port)[0] == [RGW["rgw1"]]

    maintenance(stack, "s3-rgw2", enable=False)
    back = ansible_module("deploykit_dns_wait", {**gate, "servers": [server],
                                                 "state": "present", "timeout": 30})
    assert sorted(back["answers"][server]) == both, back


def test_consul_accepts_every_rendered_agent_config(binaries: tuple[Path, Path],
                                                    tmp_path: Path) -> None:
    """`consul validate` (the role's own handler) on each agent of the example site: the API
    on loopback, DNS on loopback and the host's address, the s3 service definition."""
    site = open_site(str(REPO / "inventory" / "example"))
    tree = render_site(site)
    agents = [h for h in site.hosts.values() if h.groups & {"rgw", "consul_servers"}]
    assert agents
    for host in agents:
        conf = tmp_path / host.name
        conf.mkdir()
        agent = json.loads(tree[host.name]["/etc/consul.d/consul.json"].content)
        assert agent["client_addr"] == "127.0.0.1", agent
        assert agent["addresses"]["dns"] == f"127.0.0.1 {host.address}", agent
        agent["data_dir"] = str(tmp_path / f"{host.name}-data")
        (conf / "consul.json").write_text(json.dumps(agent))
        service = tree[host.name].get("/etc/consul.d/s3-service.json")
        if service is not None:
            (conf / "s3-service.json").write_text(service.content)
        done = subprocess.run([str(binaries[0]), "validate", str(conf)], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, f"{host.name}: {done.stdout}{done.stderr}"


def test_consul_accepts_the_telemetry_prometheus_scrapes(binaries: tuple[Path, Path],
                                                         make_inventory: InventoryFactory,
                                                         tmp_path: Path) -> None:
    """An API opened beyond loopback with ACLs off (so Prometheus can scrape it without a
    token) adds the retention time that /v1/agent/metrics?format=prometheus needs; the real
    agent accepts it. Under the default ACLs it is not added."""
    closed = open_site(str(make_inventory()))
    assert "telemetry" not in consul_render.agent_config(closed, closed.hosts["c1"])
    acl = open_site(str(make_inventory(all={"consul_http_address": "0.0.0.0"})))
    assert "telemetry" not in consul_render.agent_config(acl, acl.hosts["c1"])
    site = open_site(str(make_inventory(all={"consul_http_address": "0.0.0.0",
                                             "consul_acl_enabled": False})))
    agent = consul_render.agent_config(site, site.hosts["c1"])
    assert agent["telemetry"] == {"prometheus_retention_time": "60s", "disable_hostname": True}
    agent["data_dir"] = str(tmp_path / "data")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "consul.json").write_text(json.dumps(agent))
    done = subprocess.run([str(binaries[0]), "validate", str(tmp_path / "conf")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
