"""The rendered Corefile's `bind` and `acl`, run by the real CoreDNS (the lab's build, which
now carries both plugins): it listens on the DNS host's address and loopback only, answers
sources inside coredns_allowed_networks and REFUSES the rest. 127.0.0.2 stands in for the
DNS host's address; other 127.0.0.x addresses are clients inside and outside the list."""

from __future__ import annotations

import copy
import socketserver
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dns.exception
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

ANSWER = "127.0.2.53"
DNS_HOST = "127.0.0.2"


@pytest.fixture(scope="module")
def coredns_binary() -> Path:
    from deploykit_lab.coredns import ensure_coredns
    from tests.tools import require_tool

    require_tool("go")  # built from the Go module proxy when not cached
    return ensure_coredns()


class _UDP(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data, sock = self.request
        query = dns.message.from_wire(data)
        response = dns.message.make_response(query)
        response.answer.append(dns.rrset.from_text_list(query.question[0].name, 30, "IN", "A",
                                                        [ANSWER]))
        sock.sendto(response.to_wire(), self.client_address)


@pytest.fixture
def upstream() -> Iterator[int]:
    with udp_server(_UDP) as port:
        yield port


def _corefile(make_inventory: InventoryFactory, upstream: int, ports: dict[str, int],
              **extra: object) -> str:
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["dns"] = {"hosts": {"dns1": {"ansible_host": DNS_HOST}}}
    site = open_site(str(make_inventory(hosts, all={
        "deploykit_s3_fqdn": "s3.deploykit.test", "consul_dns_port": free_port(),
        "coredns_port": ports["dns"], "coredns_health_port": free_port(),
        "coredns_ready_port": ports["ready"], "coredns_metrics_port": free_port(),
        "coredns_upstream": [f"127.0.0.1:{upstream}"], **extra})))
    return render_site(site)["dns1"]["/etc/coredns/Corefile"].content


@pytest.fixture
def run_coredns(coredns_binary: Path, tmp_path: Path) -> Iterator[object]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(text: str, ready_port: int) -> None:
        corefile = tmp_path / "Corefile"
        corefile.write_text(text)
        proc = subprocess.Popen([str(coredns_binary), "-conf", str(corefile)], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.append(proc)
        deadline = time.monotonic() + 15
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ready_port}/ready", timeout=1):
                    return
            except OSError:
                if proc.poll() is not None:
                    out = proc.stdout.read().decode() if proc.stdout else ""
                    raise AssertionError(f"CoreDNS refused the Corefile: {out}") from None
                assert time.monotonic() < deadline, "CoreDNS never became ready"
                time.sleep(0.2)

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=10)


def _ask(server: str, port: int, source: str) -> int | None:
    try:
        reply = dns.query.udp(dns.message.make_query("deb.debian.org.", "A"), server,
                              port=port, source=source, timeout=2)
    except (dns.exception.Timeout, OSError):
        return None  # nothing listens there
    return reply.rcode()


@pytest.fixture
def ports() -> dict[str, int]:
    return {"dns": free_port(), "ready": free_port()}


def test_allowed_sources_are_answered_others_refused(
        make_inventory: InventoryFactory, upstream: int, ports: dict[str, int],
        run_coredns: object) -> None:
    text = _corefile(make_inventory, upstream, ports, coredns_allowed_networks=[
        "10.0.0.0/16", f"{DNS_HOST}/32", "127.0.0.3"])
    assert f"bind {DNS_HOST} 127.0.0.1\n" in text
    run_coredns(text, ports["ready"])  # type: ignore[operator]
    port = ports["dns"]
    assert _ask(DNS_HOST, port, "127.0.0.3") == dns.rcode.NOERROR  # in the list
    assert _ask(DNS_HOST, port, DNS_HOST) == dns.rcode.NOERROR  # the host itself
    assert _ask("127.0.0.1", port, "127.0.0.1") == dns.rcode.NOERROR  # loopback, always
    assert _ask(DNS_HOST, port, "127.0.0.4") == dns.rcode.REFUSED  # outside: no resolver
    assert _ask("127.0.0.1", port, "127.0.0.4") == dns.rcode.REFUSED
    assert _ask("127.0.0.5", port, "127.0.0.3") is None  # not bound there


def test_the_opt_outs_answer_everyone_on_every_address(
        make_inventory: InventoryFactory, upstream: int, ports: dict[str, int],
        run_coredns: object) -> None:
    text = _corefile(make_inventory, upstream, ports, coredns_bind=[],
                     coredns_allowed_networks=["0.0.0.0/0", "::/0"])
    assert "    bind " not in text
    run_coredns(text, ports["ready"])  # type: ignore[operator]
    assert _ask("127.0.0.5", ports["dns"], "127.0.0.4") == dns.rcode.NOERROR
