"""More of the bad-inventory corpus (tests/unit/test_bad_inventories.py): values that are
well typed but cannot work or are dangerous: path settings naming system paths or
controller files, ports and addresses that collide, versions and downloads that are not
pinned, operator CAs that cannot vouch for the site, monitoring values and free strings
that break what they are rendered into. Each case runs validate and render through the
real CLI as the main corpus does (exit 3, one line per problem naming file and key,
nothing written); the controls are unusual but valid inventories that must still pass.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

import tests.unit.test_bad_inventories as corpus
from tests.unit.test_bad_inventories import (
    AF,
    ALLF,
    DF,
    RF,
    VF,
    VLLM,
    Case,
    Files,
    Mutation,
    assert_control_validates,
    both,
    gv,
    hosts,
)

H = "hosts.yml"
CONSUL = ("c1", "rgw1", "rgw2")
ALL = ("adm1", "c1", "dns1", "gpu1", "gpu2", "rgw1", "rgw2")


def controller_file(rel: str, key: str, group: str, content: bytes = b"#!/bin/sh\n",
                    mode: int = 0o755) -> Mutation:
    """A file the case creates beside the inventory, named in `key`."""
    def mutate(files: Files, root: Path) -> None:
        target = root.parent / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(mode)
        files[f"group_vars/{group}.yml"][key] = str(target)
    return mutate


def controller_link(rel: str, to: str, key: str, group: str) -> Mutation:
    def mutate(files: Files, root: Path) -> None:
        link = root.parent / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(to)
        files[f"group_vars/{group}.yml"][key] = str(link)
    return mutate


def serving_rgw1(files: Files, root: Path) -> None:
    """rgw1 also serves (a host in both tiers: its consul and vLLM directories meet)."""
    files["hosts.yml"]["all"]["children"]["vllm"]["hosts"]["rgw1"] = {
        "vllm_accelerator": "cuda"}


PATH_CASES = [
    # --- host directories the roles create, chown or delete ------------------------------
    Case("consul-data-dir-etc", gv("all", consul_data_dir="/etc"), ALLF, "consul_data_dir",
         CONSUL),
    Case("consul-data-dir-root", gv("all", consul_data_dir="/"), ALLF, "consul_data_dir",
         CONSUL),
    Case("consul-data-dir-var-lib", gv("rgw", consul_data_dir="/var/lib"), RF,
         "consul_data_dir", ("rgw1", "rgw2")),
    Case("consul-data-dir-double-slash", gv("all", consul_data_dir="//etc"), ALLF,
         "consul_data_dir"),
    Case("consul-data-dir-home", gv("all", consul_data_dir="/home/alice"), ALLF,
         "consul_data_dir", CONSUL),
    Case("consul-data-dir-ssh", gv("all", consul_data_dir="/etc/ssh/consul"), ALLF,
         "consul_data_dir", CONSUL),
    Case("consul-data-dir-other-package", gv("all", consul_data_dir="/var/lib/mysql"), ALLF,
         "consul_data_dir", CONSUL),
    Case("config-dir-tmp", gv("vllm", lmcache_config_dir="/tmp"), VF, "lmcache_config_dir",
         VLLM),
    Case("config-dir-var-tmp", gv("vllm", lmcache_config_dir="/var/tmp/"), VF,
         "lmcache_config_dir", VLLM),
    Case("record-in-tmp", gv("all", deploykit_common_record_path="/tmp/deploykit.json"),
         ALLF, "deploykit_common_record_path", ALL),
    Case("config-dir-usr-local-bin", gv("vllm", lmcache_config_dir="/usr/local/bin"), VF,
         "lmcache_config_dir", VLLM),
    Case("config-dir-systemd", gv("vllm", lmcache_config_dir="/etc/systemd/system"), VF,
         "lmcache_config_dir", VLLM),
    Case("venv-usr", gv("vllm", vllm_venv="/usr"), VF, "vllm_venv", VLLM),
    Case("venv-opt", gv("vllm", vllm_venv="/opt"), VF, "vllm_venv", VLLM),
    Case("disk-path-var-log", gv("vllm", lmcache_mode="disk",
                                  lmcache_disk_path="/var/log/lmcache"), VF,
         "lmcache_disk_path", VLLM),
    Case("consul-data-dir-above-venv", both(serving_rgw1,
                                             gv("all", vllm_venv="/opt/consul/venv")),
         ALLF, "vllm_venv", ("rgw1",)),
    Case("consul-data-dir-is-venv", both(serving_rgw1, gv("rgw", consul_data_dir="/opt/vllm")),
         RF, "consul_data_dir", ("rgw1",)),
    Case("venv-is-config-dir", gv("vllm", vllm_venv="/etc/deploykit"), VF, "vllm_venv",
         VLLM),
    # --- the converge record (replaced, deleted by down) ----------------------------------
    Case("record-etc-passwd", gv("all", deploykit_common_record_path="/etc/passwd"), ALLF,
         "deploykit_common_record_path", ALL),
    Case("record-authorized-keys", gv("all", deploykit_common_record_path=(
        "/root/.ssh/authorized_keys")), ALLF, "deploykit_common_record_path", ALL),
    Case("record-bin", gv("dns", deploykit_common_record_path="/usr/bin/deploykit.json"), DF,
         "deploykit_common_record_path", ("dns1",)),
    Case("record-not-deploykit", gv("all", deploykit_common_record_path="/var/lib/state.json"),
         ALLF, "deploykit_common_record_path", ALL),
    Case("record-dotdot", gv("all", deploykit_common_record_path=(
        "/var/lib/deploykit/../../../etc/passwd")), ALLF, "deploykit_common_record_path"),
    # --- controller binaries copied to the fleet ------------------------------------------
    Case("consul-binary-shadow", gv("all", consul_binary_src="/etc/shadow"), ALLF,
         "consul_binary_src", CONSUL),
    Case("consul-binary-sh", gv("all", consul_binary_src="/bin/sh"), ALLF,
         "consul_binary_src", CONSUL),
    Case("consul-binary-missing", gv("all", consul_binary_src="/nonexistent/consul"), ALLF,
         "consul_binary_src", CONSUL),
    Case("coredns-binary-directory", gv("dns", coredns_binary_src="/usr"), DF,
         "coredns_binary_src", ("dns1",)),
    Case("coredns-binary-not-executable",
         controller_file("bin/coredns", "coredns_binary_src", "dns", mode=0o644), DF,
         "coredns_binary_src", ("dns1",)),
    Case("consul-binary-link-to-shell",
         controller_link("bin/consul", "/bin/sh", "consul_binary_src", "all"), ALLF,
         "consul_binary_src", CONSUL),
    Case("consul-binary-link-to-passwd",
         controller_link("bin/consul", "/etc/passwd", "consul_binary_src", "rgw"), RF,
         "consul_binary_src", ("rgw1", "rgw2")),
    # --- controller directories shipped to the hosts --------------------------------------
    Case("wheel-dir-root", gv("vllm", vllm_wheel_dir="/"), VF, "vllm_wheel_dir", VLLM),
    Case("wheel-dir-etc", gv("vllm", lmcache_wheel_dir="/etc"), VF, "lmcache_wheel_dir",
         VLLM),
    Case("wheel-dir-inventory", gv("vllm", vllm_wheel_dir="."), VF, "vllm_wheel_dir", VLLM),
    Case("wheel-dir-home", gv("vllm", vllm_wheel_dir=str(Path.home())), VF, "vllm_wheel_dir",
         VLLM),
]


def rgw_address(host: str, address: str) -> Mutation:
    return hosts(lambda g: g["rgw"]["hosts"][host].__setitem__("ansible_host", address))


NETWORK_CASES = [
    # --- ports: every listener deploykit renders on one host is distinct ------------------
    Case("vllm-port-on-consul-rpc", both(
        lambda files, root: files["hosts.yml"]["all"]["children"]["vllm"]["hosts"].__setitem__(
            "c1", {"vllm_accelerator": "cuda"}), gv("vllm", vllm_port=8300)), VF, "vllm_port"),
    Case("rgw-frontend-on-serf-lan", gv("rgw", ceph_rgw_frontend_port=8298), RF,
         "ceph_rgw_frontend_port"),
    Case("instances-reach-lmcache-server", gv("vllm", vllm_accelerator_count=8,
                                              vllm_instances=6, vllm_port=6550), VF,
         "vllm_port", VLLM),
    Case("node-exporter-on-vllm-port", both(
        lambda files, root: files["hosts.yml"]["all"]["children"].__setitem__(
            "monitoring", {"hosts": {"mon1": {"ansible_host": "10.0.0.41"}}}),
        gv("vllm", monitoring_node_exporter_port=8000)), VF, "monitoring_node_exporter_port"),
    Case("port-zero", gv("rgw", deploykit_s3_port=0), RF, "deploykit_s3_port"),
    Case("port-too-high", gv("dns", coredns_port=70000), DF, "coredns_port"),
    Case("privileged-vllm-loopback-port", gv("vllm", vllm_loopback_port=443), VF,
         "vllm_loopback_port"),
    # --- addresses -------------------------------------------------------------------------
    Case("rgw-on-loopback", rgw_address("rgw2", "127.0.0.1"), H, "ansible_host", ("rgw2",)),
    Case("rgw-on-broadcast", rgw_address("rgw1", "255.255.255.255"), H, "ansible_host"),
    Case("rgw-on-multicast", rgw_address("rgw1", "224.0.0.1"), H, "ansible_host"),
    Case("rgw-on-unspecified", rgw_address("rgw1", "0.0.0.0"), H, "ansible_host"),
    Case("rgw-on-link-local", rgw_address("rgw1", "169.254.1.1"), H, "ansible_host"),
    Case("rgw-ipv6-only", rgw_address("rgw1", "fd00::11"), H, "ansible_host"),
    Case("consul-http-other-host", gv("all", consul_http_address="10.0.0.21"), ALLF,
         "consul_http_address", ("rgw1", "rgw2")),
    Case("consul-http-multicast", gv("all", consul_http_address="239.1.1.1"), ALLF,
         "consul_http_address", CONSUL),
    Case("dns-upstream-itself", gv("dns", coredns_upstream=["10.0.0.31"]), DF,
         "coredns_upstream", ("dns1",)),
    Case("dns-upstream-unspecified", gv("dns", coredns_upstream=["0.0.0.0:53"]), DF,
         "coredns_upstream", ("dns1",)),
    Case("rgw-networks-miss-gateways", gv("all", ceph_rgw_networks=["192.168.0.0/24"]), ALLF,
         "ceph_rgw_networks", ("rgw1", "rgw2")),
    Case("rgw-networks-ipv6-for-ipv4", gv("rgw", ceph_rgw_networks=["fd00::/64"]), RF,
         "ceph_rgw_networks", ("rgw1", "rgw2")),
]

MIRROR = "http://mirror.example.com/coredns/coredns_{version}_linux_amd64.tgz"
VERSION_CASES = [
    Case("consul-version-latest", gv("all", consul_version="latest"), ALLF, "consul_version",
         ALL),
    Case("coredns-version-empty", gv("dns", coredns_version=""), DF, "coredns_version"),
    Case("coredns-version-wildcard", gv("dns", coredns_version="1.*"), DF, "coredns_version"),
    Case("ceph-version-url", gv("all", deploykit_ceph_version="https://x.example/ceph"), ALLF,
         "deploykit_ceph_version"),
    Case("ceph-version-two-parts", gv("all", deploykit_ceph_version="20.2"), ALLF,
         "deploykit_ceph_version"),
    Case("vllm-version-trailing-space", gv("vllm", vllm_version="0.34.0 "), VF,
         "vllm_version", VLLM),
    Case("lmcache-version-shell", gv("vllm", lmcache_version="0.5.6; curl x|sh"), VF,
         "lmcache_version", VLLM),
    Case("vllm-version-range", gv("vllm", vllm_version=">=0.30"), VF, "vllm_version", VLLM),
    # --- downloads: HTTPS or pinned, no login ---------------------------------------------
    Case("coredns-url-http-unpinned", gv("dns", coredns_binary_url=MIRROR), DF,
         "coredns_binary_url", ("dns1",)),
    Case("consul-url-with-password", gv("all", consul_binary_url=(
        "https://deploy:" + corpus.SECRET + "@mirror.example.com/consul_{version}.zip")), ALLF,
         "consul_binary_url", CONSUL),
    Case("consul-url-ftp", gv("all", consul_binary_url="ftp://mirror.example.com/c.zip"), ALLF,
         "consul_binary_url", CONSUL),
    Case("coredns-url-no-host", gv("dns", coredns_binary_url="https:///coredns.tgz"), DF,
         "coredns_binary_url"),
    Case("coredns-url-shell", gv("dns", coredns_binary_url=(
        "https://mirror.example.com/$(id).tgz")), DF, "coredns_binary_url"),
]

TLS = {"deploykit_s3_tls": True, "deploykit_s3_port": 443, "deploykit_s3_fqdn": "s3.t.test"}


def operator_ca(*, key: str = "ec", digest: str = "sha256", ca: bool = True,
                cert_sign: bool | None = True, days: int = 3650,
                permitted: list[x509.GeneralName] | None = None,
                excluded: list[x509.GeneralName] | None = None,
                missing: tuple[str, ...] = ()) -> Mutation:
    """An operator CA made to order beside the inventory, named in group_vars/all.yml."""
    def mutate(files: Files, root: Path) -> None:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.x509.oid import NameOID

        private = {"ec": lambda: ec.generate_private_key(ec.SECP256R1()),
                   "ec-k1": lambda: ec.generate_private_key(ec.SECP256K1()),
                   "ec-p192": lambda: ec.generate_private_key(ec.SECP192R1()),
                   "rsa1024": lambda: rsa.generate_private_key(65537, 1024),
                   "rsa2048": lambda: rsa.generate_private_key(65537, 2048)}[key]()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ops CA")])
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(private.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=days))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None),
                                  critical=True))
        if cert_sign is not None:
            builder = builder.add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        if permitted or excluded:
            builder = builder.add_extension(x509.NameConstraints(
                permitted_subtrees=permitted, excluded_subtrees=excluded), critical=True)
        cert = builder.sign(private, hashes.SHA256())
        if digest != "sha256":
            cert = resigned(cert, private, digest)
        cert_path, key_path = root.parent / "ops-ca.crt", root.parent / "ops-ca.key"
        if "cert" not in missing:
            cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        if "key" not in missing:
            key_path.write_bytes(private.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption()))
            key_path.chmod(0o600)
        files["group_vars/all.yml"].update(TLS, deploykit_tls_ca_cert=str(cert_path),
                                           deploykit_tls_ca_key=str(key_path))
    return mutate


def _der(tag: int, body: bytes) -> bytes:
    size = len(body)
    length = bytes([size]) if size < 128 else \
        bytes([0x80 | ((size.bit_length() + 7) // 8)]) + size.to_bytes(
            (size.bit_length() + 7) // 8, "big")
    return bytes([tag]) + length + body


def resigned(cert: x509.Certificate, private: Any, digest: str) -> x509.Certificate:
    """`cert` signed again with RSA and SHA-1 or MD5, which cryptography no longer signs
    certificates with (but still signs data with): the algorithm OIDs are swapped in
    the DER (same length), the TBS part signed, the certificate put together again."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    sha256_rsa = bytes.fromhex("2a864886f70d01010b")
    oid = sha256_rsa[:-1] + {"sha1": b"\x05", "md5": b"\x04"}[digest]
    tbs = cert.tbs_certificate_bytes.replace(sha256_rsa, oid)
    signature = private.sign(tbs, padding.PKCS1v15(),
                             {"sha1": hashes.SHA1(), "md5": hashes.MD5()}[digest])
    algorithm = _der(0x30, _der(0x06, oid) + b"\x05\x00")
    return x509.load_der_x509_certificate(
        _der(0x30, tbs + algorithm + _der(0x03, b"\x00" + signature)))


