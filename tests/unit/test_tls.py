"""deploykit_s3_tls: the site CA and concentrator certificates on the controller, what the
render tree carries (paths, never keys), the HAProxy bind, LMCache's disable_tls."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import stat
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from deploy_kit.core.errors import InventoryError
from deploy_kit.ops import tls
from deploy_kit.ops.rundir import SETTINGS_PATH, role_tree
from deploy_kit.ops.site import open_site
from deploy_kit.render.files import render_site
from tests.cli import run_cli
from tests.conftest import InventoryFactory

TLS = {"deploykit_s3_tls": True, "deploykit_s3_port": 443, "deploykit_s3_fqdn": "s3.t.test"}


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def test_ca_created_once_private_and_git_ignored(make_inventory: InventoryFactory) -> None:
    root = make_inventory(all=TLS)
    site = open_site(str(root))
    first = tls.ensure_site_tls(site)
    d = root / ".deploykit-tls"
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert stat.S_IMODE((d / "ca.key").stat().st_mode) == 0o600
    assert (d / ".gitignore").read_text().splitlines()[-1] == "*"
    assert [(i.host, i.action) for i in first] == [("rgw1", "issued"), ("rgw2", "issued")]
    pem = (d / "rgw1.pem").read_bytes()
    assert stat.S_IMODE((d / "rgw1.pem").stat().st_mode) == 0o600
    cert, ca = _cert(pem), _cert((d / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    assert tls.sans(cert) == (["s3.t.test", "*.s3.t.test"], ["10.0.0.11"])
    assert b"PRIVATE KEY" in pem and pem.count(b"BEGIN CERTIFICATE") == 1  # self-signed CA
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert datetime.timedelta(days=364) < lifetime < datetime.timedelta(days=366)
    # a second run keeps CA and certificates byte for byte: the roles then change nothing
    ca_before = (d / "ca.crt").read_bytes()
    again = tls.ensure_site_tls(open_site(str(root)))
    assert [i.action for i in again] == ["kept", "kept"]
    assert (d / "rgw1.pem").read_bytes() == pem and (d / "ca.crt").read_bytes() == ca_before


def test_the_created_ca_vouches_for_the_s3_name_only(make_inventory: InventoryFactory) -> None:
    """The CA goes into every serving host's trust store: its name constraints let a chain
    verifier (cryptography's, RFC 5280) accept the concentrator's certificate for any bucket
    name, and refuse one the same CA key signs for another site."""
    from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

    root = make_inventory(all={**TLS, "ceph_rgw_networks": ["10.0.0.0/24"]})
    site = open_site(str(root))
    tls.ensure_site_tls(site)
    d = root / ".deploykit-tls"
    ca_cert = _cert((d / "ca.crt").read_bytes())
    constraints = ca_cert.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    assert constraints.value.permitted_subtrees == [
        x509.DNSName("s3.t.test"), x509.IPAddress(ipaddress.ip_network("10.0.0.0/24"))]
    now = datetime.datetime.now(datetime.UTC)
    verifier = PolicyBuilder().store(Store([ca_cert])).time(now)
    leaf = _cert((d / "rgw1.pem").read_bytes())
    verifier.build_server_verifier(x509.DNSName("lmcache.s3.t.test")).verify(leaf, [])
    ca = tls.load_ca(d / "ca.crt", d / "ca.key")
    forged, _ = tls.issue(ca, ["bank.example.com"], [], 30)
    with pytest.raises(VerificationError):
        verifier.build_server_verifier(x509.DNSName("bank.example.com")).verify(
            _cert(forged), [])


def test_reissued_when_names_change_or_expiry_nears(make_inventory: InventoryFactory) -> None:
    root = make_inventory(all={**TLS, "deploykit_tls_cert_days": 20})
    tls.ensure_site_tls(open_site(str(root)))
    pem = (root / ".deploykit-tls" / "rgw1.pem").read_bytes()
    # 20 days left of 20: outside its renewal window (the last third), kept
    assert [i.action for i in tls.ensure_site_tls(open_site(str(root)))] == ["kept"] * 2
    root = make_inventory(all={**TLS, "deploykit_s3_fqdn": "s3.other.test",
                               "deploykit_tls_cert_days": 20})
    issued = tls.ensure_site_tls(open_site(str(root)))
    assert [i.action for i in issued] == ["issued"] * 2
    new = (root / ".deploykit-tls" / "rgw1.pem").read_bytes()
    assert new != pem and tls.sans(_cert(new))[0] == ["s3.other.test", "*.s3.other.test"]


def test_renewal_window(make_inventory: InventoryFactory) -> None:
    root = make_inventory(all=TLS)
    site = open_site(str(root))
    ca = tls.ensure_ca(site)
    dns, ips = ["s3.t.test", "*.s3.t.test"], ["10.0.0.11"]
    cert, key = tls.issue(ca, dns, ips, 365)
    assert tls.still_fits(cert + key, ca, dns, ips) is not None
    # a short-lived certificate renews in the last third of its life, not 30 days ahead
    short, key2 = tls.issue(ca, dns, ips, 29)
    assert tls.still_fits(short + key2, ca, dns, ips) is not None
    other_ca = tls.CA(*_load(*tls.create_ca("x")))
    assert tls.still_fits(cert + key, other_ca, dns, ips) is None  # another CA: reissue
    assert tls.still_fits(cert + key, ca, dns[:1], ips) is None  # names changed
    assert tls.still_fits(cert + key2, ca, dns, ips) is None  # key of another certificate


def _load(cert_pem: bytes, key_pem: bytes) -> tuple[x509.Certificate, object, bytes]:
    return (_cert(cert_pem), serialization.load_pem_private_key(key_pem, None), cert_pem)


def test_an_existing_ca_is_taken_and_its_key_must_be_private(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    cert_pem, key_pem = tls.create_ca("ops")
    (tmp_path / "ops-ca.crt").write_bytes(cert_pem)
    key = tmp_path / "ops-ca.key"
    key.write_bytes(key_pem)
    os.chmod(key, 0o644)
    root = make_inventory(all={**TLS, "deploykit_tls_ca_cert": str(tmp_path / "ops-ca.crt"),
                               "deploykit_tls_ca_key": str(key)})
    site = open_site(str(root))
    with pytest.raises(tls.TlsError, match="accessible to others"):
        tls.ensure_site_tls(site)
    os.chmod(key, 0o600)
    tls.ensure_site_tls(site)
    issued = _cert((root / ".deploykit-tls" / "rgw2.pem").read_bytes())
    issued.verify_directly_issued_by(_cert(cert_pem))
    assert not (root / ".deploykit-tls" / "ca.key").exists()  # nothing created


def test_a_ca_cert_without_its_key_is_refused(make_inventory: InventoryFactory) -> None:
    root = make_inventory(all={**TLS, "deploykit_tls_ca_cert": "/etc/ops/ca.crt"})
    with pytest.raises(InventoryError, match="deploykit_tls_ca_key"):
        open_site(str(root))


def test_a_foreign_key_or_a_leaf_as_ca_is_refused(make_inventory: InventoryFactory,
                                                   tmp_path: Path) -> None:
    a, _ = tls.create_ca("a")
    _, b_key = tls.create_ca("b")
    (tmp_path / "ca.crt").write_bytes(a)
    (tmp_path / "ca.key").write_bytes(b_key)
    os.chmod(tmp_path / "ca.key", 0o600)
    with pytest.raises(tls.TlsError, match="does not belong"):
        tls.load_ca(tmp_path / "ca.crt", tmp_path / "ca.key")
    ca = tls.CA(*_load(a, tls.create_ca("a")[1]))  # only to sign: any key will do here
    leaf, leaf_key = tls.issue(ca, ["s3.t.test"], [], 30)
    (tmp_path / "leaf.crt").write_bytes(leaf)
    (tmp_path / "leaf.key").write_bytes(leaf_key)
    os.chmod(tmp_path / "leaf.key", 0o600)
    with pytest.raises(tls.TlsError, match="no CA certificate"):
        tls.load_ca(tmp_path / "leaf.crt", tmp_path / "leaf.key")


def test_tree_carries_paths_not_keys(make_inventory: InventoryFactory) -> None:
    root = make_inventory(all=TLS)
    site = open_site(str(root))
    tls.ensure_site_tls(site)
    tree = role_tree(site)
    for files in tree.values():
        for rendered in files.values():
            assert "PRIVATE KEY" not in rendered.content and "BEGIN CERT" not in rendered.content
    rgw = json.loads(tree["rgw1"][SETTINGS_PATH].content)
    assert (rgw["_deploykit_tls_ca_cert_src"], rgw["_ceph_rgw_tls_pem_src"],
            rgw["_ceph_rgw_haproxy_pem_path"]) == (
        str(root / ".deploykit-tls" / "ca.crt"), str(root / ".deploykit-tls" / "rgw1.pem"),
        "/etc/haproxy/deploykit-s3.pem")
    gpu = json.loads(tree["gpu1"][SETTINGS_PATH].content)
    assert "_ceph_rgw_tls_pem_src" not in gpu  # a serving host gets the CA certificate only
    plain = role_tree(open_site(str(make_inventory(all={}))))
    assert "_deploykit_tls_ca_cert_src" not in json.loads(plain["rgw1"][SETTINGS_PATH].content)


def test_haproxy_binds_tls_and_lmcache_keeps_tls_on(make_inventory: InventoryFactory) -> None:
    # in-process: the in-process lmcache.yaml carries disable_tls (cuda's default is server)
    inprocess = {"lmcache_topology": "inprocess"}
    tree = render_site(open_site(str(make_inventory(all=TLS | inprocess))))
    cfg = tree["rgw1"]["/etc/haproxy/haproxy.cfg"].content
    assert "bind *:443 ssl crt /etc/haproxy/deploykit-s3.pem alpn http/1.1" in cfg
    assert "bind *:1967\n" in cfg  # /health and /metrics stay plain HTTP for Consul and Prometheus
    lm = yaml.safe_load(tree["gpu1"]["/etc/deploykit/lmcache.yaml"].content)
    assert lm["remote_url"] == "s3://lmcache.s3.t.test"
    assert lm["extra_config"]["disable_tls"] is False
    profile = tree["gpu1"]["/etc/deploykit/aws/config"].content
    assert "endpoint_url = https://s3.t.test" in profile
    plain = render_site(open_site(str(make_inventory(all=inprocess))))
    assert "ssl" not in plain["rgw1"]["/etc/haproxy/haproxy.cfg"].content
    lm = yaml.safe_load(plain["gpu1"]["/etc/deploykit/lmcache.yaml"].content)
    assert lm["extra_config"]["disable_tls"] is True


def test_the_render_play_issues_like_up(make_inventory: InventoryFactory, tmp_path: Path) -> None:
    """A plain ansible-playbook run renders with --for-roles: it must issue the certificates
    the roles copy, and write no key into the tree."""
    root = make_inventory(all=TLS)
    out = tmp_path / "tree"
    result = run_cli("render", "--for-roles", "-i", str(root), "-o", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (root / ".deploykit-tls" / "rgw1.pem").exists()
    assert "PRIVATE KEY" not in result.stdout + result.stderr
    for path in out.rglob("*"):
        if path.is_file():
            assert b"PRIVATE KEY" not in path.read_bytes(), path


def _ca_files(tmp_path: Path, *, key_type: str = "ec", days: int = 3650,
              starts_in_days: int = 0, leaf: bool = False) -> tuple[Path, Path]:
    """A CA certificate and its key on disk, made to order (key type, validity, CA or not)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    from cryptography.x509.oid import NameOID

    key = ed25519.Ed25519PrivateKey.generate() if key_type == "ed25519" else \
        ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ops CA")])
    start = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=starts_in_days)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start - datetime.timedelta(minutes=5))
            .not_valid_after(start + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=not leaf, path_length=None), critical=True)
            .sign(key, None if key_type == "ed25519" else hashes.SHA256()))
    cert_path, key_path = tmp_path / "ops-ca.crt", tmp_path / "ops-ca.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path


