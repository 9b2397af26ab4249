"""The consul-mode Corefile run by a real CoreDNS binary, on loopback only.

No Consul binary can be had on these machines, so a small DNS server stands in for
Consul's DNS interface on :<port>, answering `s3.service.consul` with three addresses
(the one stand-in in the suite). Everything else is real: the Corefile deploykit renders,
the CoreDNS binary the lab builds, and dnspython queries over UDP and TCP.
"""

from __future__ import annotations

import copy
import socket
import socketserver
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from deploy_kit.config.open import open_site
from deploy_kit.render.files import render_site
from tests.conftest import BASE_HOSTS, InventoryFactory

CONSUL_ANSWERS = ["127.0.1.1", "127.0.1.2", "127.0.1.3"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def consul_answer(wire: bytes) -> bytes:
    query = dns.message.from_wire(wire)
    response = dns.message.make_response(query)
    question = query.question[0]
    if question.name.to_text().lower() == "s3.service.consul." and \
            question.rdtype == dns.rdatatype.A:
        response.answer.append(dns.rrset.from_text_list(question.name, 0, "IN", "A",
                                                        CONSUL_ANSWERS))
    else:
        response.set_rcode(dns.rcode.NXDOMAIN)
    return response.to_wire()


class _UDP(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data, sock = self.request
        sock.sendto(consul_answer(data), self.client_address)


class _TCP(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        size = int.from_bytes(self.request.recv(2), "big")
        reply = consul_answer(self.request.recv(size))
        self.request.sendall(len(reply).to_bytes(2, "big") + reply)


@pytest.fixture
def consul_stand_in() -> Iterator[int]:
    port = free_port()
    udp = socketserver.ThreadingUDPServer(("127.0.0.1", port), _UDP)
    tcp = socketserver.ThreadingTCPServer(("127.0.0.1", port), _TCP)
    for server in (udp, tcp):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield port
    for server in (udp, tcp):
        server.shutdown()
        server.server_close()


@pytest.fixture
def coredns_binary() -> Path:
    from tests.tools import require_tool

    require_tool("go")  # the binary is built from the Go module proxy when missing
    from deploy_kit.lab.coredns import ensure_coredns

    return ensure_coredns()


def test_consul_mode_answers_exact_and_wildcard_names_with_every_address(
        make_inventory: InventoryFactory, consul_stand_in: int, coredns_binary: Path,
        tmp_path: Path) -> None:
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["consul_servers"] = {"hosts": {"c1": {"ansible_host": "127.0.0.1"}}}
    dns_port, ready_port = free_port(), free_port()
    site = open_site(str(make_inventory(hosts, all={
        "deploykit_s3_fqdn": "s3.deploykit.test", "deploykit_dns_mode": "consul",
        "consul_dns_port": consul_stand_in, "coredns_port": dns_port,
        "coredns_health_port": free_port(), "coredns_ready_port": ready_port,
        "coredns_metrics_port": free_port(), "coredns_upstream": []})))
    corefile = tmp_path / "Corefile"
    corefile.write_text(render_site(site)["dns1"]["/etc/coredns/Corefile"].content)
    proc = subprocess.Popen([str(coredns_binary), "-conf", str(corefile)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ready_port}/ready", timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "CoreDNS never became ready"
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                time.sleep(0.2)
        for name in ("s3.deploykit.test.", "lmcache.s3.deploykit.test.",
                     "any-bucket.s3.deploykit.test."):
            for transport in (dns.query.udp, dns.query.tcp):
                reply = transport(dns.message.make_query(name, "A"), "127.0.0.1",
                                  port=dns_port, timeout=3)
                assert reply.rcode() == dns.rcode.NOERROR
                [rrset] = reply.answer
                assert rrset.name.to_text() == name  # answer name rewritten back
                assert sorted(r.address for r in rrset) == CONSUL_ANSWERS
        outside = dns.query.udp(dns.message.make_query("s3.other.test.", "A"), "127.0.0.1",
                                port=dns_port, timeout=3)
        assert outside.rcode() == dns.rcode.REFUSED  # no upstream configured: not answered
    finally:
        proc.terminate()
        proc.wait(timeout=10)