CAK, CAC = "deploykit_tls_ca_key", "deploykit_tls_ca_cert"
DNS, IP = x509.DNSName, x509.IPAddress
CA_CASES = [
    Case("ca-both-files-missing", operator_ca(missing=("cert", "key")), ALLF, CAC,
         also=((ALLF, CAK),)),
    Case("ca-no-cert-sign", operator_ca(cert_sign=False), ALLF, CAC),
    Case("ca-rsa-1024", operator_ca(key="rsa1024"), ALLF, CAC),
    Case("ca-secp256k1", operator_ca(key="ec-k1"), ALLF, CAC),
    Case("ca-sha1", operator_ca(key="rsa2048", digest="sha1"), ALLF, CAC),
    Case("ca-md5", operator_ca(key="rsa2048", digest="md5"), ALLF, CAC),
    Case("ca-expires-before-certificates", operator_ca(days=100), ALLF, CAC),
    Case("ca-constrained-to-another-site", operator_ca(permitted=[DNS("other.test")]), ALLF,
         CAC),
    Case("ca-excludes-the-s3-name", operator_ca(excluded=[DNS("s3.t.test")]), ALLF, CAC),
    Case("ca-constrained-to-other-addresses", operator_ca(permitted=[
        DNS("t.test"), IP(ipaddress.ip_network("192.168.0.0/16"))]), ALLF, CAC),
    Case("ca-leaf-and-key-missing", operator_ca(ca=False, missing=("key",)), ALLF, CAC,
         also=((ALLF, CAK),)),
]

