"""The engines users already run: a wheel that works outside the checkout, the Ansible
collection built and installed, and the execution-environment context for ansible-builder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

BIN = Path(sys.executable).parent
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300,
                            env={**os.environ, **(env or {})})
    assert result.returncode == 0, f"{argv}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    build = tmp_path_factory.mktemp("build")
    # build in a copy: setuptools writes build/ and *.egg-info next to the sources
    source = build / "src"
    shutil.copytree(REPO, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".git", "runs", "build", "dist", "*.egg-info", ".*_cache", "__pycache__"))
    run([str(BIN / "pip"), "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
         "."], cwd=source)
    run([str(BIN / "ansible-galaxy"), "collection", "build", "--force", "--output-path",
         str(out), "."], cwd=source)
    return out


def listed_tasks(argv: list[str], cwd: Path, env: dict[str, str], rendered: Path) -> str:
    return run([*argv, "--list-tasks", "-e", f"deploykit_render_dir={rendered}"], cwd, env).stdout


def test_wheel_carries_the_content_and_runs_outside_the_checkout(dist: Path,
                                                                 tmp_path: Path) -> None:
    site = tmp_path / "site"
    with zipfile.ZipFile(dist / f"deploykit-{VERSION}-py3-none-any.whl") as wheel:
        wheel.extractall(site)
        names = wheel.namelist()
    # the lab harness is its own distribution (deploykit-lab/): the product wheel carries none of it
    assert not [n for n in names if "deploykit_lab" in n or n.startswith("deploy_kit/lab/")]
    content = site / "deploy_kit" / "_content"
    for path in ("playbooks/site.yml", "templates/Corefile.j2", "ansible.cfg",
                 "collections/ansible_collections/deploykit/kvcache/roles/ceph_rgw/tasks/main.yml",
                 "collections/ansible_collections/deploykit/kvcache/plugins/modules/"
                 "deploykit_ceph_pool.py"):
        assert (content / path).is_file(), path
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    inventory = elsewhere / "prod"
    shutil.copytree(REPO / "inventory" / "example", inventory)
    env = {"PYTHONPATH": str(site), "PATH": f"{BIN}:{os.environ['PATH']}"}
    out = elsewhere / "out"
    run([sys.executable, "-m", "deploy_kit", "render", "-i", str(inventory), "-o", str(out),
         "--for-roles"], elsewhere, env)
    assert (out / "gpu-h100-1" / "etc" / "systemd" / "system" / "vllm.service").is_file()
    command = run([sys.executable, "-m", "deploy_kit", "up", "-i", str(inventory),
                   "--print-command"], elsewhere, env).stdout
    assert str(content / "playbooks" / "site.yml") in command
    tasks = listed_tasks([str(BIN / "ansible-playbook"), "-i", str(inventory),
                          str(content / "playbooks" / "site.yml")], elsewhere,
                         {**env, "ANSIBLE_CONFIG": str(content / "ansible.cfg")}, out)
    assert "deploykit.kvcache.ceph_rgw : Write the concentrator configuration" in tasks


def test_collection_installs_and_its_playbook_resolves_roles_by_fqcn(dist: Path,
                                                                      tmp_path: Path) -> None:
    collections = tmp_path / "collections"
    tarball = dist / f"deploykit-kvcache-{VERSION}.tar.gz"
    # --force: the checkout's own collections/ (an ANSIBLE_CONFIG in the environment) may
    # already list deploykit.kvcache; this test wants the tarball's copy
    run([str(BIN / "ansible-galaxy"), "collection", "install", "--force", "-p",
         str(collections), str(tarball)], tmp_path)
    installed = collections / "ansible_collections" / "deploykit" / "kvcache"
    assert (installed / "MANIFEST.json").is_file()
    assert not (installed / "deploy_kit").exists() and not (installed / "tests").exists()
    assert not (installed / "deploykit-lab").exists()
    rendered = tmp_path / "rendered"
    run([sys.executable, "-m", "deploy_kit", "render", "--for-roles", "-i", "example", "-o",
         str(rendered)], REPO)
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text(f"[defaults]\ncollections_path = {collections}\n")
    env = {"ANSIBLE_CONFIG": str(cfg)}
    tasks = listed_tasks([str(BIN / "ansible-playbook"), "-i", str(REPO / "inventory" /
                                                                   "example"),
                          "deploykit.kvcache.site"], tmp_path, env, rendered)
    for role in ("ceph_rgw_pools", "ceph_rgw", "ceph_rgw_s3", "consul", "coredns", "resolver",
                 "serving"):
        assert f"deploykit.kvcache.{role} : " in tasks, role
    doc = run([str(BIN / "ansible-doc"), "deploykit.kvcache.deploykit_ceph_pool"], tmp_path,
              env).stdout
    assert "pg_num" in doc


def test_execution_environment_context_is_complete(dist: Path, tmp_path: Path) -> None:
    work = tmp_path / "ee"
    (work / "dist").mkdir(parents=True)
    shutil.copy(REPO / "execution-environment.yml", work)
    for artefact in dist.iterdir():
        shutil.copy(artefact, work / "dist")
    run([str(BIN / "ansible-builder"), "create", "-f", "execution-environment.yml",
         "--context", str(work / "context"), "--output-filename", "Containerfile"], work)
    containerfile = (work / "context" / "Containerfile").read_text()
    # no version spelt in the definition: what dist/ holds is installed
    assert "pip install --no-cache-dir /tmp/deploykit/deploykit-*-py3-none-any.whl" in \
        containerfile
    assert "ansible-galaxy collection install" in containerfile
    staged = work / "context" / "_build" / "deploykit"
    assert (staged / f"deploykit-{VERSION}-py3-none-any.whl").is_file()
    assert (staged / f"deploykit-kvcache-{VERSION}.tar.gz").is_file()
    # the base image is one exact build, never a moving tag
    base = next(line for line in containerfile.splitlines() if line.startswith("ARG EE_BASE_IMAGE"))
    assert "ubi9/python-311:" in base and not base.rstrip('"').endswith((":latest", ":9"))
    # what make ee-context checks before ansible-builder runs
    assert run([sys.executable, str(REPO / "tools" / "version.py"), "--check-dist",
                str(work / "dist")], REPO).returncode == 0
    (work / "dist" / "deploykit-0.0.1-py3-none-any.whl").write_text("")
    stale = subprocess.run([sys.executable, str(REPO / "tools" / "version.py"), "--check-dist",
                            str(work / "dist")], capture_output=True, text=True, timeout=60)
    assert stale.returncode == 1 and "deploykit-0.0.1-py3-none-any.whl" in stale.stderr


def test_another_ee_gets_the_collections_requirements(dist: Path, tmp_path: Path) -> None:
    """An EE that installs deploykit.kvcache (galaxy requirements) gets deploykit, pinned to
    the collection's version, and ssh: ansible-builder's own introspection reads them from
    the collection's meta/execution-environment.yml."""
    collections = tmp_path / "collections"
    run([str(BIN / "ansible-galaxy"), "collection", "install", "--force", "-p",
         str(collections), str(dist / f"deploykit-kvcache-{VERSION}.tar.gz")], tmp_path)
    pip, bindep = tmp_path / "requirements.txt", tmp_path / "bindep.txt"
    import ansible_builder._target_scripts.introspect as introspect

    run([sys.executable, introspect.__file__, "introspect", str(collections), "--write-pip",
         str(pip), "--write-bindep", str(bindep)], tmp_path)
    wanted = pip.read_text().splitlines()
    assert f"deploykit=={VERSION}  # from collection deploykit.kvcache" in wanted, wanted
    assert any(line.startswith("boto3>=") for line in wanted), wanted
    assert "openssh-clients [platform:rpm]  # from collection deploykit.kvcache" in \
        bindep.read_text().splitlines()
