"""KV encryption at rest (lmcache_l2_encryption, docs/security.md "Encryption at rest"): the
server's S3 adapter gets LMCache's aesgcm serde naming only the master key's path; the key
is a generated site secret that no rendered file or argv ever holds; the rules refuse it
where LMCache cannot encrypt; plan counts the 29-byte frame in every object and the bucket;
`deploykit secrets rotate l2-key` rolls a new key and says the cache goes cold. LMCache's own
serde factory builds the rendered serde in the upstream tier (tests/upstream/
test_lmcache_config.py)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.config import names, site_secrets
from deploy_kit.config.models import HostConfig
from deploy_kit.core.geometry import AESGCM_FRAME_BYTES
from deploy_kit.render import lmcache_server
from tests.cli import run_cli
from tests.conftest import InventoryFactory
from tests.unit.test_check_mode_writes_nothing import tree_digest
from tests.unit.test_secrets_agree_module import agree
from tests.unit.test_secrets_store import fake_runner, stored  # noqa: F401 (the fixture)
from tests.unit.test_vault import encrypt, password_file

Runs = list[dict[str, Any]]
ON = {"lmcache_l2_encryption": True}
KEY = base64.b64encode(bytes(range(7, 39))).decode()  # 32 bytes, as the generator makes


def _server(**settings: Any) -> HostConfig:
    return HostConfig(vllm_accelerator="cuda", lmcache_topology="server", **settings)


def test_the_adapter_has_no_serde_without_encryption() -> None:
    adapter = lmcache_server.l2_adapter(_server())
    assert adapter is not None and adapter["type"] == "s3" and "serde" not in adapter


@pytest.mark.parametrize("bits", [128, 256])
def test_the_adapter_encrypts_with_a_path_never_a_key(bits: int) -> None:
    c = _server(lmcache_l2_encryption=True, lmcache_l2_encryption_aes_bits=bits,
                lmcache_l2_master_key=KEY)
    adapter = lmcache_server.l2_adapter(c)
    assert adapter is not None
    assert adapter["serde"] == {"type": "aesgcm", "key_provider": "hkdf", "aes_bits": bits,
                                "master_key_path": "/etc/deploykit/lmcache-l2-master.key"}
    argv = lmcache_server.server_argv(c)
    assert json.loads(argv[argv.index("--l2-adapter") + 1]) == adapter
    assert KEY not in " ".join(argv) + lmcache_server.render_unit(c)


def test_the_generated_key_is_32_random_bytes_of_base64() -> None:
    values = {site_secrets.generate(site_secrets.L2_MASTER_KEY) for _ in range(4)}
    assert len(values) == 4
    for value in values:
        assert len(base64.b64decode(value, validate=True)) == 32
        assert site_secrets.value_problem(site_secrets.L2_MASTER_KEY, value) is None
    assert site_secrets.value_problem("lmcache_l2_master_key_next", "c2hvcnQ=") == \
        "is not 32 bytes of base64 (an L2 master key)"


def _problems(root: Path) -> str:
    result = run_cli("validate", "-i", str(root))
    assert result.returncode != 0
    return result.stderr


def test_encryption_is_refused_in_process_and_off_s3_with_the_fix(
        make_inventory: InventoryFactory) -> None:
    root = make_inventory(vllm=ON, files={"host_vars/gpu1.yml": "lmcache_topology: inprocess\n",
                                          "host_vars/gpu2.yml": "lmcache_mode: dram\n"})
    out = _problems(root)
    assert ("vllm.yml: lmcache_l2_encryption: true on an in-process LMCache host: in-process "
            "LMCache has no encrypting L2 adapter and would store plaintext (host gpu1) — set "
            "lmcache_topology: server") in out
    assert ("vllm.yml: lmcache_l2_encryption: true with lmcache_mode dram: only the S3 "
            "adapter encrypts") in out
    assert "(host gpu2) — use lmcache_mode: s3, or lmcache_l2_encryption: false" in out


def test_the_hosts_of_a_bucket_encrypt_alike(make_inventory: InventoryFactory) -> None:
    root = make_inventory(vllm=ON, files={"host_vars/gpu2.yml": "lmcache_l2_encryption: false\n"})
    assert "lmcache_l2_encryption: false differs from the true of the other hosts of bucket" \
        in _problems(root)
    bits = make_inventory(vllm=ON, files={
        "host_vars/gpu2.yml": "lmcache_l2_encryption_aes_bits: 128\n"})
    assert "lmcache_l2_encryption_aes_bits: 128 differs" in _problems(bits)
    apart = make_inventory(vllm=ON, files={
        "host_vars/gpu2.yml": "lmcache_l2_encryption: false\nlmcache_s3_bucket: plain\n"})
    assert run_cli("validate", "-i", str(apart)).returncode == 0


def test_the_key_is_needed_only_where_a_host_encrypts(make_inventory: InventoryFactory) -> None:
    plain = run_cli("secrets", "list", "--json", "-i", str(make_inventory()))
    assert site_secrets.L2_MASTER_KEY not in plain.stdout
    root = make_inventory(vllm=ON)
    assert run_cli("secrets", "generate", "-i", str(root)).returncode == 0
    value = stored(root)[site_secrets.L2_MASTER_KEY]
    listed = run_cli("secrets", "list", "--json", "-i", str(root))
    rows = {r["name"]: r for r in json.loads(listed.stdout)["secrets"]}
    assert rows[site_secrets.L2_MASTER_KEY]["source"] == "generated"
    assert value not in listed.stdout + listed.stderr


def test_no_rendered_file_holds_the_key(make_inventory: InventoryFactory,
                                        tmp_path: Path) -> None:
    """The key from the vault, so the site being rendered holds it: neither its text nor its
    bytes are in any file of the render (units, env files, settings.json), only its path."""
    root = make_inventory(vllm={**ON, "lmcache_l2_master_key": "{{ vault_l2 }}"}, files={
        "group_vars/all/vault.yml": encrypt(yaml.safe_dump({"vault_l2": KEY}))})
    out = tmp_path / "out"
    result = run_cli("render", "-i", str(root), "-o", str(out), "--vault-password-file",
                     str(password_file(tmp_path)))
    assert result.returncode == 0, result.stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) > 20
    raw = base64.b64decode(KEY)
    for path in files:
        data = path.read_bytes()
        assert KEY.encode() not in data and raw not in data, path
    assert KEY not in result.stdout + result.stderr
    unit = (out / "gpu1" / lmcache_server.UNIT_PATH.lstrip("/")).read_text()
    assert '"master_key_path":"/etc/deploykit/lmcache-l2-master.key"' in unit
    settings = json.loads((out / "gpu1" / ".deploykit" / "settings.json").read_text())
    assert settings["_lmcache_l2_master_key_path"] == names.lmcache_l2_master_key_path(
        HostConfig())
    assert "lmcache_l2_master_key" not in settings


def test_plan_counts_the_frame_in_each_object_and_the_bucket(
        make_inventory: InventoryFactory) -> None:
    def model(root: Path) -> dict[str, Any]:
        result = run_cli("plan", "--json", "-i", str(root))
        assert result.returncode == 0, result.stderr
        plan = json.loads(result.stdout)
        return plan["models"][0] | {"warnings": plan["warnings"]}

    plain = model(make_inventory())
    sealed = model(make_inventory(vllm=ON))
    assert AESGCM_FRAME_BYTES == 29 and sealed["l2_frame_bytes"] == 29
    assert sealed["object_bytes"] == plain["object_bytes"] + 29
    chunks = plain["storage_bytes"] // plain["chunk_bytes"]
    assert sealed["storage_bytes"] == plain["storage_bytes"] + 29 * chunks
    # a 64 MiB object is 8 awscrt parts; 29 bytes more make a ninth
    assert plain["object_bytes"] == 64 * 1024**2
    assert sealed["s3_put_requests_per_chunk"] == plain["s3_put_requests_per_chunk"] + 1
    note = [w for w in sealed["warnings"] if w.startswith("lmcache_l2_encryption on")]
    assert len(note) == 1 and "unreadable: the cache goes cold" in note[0]
    assert not [w for w in plain["warnings"] if "lmcache_l2_encryption" in w]


def test_rotate_rolls_a_new_key_and_says_the_cache_goes_cold(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs) -> None:  # noqa: F811
    root = make_inventory(vllm=ON)
    assert run_cli("secrets", "generate", "-i", str(root)).returncode == 0
    old = stored(root)[site_secrets.L2_MASTER_KEY]
    runs = {"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")}
    before = tree_digest(root)
    refused = run_cli("secrets", "rotate", "l2-key", "-i", str(root), env=runs)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    checked = run_cli("secrets", "rotate", "l2-key", "--check", "-i", str(root), env=runs)
    assert checked.returncode == 0, checked.stderr
    assert "would store lmcache_l2_master_key_next" in checked.stderr
    assert tree_digest(root) == before
    fake_runner.clear()
    done = run_cli("secrets", "rotate", "l2-key", "--yes", "-i", str(root), env=runs)
    assert done.returncode == 0, done.stderr
    assert [Path(a).name for a in fake_runner[-1]["argv"] if str(a).endswith(".yml")
            and "/playbooks/" in str(a)] == ["rotate_l2_key.yml"]
    handed = fake_runner[-1]["content"]["deploykit_generated_secrets"]
    new = handed["lmcache_l2_master_key_next"]
    assert handed["lmcache_l2_master_key"] == old and new != old
    assert fake_runner[-1]["mode"] == 0o600
    assert stored(root)[site_secrets.L2_MASTER_KEY] == new
    assert "lmcache_l2_master_key_next" not in stored(root)
    text = " ".join(done.stderr.split())
    assert "every chunk stored under the old key becomes unreadable" in text
    assert "the bucket lifecycle expires them" in text
    for value in (old, new):
        assert value not in done.stdout + done.stderr + " ".join(map(str,
                                                                    fake_runner[-1]["argv"]))
    # the store's own name is taken too (as for the other kinds)
    assert run_cli("secrets", "rotate", "lmcache_l2_master_key", "--yes", "-i", str(root),
                   env=runs).returncode == 0


def test_rotate_refuses_a_site_that_encrypts_nothing_or_a_vault_key(
        make_inventory: InventoryFactory, tmp_path: Path, fake_runner: Runs) -> None:  # noqa: F811
    result = run_cli("secrets", "rotate", "l2-key", "--yes", "-i", str(make_inventory()))
    assert result.returncode == 2 and "encrypts no KV cache" in result.stderr
    vaulted = make_inventory(vllm={**ON, "lmcache_l2_master_key": "{{ vault_l2 }}"}, files={
        "group_vars/all/vault.yml": encrypt(yaml.safe_dump({"vault_l2": KEY}))})
    before = tree_digest(vaulted)
    result = run_cli("secrets", "rotate", "l2-key", "--yes", "-i", str(vaulted),
                     "--vault-password-file", str(password_file(tmp_path)))
    assert result.returncode == 2 and "deploykit does not write it" in result.stderr
    assert "openssl rand -base64 32" in " ".join(result.stderr.split())
    assert tree_digest(vaulted) == before and not fake_runner


def test_a_host_holding_another_master_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lmcache-l2-master.key"
    path.write_text(KEY)  # as the role writes it: the text, no newline
    params = {"values": {"lmcache_l2_master_key": KEY}, "consul_secrets": "", "vllm_env": "",
              "vllm_keys": "", "consul_url": "", "l2_key": str(path)}
    assert agree.compare(params)["differ"] == []
    other = site_secrets.generate(site_secrets.L2_MASTER_KEY)
    assert agree.compare(params | {"values": {"lmcache_l2_master_key": other}})["differ"] == \
        ["lmcache_l2_master_key"]
    # a rotation under way: the next key is accepted too
    assert agree.compare(params | {"values": {"lmcache_l2_master_key": other,
                                              "lmcache_l2_master_key_next": KEY}})["differ"] == []
