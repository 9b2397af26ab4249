"""A corpus of bad inventories (operator mistakes and hostile input), each a mutation of one
small valid site. For every one, through the real CLI (`validate` and `render -o OUT`):
exit 3, exactly one message per problem naming the file, the key and the hosts with a hint,
no traceback, nothing written anywhere (render refuses before writing, so not even OUT
exists) and no secret echoed.

The CLI runs in process (tests/cli.py), except for the cases that guard against a hang or an
unbounded read (`bounded=True`: a FIFO, a device, an alias bomb): those run in a subprocess
whose timeout bounds the time, so a regression fails the case instead of the test session.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli import Result, run_cli
from tests.conftest import BASE_HOSTS, fold_shadowed_vars_files

Files = dict[str, Any]  # relative path -> dict (YAML-dumped), str or bytes
Mutation = Callable[[Files, Path], None]
ALL_HOSTS = ("adm1", "c1", "dns1", "gpu1", "gpu2", "rgw1", "rgw2")
VLLM = ("gpu1", "gpu2")
SECRET = "Corpus-Secret-Value-4711"  # must never appear in any output
TIMEOUT_S = 60  # both commands of one bounded case; a hang (a FIFO read) fails the case


def base_files() -> Files:
    return {"hosts.yml": copy.deepcopy(BASE_HOSTS), "group_vars/all.yml": {},
            "group_vars/vllm.yml": {}, "group_vars/rgw.yml": {},
            "group_vars/ceph_admin.yml": {}, "group_vars/dns.yml": {}}


def groups(files: Files) -> dict[str, Any]:
    hosts: dict[str, Any] = files["hosts.yml"]["all"]["children"]
    return hosts


def gv(group: str, **values: Any) -> Mutation:
    def mutate(files: Files, root: Path) -> None:
        files[f"group_vars/{group}.yml"].update(values)
    return mutate


def raw(path: str, content: str | bytes) -> Mutation:
    def mutate(files: Files, root: Path) -> None:
        files[path] = content
    return mutate


def hosts(fn: Callable[[dict[str, Any]], None]) -> Mutation:
    def mutate(files: Files, root: Path) -> None:
        fn(groups(files))
    return mutate


def both(*mutations: Mutation) -> Mutation:
    def mutate(files: Files, root: Path) -> None:
        for m in mutations:
            m(files, root)
    return mutate


def model_config(make: Callable[[Path], None]) -> Mutation:
    """vllm_model_config pointing at a path the case creates (a FIFO, a device, JSON...)."""
    def mutate(files: Files, root: Path) -> None:
        target = root / "model" / "config.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        make(target)
        files["group_vars/vllm.yml"]["vllm_model_config"] = str(target)
    return mutate


def json_text(text: str) -> Callable[[Path], None]:
    return lambda p: p.write_text(text)


def sparse(size: int) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        with p.open("wb") as f:
            f.truncate(size)
    return make


def symlink_to(target: str) -> Callable[[Path], None]:
    return lambda p: p.symlink_to(target)


def set_host(group: str, host: str, value: Any) -> Mutation:
    return hosts(lambda g: g[group]["hosts"].__setitem__(host, value))


def rename_host(group: str, old: str, new: str) -> Mutation:
    def fn(g: dict[str, Any]) -> None:
        g[group]["hosts"][new] = g[group]["hosts"].pop(old)
    return hosts(fn)


def nested(depth: int) -> str:
    lines = ["lmcache_extra_config:"]
    lines += [" " * (2 * i) + f"k{i}:" for i in range(1, depth)]
    return "\n".join(lines) + " 1\n"


def bomb() -> str:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, 9):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append("vllm_extra_args: *a8")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Case:
    name: str
    mutate: Mutation
    file: str  # the file the message must name (suffix of the path)
    key: str  # the key the message must name (prefix match)
    hosts: tuple[str, ...] = ()  # every host the message must name
    also: tuple[tuple[str, str], ...] = ()  # further (file, key) problems expected
    env: dict[str, str] = field(default_factory=dict)
    bounded: bool = False  # guards against a hang or an unbounded read: run in a subprocess


H = "hosts.yml"
ALLF, VF, RF, AF, DF = ("group_vars/all.yml", "group_vars/vllm.yml", "group_vars/rgw.yml",
                        "group_vars/ceph_admin.yml", "group_vars/dns.yml")
REF = "{{ lookup('env', 'DK_CORPUS_SECRET') }}"
INVENTORY_SOURCE = (("model/config.json", "(inventory source)"),)

CASES = [
    # --- structure: wrong YAML types where Ansible expects mappings -----------------------
    Case("group-hosts-list", hosts(lambda g: g["rgw"].__setitem__("hosts", ["rgw1", "rgw2"])),
         H, "all.children.rgw.hosts"),
    Case("group-hosts-scalar", hosts(lambda g: g["rgw"].__setitem__("hosts", "rgw1")),
         H, "all.children.rgw.hosts"),
    Case("group-children-list", hosts(lambda g: g["vllm"].__setitem__("children", ["x"])),
         H, "all.children.vllm.children"),
    Case("all-children-scalar", raw(H, "all:\n  children: rgw\n"), H, "all.children"),
    Case("host-entry-list", set_host("rgw", "rgw1", ["10.0.0.11"]), H,
         "all.children.rgw.hosts.rgw1"),
    Case("host-entry-scalar", set_host("dns", "dns1", "10.0.0.31"), H,
         "all.children.dns.hosts.dns1"),
    Case("group-vars-list", hosts(lambda g: g["rgw"].__setitem__("vars", ["a", "b"])),
         H, "all.children.rgw.vars"),
    Case("group-node-list", hosts(lambda g: g.__setitem__("dns", ["dns1"])), H,
         "all.children.dns"),
    Case("group-misspelt-hosts", hosts(lambda g: g["consul_servers"].__setitem__(
        "host", {"c2": None})), H, "all.children.consul_servers.host"),
    Case("no-all-group", raw(H, "rgw:\n  hosts: {rgw1: {}}\n"), H, "all"),
    Case("group-vars-file-list", raw(VF, "- vllm_port: 1\n"), VF, "(file)"),
    Case("group-vars-file-scalar", raw(RF, "just text\n"), RF, "(file)"),
    Case("var-name-not-string", raw(ALLF, "1: x\n"), ALLF, "1", ALL_HOSTS),
    # --- unreadable files: named, bounded -------------------------------------------------
    Case("non-utf8-group-vars", raw(VF, b"vllm_port: 8000\nvllm_model: \xff\xfe\n"), VF,
         "(file)"),
    Case("non-utf8-hosts", raw(H, b"all:\n  children: {rgw: {hosts: {r\xe9: {}}}}\n"), H,
         "(file)"),
    Case("deep-flow-nesting", raw(ALLF, "x: " + "[" * 300 + "]" * 300 + "\n"), ALLF, "line"),
    Case("deep-block-nesting", raw(VF, nested(120)), VF, "line"),
    Case("recursive-alias", raw(VF, "lmcache_extra_config: &x {s3_region: *x}\n"), VF,
         "(file)"),
    Case("alias-bomb", raw(VF, bomb()), VF, "(file)", bounded=True),
    Case("group-vars-fifo", lambda files, root: (root / "group_vars" / "all").mkdir(
        parents=True) or
         os.mkfifo(root / "group_vars" / "all" / "pipe.yml"), "group_vars/all/pipe.yml",
         "(file)", bounded=True),
    Case("yaml-syntax-error", raw(RF, "ceph_rgw_count_per_host: [4\n"), RF, "line"),
    Case("yaml-error-does-not-hide-others",
         both(raw(RF, "ceph_rgw_count_per_host: [4\n"),
              gv("vllm", lmcache_chunk_size=250, vllm_block_size=16)),
         RF, "line", also=((VF, "lmcache_chunk_size"),)),
    Case("hosts-yaml-error-and-group-vars-error",
         both(raw(H, "all:\n  children: {rgw: [\n"), raw(DF, "coredns_port: {\n")), H, "line",
         also=((DF, "line"),)),
    Case("duplicate-key", raw(ALLF, "deploykit_s3_port: 80\ndeploykit_s3_port: 81\n"), ALLF,
         "deploykit_s3_port"),
    Case("duplicate-host", raw(H, yaml.safe_dump(BASE_HOSTS).replace("rgw2:", "rgw1:")), H,
         "rgw1"),
    # --- model config.json ----------------------------------------------------------------
    # the model sits inside the inventory directory, where Ansible reads every file as an
    # inventory source: a FIFO, a device or a huge file there is named too (it would block
    # or fill ansible-playbook), and never handed to Ansible
    Case("model-config-fifo", model_config(os.mkfifo), VF, "vllm_model_config", VLLM,
         also=INVENTORY_SOURCE, bounded=True),
    Case("model-config-device", model_config(symlink_to("/dev/zero")), VF,
         "vllm_model_config", VLLM, also=INVENTORY_SOURCE, bounded=True),
    Case("model-config-list", model_config(json_text("[1, 2, 3]")), VF, "vllm_model_config",
         VLLM),
    Case("model-config-zero-heads", model_config(json_text(
        '{"num_hidden_layers": 4, "num_attention_heads": 0, "hidden_size": 64}')), VF,
        "vllm_model_config", VLLM),
    Case("model-config-zero-kv-heads", model_config(json_text(
        '{"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 0, '
        '"hidden_size": 512}')), VF, "vllm_model_config", VLLM),
    Case("model-config-string-layers", model_config(json_text(
        '{"num_hidden_layers": "many", "num_attention_heads": 8, "hidden_size": 512}')), VF,
        "vllm_model_config", VLLM),
    Case("model-config-not-json", model_config(json_text("{not json")), VF,
         "vllm_model_config", VLLM),
    Case("model-config-huge", model_config(sparse(64 * 1024 * 1024)), VF, "vllm_model_config",
         VLLM, also=INVENTORY_SOURCE),
    Case("model-config-directory", model_config(lambda p: p.mkdir()), VF,
         "vllm_model_config", VLLM),
    Case("model-config-missing", model_config(lambda p: None), VF, "vllm_model_config", VLLM),
    # --- versions ------------------------------------------------------------------------
    Case("vllm-version-unsupported-default-block", gv("all", vllm_version="0.1.0"), ALLF,
         "vllm_version", ALL_HOSTS),
    Case("lmcache-version-unsupported", gv("vllm", lmcache_version="9.9.9"), VF,
         "lmcache_version", VLLM),
    # --- names and paths that would leave OUT ---------------------------------------------
    Case("host-name-dotdot", rename_host("rgw", "rgw2", "../../etc"), H,
         "all.children.rgw.hosts.../../etc"),
    Case("host-name-absolute", lambda files, root: groups(files)["rgw"]["hosts"].__setitem__(
        str(root.parent / "escaped"), {"ansible_host": "10.0.0.13"}), H,
        "all.children.rgw.hosts./"),
    Case("host-name-space", rename_host("dns", "dns1", "dns 1"), H, "all.children.dns.hosts"),
    Case("host-name-cluster-dir", rename_host("vllm", "gpu2", "_cluster"), H,
         "all.children.vllm.hosts._cluster"),
    Case("group-name-dotdot", hosts(lambda g: g.__setitem__("../x", {"hosts": {"z": None}})),
         H, "all.children.../x"),
    Case("config-dir-dotdot", gv("vllm", lmcache_config_dir="../../etc"), VF,
         "lmcache_config_dir", VLLM),
    Case("config-dir-not-normalised", gv("vllm", lmcache_config_dir="/etc/deploykit/../.."),
         VF, "lmcache_config_dir", VLLM),
    Case("config-dir-relative", gv("all", lmcache_config_dir="etc/deploykit"), ALLF,
         "lmcache_config_dir", ALL_HOSTS),
    Case("venv-trailing-slash", gv("vllm", vllm_venv="/opt/vllm/"), VF, "vllm_venv", VLLM),
    Case("record-path-relative", gv("all", deploykit_common_record_path="converged.json"), ALLF,
         "deploykit_common_record_path", ALL_HOSTS),
    Case("consul-data-dir-dotdot", gv("all", consul_data_dir="/opt/../../consul"), ALLF,
         "consul_data_dir", ALL_HOSTS),
    # --- secrets -------------------------------------------------------------------------
    Case("secret-inline", gv("all", deploykit_s3_secret_key=SECRET), ALLF,
         "deploykit_s3_secret_key", ALL_HOSTS),
    Case("secret-through-plain-var", gv("all", deploykit_s3_secret_key="{{ my_secret }}",
                                        my_secret=SECRET), ALLF, "my_secret", ALL_HOSTS),
    Case("secret-through-var-chain", both(
        gv("vllm", deploykit_s3_access_key="{{ a_key }}", a_key="{{ b_key }}"),
        raw("host_vars/gpu1.yml", f"b_key: {SECRET}\n")), "host_vars/gpu1.yml", "b_key",
        ("gpu1",)),
    Case("secret-in-unencrypted-vault", both(
        raw("group_vars/all/vault.yml", f"vault_deploykit_s3_secret_key: {SECRET}\n"),
        gv("all", deploykit_s3_secret_key="{{ vault_deploykit_s3_secret_key }}")),
        "group_vars/all/vault.yml", "vault_deploykit_s3_secret_key", ALL_HOSTS),
    Case("secret-non-string", gv("all", deploykit_s3_access_key=[SECRET]), ALLF,
         "deploykit_s3_access_key", ALL_HOSTS),
    Case("secret-in-vllm-extra-env", gv("vllm", vllm_extra_env={
        "AWS_SECRET_ACCESS_KEY": SECRET}), VF, "vllm_extra_env.AWS_SECRET_ACCESS_KEY", VLLM),
    Case("token-in-vllm-extra-env", gv("vllm", vllm_extra_env={"HF_TOKEN": SECRET}), VF,
         "vllm_extra_env.HF_TOKEN", VLLM),
    Case("secret-in-lmcache-extra-config", gv("vllm", lmcache_extra_config={
        "aws_access_key_id": SECRET}), VF, "lmcache_extra_config.aws_access_key_id", VLLM),
    Case("secret-nested-in-lmcache-extra-config", gv("vllm", lmcache_extra_config={
        "nixl_backend_params": {"secret_key": SECRET}}), VF,
        "lmcache_extra_config.nixl_backend_params.secret_key", VLLM),
    Case("secret-copied-into-extra-args", both(
        gv("all", deploykit_s3_secret_key=REF),
        gv("vllm", vllm_extra_args=["--api-key", SECRET])), VF, "vllm_extra_args", VLLM,
        env={"DK_CORPUS_SECRET": SECRET}),
    # every secret, not only the S3 keys, against every plain setting
    Case("api-key-copied-into-extra-args", gv(
        "vllm", vllm_api_key=REF, vllm_extra_args=["--api-key", SECRET]), VF,
        "vllm_extra_args", VLLM, env={"DK_CORPUS_SECRET": SECRET}),
    Case("stats-password-copied-into-extra-env", both(
        gv("all", ceph_rgw_concentrator_monitor_password=REF),
        gv("vllm", vllm_extra_env={"OPTS": f"--x={SECRET}"})), VF, "vllm_extra_env", VLLM,
        env={"DK_CORPUS_SECRET": SECRET}),
    # --- injection into config text -------------------------------------------------------
    Case("fqdn-newline", gv("all", deploykit_s3_fqdn="s3.example.com\n  forward . 6.6.6.6"),
         ALLF, "deploykit_s3_fqdn", ALL_HOSTS),
    Case("fqdn-label-too-long", gv("all", deploykit_s3_fqdn="s3." + "a" * 64 + ".com"), ALLF,
         "deploykit_s3_fqdn", ALL_HOSTS),
    Case("fqdn-too-long", gv("all", deploykit_s3_fqdn=".".join(["abcdefgh"] * 30)), ALLF,
         "deploykit_s3_fqdn", ALL_HOSTS),
    Case("fqdn-space", gv("all", deploykit_s3_fqdn="s3.exa mple.com"), ALLF,
         "deploykit_s3_fqdn", ALL_HOSTS),
    Case("fqdn-single-label", gv("all", deploykit_s3_fqdn="localhost"), ALLF,
         "deploykit_s3_fqdn", ALL_HOSTS),
    Case("fqdn-brace", gv("all", deploykit_s3_fqdn="s3.example.com {"), ALLF,
         "deploykit_s3_fqdn", ALL_HOSTS),
    Case("address-shell", set_host("rgw", "rgw1", {"ansible_host": "10.0.0.11; rm -rf /"}),
         H, "ansible_host", ("rgw1",)),
    Case("rgw-address-not-ip", set_host("rgw", "rgw1", {"ansible_host": "rgw1.example.com"}),
         H, "ansible_host", ("rgw1",)),
    Case("dns-address-newline", raw("host_vars/dns1.yml",
                                    'deploykit_address: "10.0.0.31\\nnameserver 6.6.6.6"\n'),
         "host_vars/dns1.yml", "deploykit_address", ("dns1",)),
    Case("serving-address-cidr", set_host("vllm", "gpu1", {"ansible_host": "10.0.1.1/24",
                                                           "vllm_accelerator": "cuda"}),
         H, "ansible_host", ("gpu1",)),
    Case("upstream-injection", gv("dns", coredns_upstream=["8.8.8.8\n}\n. {\n forward . x"]),
         DF, "coredns_upstream", ("dns1",)),
    Case("upstream-bad-port", gv("dns", coredns_upstream=["8.8.8.8:99999"]), DF,
         "coredns_upstream", ("dns1",)),
    Case("upstream-relative-path", gv("dns", coredns_upstream=["resolv.conf"]), DF,
         "coredns_upstream", ("dns1",)),
    Case("rgw-network-injection", gv("rgw", ceph_rgw_networks=["10.0.0.0/24\nplacement: x"]),
         RF, "ceph_rgw_networks", ("rgw1", "rgw2")),
    Case("rgw-network-no-prefix", gv("rgw", ceph_rgw_networks=["10.0.0.0"]), RF,
         "ceph_rgw_networks", ("rgw1", "rgw2")),
    Case("rgw-network-bad-prefix", gv("rgw", ceph_rgw_networks=["10.0.0.0/33"]), RF,
         "ceph_rgw_networks", ("rgw1", "rgw2")),
    Case("pool-name-shell", gv("ceph_admin", ceph_rgw_pools_list=[
        {"name": "data; rm -rf /", "pg_num": 64}]), AF, "ceph_rgw_pools_list.0.name", ("adm1",)),
    Case("pool-name-empty", gv("ceph_admin", ceph_rgw_pools_list=[{"name": "", "pg_num": 64}]),
         AF, "ceph_rgw_pools_list.0.name", ("adm1",)),
    Case("pool-application-subshell", gv("ceph_admin", ceph_rgw_pools_list=[
        {"name": "p", "pg_num": 64, "application": "rgw $(id)"}]), AF,
        "ceph_rgw_pools_list.0.application", ("adm1",)),
    # --- accepted before, cannot work -----------------------------------------------------
    Case("duplicate-rgw-address", set_host("rgw", "rgw2", {"ansible_host": "10.0.0.11"}), H,
         "ansible_host", ("rgw1", "rgw2")),
    Case("tp-does-not-divide-kv-heads", gv("vllm", vllm_tensor_parallel_size=3), VF,
         "vllm_tensor_parallel_size", VLLM),
    Case("chunk-longer-than-context", gv("vllm", lmcache_chunk_size=512,
                                         vllm_max_model_len=256), VF, "lmcache_chunk_size",
         VLLM),
    Case("tls-on-disable-tls-true", both(gv("all", deploykit_s3_tls=True),
                                         gv("vllm", lmcache_extra_config={"disable_tls": True})),
         VF, "lmcache_extra_config.disable_tls", VLLM),
    Case("tls-off-disable-tls-false", gv("vllm", lmcache_extra_config={"disable_tls": False}),
         VF, "lmcache_extra_config.disable_tls", VLLM),
    Case("s3-region-empty", gv("all", deploykit_s3_region=""), ALLF, "deploykit_s3_region",
         ALL_HOSTS),
    Case("s3-region-space", gv("all", deploykit_s3_region="us east"), ALLF,
         "deploykit_s3_region", ALL_HOSTS),
    Case("homoglyph-cyrillic", gv("vllm", **{"vll\u043c_model": "x"}), VF,
         "vll\\u043c_model", VLLM),
    Case("homoglyph-fullwidth", gv("all", **{"\uff56\uff4c\uff4c\uff4d_port": 1}), ALLF,
         "\\uff56", ALL_HOSTS),
    Case("homoglyph-greek", gv("dns", **{"c\u03bfredns_port": 53}), DF, "c\\u03bfredns_port",
         ("dns1",)),
    # --- one site-wide bad value: one message, every host, no "group has no hosts" --------
    Case("site-port-not-int", gv("all", deploykit_s3_port="eighty"), ALLF,
         "deploykit_s3_port", ALL_HOSTS),
    Case("site-dns-mode-bogus", gv("all", deploykit_dns_mode="bogus"), ALLF,
         "deploykit_dns_mode", ALL_HOSTS),
    Case("site-misspelt-key", gv("all", deploykit_s3_fqnd="s3.example.com"), ALLF,
         "deploykit_s3_fqnd", ALL_HOSTS),
    Case("vllm-port-not-int", gv("vllm", vllm_port="x"), VF, "vllm_port", VLLM),
    Case("rgw-count-negative", gv("rgw", ceph_rgw_count_per_host=-1), RF,
         "ceph_rgw_count_per_host", ("rgw1", "rgw2")),
    Case("extra-args-not-list", gv("vllm", vllm_extra_args="--enforce-eager"), VF,
         "vllm_extra_args", VLLM),
    # --- line injection: one rule for every setting and every format ---
    Case("inject-extra-arg-execstartpre", gv("vllm", vllm_extra_args=[
        "--enforce-eager", "x\nExecStartPre=+/bin/sh -c 'id > /tmp/pwned'"]), VF,
         "vllm_extra_args", VLLM),
    Case("inject-service-user-section", gv("vllm", vllm_user="vllm\n[Service]\nUser=root"),
         VF, "vllm_user", VLLM),
    Case("inject-service-user-specifier", gv("vllm", vllm_user="root%n"), VF, "vllm_user",
         VLLM),
    Case("inject-extra-env-value-ld-preload", gv("vllm", vllm_extra_env={
        "OMP_NUM_THREADS": "4\nLD_PRELOAD=/tmp/evil.so"}), VF, "vllm_extra_env", VLLM),
    Case("inject-extra-env-key", gv("vllm", vllm_extra_env={"A\nLD_PRELOAD": "x"}), VF,
         "vllm_extra_env", VLLM),
    Case("extra-env-key-with-equals", gv("vllm", vllm_extra_env={"A=B": "x"}), VF,
         "vllm_extra_env", VLLM),
    Case("inject-model-name-nul", gv("vllm", vllm_model="Qwen/Qwen3-8B\x00/etc/shadow"), VF,
         "vllm_model", VLLM),
    Case("inject-served-name-cr", gv("vllm", vllm_served_model_name="m\rExecStart=/bin/sh"),
         VF, "vllm_served_model_name", VLLM),
    Case("inject-consul-service-name", gv("all", consul_service_name="s3\nforward . 6.6.6.6"),
         ALLF, "consul_service_name", ALL_HOSTS),
    Case("inject-unicode-line-separator", gv("all", deploykit_s3_region="us\u2028x"), ALLF,
         "deploykit_s3_region", ALL_HOSTS),
    Case("inject-nested-transfer-config", gv("vllm", vllm_kv_transfer_extra={
        "kv_connector_extra_config": {"k": ["ok", "bad\nline"]}}), VF,
         "vllm_kv_transfer_extra", VLLM),
    # --- paths that point at the wrong thing: up chmods the TLS dir 0700
    # and git-ignores all of it, so it must be a directory of its own
    Case("tls-dir-is-the-inventory", gv("all", deploykit_tls_dir="."), ALLF,
         "deploykit_tls_dir"),
    Case("tls-dir-above-the-inventory", gv("all", deploykit_tls_dir=".."), ALLF,
         "deploykit_tls_dir"),
    Case("tls-dir-root", gv("all", deploykit_tls_dir="/"), ALLF, "deploykit_tls_dir"),
    Case("tls-dir-holds-other-files", gv("all", deploykit_tls_dir="group_vars"), ALLF,
         "deploykit_tls_dir"),
    # links out of the inventory are not read (a CI job reading a PR's inventory as root)
    # (a link the corpus's own writer never writes through: it is no key of `files`)
    Case("group-vars-link-to-shadow", lambda files, root: (
        (root / "group_vars" / "all").mkdir(parents=True, exist_ok=True),
        (root / "group_vars" / "all" / "shadow.yml").symlink_to("/etc/shadow")),
        "group_vars/all/shadow.yml", "(file)"),
    # the serving role copies a local model directory to every serving host: never `/`
    Case("model-root-with-config-elsewhere", lambda files, root: (
        model_config(json_text('{"num_hidden_layers": 4, "num_attention_heads": 8, '
                               '"num_key_value_heads": 8, "hidden_size": 512}'))(files, root),
        files["group_vars/vllm.yml"].update(vllm_model="/")), VF, "vllm_model", VLLM),
    Case("model-is-the-inventory", lambda files, root: files["group_vars/vllm.yml"].update(
        vllm_model=str(root)), VF, "vllm_model", VLLM),
    # --- numbers that render broken configs -----------------------------------------------
    Case("port-boolean", gv("vllm", vllm_port=True), VF, "vllm_port", VLLM),
    Case("gateway-ports-past-65535", gv("rgw", ceph_rgw_frontend_port=65534,
                                        ceph_rgw_count_per_host=4), RF,
         "ceph_rgw_frontend_port", ("rgw1", "rgw2")),
    # --- a Consul secret given to some agents only: the cluster would hold two values (set
    # nowhere it is generated by `up`: config/site_secrets.py) ---
    Case("consul-gossip-key-on-some-agents", both(
        gv("all", site_gossip="pXQAF4nCPmZJNKm0wLu+Ge2bHIJgp0GKQtLmrq3Ftdc="),
        gv("rgw", consul_gossip_key="{{ site_gossip }}")), RF, "consul_gossip_key", ("c1",),
        also=((ALLF, "site_gossip"),)),  # and inline, outside the vault
    Case("consul-service-name-quote", gv("all", consul_service_name='s3" { policy = "write" }'),
         ALLF, "consul_service_name", ALL_HOSTS),
    Case("consul-datacenter-dot", gv("all", consul_datacenter="dc1.evil"), ALLF,
         "consul_datacenter", ALL_HOSTS),
    Case("s3-user-shell", gv("all", ceph_rgw_s3_user="lmcache; rm -rf /"), ALLF,
         "ceph_rgw_s3_user", ALL_HOSTS),
    Case("monitor-user-space", gv("all", ceph_rgw_concentrator_monitor_user="admin insecure"),
         ALLF, "ceph_rgw_concentrator_monitor_user", ALL_HOSTS),
    # --- what upstream programs take and then fail on: refused at validate instead ---
    # cephadm's `rgw zonegroup modify` fails the service without all three names
    Case("rgw-realm-without-zone", gv("all", ceph_rgw_realm="kv"), ALLF, "ceph_rgw_realm"),
    # a Gaudi host has no CUDA memory for a `cuda` NIXL buffer (GDS: a backend that
    # registers VRAM, so the CUDA host's buffer stands)
    Case("nixl-cuda-buffer-on-gaudi", both(
        set_host("vllm", "gpu2", {"ansible_host": "10.0.1.2", "vllm_accelerator": "gaudi3",
                                  "vllm_version": "0.26.0"}),
        gv("vllm", lmcache_mode="nixl", lmcache_nixl_buffer_device="cuda",
           lmcache_nixl_backend="GDS", lmcache_nixl_buffer_size=1 << 30)), VF,
        "lmcache_nixl_buffer_device", ("gpu2",)),
    # NIXL's OBJ engines register host memory only: a `cuda` buffer cannot be registered
    Case("nixl-cuda-buffer-with-obj", gv("vllm", lmcache_mode="nixl",
                                         lmcache_nixl_buffer_device="cuda",
                                         lmcache_nixl_buffer_size=1 << 30),
         VF, "lmcache_nixl_buffer_device", ("gpu1", "gpu2")),
    # a DNS server that is its own resolver's upstream loops every other name
    Case("dns-upstream-is-itself", both(
        set_host("vllm", "dns1", {"ansible_host": "10.0.0.31", "vllm_accelerator": "cuda"}),
        gv("dns", coredns_upstream=["/etc/resolv.conf"])), DF, "coredns_upstream", ("dns1",)),
    # a secret with a line break would add lines to the 0600 env file; never echoed
    Case("inject-secret-newline", gv("vllm", vllm_api_key=SECRET + "\nLD_PRELOAD=/x"), VF,
         "vllm_api_key", VLLM),
    # --- addresses, ports, names and sizes that would render broken configs (class 7) ---
    Case("rgw-address-ipv6", set_host("rgw", "rgw1", {"ansible_host": "2001:db8::11"}), H,
         "ansible_host", ("rgw1",)),
    Case("consul-server-address-name", set_host("consul_servers", "c1",
                                                {"ansible_host": "c1.example.com"}), H,
         "ansible_host", ("c1",)),
    Case("serving-address-link-local", set_host("vllm", "gpu1", {
        "ansible_host": "fe80::1%eth0", "vllm_accelerator": "cuda"}), H, "ansible_host",
         ("gpu1",)),
    Case("dns-address-unspecified", raw("host_vars/dns1.yml", "deploykit_address: 0.0.0.0\n"),
         "host_vars/dns1.yml", "deploykit_address", ("dns1",)),
    Case("rgw-address-multicast", set_host("rgw", "rgw2", {"ansible_host": "224.0.0.12"}), H,
         "ansible_host", ("rgw2",)),
    Case("vllm-loopback-port-privileged", gv("vllm", vllm_loopback_port=80), VF,
         "vllm_loopback_port", VLLM),
    Case("rgw-frontend-port-privileged", gv("rgw", ceph_rgw_frontend_port=800), RF,
         "ceph_rgw_frontend_port", ("rgw1", "rgw2")),
    Case("consul-dns-port-privileged", gv("all", consul_dns_port=53), ALLF, "consul_dns_port",
         ALL_HOSTS),
    Case("consul-http-address-name", gv("all", consul_http_address="localhost"), ALLF,
         "consul_http_address", ALL_HOSTS),
    Case("consul-node-names-differ-by-case", rename_host("rgw", "rgw2", "RGW1"), H, "rgw1",
         ("RGW1", "rgw1")),
    Case("consul-node-name-underscore", rename_host("consul_servers", "c1", "consul_1"), H,
         "consul_1", ("consul_1",)),
    Case("disk-size-nan", gv("vllm", lmcache_max_local_disk_size=float("nan")), VF,
         "lmcache_max_local_disk_size", VLLM),
    Case("l1-size-infinite", gv("vllm", lmcache_server_l1_size_gb=float("inf")), VF,
         "lmcache_server_l1_size_gb", VLLM),
    Case("chunk-size-absurd", gv("vllm", lmcache_chunk_size=10**9), VF, "lmcache_chunk_size",
         VLLM),
    Case("model-config-nan-rope", model_config(json_text(
        '{"num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 512, '
        '"rope_theta": NaN}')), VF, "vllm_model_config", VLLM),
    Case("model-config-absurd-layers", model_config(json_text(
        '{"num_hidden_layers": 1000000000, "num_attention_heads": 8, "hidden_size": 512}')),
         VF, "vllm_model_config", VLLM),
    # --- monitoring and the planner (issues 21, 22) -------------------------------------
    Case("monitoring-duration-unit", gv("all", monitoring_hit_ratio_for="15 minutes"), ALLF,
         "monitoring_hit_ratio_for", ALL_HOSTS),
    Case("monitoring-ratio-above-one", gv("all", monitoring_hit_ratio_target=1.5), ALLF,
         "monitoring_hit_ratio_target", ALL_HOSTS),
    Case("monitoring-mgr-target-no-port", gv("all", monitoring_ceph_mgr_targets=["mgr1"]),
         ALLF, "monitoring_ceph_mgr_targets", ALL_HOSTS),
    Case("monitoring-mgr-target-injection", gv("all", monitoring_ceph_mgr_targets=[
        'a" ]\nrule_files: [x]:9283']), ALLF, "monitoring_ceph_mgr_targets", ALL_HOSTS),
    Case("monitoring-port-privileged", gv("all", monitoring_prometheus_port=80), ALLF,
         "monitoring_prometheus_port", ALL_HOSTS),
    Case("planner-unknown-accelerator-model", gv("vllm", vllm_accelerator_model="tpu-v5"), VF,
         "vllm_accelerator_model", VLLM),
    Case("planner-zero-bandwidth", gv("vllm", deploykit_storage_gbps=0), VF,
         "deploykit_storage_gbps", VLLM),
    Case("planner-tflops-nan", gv("vllm", vllm_prefill_tflops=float("nan")), VF,
         "vllm_prefill_tflops", VLLM),
]

COMMANDS = (("validate", "-i", "{root}"), ("render", "-i", "{root}", "-o", "{out}"))
# The bounded cases: both commands in one subprocess, through the same main() as in process.
DRIVER = """
import io, json, sys
from deploy_kit.cli.app import main
from deploy_kit.cli.environment import Environment
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    rc = main(argv, Environment(stdin=io.StringIO(), stdout=out, stderr=err,
                                stderr_isatty=False, color=False))
    results.append([int(rc), out.getvalue(), err.getvalue()])
