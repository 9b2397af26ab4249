"""No message quotes a secret. A known secret is planted in every input that may carry one
(inventory values under a credential's name, anything in a vault, -e values, the generated
store) in a way each error path refuses, and every command that reads it (validate, plan,
up --check) is run: the secret is in neither stdout nor stderr, and the refusal is one of
deploykit's (never an internal error)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.cli import Result, run_cli
from tests.conftest import BASE_HOSTS, encrypt_vault, vault_password_file

SECRET = "PLANTEDs3cr3tZq9"
# any part of it: a message that cuts a value ([:40]) still quotes its start
PIECES = ("PLANTED", "s3cr3tZq9")
VAULTED = "<vault>"  # a file written vault-encrypted


@dataclass(frozen=True)
class Case:
    files: dict[str, str]
    extra: tuple[str, ...] = ()  # -e values (up only); "@NAME": a file written beside
    extra_files: dict[str, str] = field(default_factory=dict)
    refused: bool = True  # exit 2 or 3 before any host (False: valid, run only to read it)


S = SECRET
CASES: dict[str, Case] = {
    # inventory values
    "inline-secret": Case({"group_vars/vllm.yml": f"vllm_api_key: {S}\n"}),
    "inline-secret-then-bad-yaml": Case({"group_vars/vllm.yml":
                                         f'vllm_api_key: "{S}\nnext: [\n'}),
    "secret-named-unowned": Case({"group_vars/vllm.yml": f"my_db_password: {S}\n"
                                  "vllm_port: nope\n"}),
    "secret-in-extra-args": Case({"group_vars/vllm.yml":
                                  f'vllm_extra_args: ["--api-key={S}"]\n'
                                  f"vllm_extra_env: {{VLLM_API_KEY: {S}, AWS_SECRET: {S}}}\n"}),
    # vault values
    "vault-bad-secret": Case({"group_vars/all/vault.yml": VAULTED +
                              f'vllm_api_key: "{S}\\n"\nconsul_gossip_key: "{S}"\n'
                              f"consul_acl_management_token: {S}\n"}),
    "vault-wrong-type": Case({"group_vars/all/vault.yml": VAULTED +
                              f"deploykit_s3_access_key: [{S}]\n"
                              f"deploykit_s3_secret_key: {{a: {S}}}\n"}),
    "vault-bad-yaml": Case({"group_vars/all/vault.yml": VAULTED + f'vllm_api_key: "{S}\nx: [\n'}),
    "vault-bad-settings": Case({"group_vars/all/vault.yml": VAULTED +
                                f'vllm_served_model_name: "{S}!!"\nvllm_port: "{S}"\n'
                                f'deploykit_s3_fqdn: "{S}..x"\n'
                                f'vllm_extra_env: {{"bad {S}": x}}\n'}),
    "vault-copied-to-a-setting": Case({
        "group_vars/all/vault.yml": VAULTED + f"vault_k: {S}\n",
        "group_vars/vllm.yml": "vllm_api_key: '{{ vault_k }}'\n"
                               "vllm_extra_env: {X: '{{ vault_k }}'}\n"
                               "lmcache_extra_config: {s3_secret: '{{ vault_k }}'}\n"}),
    "vault-host-vars": Case({"host_vars/gpu1/vault.yml": VAULTED +
                             f"vllm_api_key: {S}\nvllm_tensor_parallel_size: {S}\n"}),
    # -e values (up reads them)
    "extra-var-setting": Case({}, extra=(f"vllm_api_key={S}",)),
    "extra-var-malformed": Case({}, extra=(f'{{"vllm_api_key": "{S}"',)),
    "extra-var-internal": Case({}, extra=(f'{{"_deploykit_site": "{S}"}}',)),
    "extra-var-file-bad-yaml": Case({}, extra=("@vars.yml",),
                                    extra_files={"vars.yml": f'k: "{S}\nnext: [\n'}),
    "extra-var-vaulted": Case({}, extra=("@vault-vars.yml",),
                              extra_files={"vault-vars.yml": VAULTED +
                                           f"vllm_api_key: {S}\n_deploykit_x: {S}\n"}),
}

# the generated store (ops/secrets_store.py): its messages are helper H-A's part
STORE_CASES: dict[str, Case] = {
    "store-bad-yaml": Case({".deploykit-secrets/secrets.yml":
                            f'deploykit_generated_secrets:\n  vllm_api_key: "{S}\n  x: [\n'}),
    "store-bad-value": Case({".deploykit-secrets/secrets.yml":
                             f'deploykit_generated_secrets:\n  vllm_api_key: "{S}\\nx"\n'
                             f"  consul_gossip_key: {S}\n"}),
}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(encrypt_vault(text.removeprefix(VAULTED)) if text.startswith(VAULTED)
                    else text)


def _site(tmp_path: Path, case: Case) -> Path:
    root = tmp_path / "inv"
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(BASE_HOSTS))
    for rel, text in case.files.items():
        _write(root / rel, text)
        if rel.startswith(".deploykit-secrets/"):
            (root / ".deploykit-secrets").chmod(0o700)
            (root / rel).chmod(0o600)
    for rel, text in case.extra_files.items():
        _write(tmp_path / rel, text)
    return root


def _runs(tmp_path: Path, case: Case) -> dict[str, Result]:
    root = _site(tmp_path, case)
    vault = ["--vault-password-file", str(vault_password_file(tmp_path))]
    extra = [w for e in case.extra for w in ("-e", e if not e.startswith("@")
                                             else f"@{tmp_path / e[1:]}")]
    # a host deploykit would contact does not answer at once (nothing may be contacted)
    env = {"ANSIBLE_TIMEOUT": "2", "ANSIBLE_SSH_RETRIES": "0"}
    runs = {"up --check": run_cli("up", "-i", str(root), *vault, "--check", *extra,
                                  env=env, cwd=tmp_path)}
    if not case.extra:
        runs["validate"] = run_cli("validate", "-i", str(root), *vault, cwd=tmp_path)
        runs["plan"] = run_cli("plan", "-i", str(root), *vault, cwd=tmp_path)
    return runs


def _check(tmp_path: Path, case: Case) -> None:
    for verb, result in _runs(tmp_path, case).items():
        text = result.stdout + result.stderr
        assert not any(piece in text for piece in PIECES), (verb, text[-1500:])
        assert "internal error" not in text and "Traceback" not in text, (verb, text[-800:])
        if case.refused:
            assert result.returncode in (2, 3), (verb, result.returncode, text[-800:])


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_error_path_quotes_a_planted_secret(tmp_path: Path, name: str) -> None:
    _check(tmp_path, CASES[name])


@pytest.mark.parametrize("name", sorted(STORE_CASES))
def test_no_store_error_quotes_a_planted_secret(tmp_path: Path, name: str) -> None:
    _check(tmp_path, STORE_CASES[name])


def test_the_harness_sees_a_quoted_secret(tmp_path: Path) -> None:
    """The check itself can fail: a served model name is not a secret, and its message
    quotes it (the harness would catch a secret quoted the same way)."""
    case = Case({"group_vars/vllm.yml": f'vllm_served_model_name: "{S}!!"\n'})
    with pytest.raises(AssertionError):
        _check(tmp_path, case)
    assert os.environ.get("ANSIBLE_TIMEOUT") is None  # run_cli put the variables back
