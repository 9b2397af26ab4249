"""A second controller converges the same site (docs/security.md, "Generated secrets"): the
lab has a vault (its password file outside the inventory, named by `deploykit lab status
--json` as `vault_password_file`), so the secrets the first `up` generated are in the
committed vault file `.deploykit-secrets.vault.yml` and the site's name in
`.deploykit-site.yml`. A git clone of the lab's inventory, as a CI runner gets it (ignored
files dropped), in a directory of another name, converged with `--vault-password-file` and
nothing else: changed 0, no Consul or vLLM secret file on any host changed, and verify
green. tests/lab/core/test_5_second_controller_refused.py proves the same clone without
the vault password is refused before any host changes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lab.conftest import INSTALLED_CLI, LAB_INVENTORY, LAB_SITE, Lab, runs_dirs

pytestmark = pytest.mark.lab

HOSTS = {"lab1": "10.99.0.11", "lab2": "10.99.0.12", "lab3": "10.99.0.13",
         "lab4": "10.99.0.14"}
# every file a re-keying `up` would rewrite: Consul's secrets, the vLLM key files
SECRET_FILES = "find /etc/consul.d /etc/deploykit -maxdepth 1 -type f 2>/dev/null | sort | " \
    "xargs -r sha256sum"


def vault_password_file(lab: Lab) -> str:
    doc = json.loads(lab.deploykit("lab", "status", "--json").stdout)
    path = doc["vault_password_file"]
    assert Path(path).is_file() and not Path(path).is_relative_to(LAB_INVENTORY)
    return str(path)


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=deploykit-lab", "-c", "user.email=lab@example.test",
                    "-c", "init.defaultBranch=main", *args], cwd=cwd, check=True,
                   capture_output=True, text=True, timeout=120)


def ci_clone(tmp_path: Path) -> Path:
    """The lab's inventory as a CI runner gets it: committed (its .gitignore files keep
    what is never committed out), then cloned into a directory of another name."""
    repo = tmp_path / "site-repo"
    shutil.copytree(LAB_INVENTORY, repo, symlinks=True)
    git("init", "-q", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "the lab site", cwd=repo)
    clone = tmp_path / "ci-runner-checkout"
    git("clone", "-q", str(repo), str(clone), cwd=tmp_path)
    return clone


def without_vault_variable(lab: Lab, *args: str) -> subprocess.CompletedProcess[str]:
    """A deploykit call given the vault on its command line only (Lab.env exports it)."""
    env = {k: v for k, v in lab.env().items() if not k.startswith("ANSIBLE_VAULT")}
    cli = [INSTALLED_CLI] if INSTALLED_CLI else [sys.executable, "-m", "deploy_kit"]
    result = subprocess.run([*cli, *args], cwd=LAB_SITE, capture_output=True, text=True,
                            timeout=1800, env=env)
    lab.outputs.append(result.stdout + result.stderr)
    return result


def secret_digests(lab: Lab) -> dict[str, str]:
    return {name: lab.ssh(address, SECRET_FILES) for name, address in HOSTS.items()}


def test_a_git_clone_with_the_vault_password_converges_with_nothing_changed(
        converged: Lab, tmp_path: Path) -> None:
    password = vault_password_file(converged)
    vault_file = LAB_INVENTORY / ".deploykit-secrets.vault.yml"
    assert vault_file.read_text().startswith("$ANSIBLE_VAULT;")
    assert not (LAB_INVENTORY / ".deploykit-secrets").exists()  # no local store: a vault
    assert "deploykit_site_name: lab" in (LAB_INVENTORY / ".deploykit-site.yml").read_text()

    clone = ci_clone(tmp_path)
    assert (clone / vault_file.name).is_file() and (clone / ".deploykit-site.yml").is_file()
    assert clone.name != LAB_INVENTORY.name  # the committed identity names the site
    before = secret_digests(converged)
    started = set(runs_dirs())
    result = without_vault_variable(converged, "up", "-i", str(clone),
                                    "--vault-password-file", password)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "secrets: generated" not in result.stdout + result.stderr
    summary = json.loads((sorted(set(runs_dirs()) - started)[-1] / "summary.json").read_text())
    assert summary["rc"] == 0 and not summary["failed"], summary["failed"]
    assert summary["changed"] == 0, summary["changed_tasks"]
    assert secret_digests(converged) == before
    assert not (clone / ".deploykit-secrets").exists()  # nothing generated beside the clone

    verify = without_vault_variable(converged, "verify", "-i", str(clone),
                                    "--vault-password-file", password, "--json")
    findings = json.loads(verify.stdout)["findings"]
    failed = [f for f in findings if f["status"] == "fail"]
    assert verify.returncode == 0 and not failed, failed
