"""The catch-all `.:53` block run by the real CoreDNS binary, with an upstream on loopback.

CoreDNS 1.12.1 refuses `. :53` ("zone is not a valid domain name"); this renders the
Corefile with `coredns_upstream` set (as production inventories do) and checks that CoreDNS
starts and forwards every other name to the upstream (that it answers the S3 names from
Consul is test_consul_dns.py's, with a real Consul).
"""

from __future__ import annotations

import copy
import socketserver
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dns.message
import dns.query
import dns.rcode
import dns.rrset
import pytest

from deploy_kit.ops.site import open_site
from deploy_kit.render.files import render_site
from tests.conftest import BASE_HOSTS, InventoryFactory
from tests.integration.test_consul_dns import free_port
from tests.tools import udp_server


@pytest.fixture(scope="module")
def coredns_binary() -> Path:
    from deploykit_lab.coredns import ensure_coredns
    from tests.tools import require_tool

    require_tool("go")  # built from the Go module proxy when not cached
    return ensure_coredns()

UPSTREAM_ANSWER = "127.0.2.53"


def upstream_answer(wire: bytes) -> bytes:
    query = dns.message.from_wire(wire)
    response = dns.message.make_response(query)
    response.answer.append(dns.rrset.from_text_list(query.question[0].name, 30, "IN", "A",
                                                    [UPSTREAM_ANSWER]))
    return response.to_wire()


class _UDP(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data, sock = self.request
        sock.sendto(upstream_answer(data), self.client_address)


@pytest.fixture
def upstream() -> Iterator[int]:
    with udp_server(_UDP) as port:
        yield port


def test_catch_all_block_starts_and_forwards_to_the_upstream(
        make_inventory: InventoryFactory, upstream: int, coredns_binary: Path,
        tmp_path: Path) -> None:
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["consul_servers"] = {"hosts": {"c1": {"ansible_host": "127.0.0.1"}}}
    # CoreDNS binds the DNS host's own address (and 127.0.0.1): one this machine has
    hosts["all"]["children"]["dns"] = {"hosts": {"dns1": {"ansible_host": "127.0.0.31"}}}
    dns_port, ready_port = free_port(), free_port()
    site = open_site(str(make_inventory(hosts, all={
        "deploykit_s3_fqdn": "s3.deploykit.test", "deploykit_dns_mode": "consul",
        "consul_dns_port": free_port(), "coredns_port": dns_port,
        "coredns_health_port": free_port(), "coredns_ready_port": ready_port,
        "coredns_metrics_port": free_port(), "coredns_upstream": [f"127.0.0.1:{upstream}"]})))
    text = render_site(site)["dns1"]["/etc/coredns/Corefile"].content
    assert f"\n.:{dns_port} {{\n" in text
    corefile = tmp_path / "Corefile"
    corefile.write_text(text)
    proc = subprocess.Popen([str(coredns_binary), "-conf", str(corefile)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ready_port}/ready", timeout=1):
                    break
            except OSError:
                out = proc.stdout.read().decode() if proc.poll() is not None and proc.stdout \
                    else ""
                assert proc.poll() is None, f"CoreDNS refused the Corefile: {out}"
                assert time.monotonic() < deadline, "CoreDNS never became ready"
                time.sleep(0.2)
        for name in ("deb.debian.org.", "s3.other.test."):
            reply = dns.query.udp(dns.message.make_query(name, "A"), "127.0.0.1",
                                  port=dns_port, timeout=3)
            assert reply.rcode() == dns.rcode.NOERROR
            assert [r.address for r in reply.answer[0]] == [UPSTREAM_ANSWER]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
