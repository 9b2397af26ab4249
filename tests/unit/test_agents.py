"""The programs deploykit installs on the hosts (deploy_kit/agents): standalone scripts the
hosts run with their own python, no deploykit there, so each imports the standard library
only (the LMCache agent also boto3, inside the function that asks S3: the serving venv's,
whose python runs it); and each reads exactly the settings the render writes for it."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

from deploy_kit import agents
from deploy_kit.ops.site import open_site
from deploy_kit.render import monitoring, self_heal
from tests.conftest import CPU_TWO_INSTANCES, InventoryFactory

PROGRAMS = sorted(p for p in agents.HERE.glob("*.py") if p.name != "__init__.py")
# what a program may import only inside a function, from where the host runs it
HOST_PACKAGES = {"lmcache_heal.py": {"boto3", "botocore"}}


def imports(tree: ast.AST) -> list[tuple[str, bool]]:
    """(top-level name, at module level) of every import in the tree."""
    top = {id(node) for node in getattr(tree, "body", [])}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name.split(".")[0], id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module.split(".")[0], id(node) in top))
    return found


def test_there_are_programs() -> None:
    assert {p.name for p in PROGRAMS} == {"lmcache_heal.py", "lmcache_s3_events.py",
                                          "lmcache_quota.py"}
    assert {agents.LMCACHE_HEAL, agents.LMCACHE_S3_EVENTS, agents.LMCACHE_QUOTA} == \
        set(PROGRAMS)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_a_program_imports_only_the_standard_library(program: Path) -> None:
    found = imports(ast.parse(program.read_text()))
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    assert not [name for name, _ in found if name == "deploy_kit"]
    assert not [name for name, top in found if top and name not in stdlib]
    inside = {name for name, top in found if not top and name not in stdlib}
    assert inside <= HOST_PACKAGES.get(program.name, set())


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_a_program_is_a_script(program: Path) -> None:
    """The monitoring role installs it as it is, the serving role with the serving venv's
    python in place of the first line: either way a shebang, then `main` when run."""
    text = program.read_text()
    assert text.startswith("#!/usr/bin/python3\n")
    assert '\nif __name__ == "__main__":\n    main(' in text


def read_keys(program: Path, name: str) -> set[str]:
    """The keys the program reads as NAME["key"]."""
    return set(re.findall(rf'\b{name}\[["\'](\w+)["\']\]', program.read_text()))


def test_the_lmcache_agent_reads_what_the_render_writes(make_inventory: InventoryFactory
                                                        ) -> None:
    site = open_site(str(make_inventory(hosts=CPU_TWO_INSTANCES)))
    text = self_heal.render(site, site.hosts["cpu1"])[self_heal.CONFIG][0]
    written = json.loads(text)
    read = read_keys(agents.LMCACHE_HEAL, "C")
    assert len(read) > 20 and read <= set(written)
    # a stable file: sorted keys, the same text for the same site
    assert list(written) == sorted(written)
    assert text == self_heal.render(site, site.hosts["cpu1"])[self_heal.CONFIG][0]
    assert text.endswith("}\n")


def test_the_s3_event_counter_reads_what_the_render_writes(make_inventory: InventoryFactory
                                                           ) -> None:
    site = open_site(str(make_inventory(hosts=CPU_TWO_INSTANCES)))
    text = monitoring.render_s3_events(site.hosts["cpu1"])[monitoring.S3_EVENTS_CONFIG][0]
    written = json.loads(text)
    assert read_keys(agents.LMCACHE_S3_EVENTS, "settings") == set(written)
    assert list(written) == sorted(written)


def test_a_new_agent_is_a_new_input_of_every_host(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The render no longer writes the programs, so they are digested with deploykit's own
    code: a changed agent converges a host whose render is unchanged, as a changed render
    did when the program was rendered."""
    import shutil

    from deploy_kit.ops import inputs
    from tests.conftest import REPO

    before = inputs.code_inputs(REPO)["code_digest"]
    copy = tmp_path / "agents"
    shutil.copytree(agents.HERE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(inputs, "AGENTS", copy)
    assert inputs.code_inputs(REPO)["code_digest"] == before
    program = copy / "lmcache_heal.py"
    program.write_text(program.read_text() + "# edited\n")
    assert inputs.code_inputs(REPO)["code_digest"] != before


def test_the_serving_role_installs_the_agent_under_the_serving_venvs_python(tmp_path: Path
                                                                            ) -> None:
    """roles/serving/tasks/self_heal.yml's own task, on localhost: the program as it is but
    for its first line, the venv's python; check mode, then one change, then none."""
    import os
    import subprocess

    import yaml

    from tests.conftest import REPO

    tasks = yaml.safe_load((REPO / "roles/serving/tasks/self_heal.yml").read_text())
    task = next(t for t in tasks if t["name"] == "Write the LMCache agent")
    for owner in ("owner", "group"):  # root's on a host
        task["ansible.builtin.copy"].pop(owner)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python3").symlink_to(sys.executable)
    installed = tmp_path / "lmcache-heal"
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False,
        "vars": {"vllm_venv": str(venv), "_serving_agent_source": str(agents.LMCACHE_HEAL),
                 "_serving_agent_script": str(installed)},
        "tasks": [task]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_LOCALHOST_WARNING": "false"}

    def changed(*flags: str) -> int:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), str(playbook),
             "-i", "localhost,", "-c", "local",
             "-e", f"ansible_python_interpreter={sys.executable}", *flags],
            capture_output=True, text=True, timeout=300, cwd=REPO, env=env, check=False)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return int(re.search(r"changed=(\d+)", done.stdout).group(1))

    assert changed("--check") == 1 and not installed.exists()
    assert changed() == 1
    assert (changed(), changed("--check")) == (0, 0)
    source = agents.LMCACHE_HEAL.read_text()
    assert installed.read_text() == f"#!{venv}/bin/python3\n" + source.split("\n", 1)[1]
    assert installed.stat().st_mode & 0o777 == 0o755
    # it runs as a script: a wrong mode is refused before any settings file is read
    done = subprocess.run([str(installed)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert (done.returncode, done.stderr) == (1, "usage: lmcache-heal heal|restart\n")
