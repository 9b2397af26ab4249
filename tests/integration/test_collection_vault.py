"""The installed collection under plain ansible-playbook with vault ids: its render step
gets exactly the secrets and every -i ansible-playbook was given and leaves no rendered
tree behind, and deploykit.kvcache.verify writes the verify report and fails on FAIL.

Real Ansible throughout: `ansible-galaxy collection build/install`, `ansible-vault encrypt
--vault-id prod@FILE` (a 1.2 file) and `ansible-playbook`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

BIN = Path(sys.executable).parent
FQDN = "s3.vaulted.test"  # only in the vault file: seen in the render only if it was opened


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None, check: bool = True,
        ) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300,
                            env={**os.environ, **(env or {})})
    if check:
        assert result.returncode == 0, f"{argv}: {result.stdout[-3000:]}{result.stderr[-2000:]}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ansible.cfg of a controller with the built collection installed (no checkout)."""
    work = tmp_path_factory.mktemp("collection")
    run([str(BIN / "ansible-galaxy"), "collection", "build", "--force", "--output-path",
         str(work), str(REPO)], work)
    tarball = next(work.glob("deploykit-kvcache-*.tar.gz"))
    run([str(BIN / "ansible-galaxy"), "collection", "install", "--force", "-p",
         str(work / "collections"), str(tarball)], work)
    cfg = work / "ansible.cfg"
    cfg.write_text(f"[defaults]\ncollections_path = {work / 'collections'}\n"
                   "host_key_checking = False\n")
    return cfg


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the example inventory with group_vars/all/vault.yml encrypted for id prod."""
    inventory = tmp_path / "site"
    shutil.copytree(REPO / "inventory" / "example", inventory)
    vault = inventory / "group_vars" / "all" / "vault.yml"
    vault.write_text(f"deploykit_s3_fqdn: {FQDN}\n")
    password = tmp_path / "prod-pass"
    password.write_text("prod-vault-password\n")
    run([str(BIN / "ansible-vault"), "encrypt", "--vault-id", f"prod@{password}", str(vault)],
        tmp_path)
    assert vault.read_text().startswith("$ANSIBLE_VAULT;1.2;AES256;prod")
    return inventory, password


def playbook_env(cfg: Path, local_tmp: Path) -> dict[str, str]:
    local_tmp.mkdir(exist_ok=True)
    return {"ANSIBLE_CONFIG": str(cfg), "PYTHONPATH": str(REPO), "ANSIBLE_LOCAL_TEMP":
            str(local_tmp), "PATH": f"{BIN}:{os.environ['PATH']}"}


def leftovers(local_tmp: Path) -> list[str]:
    return sorted(str(p.relative_to(local_tmp)) for p in local_tmp.rglob("*"))


def test_render_gets_the_vault_ids_and_every_source_and_leaves_nothing(
        installed: Path, site: tuple[Path, Path], tmp_path: Path) -> None:
    inventory, password = site
    local_tmp = tmp_path / "local-tmp"
    env = playbook_env(installed, local_tmp)
    playbook = [str(BIN / "ansible-playbook"), "-i", str(inventory), "--vault-id",
                f"prod@{password}"]
    run([*playbook, "deploykit.kvcache.render"], tmp_path, env)
    assert leftovers(local_tmp) == []  # the rendered tree went with ansible-playbook
    # what the roles see: a later play copies the tree; a second -i adds a DNS host
    # several -i are merged by Ansible's own inventory API, which ranks group_vars/vllm.yml
    # above hosts.yml's vllm_cuda vars (deploykit's YAML reader does not): pin the H100s'
    # memory share per host so both readers agree
    for host in ("gpu-h100-1", "gpu-h100-2"):
        (inventory / "host_vars").mkdir(exist_ok=True)
        (inventory / "host_vars" / f"{host}.yml").write_text(
            "vllm_gpu_memory_utilization: 0.90\n")
    extra = tmp_path / "extra.ini"
    extra.write_text("[dns]\ndns9 ansible_host=10.67.67.39\n")
    probe = tmp_path / "probe.yml"
    probe.write_text(f"""---
- name: Render
  ansible.builtin.import_playbook: deploykit.kvcache.render