def _bad_ca(tmp_path: Path, fault: str) -> tuple[Path, Path]:
    if fault == "expired":
        return _ca_files(tmp_path, days=1, starts_in_days=-10)
    if fault == "not-yet-valid":
        return _ca_files(tmp_path, starts_in_days=30)
    if fault == "leaf-as-ca":
        return _ca_files(tmp_path, leaf=True)
    cert, key = _ca_files(tmp_path)
    if fault == "missing-cert":
        cert.unlink()
    elif fault == "world-readable-key":
        key.chmod(0o644)
    elif fault == "symlinked-key":
        real = tmp_path / "real.key"
        key.rename(real)
        key.symlink_to(real)
    elif fault == "mismatched-key":
        (tmp_path / "other").mkdir()
        _, other_key = _ca_files(tmp_path / "other")
        key.write_bytes(other_key.read_bytes())
    return cert, key


FAULTS = {"missing-cert": ("deploykit_tls_ca_cert", "cannot load"),
          "world-readable-key": ("deploykit_tls_ca_key", "accessible to others"),
          "symlinked-key": ("deploykit_tls_ca_key", "is a symlink"),
          "expired": ("deploykit_tls_ca_cert", "expired on"),
          "not-yet-valid": ("deploykit_tls_ca_cert", "is not valid before"),
          "leaf-as-ca": ("deploykit_tls_ca_cert", "no CA certificate"),
          "mismatched-key": ("deploykit_tls_ca_key", "does not belong")}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_ca_fault_is_an_inventory_problem_before_up(
        make_inventory: InventoryFactory, tmp_path: Path, fault: str) -> None:
    """validate, plan and render refuse what up would refuse: exit 3, one line naming the
    setting, nothing written (render's OUT does not appear)."""
    cert, key = _bad_ca(tmp_path, fault)
    root = make_inventory(all={**TLS, "deploykit_tls_ca_cert": str(cert),
                               "deploykit_tls_ca_key": str(key)})
    setting, words = FAULTS[fault]
    for argv in (("validate", "-i", str(root)), ("plan", "-i", str(root)),
                 ("render", "-i", str(root), "-o", str(tmp_path / "out"))):
        result = run_cli(*argv)
        lines = [ln for ln in result.stderr.splitlines() if " — " in ln]
        assert result.returncode == 3 and len(lines) == 1, (argv, result.stderr)
        assert f"{setting}: " in lines[0] and words in lines[0], lines[0]
    assert not (tmp_path / "out").exists() and not (root / ".deploykit-tls").exists()


def test_an_ed25519_ca_issues_the_concentrator_certificates(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    cert, key = _ca_files(tmp_path, key_type="ed25519")
    root = make_inventory(all={**TLS, "deploykit_tls_ca_cert": str(cert),
                               "deploykit_tls_ca_key": str(key)})
    assert run_cli("validate", "-i", str(root)).returncode == 0
    tls.ensure_site_tls(open_site(str(root)))
    issued = _cert((root / ".deploykit-tls" / "rgw1.pem").read_bytes())
    issued.verify_directly_issued_by(_cert(cert.read_bytes()))
