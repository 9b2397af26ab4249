"""CoreDNS answers only the site: bind and acl in both server blocks, networks derived from
the inventory unless listed, lists that would cut off an inventory host refused."""

from __future__ import annotations

import copy
import re

import pytest

from deploy_kit.core.errors import InventoryError
from deploy_kit.ops.site import open_site
from deploy_kit.render.dns import allowed_networks, bind_addresses
from deploy_kit.render.files import render_site
from deploy_kit.verify.checks.dns import answer_count
from deploy_kit.verify.model import DnsAnswer, Observation, Status
from tests.conftest import BASE_HOSTS, REPO, InventoryFactory


def _problems(root: object) -> str:
    with pytest.raises(InventoryError) as err:
        open_site(str(root))
    return "\n".join(str(p) for p in err.value.problems)


def test_the_example_guards_both_server_blocks() -> None:
    site = open_site(str(REPO / "inventory" / "example"))
    corefile = render_site(site)["dns1"]["/etc/coredns/Corefile"].content
    address = site.hosts["dns1"].address
    # the S3 name, the routers' name (the example has routers) and the forwarding zone
    blocks = re.findall(r"^\S+:53 \{$", corefile, re.M)
    assert blocks == ["s3.cephlab.com:53 {", "llm.cephlab.com:53 {", ".:53 {"]
    assert corefile.count(f"    bind {address} 127.0.0.1\n") == len(blocks)
    assert corefile.count("        block\n") == len(blocks)
    allow = next(line for line in corefile.splitlines() if "allow net" in line).split()[2:]
    assert allow[:2] == ["127.0.0.1/32", "::1/128"]
    # every inventory host's /24, nothing wider
    expected = sorted({".".join(h.address.split(".")[:3]) + ".0/24"
                       for h in site.hosts.values()})
    assert sorted(allow[2:]) == expected


def test_ipv6_hosts_get_their_64_and_a_list_replaces_the_derivation(
        make_inventory: InventoryFactory) -> None:
    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["vllm"]["hosts"]["gpu2"]["ansible_host"] = "2001:db8:0:7::12"
    site = open_site(str(make_inventory(hosts)))
    nets = allowed_networks(site, site.hosts["dns1"])
    assert "2001:db8:0:7::/64" in nets and "10.0.1.0/24" in nets and "10.0.0.0/24" in nets
    listed = open_site(str(make_inventory(hosts, all={"coredns_allowed_networks": [
        "10.0.0.0/16", "2001:db8::1:5", "2001:db8::/32"]})))
    assert allowed_networks(listed, listed.hosts["dns1"]) == [
        "127.0.0.1/32", "::1/128", "10.0.0.0/16", "2001:db8::1:5/128", "2001:db8::/32"]
    assert bind_addresses(listed.hosts["dns1"]) == ["10.0.0.31", "127.0.0.1"]


def test_a_list_leaving_out_inventory_hosts_is_refused(make_inventory: InventoryFactory
                                                       ) -> None:
    text = _problems(make_inventory(all={"coredns_allowed_networks": ["10.0.0.0/24"]}))
    assert "coredns_allowed_networks: leaves out inventory hosts" in text
    assert "gpu1" in text and "gpu2" in text and "rgw1" not in text


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("coredns_allowed_networks", ["10.0.0.0/33"], "is not a network"),
    ("coredns_allowed_networks", ["any"], "is not a network"),
    ("coredns_allowed_networks", "10.0.0.0/8", "list"),
    ("coredns_bind", ["10.0.0.31", "eth0 ; rm"], "neither an address nor an interface"),
    ("coredns_bind", ["10.0.0.99"], "does not hold dns1's address 10.0.0.31"),
])
def test_bad_values_are_refused(make_inventory: InventoryFactory, key: str, value: object,
                                expected: str) -> None:
    text = _problems(make_inventory(dns={key: value}))
    assert key in text and expected in text


def test_an_interface_bind_and_the_opt_outs_pass(make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(dns={"coredns_bind": ["eth0", "127.0.0.1"]})))
    assert "    bind eth0 127.0.0.1\n" in render_site(site)["dns1"]["/etc/coredns/Corefile"].content
    open_site(str(make_inventory(dns={"coredns_bind": [],
                                      "coredns_allowed_networks": ["0.0.0.0/0", "::/0"]})))


def test_verify_names_the_acl_when_refused() -> None:
    obs = Observation(fqdn="s3.t.test", bucket="b", region="default", rgw_addresses=["10.0.0.11"],
                      dns_servers=["10.0.0.31"], expected_pools=[], expected_rgw_daemons=1,
                      expected_lifecycle={"Rules": []}, pinned={})
    obs.dns = [DnsAnswer(server="10.0.0.31", name="s3.t.test", transport="udp",
                         error="REFUSED")]
    [finding] = list(answer_count(obs))
    assert finding.status == Status.FAIL and "coredns_allowed_networks" in (finding.hint or "")