def monitored(files: Files, root: Path) -> None:
    files["hosts.yml"]["all"]["children"]["monitoring"] = {
        "hosts": {"mon1": {"ansible_host": "10.0.0.41"}}}


ALL_MON = (*ALL, "mon1")
STRING_CASES = [
    # --- monitoring values that make an alert impossible ----------------------------------
    Case("scrape-interval-past-rate-window", both(monitored, gv(
        "all", monitoring_scrape_interval="10m")), ALLF, "monitoring_scrape_interval"),
    Case("hit-ratio-for-past-retention", both(monitored, gv(
        "all", monitoring_hit_ratio_for="9999h")), ALLF, "monitoring_hit_ratio_for"),
    Case("router-skew-for-past-retention", both(monitored, gv(
        "all", monitoring_router_skew_for="400h")), ALLF, "monitoring_router_skew_for"),
    Case("router-skew-for-zero", both(monitored, gv(
        "all", monitoring_router_skew_for="0m")), ALLF, "monitoring_router_skew_for"),
    # at 0.5 an even split between two instances would be "skewed"
    Case("router-skew-ratio-even-split", both(monitored, gv(
        "all", monitoring_router_skew_ratio=0.5)), ALLF, "monitoring_router_skew_ratio"),
    Case("rgw-latency-past-haproxy-timeout", both(monitored, gv(
        "all", monitoring_rgw_latency_seconds=600)), ALLF, "monitoring_rgw_latency_seconds"),
    Case("hit-ratio-target-percent", both(monitored, gv(
        "all", monitoring_hit_ratio_target=85)), ALLF, "monitoring_hit_ratio_target"),
    Case("shm-free-negative", both(monitored, gv("all", monitoring_shm_free_ratio=-0.1)),
         ALLF, "monitoring_shm_free_ratio"),
    Case("scrape-interval-bad-syntax", both(monitored, gv(
        "all", monitoring_scrape_interval="15 seconds")), ALLF, "monitoring_scrape_interval"),
    Case("hit-ratio-for-promql-injection", both(monitored, gv(
        "all", monitoring_hit_ratio_for="5m\nlabels: {x: y}")), ALLF,
         "monitoring_hit_ratio_for"),
    Case("consul-check-interval-zero", gv("all", consul_check_interval="0s"), ALLF,
         "consul_check_interval", CONSUL),
    Case("consul-retry-interval-zero", gv("all", consul_retry_interval="0ms"), ALLF,
         "consul_retry_interval", CONSUL),
    # --- free strings, by where they are written ------------------------------------------
    Case("served-name-with-quote-and-brace", gv("vllm", vllm_served_model_name='m"} x{'), VF,
         "vllm_served_model_name", VLLM),
    Case("served-name-with-space", gv("vllm", vllm_served_model_name="my model"), VF,
         "vllm_served_model_name", VLLM),
    Case("model-id-with-shell", gv("all", vllm_model="Qwen/Qwen3-32B;id"), ALLF, "vllm_model"),
    Case("mon-host-ini-comment", gv("all", deploykit_ceph_mon_host="10.0.0.1 ; #x"), ALLF,
         "deploykit_ceph_mon_host"),
    Case("service-id-path", gv("all", ceph_rgw_service_id="std/../x"), ALLF,
         "ceph_rgw_service_id"),
    Case("display-name-jinja-and-quotes", gv("ceph_admin", ceph_rgw_s3_display_name=(
        'KV "cache" {x}')), AF, "ceph_rgw_s3_display_name", ("adm1",)),
    Case("nixl-backend-yaml", gv("vllm", lmcache_nixl_backend="OBJ: {a"), VF,
         "lmcache_nixl_backend", VLLM),
    Case("dtype-argv", gv("vllm", vllm_dtype="auto --trust-remote-code"), VF, "vllm_dtype",
         VLLM),
]