print(json.dumps(results))
"""


def run_commands(case: Case, root: Path, out: Path, work: Path) -> list[Result]:
    """validate and render of the case's inventory; a bounded case in a subprocess with a
    timeout (a hang raises TimeoutExpired and fails the case)."""
    argvs = [[a.format(root=root, out=out) for a in argv] for argv in COMMANDS]
    if not case.bounded:
        return [run_cli(*argv, env=case.env, cwd=work) for argv in argvs]
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(argvs)],
                          capture_output=True, text=True, timeout=TIMEOUT_S, cwd=work,
                          env={**os.environ, "COLUMNS": "400", **case.env})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the commands' streams are in the JSON; the process's own stderr must be clean too
    assert "Traceback" not in proc.stderr and SECRET not in proc.stderr, proc.stderr
    return [Result(*r) for r in json.loads(proc.stdout)]


def write(root: Path, files: Files, fold: bool = True) -> None:
    """Write a case's files; `fold`: a group_vars/<g>.yml beside a group_vars/<g>/ directory
    moves into it (Ansible never reads the .yml then), unless the case is about exactly that."""
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        elif isinstance(content, str):
            target.write_text(content)
        else:
            target.write_text(yaml.safe_dump(content, allow_unicode=True))
    if fold:
        fold_shadowed_vars_files(root)


def assert_control_validates(mutate: Mutation, tmp_path: Path) -> None:
    """A valid inventory (a control) built from the base site: `validate` exits 0."""
    root = tmp_path / "inv"
    root.mkdir()
    files = base_files()
    mutate(files, root)
    write(root, files)
    result = run_cli("validate", "-i", str(root), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def snapshot(top: Path) -> set[str]:
    return {str(p.relative_to(top)) for p in top.rglob("*")}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_inventory(case: Case, tmp_path: Path) -> None:
    work = tmp_path / "case"
    root = work / "inv"
    root.mkdir(parents=True)
    files = base_files()
    case.mutate(files, root)
    write(root, files)
    before = snapshot(tmp_path)
    results = run_commands(case, root, work / "out", work)
    text = "".join(r.stdout + r.stderr for r in results)
    assert [r.returncode for r in results] == [3, 3], text  # validate and render
    assert "Traceback" not in text and "internal error" not in text, text
    assert SECRET not in text
    assert snapshot(tmp_path) == before  # nothing written: not OUT, not outside it
    for result in results:
        lines = [ln for ln in result.stderr.splitlines() if " — " in ln]
        expected = [(case.file, case.key), *case.also]
        assert len(lines) == len(expected), "\n".join(lines)
        for file, key in expected:
            hits = [ln for ln in lines if f"{file}: {key}" in ln]
            assert len(hits) == 1, (file, key, lines)
        line = next(ln for ln in lines if f"{case.file}: {case.key}" in ln)
        assert line.split(" — ", 1)[1].strip(), line  # a hint
        for host in case.hosts:
            assert host in line.split(" — ", 1)[0], (host, line)
        assert "group has no hosts" not in result.stderr


def test_corpus_size() -> None:
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)
    # what could block or read without end runs where a timeout bounds it
    assert all(c.bounded for c in CASES if "fifo" in c.name or "device" in c.name)

