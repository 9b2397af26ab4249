"""Corpus additions for the audit's defect classes 2-6 (entries that apply to nothing, host
identity, templating, pass-through knobs, fleet agreement), run through the same checks as
tests/unit/test_bad_inventories.py; and controls: the ordinary forms of each that must stay
valid (exit 0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.unit import test_bad_inventories as corpus
from tests.unit.test_bad_inventories import (
    AF,
    ALL_HOSTS,
    ALLF,
    DF,
    RF,
    VF,
    VLLM,
    Case,
    H,
    Mutation,
    assert_control_validates,
    both,
    gv,
    hosts,
    raw,
    rename_host,
    set_host,
)

RGW = ("rgw1", "rgw2")


def add_host(group: str, name: str, **values: object) -> Mutation:
    return hosts(lambda g: g[group]["hosts"].__setitem__(name, dict(values)))


CASES = [
    # --- class 3: host identity ---------------------------------------------------------
    Case("host-named-like-deploykit-group", add_host("dns", "rgw", ansible_host="10.0.0.32"),
         H, "rgw", ("rgw",)),
    Case("host-named-like-inventory-group", both(
        hosts(lambda g: g.__setitem__("edge", {"hosts": {"dns1": None}})),
        add_host("vllm", "edge", ansible_host="10.0.1.9", vllm_accelerator="cuda")),
        H, "edge", ("edge",)),
    # gpu2 is reached by its name; gpu1's ansible_host is that name in capitals
    Case("one-machine-two-names-case", both(
        set_host("vllm", "gpu2", {"vllm_accelerator": "rocm"}),
        set_host("vllm", "gpu1", {"ansible_host": "GPU2.", "deploykit_address": "10.0.1.1",
                                  "vllm_accelerator": "cuda"})),
        H, "ansible_host", VLLM),
    Case("one-machine-ip-leading-zero", set_host("vllm", "gpu2", {
        "ansible_host": "010.000.001.001", "deploykit_address": "10.0.1.2",
        "vllm_accelerator": "rocm"}), H, "ansible_host", VLLM),
    Case("one-machine-ipv6-spellings", both(
        set_host("vllm", "gpu1", {"ansible_host": "2001:db8::1", "vllm_accelerator": "cuda"}),
        set_host("vllm", "gpu2", {"ansible_host": "2001:0db8:0:0::0001",
                                  "vllm_accelerator": "rocm"})), H, "ansible_host", VLLM),
    Case("one-machine-across-groups", set_host("dns", "dns1", {"ansible_host": "10.0.1.1"}),
         H, "ansible_host", ("dns1", "gpu1")),
    Case("one-machine-trailing-dot", both(
        set_host("vllm", "gpu1", {"ansible_host": "node7.example.com.",
                                  "deploykit_address": "10.0.1.1", "vllm_accelerator": "cuda"}),
        set_host("vllm", "gpu2", {"ansible_host": "Node7.example.com",
                                  "deploykit_address": "10.0.1.2",
                                  "vllm_accelerator": "rocm"})), H, "ansible_host", VLLM),
    Case("one-machine-same-deploykit-address", raw("host_vars/gpu2.yml",
                                                   "deploykit_address: 10.0.1.1\n"),
         "host_vars/gpu2.yml", "deploykit_address", VLLM),
    # --- class 2: entries that apply to nothing -------------------------------------------
    Case("group-vars-typo", raw("group_vars/vlm.yml", "vllm_max_model_len: 8192\n"),
         "group_vars/vlm.yml", "vllm_max_model_len"),
    Case("group-vars-dir-typo", raw("group_vars/rgws/main.yml", "ceph_rgw_count_per_host: 2\n"),
         "group_vars/rgws/main.yml", "ceph_rgw_count_per_host"),
    Case("host-vars-unknown-host", raw("host_vars/gpu3.yml", "vllm_port: 9000\n"),
         "host_vars/gpu3.yml", "vllm_port"),
    Case("group-vars-empty-group", both(
        hosts(lambda g: g.__setitem__("monitoring", {"hosts": {}})),
        raw("group_vars/monitoring.yml", "monitoring_prometheus_port: 9095\n")),
        "group_vars/monitoring.yml", "monitoring_prometheus_port"),
    Case("vllm-setting-on-gateways", gv("rgw", vllm_max_model_len=8192), RF,
         "vllm_max_model_len", RGW),
    Case("lmcache-setting-in-host-vars-of-dns", raw("host_vars/dns1.yml",
                                                    "lmcache_chunk_size: 512\n"),
         "host_vars/dns1.yml", "lmcache_chunk_size", ("dns1",)),
    Case("rgw-setting-on-serving-hosts", gv("vllm", ceph_rgw_count_per_host=2), VF,
         "ceph_rgw_count_per_host", VLLM),
    Case("coredns-setting-on-admin", gv("ceph_admin", coredns_port=5353), AF, "coredns_port",
         ("adm1",)),
    # --- class 4: templating --------------------------------------------------------------
    Case("jinja-filter", gv("vllm", vllm_served_model_name="{{ vllm_model | lower }}"), VF,
         "vllm_served_model_name", VLLM),
    Case("jinja-arithmetic", gv("vllm", vllm_port="{{ 8000 + 1 }}"), VF, "vllm_port", VLLM),
    Case("jinja-statement", gv("all", deploykit_s3_bucket="{% if true %}kv{% endif %}"), ALLF,
         "deploykit_s3_bucket", ALL_HOSTS),
    Case("jinja-comment", gv("dns", coredns_upstream=["{# x #}8.8.8.8"]), DF,
         "coredns_upstream[0]", ("dns1",)),
    Case("jinja-nested-in-extra-config", gv("vllm", lmcache_extra_config={
        "s3_region": "{{ region }}-x"}), VF, "lmcache_extra_config.s3_region", VLLM),
    Case("jinja-reference-resolved-then-validated", gv("vllm", vllm_port="{{ my_port }}",
                                                       my_port=70000), VF, "vllm_port", VLLM),
    Case("jinja-reference-to-template", gv("vllm", vllm_model="{{ m }}", m="{{ x ~ 'y' }}"),
         VF, "m", VLLM),
    Case("jinja-reference-loop", gv("all", vllm_port="{{ a }}", a="{{ b }}", b="{{ a }}"),
         ALLF, "vllm_port", ALL_HOSTS),
    Case("jinja-reference-undefined", gv("rgw", ceph_rgw_count_per_host="{{ cores }}"), RF,
         "ceph_rgw_count_per_host", RGW),
    Case("unsafe-literal-still-validated", raw(VF, 'vllm_port: !unsafe "{{ 8000 }}"\n'), VF,
         "vllm_port", VLLM),
    Case("unknown-tag-still-refused", raw(VF, "vllm_model: !foo x\n"), VF, "line"),
    # --- class 5: pass-through knobs cannot override what deploykit renders ----------------
    Case("extra-arg-port-equals", gv("vllm", vllm_extra_args=["--port=9000"]), VF,
         "vllm_extra_args", VLLM),
    Case("extra-arg-host-separate", gv("vllm", vllm_extra_args=["--host", "127.0.0.1"]), VF,
         "vllm_extra_args", VLLM),
    Case("extra-arg-underscores", gv("vllm", vllm_extra_args=["--max_model_len", "4096"]), VF,
         "vllm_extra_args", VLLM),
    Case("extra-arg-abbreviated", gv("vllm", vllm_extra_args=["--kv-cache-dt=fp8"]), VF,
         "vllm_extra_args", VLLM),
    Case("extra-arg-short-tp", gv("vllm", vllm_extra_args=["-tp", "2"]), VF,
         "vllm_extra_args", VLLM),
    Case("extra-arg-json-subkey", gv("vllm", vllm_extra_args=[
        "--kv-transfer-config.kv_role", "kv_producer"]), VF, "vllm_extra_args", VLLM),
    Case("extra-arg-unset-setting-flag", gv("vllm", vllm_extra_args=[
        "--gpu-memory-utilization", "0.99"]), VF, "vllm_extra_args", VLLM),
    Case("extra-arg-model", gv("vllm", vllm_extra_args=["--model", "other/model"]), VF,
         "vllm_extra_args", VLLM),
    Case("extra-arg-config-file", gv("vllm", vllm_extra_args=["--config", "/etc/v.yaml"]), VF,
         "vllm_extra_args", VLLM),
    Case("extra-env-hash-seed", gv("vllm", vllm_extra_env={"PYTHONHASHSEED": "0"}), VF,
         "vllm_extra_env.PYTHONHASHSEED", VLLM),
    Case("extra-env-lmcache-override", gv("vllm", vllm_extra_env={
        "LMCACHE_CHUNK_SIZE": "512"}), VF, "vllm_extra_env.LMCACHE_CHUNK_SIZE", VLLM),
    Case("kv-transfer-extra-role", gv("vllm", vllm_kv_transfer_extra={
        "kv_role": "kv_consumer"}), VF, "vllm_kv_transfer_extra.kv_role", VLLM),
    Case("kv-transfer-extra-server-port", both(
        gv("vllm", lmcache_topology="server", vllm_kv_transfer_extra={
            "kv_connector_extra_config": {"lmcache.mp.port": 7000}})), VF,
        "vllm_kv_transfer_extra.kv_connector_extra_config.lmcache.mp.port", VLLM),
    Case("lmcache-extra-chunk-size", gv("vllm", lmcache_extra_config={"chunk_size": 512}), VF,
         "lmcache_extra_config.chunk_size", VLLM),
    Case("lmcache-extra-remote-url", gv("vllm", lmcache_extra_config={
        "remote_url": "s3://evil.example.com"}), VF, "lmcache_extra_config.remote_url", VLLM),
    Case("lmcache-extra-serde", gv("vllm", lmcache_extra_config={"remote_serde": "cachegen"}),
         VF, "lmcache_extra_config.remote_serde", VLLM),
    # --- class 6: what every host sharing the bucket must agree on --------------------------
    Case("serde-per-host", raw("host_vars/gpu2.yml", "lmcache_remote_serde: cachegen\n"),
         "host_vars/gpu2.yml", "lmcache_remote_serde", ("gpu2",)),
    Case("dtype-per-host", raw("host_vars/gpu1.yml", "vllm_dtype: float16\n"),
         "host_vars/gpu1.yml", "vllm_dtype", ("gpu1",)),
    Case("rope-per-host", raw("host_vars/gpu1.yml", "vllm_max_model_len: 4096\n"
                                                    "vllm_rope_scaling: {rope_type: yarn, "
                                                    "factor: 2.0, rope_theta: 1000000}\n"),
         "host_vars/gpu1.yml", "vllm_rope_scaling", ("gpu1",)),
    Case("served-name-per-host", raw("host_vars/gpu2.yml", "vllm_served_model_name: other\n"),
         "host_vars/gpu2.yml", "vllm_served_model_name", ("gpu2",)),
    Case("revision-through-extra-args", raw("host_vars/gpu1.yml",
                                            "vllm_extra_args: [--revision, abc123]\n"),
         "host_vars/gpu1.yml", "vllm_extra_args --revision", ("gpu1",)),
    Case("seed-through-extra-args-abbreviated", raw(
        "host_vars/gpu2.yml", "vllm_extra_args: ['--seed=7']\n"), "host_vars/gpu2.yml",
        "vllm_extra_args --seed", ("gpu2",)),
    Case("quantization-short-flag", raw("host_vars/gpu2.yml", "vllm_extra_args: [-q, fp8]\n"),
         "host_vars/gpu2.yml", "vllm_extra_args --quantization", ("gpu2",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_inventory_identity(case: Case, tmp_path: Path) -> None:
    corpus.test_bad_inventory(case, tmp_path)


CONTROLS: list[tuple[str, Mutation]] = [
    ("all-vars-for-every-tier", gv("all", vllm_max_model_len=8192, coredns_port=53,
                                   ceph_rgw_count_per_host=2)),
    ("non-deploykit-vars-for-missing-group", raw("group_vars/bastion.yml", "ntp_server: x\n")),
    ("host-vars-of-listed-host", raw("host_vars/gpu1.yml", "vllm_port: 9000\n")),
    ("group-vars-json", raw("group_vars/vllm.json", '{"vllm_port": 9001}')),
    ("reference-to-inventory-var", gv("vllm", vllm_port="{{ serving_port }}",
                                      serving_port=9000)),
    ("reference-to-role-default", gv("vllm", vllm_served_model_name="{{ vllm_model }}")),
    ("reference-to-host-var", gv("all", deploykit_address="{{ ansible_host }}")),
    ("reference-to-hostname", gv("vllm", vllm_user="{{ inventory_hostname }}")),
    ("unsafe-literal-braces", raw(VF, 'lmcache_extra_config: {x_tag: !unsafe "m{{x}}"}\n'
                                      "vllm_extra_env: !unsafe {TEMPLATE: '{% raw %}'}\n")),
    ("jinja-in-ansible-var", gv("all", ansible_python_interpreter="{{ ansible_playbook_python }}")),
    ("same-address-other-port", both(
        set_host("vllm", "gpu1", {"ansible_host": "127.0.0.1", "ansible_port": 2201,
                                  "deploykit_address": "10.0.1.1", "vllm_accelerator": "cuda"}),
        set_host("vllm", "gpu2", {"ansible_host": "127.0.0.1", "ansible_port": 2202,
                                  "deploykit_address": "10.0.1.2",
                                  "vllm_accelerator": "rocm"}))),
    ("one-host-in-two-groups", set_host("dns", "rgw1", {"ansible_host": "10.0.0.11"})),
    ("renamed-host-keeps-address", rename_host("dns", "dns1", "resolver1")),
    ("extra-args-genuinely-extra", gv("vllm", vllm_extra_args=[
        "--max-num-seqs", "64", "--disable-log-requests", "--enforce-eager",
        "--load-format=dummy"])),
    ("extra-env-genuinely-extra", gv("vllm", vllm_extra_env={"OMP_NUM_THREADS": "8",
                                                            "HF_HUB_OFFLINE": "1"})),
    ("kv-transfer-extra-genuinely-extra", gv("vllm", vllm_kv_transfer_extra={
        "kv_connector_extra_config": {"x": 1}})),
    ("lmcache-extra-genuinely-extra", gv("vllm", lmcache_extra_config={"x_site_tag": "a"})),
    ("revision-on-every-host", gv("vllm", vllm_extra_args=["--revision", "abc123"])),
    ("dtype-on-every-host", gv("vllm", vllm_dtype="bfloat16")),
]


@pytest.mark.parametrize("mutate", [m for _, m in CONTROLS], ids=[n for n, _ in CONTROLS])
def test_control_stays_valid(mutate: Mutation, tmp_path: Path) -> None:
    assert_control_validates(mutate, tmp_path)


INI = """[ceph_admin]
adm1 ansible_host=10.0.0.10
[rgw]
rgw1 ansible_host=10.0.0.11
rgw2 ansible_host=10.0.0.12
[consul_servers]
c1 ansible_host=10.0.0.21
[dns]
dns1 ansible_host=10.0.0.31
[vllm]
gpu1 ansible_host=10.0.1.1 vllm_accelerator=cuda vllm_max_model_len=32768
"""


@pytest.mark.parametrize(("vllm_vars", "expected"), [
    ('vllm_extra_env: {PS1: !unsafe "m{{x}}"}\n', 0),  # Ansible never templates it
    ('vllm_served_model_name: "{{ vllm_model | lower }}"\n', 3),
])
def test_ini_inventory_unsafe_through_ansible(vllm_vars: str, expected: int,
                                             tmp_path: Path) -> None:
    """The Ansible-API path (an INI inventory) keeps `!unsafe` as a literal too: ansible-core
    tags every other inventory string TrustedAsTemplate."""
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "hosts.ini").write_text(INI)
    (tmp_path / "group_vars" / "vllm.yml").write_text(vllm_vars)
    # a process of its own, as the CLI runs (ansible-core keeps state between in-process
    # inventory loads that can hand a later load's strings over already templated)
    result = subprocess.run([sys.executable, "-m", "deploy_kit", "validate", "-i",
                             str(tmp_path / "hosts.ini")], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120, env={**os.environ, "COLUMNS": "400"})
    assert result.returncode == expected, result.stdout + result.stderr
    if expected:
        assert "group_vars/vllm.yml: vllm_served_model_name: is a Jinja template" in \
            result.stderr


def test_ini_inventory_identity_and_orphan_vars(tmp_path: Path) -> None:
    """The inventory rules read Ansible's view too: a host named like a group, one machine
    twice, group_vars of a group the inventory lacks."""
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "hosts.ini").write_text(INI.replace("rgw2 ansible_host=10.0.0.12",
                                                    "rgw2 ansible_host=10.0.0.11")
                                        + "[monitoring]\nvllm ansible_host=10.0.1.9\n")
    (tmp_path / "group_vars" / "vlm.yml").write_text("vllm_port: 9000\n")
    result = run_cli("validate", "-i", str(tmp_path / "hosts.ini"), cwd=tmp_path)
    assert result.returncode == 3
    assert "hosts.ini: vllm: host vllm has the name of a group" in result.stderr
    assert "hosts.ini: ansible_host: rgw1 and rgw2 are one machine" in result.stderr
    assert "group_vars/vlm.yml: vllm_port: no group vlm" in result.stderr