CASES = PATH_CASES + NETWORK_CASES + VERSION_CASES + CA_CASES + STRING_CASES


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_value(case: Case, tmp_path: Path) -> None:
    corpus.test_bad_inventory(case, tmp_path)  # the main corpus's checks, unchanged


def executable(rel: str, key: str, group: str) -> Mutation:
    return controller_file(rel, key, group)


CONTROLS: list[tuple[str, Mutation]] = [
    ("private-dirs-named-for-their-service", both(
        gv("all", consul_data_dir="/var/lib/consul",
           deploykit_common_record_path="/var/lib/deploykit-prod/converged.json"),
        gv("vllm", lmcache_config_dir="/etc/deploykit-prod", vllm_venv="/srv/vllm/venv",
           vllm_models_dir="/data/models", lmcache_mode="disk",
           lmcache_disk_path="/mnt/nvme0/lmcache"))),
    ("venv-in-a-user-home", gv("vllm", vllm_venv="/home/vllm/venv")),
    ("dirs-under-srv", both(gv("all", consul_data_dir="/srv/consul-data"), gv(
        "vllm", lmcache_config_dir="/srv/kv/etc", vllm_models_dir="/var/lib/huggingface"))),
    ("venv-an-existing-conda", gv("vllm", vllm_venv="/opt/conda",
                                  vllm_models_dir="/tmp/proof/models")),
    ("binaries-from-the-controller", both(
        executable("cache/consul-1.16.3/consul", "consul_binary_src", "all"),
        executable("cache/coredns-1.12.1-abc", "coredns_binary_src", "dns"))),
    ("binary-link-to-a-versioned-file", both(
        executable("cache/consul-1.16.3", "consul_binary_src", "all"),
        lambda files, root: (root.parent / "cache" / "consul").symlink_to(
            root.parent / "cache" / "consul-1.16.3") or files["group_vars/all.yml"].update(
                consul_binary_src=str(root.parent / "cache" / "consul")))),
    ("rgw-networks-holding-the-gateways", gv("all", ceph_rgw_networks=[
        "10.0.0.0/24", "fd00::/64"], consul_http_address="0.0.0.0")),
    ("dns-upstreams-outside", gv("dns", coredns_upstream=["192.0.2.53", "[2001:db8::53]:53"])),
    ("downloads-pinned-or-https", both(
        gv("dns", coredns_binary_url=MIRROR, coredns_archive_sha256="a" * 64),
        gv("all", consul_binary_url="https://mirror.example.com/consul/{version}/c.zip",
           consul_archive_sha256="b" * 64, lmcache_version="0.5.6"))),
    ("ca-constrained-to-the-site", operator_ca(key="rsa2048", permitted=[
        DNS("s3.t.test"), IP(ipaddress.ip_network("10.0.0.0/24"))])),
    ("ca-without-key-usage", operator_ca(cert_sign=None)),
    ("monitoring-at-its-limits", both(monitored, gv(
        "all", monitoring_scrape_interval="5m", monitoring_hit_ratio_for="360h",
        monitoring_rgw_latency_seconds=299, monitoring_hit_ratio_target=1,
        consul_check_interval="2s", consul_check_timeout="2s",
        vllm_served_model_name="org/model-v1.5:latest", deploykit_ceph_mon_host=(
            "[v2:10.0.0.1:3300/0,v1:10.0.0.1:6789/0] [v2:10.0.0.2:3300/0]")))),
    ("wheel-dir-beside-the-inventory", lambda files, root: (
        (root.parent / "wheels").mkdir() or files["group_vars/vllm.yml"].update(
            vllm_wheel_dir=str(root.parent / "wheels"), lmcache_wheel_dir="../wheels"))),
]


