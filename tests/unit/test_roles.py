"""Roles stay in step with the Python model: defaults, argument specs, and no drift."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.config.models import SECRET_KEYS, HostConfig, PoolSpec
from tests.conftest import REPO

ROLES = sorted(p for p in (REPO / "roles").iterdir() if p.is_dir())


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_defaults_match_argument_specs(role: Path) -> None:
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    owned = {name for name in options if name.startswith(role.name + "_")}
    secrets = {name for name in owned if options[name].get("no_log")}
    assert set(defaults) <= owned, role.name
    # a setting's one default is the Python model's (settings.json always carries it); a role
    # default is left only for a secret (never in settings.json) or a role-only knob
    settings = set(HostConfig.model_fields) - set(SECRET_KEYS)
    assert not (set(defaults) - secrets) & settings, f"{role.name} repeats models.py defaults"
    for name in defaults:
        assert name.startswith(role.name + "_"), f"{name} lacks the {role.name}_ prefix"
        assert options[name].get("description"), f"{name} is undocumented"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_defaults_equal_the_python_defaults(role: Path) -> None:
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    model = HostConfig()
    for name, value in defaults.items():
        if name not in HostConfig.model_fields:
            continue  # role-only knob (package lists, release checksums)
        python_value = getattr(model, name)
        if name == "ceph_rgw_pools_list":
            python_value = [p.model_dump(exclude_defaults=True) | {"name": p.name}
                            for p in python_value]
            value = [PoolSpec(**v).model_dump(exclude_defaults=True) | {"name": v["name"]}
                     for v in value]
        if python_value is None:
            python_value = ""
        assert value == python_value, f"{role.name}: {name} drifted from HostConfig"


# What a task reads: expressions (when/that/loop...) whole, elsewhere what {{ }} encloses.
EXPRESSION_KEYS = frozenset({"when", "that", "loop", "failed_when", "changed_when", "until"})
JINJA = re.compile(r"{{(.*?)}}|{%(.*?)%}", re.S)
QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
INPUT = re.compile(r"(?<![\w.])((?:ceph_rgw|consul|coredns|lmcache|vllm|serving|resolver|router|"
                   r"monitoring|deploykit)_[a-z0-9_]+)\b")


def _expressions(node: Any, key: str = "") -> list[str]:
    if isinstance(node, dict):
        return [e for k, v in node.items() for e in _expressions(v, str(k))]
    if isinstance(node, list):
        return [e for item in node for e in _expressions(item, key)]
    if not isinstance(node, str):
        return []
    if key in EXPRESSION_KEYS:
        return [node]
    return ["".join(groups) for groups in JINJA.findall(node)]


def _defined(node: Any) -> set[str]:
    """Names the role gives itself: registered results, facts, task and play vars."""
    found: set[str] = set()
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "register" and isinstance(v, str):
                found.add(v)
            elif k in ("ansible.builtin.set_fact", "vars") and isinstance(v, dict):
                found.update(v)
            elif k == "loop_var" and isinstance(v, str):
                found.add(v)
            found |= _defined(v)
    elif isinstance(node, list):
        for item in node:
            found |= _defined(item)
    return found


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_argument_specs_name_every_input_the_role_reads(role: Path) -> None:
    """One way into a role: every inventory or run variable its tasks and handlers read is
    an option of its argument spec (deploykit_inputs digests exactly these, so a host whose
    inputs changed is never left out of a run)."""
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    options = {name for entry in specs.values() for name in (entry or {}).get("options") or {}}
    documents = [yaml.safe_load(path.read_text()) for folder in ("tasks", "handlers", "vars")
                 for path in sorted((role / folder).glob("*.yml"))]
    defined = set().union(*(_defined(doc) for doc in documents))
    defined |= set(yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}) \
        if (role / "defaults" / "main.yml").exists() else set()
    read = {name for doc in documents for expression in _expressions(doc)
            for name in INPUT.findall(QUOTED.sub("", expression))}
    assert read - defined - options == set(), role.name


def _tasks_from_targets() -> set[tuple[str, str]]:
    """(role, entry point) of every include_role/import_role with tasks_from in roles/ and
    playbooks/."""
    found: set[tuple[str, str]] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                spec = node.get(key)
                if isinstance(spec, dict) and spec.get("tasks_from"):
                    found.add((str(spec["name"]).removeprefix("deploykit.kvcache."),
                               str(spec["tasks_from"]).removesuffix(".yml")))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for path in sorted([*(REPO / "roles").glob("*/*/*.yml"), *(REPO / "playbooks").glob("*.yml")]):
        walk(yaml.safe_load(path.read_text()))
    return found


def test_every_tasks_from_target_is_a_declared_entry_point() -> None:
    """One way into a role: each entry point another role or a playbook reaches has an
    argument spec (Ansible then validates its inputs), and its task file exists."""
    targets = _tasks_from_targets()
    assert {("ceph_rgw", "drain"), ("consul", "leave"), ("ceph_rgw", "destroy")} <= targets
    missing = []
    for role, entry in sorted(targets):
        specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml")
                               .read_text())["argument_specs"]
        assert (REPO / "roles" / role / "tasks" / f"{entry}.yml").exists(), (role, entry)
        if entry not in specs:
            missing.append(f"{role} {entry}")
    assert missing == []


# A value the render computed (deploy_kit/ops/rundir.py host_settings): `_<area>_<name>`
# (one underscore; a role's own facts and registers use two).
COMPUTED = re.compile(r"(?<![\w.])(_(?:ceph_rgw|consul|coredns|lmcache|vllm|serving|router|"
                      r"monitoring|deploykit)_[a-z0-9_]+)\b")


def _role_documents(role: Path) -> list[Any]:
    return [yaml.safe_load(path.read_text()) for folder in ("tasks", "handlers", "vars")
            for path in sorted((role / folder).glob("*.yml"))]


def _reads(documents: list[Any], pattern: re.Pattern[str]) -> set[str]:
    return {name for doc in documents for expression in _expressions(doc)
            for name in pattern.findall(QUOTED.sub("", expression))}


@cache
def _rendered_settings_names() -> frozenset[str]:
    """Every name some host's settings.json holds, over the example site and the golden sites
    (a computed name appears only where it applies: TLS, a serving host, a local model)."""
    from deploy_kit.ops.rundir import SETTINGS_PATH, role_tree
    from deploy_kit.ops.site import open_site

    names: set[str] = set()
    for inventory in [REPO / "inventory" / "example",
                      *sorted((REPO / "tests" / "golden").glob("*/inventory"))]:
        for files in role_tree(open_site(str(inventory))).values():
            if SETTINGS_PATH in files:
                names.update(json.loads(files[SETTINGS_PATH].content))
    return frozenset(names | {"_deploykit_site"})  # site.json, loaded under one name


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_argument_specs_name_every_computed_setting_the_role_reads(
        role: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The computed names come from settings.json like every other setting: each one a role's
    tasks or handlers read is an option of its argument spec, and exists in the render (a
    misspelt name would read as undefined only on the host that reaches the task)."""
    monkeypatch.setenv("DK_GOLDEN_ACCESS", "GOLDENACCESSKEY")  # the golden sites' S3 keys
    monkeypatch.setenv("DK_GOLDEN_SECRET", "golden-secret-not-real")
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    options = {name for entry in specs.values() for name in (entry or {}).get("options") or {}}
    read = _reads(_role_documents(role), COMPUTED)
    assert read - options == set(), role.name
    assert read <= _rendered_settings_names(), sorted(read - _rendered_settings_names())


