"""consul_tls_enabled: the Consul CA and agent certificates on the controller (names, key
usage, reuse, modes), the `tls` block rendered for each agent, and what settings.json
carries (controller paths, never a key). The real agents: tests/integration/test_consul_tls.py."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from deploy_kit.core.errors import InventoryError
from deploy_kit.ops import consul_tls, tls
from deploy_kit.ops.rundir import SETTINGS_PATH, role_tree
from deploy_kit.ops.site import open_site
from deploy_kit.render import consul as consul_render
from deploy_kit.render import consul_tls as names
from deploy_kit.render.files import render_site
from tests.cli import run_cli
from tests.conftest import InventoryFactory

ON = {"consul_tls_enabled": True, "deploykit_dns_mode": "consul"}


def _certs(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def test_off_by_default_renders_no_tls_and_issues_nothing(make_inventory: InventoryFactory
                                                          ) -> None:
    root = make_inventory(all={"deploykit_dns_mode": "consul"})
    site = open_site(str(root))
    for host in ("c1", "rgw1"):
        agent = consul_render.agent_config(site, site.hosts[host])
        assert "tls" not in agent and "grpc_tls" not in agent["ports"]
    assert consul_tls.ensure_consul_tls(site) == []
    assert not (root / ".deploykit-tls").exists()
    settings = json.loads(role_tree(site)["c1"][SETTINGS_PATH].content)
    assert "_consul_tls_pem_src" not in settings


def test_agents_get_mutual_tls_with_server_hostname_checks(make_inventory: InventoryFactory
                                                           ) -> None:
    site = open_site(str(make_inventory(all=ON)))
    tree = render_site(site)
    for host in ("c1", "rgw1", "rgw2"):
        agent = json.loads(tree[host]["/etc/consul.d/consul.json"].content)
        assert agent["tls"] == {
            "defaults": {"ca_file": "/etc/consul.d/tls/ca.pem",
                         "cert_file": "/etc/consul.d/tls/agent.pem",
                         "key_file": "/etc/consul.d/tls/agent.pem",
                         "verify_incoming": True, "verify_outgoing": True,
                         "tls_min_version": "TLSv1_2"},
            "internal_rpc": {"verify_server_hostname": True}}
        # the API stays plain HTTP on loopback: no https port, no gRPC-TLS port
        assert agent["ports"]["grpc_tls"] == -1 and "https" not in agent["ports"]
        assert agent["client_addr"] == "127.0.0.1"
    # serving and DNS hosts run no agent: nothing Consul there
    assert "/etc/consul.d/consul.json" not in tree["gpu1"]


def test_each_agent_certificate_names_its_role_and_is_kept(make_inventory: InventoryFactory
                                                           ) -> None:
    root = make_inventory(all={**ON, "consul_datacenter": "east"})
    site = open_site(str(root))
    first = consul_tls.ensure_consul_tls(site)
    assert [(i.host, i.action) for i in first] == [("c1", "issued"), ("rgw1", "issued"),
                                                   ("rgw2", "issued")]
    d = root / ".deploykit-tls"
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert stat.S_IMODE((d / "consul-ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((d / "consul").stat().st_mode) == 0o700
    ca = _certs((d / "consul-ca.crt").read_bytes())
    assert "Consul CA" in ca.subject.rfc4514_string()
    constraints = ca.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    assert constraints.value.permitted_subtrees == [x509.DNSName("consul")]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0
    expected = {"c1": "server.east.consul", "rgw1": "client.east.consul",
                "rgw2": "client.east.consul"}
    pems = {}
    for host, name in expected.items():
        path = d / "consul" / f"{host}.pem"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        pems[host] = path.read_bytes()
        assert pems[host].count(b"BEGIN CERTIFICATE") == 1 and b"PRIVATE KEY" in pems[host]
        cert = _certs(pems[host])
        cert.verify_directly_issued_by(ca)
        assert tls.sans(cert) == ([name], [])
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
        usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
        assert usage.digital_signature and not usage.key_cert_sign
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    # a second run keeps CA and certificates byte for byte
    ca_before = (d / "consul-ca.crt").read_bytes()
    again = consul_tls.ensure_consul_tls(open_site(str(root)))
    assert [i.action for i in again] == ["kept"] * 3
    assert {h: (d / "consul" / f"{h}.pem").read_bytes() for h in expected} == pems
    assert (d / "consul-ca.crt").read_bytes() == ca_before


def test_a_changed_role_or_mode_reissues(make_inventory: InventoryFactory) -> None:
    root = make_inventory(all=ON)
    consul_tls.ensure_consul_tls(open_site(str(root)))
    d = root / ".deploykit-tls" / "consul"
    (d / "rgw1.pem").chmod(0o644)  # a key readable by others is replaced
    again = {i.host: i.action for i in consul_tls.ensure_consul_tls(open_site(str(root)))}
    assert again == {"c1": "kept", "rgw1": "issued", "rgw2": "kept"}
    assert stat.S_IMODE((d / "rgw1.pem").stat().st_mode) == 0o600
    # another datacenter: every name changes, every certificate is issued anew
    root2 = make_inventory(all={**ON, "consul_datacenter": "west"})
    moved = consul_tls.ensure_consul_tls(open_site(str(root2)))
    assert [i.action for i in moved] == ["issued"] * 3
    assert tls.sans(_certs((d / "c1.pem").read_bytes())) == (["server.west.consul"], [])


def test_settings_carry_paths_and_the_site_ca_stays_apart(make_inventory: InventoryFactory
                                                          ) -> None:
    root = make_inventory(all={**ON, "deploykit_s3_tls": True, "deploykit_s3_port": 443,
                               "deploykit_s3_fqdn": "s3.t.test"})
    site = open_site(str(root))
    tls.ensure_site_tls(site)
    consul_tls.ensure_consul_tls(site)
    d = root / ".deploykit-tls"
    assert (d / "ca.crt").read_bytes() != (d / "consul-ca.crt").read_bytes()
    tree = role_tree(site)
    c1 = json.loads(tree["c1"][SETTINGS_PATH].content)
    assert c1["_consul_tls_ca_src"] == str(d / "consul-ca.crt")
    assert c1["_consul_tls_pem_src"] == str(d / "consul" / "c1.pem")
    rgw1 = json.loads(tree["rgw1"][SETTINGS_PATH].content)
    assert rgw1["_consul_tls_pem_src"] == str(d / "consul" / "rgw1.pem")
    assert rgw1["_ceph_rgw_tls_pem_src"] == str(d / "rgw1.pem")  # the S3 side unchanged
    assert "_consul_tls_pem_src" not in json.loads(tree["gpu1"][SETTINGS_PATH].content)
    for files in tree.values():  # paths only: no key in any rendered file
        assert not any(b"PRIVATE KEY" in f.content.encode() for f in files.values())


def test_check_mode_writes_nothing_beside_the_inventory(make_inventory: InventoryFactory,
                                                        tmp_path: Path) -> None:
    root = make_inventory(all=ON)
    site = open_site(str(root))
    scratch = tmp_path / "scratch"
    would, sources = consul_tls.check_consul_tls(site, scratch, None)
    assert [(i.host, i.action) for i in would] == [
        ("(Consul CA)", "would create"), ("c1", "would issue"), ("rgw1", "would issue"),
        ("rgw2", "would issue")]
    assert not (root / ".deploykit-tls").exists()
    assert sources is not None and sources.consul_ca == scratch / names.CA_CERT
    settings = json.loads(role_tree(site, sources)["rgw1"][SETTINGS_PATH].content)
    assert settings["_consul_tls_pem_src"] == str(scratch / "rgw1.pem")
    assert (scratch / "rgw1.pem").is_file()


def test_a_mixed_fleet_is_refused(make_inventory: InventoryFactory) -> None:
    """A TLS server refuses a plain agent's RPC: one value for every agent (exit 3)."""
    from deploy_kit.config.rules_dns import consul_tls_agrees

    with pytest.raises(InventoryError) as mixed:
        open_site(str(make_inventory(all={"deploykit_dns_mode": "consul"},
                                     consul_servers={"consul_tls_enabled": True})))
    ours = [p for p in mixed.value.problems if p.key == "consul_tls_enabled"]
    assert len(ours) == 1 and "c1 has True" in str(ours[0]), mixed.value.problems
    assert "consul_servers.yml" in str(ours[0]) and "every Consul agent" in str(ours[0])
    with pytest.raises(InventoryError) as split:
        open_site(str(make_inventory(all={**ON, "consul_datacenter": "dc1"},
                                     consul_servers={"consul_datacenter": "east"})))
    assert [p.key for p in split.value.problems] == ["consul_datacenter"]
    # the serving hosts run no agent: their value does not count
    fine = open_site(str(make_inventory(all=ON, consul_servers={},
                                        vllm={"consul_tls_enabled": False})))
    assert list(consul_tls_agrees(fine)) == []