@pytest.mark.parametrize(("name", "mutate"), CONTROLS, ids=[c[0] for c in CONTROLS])
def test_control_passes(name: str, mutate: Mutation, tmp_path: Path) -> None:
    assert_control_validates(mutate, tmp_path)


@pytest.mark.parametrize("settings", [
    # (the longest `for` allowed, 360h, is left out: its rule test series takes promtool
    # 45 s; the check that matters for it is the retention rule's)
    {"monitoring_scrape_interval": "5m", "monitoring_hit_ratio_for": "6h",
     "monitoring_rgw_latency_seconds": 299, "monitoring_hit_ratio_target": 1,
     "monitoring_shm_free_ratio": 0.99, "vllm_served_model_name": "org/model-v1.5:latest"},
    {"monitoring_scrape_interval": "1s", "monitoring_hit_ratio_for": "1s",
     "monitoring_rgw_latency_seconds": 0.001, "monitoring_hit_ratio_target": 0.001,
     "monitoring_shm_free_ratio": 0.001},
], ids=["upper-limits", "lower-limits"])
def test_values_at_the_limits_render_what_promtool_accepts(
        make_inventory: Any, tmp_path: Path, settings: dict[str, Any]) -> None:
    """What the rules let through renders rules and a config Prometheus's own promtool
    accepts, and each alert still fires on its test series (they would not parse, or
    never fire, past the limits)."""
    from tests.unit.test_monitoring import promtool, site_of, write_cluster

    site = site_of(make_inventory, **settings)
    directory = write_cluster(site, tmp_path / "out")
    for args in (("check", "rules", "rules.yml"), ("test", "rules", "rules.test.yml"),
                 ("check", "config", "prometheus.yml")):
        result = promtool(*args, cwd=directory)
        assert result.returncode == 0, (args, result.stdout + result.stderr)


