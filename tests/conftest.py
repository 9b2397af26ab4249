from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite tests/golden expected files from the current renderers")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """The lab's ACL test hands the rest of the lab session a vault password through
    ANSIBLE_VAULT_PASSWORD_FILE (as CI would); no later test, nor its module fixtures,
    may inherit it. tryfirst: before any fixture of the item is set up."""
    if "tests/lab/" not in str(item.path):
        os.environ.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


BASE_HOSTS = {
    "all": {"children": {
        "ceph_admin": {"hosts": {"adm1": {"ansible_host": "10.0.0.10"}}},
        "rgw": {"hosts": {"rgw1": {"ansible_host": "10.0.0.11"},
                          "rgw2": {"ansible_host": "10.0.0.12"}}},
        "consul_servers": {"hosts": {"c1": {"ansible_host": "10.0.0.21"}}},
        "dns": {"hosts": {"dns1": {"ansible_host": "10.0.0.31"}}},
        # the default Qwen3-32B at TP 1 on one H100: its 40K context fits beside vLLM's CUDA
        # graphs (config/fit.py graph_bytes) at 0.94, or at the default 0.92 with 32K. The
        # host var travels with gpu1 into the INI and script forms; the group's covers a
        # replaced gpu1
        "vllm": {"hosts": {"gpu1": {"ansible_host": "10.0.1.1", "vllm_accelerator": "cuda",
                                    "vllm_gpu_memory_utilization": 0.94},
                           "gpu2": {"ansible_host": "10.0.1.2", "vllm_accelerator": "rocm"}},
                 "vars": {"vllm_max_model_len": 32768}},
    }}
}

InventoryFactory = Callable[..., Path]

# one CPU serving host running two vLLM instances behind its LMCache server
CPU_TWO_INSTANCES = {"all": {"children": {
    "ceph_admin": {"hosts": {"adm1": {"ansible_host": "10.0.0.10"}}},
    "rgw": {"hosts": {"rgw1": {"ansible_host": "10.0.0.11"}}},
    "consul_servers": {"hosts": {"c1": {"ansible_host": "10.0.0.21"}}},
    "dns": {"hosts": {"dns1": {"ansible_host": "10.0.0.31"}}},
    "vllm": {"hosts": {"cpu1": {"ansible_host": "10.0.1.1", "vllm_instances": 2}},
             "vars": {"vllm_accelerator": "cpu", "vllm_version": "0.32.0",
                      "lmcache_topology": "server", "vllm_model": "Qwen/Qwen3-8B"}}}}}


@pytest.fixture
def make_inventory(tmp_path: Path) -> InventoryFactory:
    """Write a small valid inventory; keyword args add group_vars/<group>.yml contents."""

    def make(hosts: dict | None = None, files: dict[str, str] | None = None,
             **group_vars: dict) -> Path:
        root = tmp_path / "inv"
        (root / "group_vars").mkdir(parents=True, exist_ok=True)
        (root / "hosts.yml").write_text(yaml.safe_dump(hosts or BASE_HOSTS))
        for group, data in group_vars.items():
            (root / "group_vars" / f"{group}.yml").write_text(yaml.safe_dump(data))
        for rel, text in (files or {}).items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(textwrap.dedent(text))
        fold_shadowed_vars_files(root)
        return root

    return make


def fold_shadowed_vars_files(root: Path) -> None:
    """Ansible reads group_vars/<g>/ and then never group_vars/<g>.yml (find_vars_files
    stops at the first match): a fixture that writes both gets <g>.yml moved into the
    directory as 00-main.yml, the layout an operator would use."""
    for sub in ("group_vars", "host_vars"):
        for path in sorted((root / sub).glob("*.y*ml")) if (root / sub).is_dir() else []:
            folder = path.with_suffix("")
            if folder.is_dir() and not (folder / "00-main.yml").exists():
                path.rename(folder / "00-main.yml")


VAULT_PASSWORD = "deploykit-test-vault"


def encrypt_vault(text: str) -> str:
    """ansible-vault encrypt, in process (secrets are accepted only from encrypted files)."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    return VaultLib([("default", VaultSecret(VAULT_PASSWORD.encode()))]).encrypt(text).decode()


def vault_password_file(directory: Path) -> Path:
    path = directory / "vault-password"
    path.write_text(VAULT_PASSWORD + "\n")
    return path


def inventory_problems(inventory: Path) -> list:  # list[Problem]
    """What validation refuses in an inventory (none: it opens)."""
    from deploy_kit.core.errors import InventoryError
    from deploy_kit.ops.site import open_site

    try:
        open_site(str(inventory))
    except InventoryError as exc:
        return list(exc.problems)
    return []
