"""A second controller without the site's secrets is refused before any host changes.

What a CI runner gets: a git clone of the lab's inventory (committed files only: the
generated-secrets store and the TLS directory are git-ignored, so they are not in it), and
no vault password. `up` from that clone must stop before its first change: every Consul
and vLLM secret file on every host is byte for byte what it was, no Consul or vLLM unit
restarted, the exit is non-zero, and the refusal names the secret the clone lacks (or the
vault it cannot open). The same clone with the vault password is the other half
(test_4_second_controller.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deploy_kit.config.site_secrets import GENERATED
from tests.lab.conftest import INSTALLED_CLI, LAB_INVENTORY, LAB_SITE, Lab

pytestmark = pytest.mark.lab

# every file a secret lives in on a lab host, and the units that read them
FILES = "/etc/consul.d /etc/deploykit"
UNITS = "consul vllm vllm-1 lmcache-server"


def _addresses() -> dict[str, str]:
    hosts = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())
    found: dict[str, str] = {}
    for group in hosts["all"]["children"].values():
        for name, values in ((group or {}).get("hosts") or {}).items():
            if (values or {}).get("ansible_connection") != "local":  # the controller itself
                found[name] = (values or {}).get("ansible_host", name)
    return found


def _state(lab: Lab) -> dict[str, str]:
    """Per host: the sha256 of every Consul and deploykit file, and when each unit started."""
    script = (f"find {FILES} -maxdepth 1 -type f -exec sha256sum {{}} + 2>/dev/null | sort; "
              f"for u in {UNITS}; do echo $u $(systemctl show -p ActiveEnterTimestamp "
              "--value $u 2>/dev/null); done")
    return {name: lab.ssh(address, script) for name, address in sorted(_addresses().items())}


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=ci", "-c", "user.email=ci@example.invalid",
                    *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=120)


def _clone(tmp: Path) -> Path:
    """A git clone of the lab inventory as a CI runner checks it out (under the same
    directory name: the site is the same site)."""
    repo = tmp / "repo" / "lab"
    shutil.copytree(LAB_INVENTORY, repo, symlinks=True)
    _git("init", "-q", cwd=repo)
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "the site", cwd=repo)
    clone = tmp / "runner" / "lab"
    clone.parent.mkdir(parents=True)
    _git("clone", "-q", str(repo), str(clone), cwd=tmp)
    assert not (clone / ".deploykit-secrets").exists(), "the store was committed"
    return clone


def test_a_clone_without_the_secrets_is_refused_before_any_host_changes(
        converged: Lab, tmp_path: Path) -> None:
    clone = _clone(tmp_path)
    before = _state(converged)
    assert any("/etc/consul.d/secrets.json" in text for text in before.values()), before
    env = {k: v for k, v in converged.env().items()
           if k not in ("ANSIBLE_VAULT_PASSWORD_FILE", "ANSIBLE_VAULT_IDENTITY_LIST",
                        "DEPLOYKIT_VAULT_PASSWORD_FILE")}
    cli = [INSTALLED_CLI] if INSTALLED_CLI else [sys.executable, "-m", "deploy_kit"]
    result = subprocess.run([*cli, "up", "--inventory", str(clone)], cwd=LAB_SITE, env=env,
                            stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=1800)
    out = result.stdout + result.stderr
    converged.outputs.append(out)
    assert result.returncode != 0, out[-4000:]
    assert _state(converged) == before, "a host changed: " + out[-4000:]
    refusals = [ln for ln in out.splitlines()
                if "than this run holds" in ln or ln.startswith("error:")]
    assert refusals, out[-4000:]
    assert any(name in ln or "vault" in ln for ln in refusals for name in GENERATED), refusals
    # the first controller, with the site's secrets, still converges the site
    again = converged.converge()
    assert again["rc"] == 0 and not again["failed"], again["failed"]