- name: Keep what the roles would read
  hosts: localhost
  gather_facts: false
  tasks:
    # cp, not the copy module: that copies the 165 files one module run at a time
    - name: Copy the rendered tree
      ansible.builtin.command: cp -a "{{{{ deploykit_render_dir }}}}/." "{tmp_path / 'kept'}/"
      changed_when: true
""")
    (tmp_path / "kept").mkdir()
    result = run([*playbook, "-i", str(extra), str(probe)], tmp_path, env)
    settings = json.loads((tmp_path / "kept" / "gpu-h100-1" / ".deploykit" /
                           "settings.json").read_text())
    assert FQDN in json.dumps(settings)  # read from the prod-encrypted file
    assert "errantly sent data" not in result.stdout + result.stderr
    assert (tmp_path / "kept" / "dns9").is_dir()  # from the second source
    assert leftovers(local_tmp) == []


def test_the_render_step_fails_in_one_line_on_an_invalid_site(
        installed: Path, site: tuple[Path, Path], tmp_path: Path) -> None:
    inventory, password = site
    (inventory / "group_vars" / "all" / "broken.yml").write_text("lmcache_chunk_size: -1\n")
    result = run([str(BIN / "ansible-playbook"), "-i", str(inventory), "--vault-id",
                  f"prod@{password}", "deploykit.kvcache.render"], tmp_path,
                 playbook_env(installed, tmp_path / "local-tmp"), check=False)
    assert result.returncode != 0
    assert "broken.yml: lmcache_chunk_size" in result.stdout + result.stderr


def test_the_verify_playbook_writes_the_report_and_fails_on_fail(
        installed: Path, site: tuple[Path, Path], tmp_path: Path) -> None:
    """The example's hosts do not exist: every reachability check FAILs, so the job does."""
    inventory, password = site
    report = tmp_path / "out" / "verify.json"
    started = time.monotonic()
    result = run([str(BIN / "ansible-playbook"), "-i", str(inventory), "--vault-id",
                  f"prod@{password}", "deploykit.kvcache.verify", "-e",
                  f"deploykit_verify_report={report}"], tmp_path,
                 playbook_env(installed, tmp_path / "local-tmp"), check=False)
    seconds = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]  # a task failed
    assert "Assert no check failed" in output and "check(s) failed" in output
    doc = json.loads(report.read_text())
    assert doc["schema"] == "deploykit-verify/1" and doc["failed"] > 0
    assert {f["status"] for f in doc["findings"]} >= {"fail"}
    assert FQDN in json.dumps(doc)  # the checks asked for the vaulted name
    print(f"verify playbook: {seconds:.1f} s, {doc['failed']} FAIL")


def test_up_reads_each_identity_once_and_hands_ansible_files(
        site: tuple[Path, Path], tmp_path: Path) -> None:
    """ANSIBLE_VAULT_IDENTITY_LIST names a password script: deploykit runs it once, and the
    ansible-playbook it starts gets a 0600 file instead (the script would run again; a
    prompt would ask again). The example's hosts do not exist: Ansible reaches the hosts
    (exit 5, unreachable) only after it decrypted the group_vars with what it was handed."""
    inventory, password = site
    count = tmp_path / "runs-of-the-script"
    script = tmp_path / "prod-pass.sh"
    script.write_text(f"#!/bin/sh\necho x >> {count}\ncat {password}\n")
    script.chmod(0o700)
    runs = tmp_path / "runs"
    result = run([sys.executable, "-m", "deploy_kit", "up", "-i", str(inventory), "--check",
                  "--forks", "16"], tmp_path,
                 {"ANSIBLE_VAULT_IDENTITY_LIST": f"prod@{script}", "PYTHONPATH": str(REPO),
                  "DEPLOYKIT_RUNS_DIR": str(runs), "ANSIBLE_HOST_KEY_CHECKING": "False"},
                 check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 5, output[-3000:]  # unreachable, not a vault error
    assert count.read_text().count("x") == 1
    summary = json.loads(next(runs.glob("*-up/summary.json")).read_text())
    argv = " ".join(summary["argv"])
    assert "--vault-id prod@" in argv and "prod-vault-password" not in argv
    handed = Path(argv.split("--vault-id prod@", 1)[1].split()[0])
    assert not handed.parent.exists()  # the private directory went with the run
    assert "prod-vault-password" not in (next(runs.glob("*-up")) / "ansible.log").read_text()