def test_cases_named_once() -> None:
    names = [c.name for c in CASES] + [c.name for c in corpus.CASES]
    assert len(names) == len(set(names))
    assert os.sep == "/"
    assert hosts  # the helpers stay importable for further cases


@pytest.mark.parametrize(("path", "refused"), [
    ("/", True), ("//etc", True), ("/etc/", True), ("/etc/../etc", True), ("/usr/local", True),
    ("/usr/local/bin", True), ("/var/lib", True), ("/var/lib/mysql", True),
    ("/var/lib/dpkg/consul", True), ("/etc/ssh/consul", True), ("/proc/1", True),
    ("/home/alice", True), ("/root/.ssh/consul", True), ("/etc/consul.d", True),
    ("/opt", True), ("/opt/other", True), ("/mnt", True), ("/srv", True),
    ("/opt/consul", False), ("/var/lib/consul", False), ("/etc/deploykit", False),
    ("/data/consul", False), ("/srv/anything", False), ("/mnt/nvme0/x", False),
    ("/opt/hashicorp/consul", False), ("/tmp/dk-proof-1/x", False),
])
def test_which_directories_a_role_may_own(path: str, refused: bool) -> None:
    """The rule behind every private directory setting, normalising as the kernel does."""
    from deploy_kit.config.rules_paths import system_path_problem

    assert (system_path_problem(path) is not None) == refused, system_path_problem(path)
