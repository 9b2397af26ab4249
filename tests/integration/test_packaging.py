"""The engines users already run: the standard build (`python -m build`: the sdist, then the
wheel built from that sdist) installed into a fresh venv outside the checkout and used from
another directory, the Ansible collection built and installed, and the execution-environment
context for ansible-builder.

One build and one install serve the module (the install resolves the dependencies from the
package index: measured about 20 s with a warm pip cache, docs/install.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

BIN = Path(sys.executable).parent
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
WHEEL = f"deploykit-{VERSION}-py3-none-any.whl"
SDIST = f"deploykit-{VERSION}.tar.gz"
COLLECTION = "collections/ansible_collections/deploykit/kvcache"
# what every build must carry, relative to deploy_kit/_content in the wheel
CONTENT = ("ansible.cfg", "playbooks/site.yml", "templates/Corefile.j2",
           "inventory/example/hosts.yml", "inventory/example/group_vars/all/vault.yml.example",
           "tools/lmcache_roundtrip.py", "tools/lmcache_nixl_roundtrip.py",
           f"{COLLECTION}/galaxy.yml", f"{COLLECTION}/meta/runtime.yml",
           f"{COLLECTION}/playbooks/site.yml",
           f"{COLLECTION}/roles/ceph_rgw/tasks/main.yml",
           f"{COLLECTION}/roles/coredns/tasks/main.yml",
           f"{COLLECTION}/roles/serving/templates/aws-credentials.j2",
           f"{COLLECTION}/plugins/modules/deploykit_ceph_pool.py")
# the same files in the sdist, relative to its top directory
SOURCES = ("ansible.cfg", "galaxy.yml", "MANIFEST.in", "playbooks/site.yml",
           "templates/Corefile.j2", "inventory/example/hosts.yml", "meta/runtime.yml",
           "roles/ceph_rgw/tasks/main.yml", "plugins/modules/deploykit_ceph_pool.py",
           "tools/lmcache_roundtrip.py", "tools/lmcache_nixl_roundtrip.py")


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600,
                            env=env if env is not None else os.environ.copy())
    assert result.returncode == 0, f"{argv}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
    return result


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: no checkout on the import path, no ansible.cfg."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "ANSIBLE_CONFIG", "DEPLOYKIT_PROJECT_DIR")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # build in a copy: setuptools writes build/ and *.egg-info next to the sources
    copy = tmp_path_factory.mktemp("build") / "src"
    shutil.copytree(REPO, copy, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".git", "runs", "build", "dist", "*.egg-info", ".*_cache", "__pycache__"))
    return copy


@pytest.fixture(scope="module")
def dist(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # isolated, as a user's or CI's build: setuptools comes from the index, not this venv
    run([sys.executable, "-m", "build", "-o", str(out), "."], cwd=source)
    run([str(BIN / "ansible-galaxy"), "collection", "build", "--force", "--output-path",
         str(out), "."], cwd=source)
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no system site packages) with the built wheel installed."""
    root = tmp_path_factory.mktemp("installed") / "venv"
    run([sys.executable, "-m", "venv", str(root)], cwd=root.parent, env=clean_env())
    run([str(root / "bin" / "pip"), "install", "-q", str(dist / WHEEL)], cwd=root.parent,
        env=clean_env())
    return root


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A directory outside any checkout holding a copy of the example inventory as `prod`."""
    work = tmp_path / "elsewhere"
    work.mkdir()
    shutil.copytree(REPO / "inventory" / "example", work / "prod")
    return work


def content_of(venv: Path) -> Path:
    found = list(venv.glob("lib/python3*/site-packages/deploy_kit/_content"))
    assert len(found) == 1, found
    return found[0]


def listed_tasks(argv: list[str], cwd: Path, env: dict[str, str], rendered: Path) -> str:
    return run([*argv, "--list-tasks", "-e", f"deploykit_render_dir={rendered}"], cwd, env).stdout


def test_the_sdist_carries_everything_the_wheel_bundles(dist: Path) -> None:
    with tarfile.open(dist / SDIST) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    missing = [p for p in SOURCES if p not in names]
    assert not missing, missing
    assert not [n for n in names if n.startswith(("deploykit-lab/", "tests/", "runs/"))
                or "__pycache__" in n or n.endswith("/vault.yml")]


def test_the_wheel_from_the_sdist_carries_the_content_and_no_lab(dist: Path) -> None:
    with zipfile.ZipFile(dist / WHEEL) as wheel:
        names = set(wheel.namelist())
    missing = [p for p in CONTENT if f"deploy_kit/_content/{p}" not in names]
    assert not missing, missing
    # the lab harness is its own distribution (deploykit-lab/): the product wheel carries none
    assert not [n for n in names if "deploykit_lab" in n or n.startswith("deploy_kit/lab/")
                or "/go/" in n]


@pytest.mark.parametrize("what", ["checkout", "sdist"])
def test_pip_builds_the_same_files_from_the_checkout_and_from_the_sdist(
        what: str, dist: Path, source: Path, tmp_path: Path) -> None:
    """`pip wheel .` and what `pip install deploykit-*.tar.gz` builds first."""
    target = "." if what == "checkout" else str(dist / SDIST)
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), target], cwd=source)
    with zipfile.ZipFile(tmp_path / WHEEL) as direct, zipfile.ZipFile(dist / WHEEL) as built:
        assert set(direct.namelist()) == set(built.namelist())


def test_a_build_missing_a_declared_source_fails(source: Path, tmp_path: Path) -> None:
    broken = tmp_path / "src"
    shutil.copytree(source, broken, symlinks=True, ignore=shutil.ignore_patterns("tools"))
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                             "--no-build-isolation", "-w", str(tmp_path / "out"), "."],
                            cwd=broken, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "tools/lmcache_roundtrip.py is missing" in result.stdout + result.stderr


def test_the_installed_wheel_renders_and_plans_a_run_from_elsewhere(venv: Path,
                                                                    elsewhere: Path) -> None:
    deploykit, env = str(venv / "bin" / "deploykit"), clean_env()
    content = content_of(venv)
    out = elsewhere / "out"
    run([deploykit, "render", "-i", "prod", "-o", str(out), "--for-roles"], elsewhere, env)
    assert (out / "gpu-h100-1" / "etc" / "systemd" / "system" / "vllm.service").is_file()
    # phase tags are read from the wheel's roles (the collection copy), not refused
    command = run([deploykit, "up", "-i", "prod", "--tags", "coredns_configure",
                   "--print-command"], elsewhere, env).stdout
    assert str(content / "playbooks" / "site.yml") in command
    assert "--tags coredns_configure" in command
    tasks = listed_tasks([str(venv / "bin" / "ansible-playbook"), "-i", "prod",
                          str(content / "playbooks" / "site.yml")], elsewhere,
                         clean_env(ANSIBLE_CONFIG=str(content / "ansible.cfg")), out)
    assert "deploykit.kvcache.ceph_rgw : Write the concentrator configuration" in tasks
    assert not (content / "runs").exists() and not (content / "inventory" / "prod").exists()


def test_the_installed_wheel_finds_its_roundtrip_drivers(venv: Path, elsewhere: Path) -> None:
    script = ("from deploy_kit.project import DRIVERS, driver_path\n"
              "for mode in DRIVERS: print(driver_path(mode))\n")
    paths = run([str(venv / "bin" / "python"), "-c", script], elsewhere, clean_env()).stdout
    for path in paths.split():
        assert Path(path).is_file() and Path(path).is_relative_to(content_of(venv)), path


def test_the_installed_wheel_digests_the_same_code_as_the_checkout(venv: Path,
                                                                   elsewhere: Path) -> None:
    """Converge records compare this digest: a host converged from a checkout is not
    re-converged from the wheel of the same tree (roles and plugins: the collection copy)."""
    from deploy_kit.ops.inputs import code_inputs

    script = ("import json; from deploy_kit.ops.inputs import code_inputs; "
              "from deploy_kit.project import project_dir; "
              "print(json.dumps(code_inputs(project_dir())))")
    installed = json.loads(run([str(venv / "bin" / "python"), "-c", script], elsewhere,
                               clean_env()).stdout)
    assert installed == code_inputs(REPO)
    assert installed["role_options"]


def test_a_broken_plugin_warns_and_every_verb_keeps_working(venv: Path, elsewhere: Path,
                                                            tmp_path: Path) -> None:
    """An installed distribution whose entry point cannot be imported."""
    plugin = tmp_path / "plugins"
    info = plugin / "broken_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[deploykit.plugins]\nbroken = no_such_module_for_deploykit:app\n")
    env = clean_env(PYTHONPATH=str(plugin))
    deploykit = str(venv / "bin" / "deploykit")
    version = run([deploykit, "--version"], elsewhere, env)
    assert version.stdout == f"deploykit {VERSION}\n"
    warnings = version.stderr.splitlines()
    assert len(warnings) == 1, version.stderr
    assert "deploykit.plugins broken = no_such_module_for_deploykit:app" in warnings[0]
    assert "ModuleNotFoundError" in warnings[0]
    run([deploykit, "plan", "-i", "prod"], elsewhere, env)


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
    env = {**os.environ, "ANSIBLE_CONFIG": str(cfg)}
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
