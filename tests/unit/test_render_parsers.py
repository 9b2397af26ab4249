"""Rendered files parsed by the component's own parser, or checked for what LMCache reads."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from deploy_kit.core import compat
from deploy_kit.ops.site import open_site
from deploy_kit.ops.tls import CA, create_ca, issue
from deploy_kit.render.files import render_site
from deploy_kit.render.tls import HAPROXY_PEM_PATH
from deploy_kit.render.vllm import vllm_argv
from tests.conftest import REPO, InventoryFactory
from tests.tools import require_tool

EXAMPLE = REPO / "inventory" / "example"
GOLDEN_CASES = sorted(p / "inventory" for p in (REPO / "tests" / "golden").iterdir()
                      if (p / "inventory").is_dir())


def all_trees() -> list[tuple[str, dict]]:
    return [(str(inv), render_site(open_site(str(inv)))) for inv in [EXAMPLE, *GOLDEN_CASES]]


def issued_pem() -> bytes:
    ca_pem, ca_key = create_ca("t")
    ca = CA(x509.load_pem_x509_certificate(ca_pem),
            serialization.load_pem_private_key(ca_key, None), ca_pem)
    cert, key = issue(ca, ["s3.t.test", "*.s3.t.test"], [], 30)
    return cert + key


def test_haproxy_accepts_every_concentrator_config(tmp_path: Path) -> None:
    haproxy = require_tool("haproxy")
    checked = 0
    for name, tree in all_trees():
        for host, files in tree.items():
            if "/etc/haproxy/haproxy.cfg" in files:
                cfg = tmp_path / f"{host}.cfg"
                content = files["/etc/haproxy/haproxy.cfg"].content
                if HAPROXY_PEM_PATH in content:  # TLS: haproxy -c loads a deploykit-issued PEM
                    pem = tmp_path / f"{host}.pem"
                    pem.write_bytes(issued_pem())
                    content = content.replace(HAPROXY_PEM_PATH, str(pem))
                cfg.write_text(content)
                result = subprocess.run([haproxy, "-c", "-q", "-f", str(cfg)],
                                        capture_output=True, text=True)
                assert result.returncode == 0, f"{name} {host}: {result.stderr}"
                checked += 1
    assert checked >= 4


def test_structured_files_parse_and_lmcache_keys_are_read_by_that_version() -> None:
    for name, tree in all_trees():
        for host, files in tree.items():
            for path, rendered in files.items():
                if path.endswith(".json"):
                    json.loads(rendered.content)
                if path.endswith("lmcache.yaml"):
                    cfg = yaml.safe_load(rendered.content)
                    site = open_site(name)
                    table = compat.lmcache(site.hosts[host].config.lmcache_version)
                    extra = cfg.get("extra_config", {})
                    s3_keys = {k for k in extra if k.startswith("s3_") or k in
                               ("disable_tls", "save_chunk_meta")}
                    assert s3_keys <= table.s3_extra_keys, f"{name} {host}: {s3_keys}"
                    assert not set(extra) & table.s3_dead_keys
                    if "remote_url" in cfg:
                        assert set(table.s3_required_keys) <= set(extra)


def test_secrets_only_in_0600_credentials_files(make_inventory: InventoryFactory,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DK_SECRET", "VERY-SECRET-VALUE-123")
    site = open_site(str(make_inventory(
        all={"deploykit_s3_secret_key": "{{ lookup('env', 'DK_SECRET') }}"})))
    for files in render_site(site).values():
        for path, rendered in files.items():
            holds = "VERY-SECRET-VALUE-123" in rendered.content
            assert holds == path.endswith("/aws/credentials"), path
            if holds:
                assert rendered.mode == 0o600 and rendered.secret


def test_kv_transfer_config_fields_accepted_by_pinned_vllm(
        make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory(vllm={"vllm_kv_transfer_extra": {"kv_port": 15000},
                                              "lmcache_topology": "inprocess"})))
    for host in site.group("vllm"):
        argv = vllm_argv(host)
        config = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        assert set(config) <= compat.vllm(host.config.vllm_version).kv_transfer_fields
        assert config["kv_connector"] == "LMCacheConnectorV1" and config["kv_port"] == 15000
        assert "--rope-scaling" not in argv
        # the row's default (config/cache.py DEFAULT_BLOCK_SIZE: 16 in the CUDA default
        # 0.32, 64 in ROCm's 0.34), pinned explicitly
        expected = {"cuda": "16", "rocm": "64"}[str(host.config.vllm_accelerator)]
        assert argv[argv.index("--block-size") + 1] == expected, host.name


def test_gaudi_gets_its_block_size_and_env(make_inventory: InventoryFactory) -> None:
    import copy

    from tests.conftest import BASE_HOSTS

    hosts = copy.deepcopy(BASE_HOSTS)
    hosts["all"]["children"]["vllm"]["hosts"] = {"h1": {"vllm_accelerator": "gaudi3",
                                                        "vllm_version": "0.26.0"}}
    site = open_site(str(make_inventory(hosts)))
    files = render_site(site)["h1"]
    assert "--block-size 128" in files["/etc/systemd/system/vllm.service"].content
    env = files["/etc/deploykit/vllm.env"].content
    assert "PT_HPU_GPU_MIGRATION=1" in env and "PYTHONHASHSEED=67" in env