def test_one_serving_role_keeps_the_phase_tags_of_the_three_it_replaced() -> None:
    """roles/serving replaced serving_env, lmcache and vllm: their phase tags still select
    tasks (docs and users' --tags name them), one handler topic restarts, and the role has
    the roll and destroy entry points the serving and down playbooks include."""
    from deploy_kit.ansible.tags import known_tags

    role = REPO / "roles" / "serving"
    assert not any((REPO / "roles" / old).exists() for old in ("serving_env", "lmcache", "vllm"))
    assert {"serving_env_install", "lmcache_install", "lmcache_configure", "lmcache_service",
            "vllm_install", "vllm_configure", "vllm_service"} <= known_tags(REPO)
    handlers = yaml.safe_load((role / "handlers" / "main.yml").read_text())
    # the serving front's reload is its own topic: graceful, in the configure play
    assert [h["listen"] for h in handlers] == ["serving restart", "serving front reload"]
    tasks = "\n".join(p.read_text() for p in sorted((role / "tasks").glob("*.yml")))
    assert set(re.findall(r"^\s+notify: (.+)$", tasks, re.M)) == {"serving restart",
                                                                   "serving front reload"}
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    assert set(specs["argument_specs"]) == {"main", "roll", "destroy", "rotate_credentials"}


def test_the_rendered_instances_carry_what_the_serving_role_reads() -> None:
    """The contract between the render and the role's instance loops: each _vllm_instances
    entry has the keys the tasks read, and the tree holds the env file and unit it names."""
    from deploy_kit.ops.rundir import SETTINGS_PATH, role_tree
    from deploy_kit.ops.site import open_site

    tasks = "\n".join(p.read_text() for p in (REPO / "roles" / "serving" / "tasks").glob("*.yml"))
    read = set(re.findall(r"\b(?:item|__serving_instance)\.([a-z_]+)", tasks))
    # the health gate's port: vLLM's loopback one by default, the front's with
    # __serving_gate_port
    read |= set(re.findall(r"__serving_gate_port \| default\('([a-z_]+)'\)", tasks))
    read |= set(re.findall(r"__serving_gate_port: ([a-z_]+)$", tasks, re.M))
    assert read == {"unit", "port", "loopback_port", "env_file", "unit_file"}, read
    tree = role_tree(open_site(str(REPO / "inventory" / "example")))
    counts = []
    for host, files in tree.items():
        if SETTINGS_PATH not in files:
            continue
        settings = json.loads(files[SETTINGS_PATH].content)
        for instance in settings.get("_vllm_instances") or []:
            assert read <= set(instance), (host, instance)
            assert instance["env_file"] in files and instance["unit_file"] in files, instance
        counts.append(len(settings.get("_vllm_instances") or []))
    assert max(counts) > 1  # the example has hosts of several instances
