"""A red-team corpus for the bad-inventory checks: new spellings, settings, files and
combinations of the 13 defect classes of the 2026-12-06 audit
(review-2026-12-06/reliability.md §2), written as the author of a hidden corpus would, plus
controls an ordinary operator writes that must pass.

Names start with the class number (`c4-` = templating in settings). Bad cases run validate and
render through the real CLI (exit 3, one line per problem naming file and key with a hint,
nothing written, no secret echoed); controls must give exit 0 for both.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from tests.conftest import VAULT_PASSWORD, encrypt_vault
from tests.unit.test_bad_inventories import (
    SECRET,
    VLLM,
    Case,
    Files,
    Mutation,
    both,
    gv,
    hosts,
    raw,
    rename_host,
    set_host,
)
from tests.unit.test_bad_inventories_ansible_view import as_ini, drop, run_case, script
from tests.unit.test_bad_inventories_values import CAC, CAK, TLS

H = "hosts.yml"
ALLF, VF, RF, DF = ("group_vars/all.yml", "group_vars/vllm.yml", "group_vars/rgw.yml",
                    "group_vars/dns.yml")
FAST = {"DEPLOYKIT_INVENTORY_TIMEOUT": "5"}


def host_var(host: str, **values: Any) -> Mutation:
    """host vars written in hosts.yml for `host` (in whatever group lists it)."""
    def fn(g: dict[str, Any]) -> None:
        for group in g.values():
            if host in (group.get("hosts") or {}):
                group["hosts"][host].update(values)
    return hosts(fn)


def add_host(group: str, name: str, **values: Any) -> Mutation:
    return hosts(lambda g: g[group]["hosts"].__setitem__(name, values))


def vllm_children(files: Files, root: Path) -> None:
    """The serving hosts in two child groups, as the shipped example has them."""
    g = files[H]["all"]["children"]
    members = g["vllm"].pop("hosts")
    g["vllm"]["children"] = {"vllm_cuda": {"hosts": {"gpu1": members["gpu1"]}},
                             "vllm_rocm": {"hosts": {"gpu2": members["gpu2"]}}}


def monitored(files: Files, root: Path) -> None:
    files[H]["all"]["children"]["monitoring"] = {"hosts": {"mon1": {"ansible_host":
                                                                     "10.0.0.41"}}}



def ca(*, before_days: float = -1, after_days: float = 3650, key_mode: int = 0o600,
       passphrase: bytes | None = None, other_key: bool = False, link: bool = False,
       dns_only: str | None = None) -> Mutation:
    """An operator CA beside the inventory with one thing changed (class 12)."""
    def mutate(files: Files, root: Path) -> None:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        private = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ops CA")])
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(private.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now + datetime.timedelta(days=before_days))
                   .not_valid_after(now + datetime.timedelta(days=after_days))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), True))
        if dns_only:
            builder = builder.add_extension(x509.NameConstraints(
                permitted_subtrees=[x509.DNSName(dns_only)], excluded_subtrees=None), True)
        cert = builder.sign(private, hashes.SHA256())
        signer = ec.generate_private_key(ec.SECP256R1()) if other_key else private
        crypt = serialization.BestAvailableEncryption(passphrase) if passphrase else \
            serialization.NoEncryption()
        cert_path, key_path = root.parent / "ops-ca.crt", root.parent / "ops-ca.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        target = root.parent / "pki" / "ca.key" if link else key_path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(signer.private_bytes(serialization.Encoding.PEM,
                                                serialization.PrivateFormat.PKCS8, crypt))
        target.chmod(key_mode)
        if link:
            key_path.symlink_to(target)
        files[ALLF].update(TLS, deploykit_tls_ca_cert=str(cert_path),
                           deploykit_tls_ca_key=str(key_path))
    return mutate



def whole_file_vault(files: Files, root: Path) -> None:
    """group_vars/all/ as `ansible-vault encrypt` leaves it: a vaulted file of vault_*
    values, referenced from a plain one; the password file beside the inventory."""
    files.pop(ALLF)
    files["group_vars/all/vault.yml"] = encrypt_vault("vault_api_key: sk-" + SECRET + "\n")
    files["group_vars/all/main.yml"] = "vllm_api_key: '{{ vault_api_key }}'\n"
    (root.parent / "vault-pass").write_text(VAULT_PASSWORD + "\n")


LISTING_BAD = ('{"vllm": {"hosts": ["gpu9"]}, "_meta": {"hostvars": {"gpu9": '
               '{"ansible_host": "10.0.1.9", "vllm_accelerator": "cuda", '
               '"vllm_port": 70000}}}}')

CASES = [
    # --- class 1: the files Ansible reads ------------------------------------------------
    Case("c1-group-vars-yaml-extension", both(drop(VF), raw("group_vars/vllm.yaml",
                                                           "vllm_port: 70000\n")),
         "group_vars/vllm.yaml", "vllm_port", VLLM),
    Case("c1-host-vars-json", raw("host_vars/gpu1.json", '{"vllm_port": 70000}\n'),
         "host_vars/gpu1.json", "vllm_port", ("gpu1",)),
    Case("c1-host-vars-nested-directory", raw("host_vars/gpu2/net/ports.yml",
                                              "vllm_port: 70000\n"),
         "host_vars/gpu2/net/ports.yml", "vllm_port", ("gpu2",)),
    Case("c1-source-in-subdirectory", raw("extra/hosts.yml", (
        "all:\n  children:\n    vllm:\n      hosts:\n        gpu9: {ansible_host: 10.0.1.9, "
        "vllm_accelerator: cuda, vllm_port: 70000}\n")), "extra/hosts.yml", "vllm_port"),
    Case("c1-json-inventory-source", raw("more.json", (
        '{"all": {"children": {"vllm": {"hosts": {"gpu9": {"ansible_host": "10.0.1.9", '
        '"vllm_accelerator": "cuda", "vllm_port": 70000}}}}}}\n')), "more.json", "vllm_port"),
    Case("c1-ini-group-vars-only", raw("extra.ini", "[vllm:vars]\nvllm_port=70000\n"),
         "extra.ini", "vllm_port"),
    Case("c1-group-vars-all-dir-deep", raw("group_vars/all/site/ports.yaml",
                                           "deploykit_s3_port: 70000\n"),
         "group_vars/all/site/ports.yaml", "deploykit_s3_port"),
    # --- class 2: entries that apply to nothing ------------------------------------------
    Case("c2-host-vars-case-differs", raw("host_vars/GPU1.yml", "vllm_port: 9000\n"),
         "host_vars/GPU1.yml", "vllm_port"),
    Case("c2-group-vars-missing-child", raw("group_vars/vllm_cuda.yml",
                                            "vllm_gpu_memory_utilization: 0.8\n"),
         "group_vars/vllm_cuda.yml", "vllm_gpu_memory_utilization"),
    Case("c2-group-vars-plural", raw("group_vars/consul_server.yml",
                                     "consul_bootstrap_expect: 1\n"),
         "group_vars/consul_server.yml", "consul_bootstrap_expect"),
    Case("c2-host-vars-ansible-key-unknown-host", raw("host_vars/rgw3.yml",
                                                      "ansible_user: deploy\n"),
         "host_vars/rgw3.yml", "ansible_user"),
    Case("c2-rgw-setting-in-host-vars-of-gpu", raw("host_vars/gpu1.yml",
                                                   "ceph_rgw_count_per_host: 2\n"),
         "host_vars/gpu1.yml", "ceph_rgw_count_per_host", ("gpu1",)),
    Case("c2-coredns-setting-on-vllm-group", gv("vllm", coredns_port=5353), VF,
         "coredns_port"),
    # --- class 3: host identity ----------------------------------------------------------
    Case("c3-host-named-monitoring", rename_host("dns", "dns1", "monitoring"), H,
         "monitoring"),
    Case("c3-host-named-ungrouped", rename_host("vllm", "gpu2", "ungrouped"), H, "ungrouped"),
    # an IPv4-mapped IPv6 address is refused before identity compares it (no host reaches
    # a serving host at ::ffff:a.b.c.d): one line, naming the host that wrote it
    Case("c3-ipv4-mapped-twin", set_host("vllm", "gpu2", {"ansible_host": "::ffff:10.0.1.1",
                                                          "vllm_accelerator": "rocm"}), H,
         "ansible_host", ("gpu2",)),
    Case("c3-dns-names-differ-by-case", both(
        host_var("gpu1", ansible_host="GPU.example.com"),
        host_var("gpu2", ansible_host="gpu.example.com")), H, "ansible_host",
         ("gpu1", "gpu2")),
    Case("c3-default-port-spelt-out", both(
        host_var("gpu2", ansible_host="10.0.1.1", ansible_port=22)), H, "ansible_host",
         ("gpu1", "gpu2")),
    Case("c3-host-named-by-address", add_host("dns", "10.0.0.11"), H, "ansible_host",
         ("rgw1", "10.0.0.11")),
    # local hosts are told apart by their service address only (a loopback test site):
    # two with one address are one machine
    Case("c3-two-local-hosts-one-address", both(
        host_var("adm1", ansible_connection="local"),
        host_var("dns1", ansible_connection="local", ansible_host="10.0.0.10")), H,
         "ansible_host", ("adm1", "dns1")),
    # --- class 4: templating in settings -------------------------------------------------
    Case("c4-lookup-file", gv("vllm", vllm_model="{{ lookup('file', '/etc/hostname') }}"),
         VF, "vllm_model", VLLM),
    Case("c4-hostvars-reference", gv("vllm", vllm_port="{{ hostvars['gpu1'].vllm_port }}"),
         VF, "vllm_port", VLLM),
    Case("c4-raw-block", gv("vllm", vllm_served_model_name="{% raw %}x{% endraw %}"), VF,
         "vllm_served_model_name", VLLM),
    Case("c4-template-in-extra-config-key", gv("vllm", lmcache_extra_config={
        "{{ key }}": 1}), VF, "lmcache_extra_config", VLLM),
    Case("c4-reference-reaches-bad-port", both(gv("all", site_port=70000),
                                               gv("vllm", vllm_port="{{site_port}}")),
         VF, "vllm_port", VLLM),
    Case("c4-reference-in-list-element", gv("vllm", vllm_extra_args=[
        "--max-num-seqs", "{{ seqs | int }}"]), VF, "vllm_extra_args", VLLM),
    Case("c4-ini-template", both(as_ini, raw("group_vars/vllm.yml",
                                             "vllm_port: \"{{ 8000 + 1 }}\"\n")),
         VF, "vllm_port", VLLM),
    Case("c4-reference-undefined-for-one-host", both(
        raw("host_vars/gpu1.yml", "site_model: Qwen/Qwen3-8B\n"),
        gv("vllm", vllm_model="{{ site_model }}")), VF, "vllm_model", ("gpu2",)),
    Case("c4-whitespace-control", gv("vllm", vllm_served_model_name="{{- name -}}"), VF,
         "vllm_served_model_name", VLLM),
    Case("c4-self-reference", gv("vllm", vllm_port="{{ vllm_port }}"), VF, "vllm_port",
         VLLM),
    # --- class 5: pass-through knobs -----------------------------------------------------
    Case("c5-extra-arg-gpu-mem", gv("vllm", vllm_extra_args=[
        "--gpu-memory-utilization=0.5"]), VF, "vllm_extra_args", VLLM),
    Case("c5-extra-arg-kv-transfer-json", gv("vllm", vllm_extra_args=[
        "--kv-transfer-config", '{"kv_connector": "NixlConnector"}']), VF, "vllm_extra_args",
         VLLM),
    Case("c5-extra-arg-served-name", gv("vllm", vllm_extra_args=["--served-model-name", "x"]),
         VF, "vllm_extra_args", VLLM),
    Case("c5-extra-arg-kv-cache-dtype", gv("vllm", vllm_extra_args=["--kv-cache-dtype",
                                                                     "fp8"]),
         VF, "vllm_extra_args", VLLM),
    Case("c5-extra-env-config-file", gv("vllm", vllm_extra_env={
        "LMCACHE_CONFIG_FILE": "/tmp/mine.yaml"}), VF, "vllm_extra_env", VLLM),
    Case("c5-extra-env-remote-serde", gv("vllm", vllm_extra_env={
        "LMCACHE_REMOTE_SERDE": "naive"}), VF, "vllm_extra_env", VLLM),
    Case("c5-extra-config-hash-algorithm", gv("vllm", lmcache_extra_config={
        "pre_caching_hash_algorithm": "builtin"}), VF, "lmcache_extra_config"),
    Case("c5-kv-transfer-extra-connector", gv("vllm", vllm_kv_transfer_extra={
        "kv_connector": "SharedStorageConnector"}), VF, "vllm_kv_transfer_extra", VLLM),
    Case("c5-extra-arg-kv-transfer-equals-json", gv("vllm", vllm_extra_args=[
        '--kv-transfer-config={"kv_role": "kv_producer"}']), VF, "vllm_extra_args", VLLM),
    Case("c5-extra-arg-host", gv("vllm", vllm_extra_args=["--host", "127.0.0.1"]), VF,
         "vllm_extra_args", VLLM),
    Case("c5-extra-arg-api-key-literal", gv("vllm", vllm_extra_args=["--api-key", "k"]), VF,
         "vllm_extra_args", VLLM),
    # --- class 6: fleet agreement --------------------------------------------------------
    Case("c6-model-in-hosts-yml", host_var("gpu2", vllm_model="Qwen/Qwen3-4B"), H,
         "vllm_model", ("gpu2",)),
    Case("c6-chunk-size-host-vars", raw("host_vars/gpu2.yml", "lmcache_chunk_size: 512\n"),
         "host_vars/gpu2.yml", "lmcache_chunk_size", ("gpu2",)),
    Case("c6-hash-seed-child-group", both(vllm_children, raw(
        "group_vars/vllm_rocm.yml", "vllm_python_hash_seed: 1\n")),
         "group_vars/vllm_rocm.yml", "vllm_python_hash_seed", ("gpu2",)),
    Case("c6-hash-algorithm-per-host", raw("host_vars/gpu1.yml",
                                           "lmcache_pre_caching_hash_algorithm: builtin\n"),
         "host_vars/gpu1.yml", "lmcache_pre_caching_hash_algorithm", ("gpu1",)),
    Case("c6-tokenizer-one-host", raw("host_vars/gpu1.yml",
                                      "vllm_extra_args: ['--tokenizer', 'other/tok']\n"),
         "host_vars/gpu1.yml", "vllm_extra_args", ("gpu1",)),
    Case("c6-trust-remote-code-one-host", raw("host_vars/gpu2.yml",
                                              "vllm_extra_args: ['--trust-remote-code']\n"),
         "host_vars/gpu2.yml", "vllm_extra_args", ("gpu2",)),
    Case("c6-kv-dtype-one-host", host_var("gpu1", vllm_kv_cache_dtype="fp8"), H,
         "vllm_kv_cache_dtype", ("gpu1",)),
    Case("c6-rope-per-child-group", both(vllm_children, raw(
        "group_vars/vllm_cuda.yml", "vllm_rope_scaling: {rope_type: yarn, factor: 4.0}\n")),
         "group_vars/vllm_cuda.yml", "vllm_rope_scaling", ("gpu1",)),
    # --- class 7: addresses and ports ----------------------------------------------------
    # (8301 is no clash on a serving host: it runs no Consul agent; a host in rgw does)
    Case("c7-vllm-on-serf-port-of-a-gateway", both(
        hosts(lambda g: g["vllm"]["hosts"].__setitem__("rgw1", {"vllm_accelerator": "cuda"})),
        raw("host_vars/rgw1.yml", "vllm_port: 8301\n")), "host_vars/rgw1.yml", "vllm_port",
         ("rgw1",)),
    Case("c7-lmcache-server-on-vllm-port", gv("vllm", lmcache_topology="server",
                                              lmcache_server_port=8000), VF, "lmcache_server_port"),
    Case("c7-coredns-metrics-on-health", gv("dns", coredns_metrics_port=8080,
                                            coredns_health_port=8080), DF, "coredns_"),
    Case("c7-consul-http-on-dns-port", gv("all", consul_http_port=8600), ALLF,
         "consul_http_port"),
    Case("c7-consul-server-loopback", add_host("consul_servers", "c2",
                                               ansible_host="127.0.0.1"), H, "ansible_host",
         ("c2",)),
    Case("c7-serving-broadcast", raw("host_vars/gpu1.yml",
                                     "deploykit_address: 255.255.255.255\n"),
         "host_vars/gpu1.yml", "deploykit_address", ("gpu1",)),
    # both ports are set: the clash names one of them (deploykit_s3_port)
    Case("c7-frontend-on-s3-port", both(gv("all", deploykit_s3_port=8080),
                                        gv("rgw", ceph_rgw_frontend_port=8080)), ALLF,
         "deploykit_s3_port"),
    Case("c7-mgr-target-port-out-of-range", gv("all", monitoring_ceph_mgr_targets=[
        "10.0.0.10:99999"]), ALLF, "monitoring_ceph_mgr_targets"),
    # --- class 8: path settings ----------------------------------------------------------
    # (vllm_models_dir is used only for a staged local model: with a hub model it is inert)
    Case("c8-config-dir-in-boot", gv("vllm", lmcache_config_dir="/boot/lmcache"), VF,
         "lmcache_config_dir", VLLM),
    Case("c8-venv-usr-local", gv("vllm", vllm_venv="/usr/local"), VF, "vllm_venv", VLLM),
    Case("c8-record-root-ssh", gv("all", deploykit_common_record_path=(
        "/root/.ssh/deploykit.json")), ALLF, "deploykit_common_record_path"),
    Case("c8-record-tmp", gv("all", deploykit_common_record_path="/tmp/deploykit.json"),
         ALLF, "deploykit_common_record_path"),
    Case("c8-config-dir-etc-ssl", gv("vllm", lmcache_config_dir="/etc/ssl/deploykit"), VF,
         "lmcache_config_dir", VLLM),
    Case("c8-consul-data-home-host-vars", raw("host_vars/c1.yml", "consul_data_dir: /home\n"),
         "host_vars/c1.yml", "consul_data_dir", ("c1",)),
    Case("c8-venv-ceph-tree", gv("vllm", vllm_venv="/var/lib/ceph/venv"), VF, "vllm_venv",
         VLLM),
    Case("c8-venv-not-normalised", gv("vllm", vllm_venv="/opt/conda/../../usr"), VF,
         "vllm_venv", VLLM),
    # --- class 9: downloads and versions -------------------------------------------------
    Case("c9-consul-version-two-parts", gv("all", consul_version="1.16"), ALLF,
         "consul_version"),
    Case("c9-coredns-version-v-prefix", gv("dns", coredns_version="v1.12.1"), DF,
         "coredns_version", ("dns1",)),
    Case("c9-url-scheme-relative", gv("all", consul_binary_url="//mirror.example.com/c.zip"),
         ALLF, "consul_binary_url"),
    Case("c9-url-http-uppercase", gv("dns", coredns_binary_url=(
        "HTTP://mirror.example.com/coredns.tgz")), DF, "coredns_binary_url", ("dns1",)),
    Case("c9-sha-not-hex", gv("dns", coredns_binary_url="http://m.example.com/c.tgz",
                              coredns_archive_sha256="z" * 64), DF, "coredns_archive_sha256",
         ("dns1",)),
    Case("c9-vllm-version-star", gv("vllm", vllm_version="0.34.*"), VF, "vllm_version",
         VLLM),
    Case("c9-lmcache-version-trailing-space", gv("vllm", lmcache_version="0.5.6 "), VF,
         "lmcache_version", VLLM),
    # --- class 10: YAML, number and Unicode edge values ----------------------------------
    Case("c10-sexagesimal-port", raw(VF, "vllm_port: 1:20\n"), VF, "vllm_port", VLLM),
    Case("c10-octal-port", raw(VF, "vllm_port: 017500\n"), VF, "vllm_port", VLLM),
    # gpu1 sets its own utilisation (tests/conftest.py BASE_HOSTS): the group's reaches gpu2
    Case("c10-percent-utilisation", gv("vllm", vllm_gpu_memory_utilization="90%"), VF,
         "vllm_gpu_memory_utilization", ("gpu2",)),
    Case("c10-y-as-bool", raw(VF, "vllm_enforce_eager: y\n"), VF, "vllm_enforce_eager",
         VLLM),
    Case("c10-nbsp-in-model", gv("vllm", vllm_model="Qwen/Qwen3-8B\u00a0"), VF, "vllm_model",
         VLLM),
    Case("c10-null-model", raw(VF, "vllm_model: ~\n"), VF, "vllm_model", VLLM),
    Case("c10-negative-chunk", gv("vllm", lmcache_chunk_size=-256), VF, "lmcache_chunk_size",
         VLLM),
    Case("c10-tab-in-display-name", gv("all", ceph_rgw_s3_display_name="kv\tcache"), ALLF,
         "ceph_rgw_s3_display_name"),
    Case("c10-cyrillic-key", raw(VF, "vllm_p\u043ert: 8001\n"), VF, "vllm_p"),
    # --- class 11: scripts and INI inventories -------------------------------------------
    Case("c11-ini-privileged-port", both(as_ini, raw("hosts.ini", (
        "[ceph_admin]\nadm1 ansible_host=10.0.0.10\n[rgw]\nrgw1 ansible_host=10.0.0.11\n"
        "rgw2 ansible_host=10.0.0.12\n[consul_servers]\nc1 ansible_host=10.0.0.21\n[dns]\n"
        "dns1 ansible_host=10.0.0.31\n[vllm]\ngpu1 ansible_host=10.0.1.1 "
        "vllm_accelerator=cuda vllm_port=70000\ngpu2 ansible_host=10.0.1.2 "
        "vllm_accelerator=rocm\n"))), "hosts.ini", "vllm_port", ("gpu1",)),
    Case("c11-ini-group-vars-section", both(as_ini, lambda files, root: files.__setitem__(
        "hosts.ini", files["hosts.ini"] + "\n[vllm:vars]\nvllm_enforce_eager=maybe\n")),
         "hosts.ini", "vllm_enforce_eager"),
    Case("c11-script-bad-hostvar", both(drop(H), script("inventory.py",
                                                       f"#!/bin/sh\necho '{LISTING_BAD}'\n")),
         "inventory.py", "vllm_port", env=FAST),
    Case("c11-script-not-json", both(drop(H), script("inventory.sh",
                                                    "#!/bin/sh\necho 'hello'\n")),
         "inventory.sh", "(inventory source)", env=FAST),
    Case("c11-script-background-child", both(drop(H), script(
        "inventory.sh", "#!/bin/sh\n(sleep 120 &)\necho '{}'\n")), "inv", "(inventory)",
         env=FAST, bounded=True),
    Case("c11-script-reads-stdin", both(drop(H), script(
        "inventory.sh", "#!/bin/sh\ncat >/dev/null\necho '{}'\n")), "inv", "(inventory)",
         env=FAST, bounded=True),
    Case("c11-ini-jinja-host-var", both(as_ini, lambda files, root: files.__setitem__(
        "hosts.ini", files["hosts.ini"].replace(
            "gpu2 ansible_host=10.0.1.2", "gpu2 ansible_host=10.0.1.2 vllm_port='{{ 80 }}'"))),
         "hosts.ini", "(inventory source)"),
    # --- class 12: operator CA (files made to order) -------------------------------------
    Case("c12-ca-expired", ca(before_days=-400, after_days=-1), ALLF, CAC),
    Case("c12-ca-not-yet-valid", ca(before_days=2), ALLF, CAC),
    Case("c12-ca-key-group-readable", ca(key_mode=0o640), ALLF, CAK),
    Case("c12-ca-key-of-another-ca", ca(other_key=True), ALLF, CAK),
    Case("c12-ca-key-is-a-link", ca(link=True), ALLF, CAK),
    Case("c12-ca-key-with-passphrase", ca(passphrase=b"hunter22"), ALLF, CAK),
    Case("c12-ca-dns-constraint-other-site", ca(dns_only="other.test"), ALLF, CAC),
    # --- class 13: monitoring and free strings -------------------------------------------
    Case("c13-alertmanager-shell", both(monitored, gv(
        "all", monitoring_alertmanager="http://am:9093; rm -rf /")), ALLF,
         "monitoring_alertmanager"),
    Case("c13-scrape-interval-zero", both(monitored, gv(
        "all", monitoring_scrape_interval="0s")), ALLF, "monitoring_scrape_interval"),
    Case("c13-served-name-hash", gv("vllm", vllm_served_model_name="model#1"), VF,
         "vllm_served_model_name", VLLM),
    Case("c13-zone-space", gv("all", ceph_rgw_realm="r", ceph_rgw_zonegroup="g",
                              ceph_rgw_zone="my zone"), ALLF, "ceph_rgw_zone"),
    Case("c13-model-with-flag", gv("vllm", vllm_model="Qwen/Qwen3-8B --trust-remote-code"),
         VF, "vllm_model", VLLM),
    Case("c13-accelerator-model-quote", gv("vllm", vllm_accelerator_model='h100"'), VF,
         "vllm_accelerator_model", VLLM),
]

VAULTED = encrypt_vault("sk-" + SECRET)

CONTROLS = [
    Case("ok-example-layout-children", both(vllm_children, raw(
        "group_vars/vllm_cuda.yml", "vllm_max_model_len: 32768\n")), "", ""),
    Case("ok-ini-ordinary", both(as_ini, lambda files, root: files.__setitem__(
        "hosts.ini", files["hosts.ini"] + "\n[all:vars]\nansible_user=deploy\n"
        "ansible_become=true\n")), "", ""),
    Case("ok-group-vars-directories", both(drop(VF), raw(
        "group_vars/vllm/10-serving.yml", "vllm_port: 8100\n"), raw(
        "group_vars/vllm/20-cache.yaml", "lmcache_chunk_size: 512\n"), raw(
        "group_vars/vllm/README.md", "# notes\n")), "", ""),
    Case("ok-unsafe-own-var", raw(ALLF, "motd: !unsafe 'deployed {{ by }} ops'\n"), "", ""),
    Case("ok-host-vars-real-host", raw("host_vars/gpu1.yml",
                                       "vllm_max_model_len: 32768\n"), "", ""),
    Case("ok-own-vars-for-empty-child", both(
        hosts(lambda g: g.__setitem__("spare", {"hosts": {}})),
        raw("group_vars/spare.yml", "team: infra\n")), "", ""),
    Case("ok-plain-reference", both(gv("all", site_model="Qwen/Qwen3-8B"),
                                    gv("vllm", vllm_model="{{ site_model }}")), "", ""),
    Case("ok-extra-non-deploykit-vars", gv("all", ntp_servers=["0.pool.ntp.org"],
                                          owner={"team": "ml", "pager": "x"}), "", ""),
    Case("ok-ipv6-serving-hosts", both(
        host_var("gpu1", ansible_host="2001:db8::11"),
        host_var("gpu2", ansible_host="2001:db8::12")), "", ""),
    Case("ok-dns-name-hosts", both(
        host_var("gpu1", ansible_host="gpu1.prod.example.com"),
        host_var("gpu2", ansible_host="gpu2.prod.example.com")), "", ""),
    Case("ok-vaulted-api-key", raw("group_vars/vllm.yml",
                                   "vllm_api_key: !vault |\n" + "".join(
                                       f"  {ln}\n" for ln in VAULTED.splitlines())), "", ""),
    Case("ok-proxy-command", gv("all", ansible_ssh_common_args=(
        "-o ProxyCommand='ssh -W %h:%p bastion.example.com'")), "", ""),
    Case("ok-become-password-reference", both(
        raw("group_vars/all.yml", "vault_become: !vault |\n" + "".join(
            f"  {ln}\n" for ln in encrypt_vault("pw").splitlines()) +
            "ansible_become_password: '{{ vault_become }}'\n")), "", ""),
    Case("ok-genuine-extra-knobs", gv("vllm", vllm_extra_args=[
        "--max-num-seqs", "128", "--disable-log-requests"], vllm_extra_env={
        "HF_HUB_OFFLINE": "1", "NCCL_DEBUG": "WARN"}), "", ""),
    Case("ok-version-per-accelerator", raw("host_vars/gpu2.yml",
                                           "vllm_version: '0.33.0'\n"), "", ""),
    Case("ok-paths-ordinary", both(gv("all", consul_data_dir="/var/lib/consul",
                                      deploykit_common_record_path=(
                                          "/var/lib/deploykit/state.json")),
                                   gv("vllm", vllm_models_dir="/mnt/models",
                                      lmcache_config_dir="/etc/lmcache",
                                      vllm_venv="/opt/vllm/venv")), "", ""),
    Case("ok-yes-and-quoted-numbers", raw(VF, "vllm_enforce_eager: yes\nvllm_port: '8001'\n"
                                              "vllm_gpu_memory_utilization: .95\n"), "", ""),
    Case("ok-bom-at-file-start", raw(VF, "\ufeffvllm_port: 8001\n".encode()), "", ""),
    Case("ok-monitoring-durations", both(monitored, gv(
        "all", monitoring_hit_ratio_for="1d", monitoring_scrape_interval="1m30s")), "", ""),
    Case("ok-script-inventory", both(drop(H), script(
        "inventory.py", "#!/bin/sh\ncat <<'EOF'\n" + (
            '{"ceph_admin": {"hosts": ["adm1"]}, "rgw": {"hosts": ["rgw1"]}, '
            '"consul_servers": {"hosts": ["c1"]}, "dns": {"hosts": ["dns1"]}, '
            '"vllm": {"hosts": ["gpu1"]}, "_meta": {"hostvars": {'
            '"adm1": {"ansible_host": "10.0.0.10"}, "rgw1": {"ansible_host": "10.0.0.11"}, '
            '"c1": {"ansible_host": "10.0.0.21"}, "dns1": {"ansible_host": "10.0.0.31"}, '
            '"gpu1": {"ansible_host": "10.0.1.1", "vllm_accelerator": "cuda",'
            ' "vllm_max_model_len": 32768}}}}\n') +
        "EOF\n")), "", "", env=FAST),
    # YAML 1.1 octal and base-60 ints are refused in deploykit's settings only: an operator's
    # own `mode: 0644` (Ansible's usual spelling) or `backup_at: 12:30` is theirs to mean
    Case("ok-octal-mode-own-var", raw(ALLF, "config_mode: 0644\nbackup_at: 12:30\n"), "", ""),
    Case("ok-ansible-keys-real-host", raw("host_vars/rgw1.yml",
                                          "ansible_user: deploy\nansible_port: 2222\n"), "", ""),
    Case("ok-all-vars-in-hosts-yml", lambda files, root: files[H]["all"].__setitem__(
        "vars", {"vllm_model": "Qwen/Qwen3-8B", "ansible_user": "deploy"}), "", ""),
    Case("ok-ungrouped-host-with-own-vars", both(
        lambda files, root: files[H]["all"].__setitem__("hosts", {
            "bastion": {"ansible_host": "10.0.0.99"}}),
        raw("group_vars/ungrouped.yml", "role_note: jump host\n")), "", ""),
    Case("ok-whole-file-vault", whole_file_vault, "", "",
         env={"ANSIBLE_VAULT_PASSWORD_FILE": "vault-pass"}),
    # RFC 5280: a CA constrained only in DNS names leaves IP addresses unconstrained, so
    # the gateways' IP SANs are fine
    Case("ok-ca-dns-constraint-only", ca(dns_only="s3.t.test"), "", ""),
    Case("ok-ca-plain", ca(), "", ""),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_inventory(case: Case, tmp_path: Path) -> None:
    results, text = run_case(case, tmp_path)
    assert [r.returncode for r in results] == [3, 3], text
    for result in results:
        lines = [ln for ln in result.stderr.splitlines() if " — " in ln]
        hits = [ln for ln in lines if f"{case.file}: {case.key}" in ln]
        assert hits, (case.file, case.key, lines)
        assert hits[0].split(" — ", 1)[1].strip(), hits[0]  # a hint
        for host in case.hosts:
            assert host in hits[0].split(" — ", 1)[0], (host, hits[0])


@pytest.mark.parametrize("case", CONTROLS, ids=[c.name for c in CONTROLS])
def test_control_validates(case: Case, tmp_path: Path) -> None:
    results, text = run_case(case, tmp_path)
    assert [r.returncode for r in results] == [0, 0], text


def test_corpus_shape() -> None:
    """Every class has cases, and no name repeats one of the other corpus files'."""
    import tests.unit.test_bad_inventories as main
    import tests.unit.test_bad_inventories_ansible_view as view
    import tests.unit.test_bad_inventories_identity as identity
    import tests.unit.test_bad_inventories_values as values

    assert {c.name.split("-")[0] for c in CASES} == {f"c{i}" for i in range(1, 14)}
    ours = [c.name for c in CASES + CONTROLS]
    theirs = {c.name for m in (main, view, identity, values) for c in m.CASES}
    assert len(ours) == len(set(ours)) and not set(ours) & theirs