def test_the_render_play_issues_only_outside_check_mode(make_inventory: InventoryFactory,
                                                        tmp_path: Path) -> None:
    """`render --for-roles --check` (a plain `ansible-playbook --check`) writes nothing
    beside the inventory: the would-be Consul CA and certificates go into its output
    directory, where settings.json points; without --check it issues as `up` does."""
    root = make_inventory(all=ON)
    before = sorted(str(p) for p in root.rglob("*"))
    out = tmp_path / "out"
    result = run_cli("render", "-i", str(root), "--for-roles", "--check", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert sorted(str(p) for p in root.rglob("*")) == before
    assert "would create the Consul CA" in result.stderr
    c1 = json.loads((out / "c1" / SETTINGS_PATH.lstrip("/")).read_text())
    for key in ("_consul_tls_ca_src", "_consul_tls_pem_src"):
        assert Path(c1[key]).parent == out / ".deploykit-check-tls" and Path(c1[key]).is_file()
    again = run_cli("render", "-i", str(root), "--for-roles", "-o", str(tmp_path / "o2"))
    assert again.returncode == 0, again.stderr
    assert (root / ".deploykit-tls" / "consul" / "c1.pem").is_file()
    # a plain render (not for the roles) never issues
    (root / ".deploykit-tls" / "consul" / "c1.pem").unlink()
    plain = run_cli("render", "-i", str(root), "-o", str(tmp_path / "o3"))
    assert plain.returncode == 0, plain.stderr
    assert not (root / ".deploykit-tls" / "consul" / "c1.pem").exists()


def test_the_role_installs_the_key_0600_without_logging_it() -> None:
    import yaml

    from tests.conftest import REPO

    tasks = yaml.safe_load((REPO / "roles" / "consul" / "tasks" / "configure.yml").read_text())
    (key,) = [t for t in tasks if t.get("ansible.builtin.copy", {}).get("src")
              == "{{ _consul_tls_pem_src }}"]
    assert key["no_log"] is True and key["diff"] is False
    assert key["ansible.builtin.copy"]["mode"] == "0600"
    assert key["ansible.builtin.copy"]["owner"] == "consul"
    assert "Schedule a Consul restart" in key["notify"]
    assert key["when"] == "consul_tls_enabled | bool"
