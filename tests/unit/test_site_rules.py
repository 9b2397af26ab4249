"""Every validation rule runs on every site, whatever a caller imported first: no module adds
a rule by being imported, and ops/site.py's SITE_RULES lists every rule there is (config's
families and render/knobs.py), each once."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

from tests.conftest import REPO

# Prints the rules a fresh interpreter sees: SITE_RULES as ops/site.py built it, and every
# family's list at the end. argv[1] "render-first": every render module (and the CLI, which
# imports most of the package) is imported before ops/site.py; "after": after it.
PROBE = r"""
import importlib, json, pkgutil, sys

def import_everything():
    import deploy_kit.render
    for info in pkgutil.walk_packages(deploy_kit.render.__path__, "deploy_kit.render."):
        importlib.import_module(info.name)
    importlib.import_module("deploy_kit.cli.app")

if sys.argv[1] == "render-first":
    import_everything()
from deploy_kit.config import rules as config_rules
from deploy_kit.ops import site
from deploy_kit.render import knobs
if sys.argv[1] == "after":
    import_everything()
name = lambda f: f"{f.__module__}.{f.__qualname__}"
print(json.dumps({
    "site": [name(f) for f in site.SITE_RULES],
    "families": [name(f) for family in (*config_rules.FAMILIES, knobs) for f in family.RULES],
}))
"""


def _rules_in_fresh_interpreter(order: str) -> dict[str, list[str]]:
    out = subprocess.run([sys.executable, "-c", PROBE, order], cwd=REPO, check=True,
                         capture_output=True, text=True, timeout=120).stdout
    seen: dict[str, list[str]] = json.loads(out)
    return seen


def _decorated_rules() -> set[str]:
    """module.function for every function of deploy_kit/ decorated `@rule` (a site rule)."""
    found = set()
    for path in sorted((REPO / "deploy_kit").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and any(
                    isinstance(d, ast.Name) and d.id == "rule" for d in node.decorator_list):
                found.add(f"{module}.{node.name}")
    return found


def test_rule_set_does_not_depend_on_imports() -> None:
    alone = _rules_in_fresh_interpreter("alone")
    render_first = _rules_in_fresh_interpreter("render-first")
    after = _rules_in_fresh_interpreter("after")
    assert alone["site"] == render_first["site"] == after["site"]
    # nothing joined a family after SITE_RULES was built from it
    assert alone["families"] == render_first["families"] == after["families"] == alone["site"]


def test_site_rules_list_every_decorated_rule_once() -> None:
    rules = _rules_in_fresh_interpreter("alone")["site"]
    assert len(rules) == len(set(rules))
    assert set(rules) == _decorated_rules()
    assert any(r.startswith("deploy_kit.render.knobs.") for r in rules)
    assert len(rules) >= 52  # 50 of config's, 2 of render's when the families were split


def test_config_does_not_import_the_renderers() -> None:
    """config/rules.py lists config's families only; render's join in ops/site.py."""
    from deploy_kit.config import rules as config_rules
    from deploy_kit.ops.site import SITE_RULES
    from deploy_kit.render import knobs

    assert (*config_rules.RULES, *knobs.RULES) == SITE_RULES
    assert not any(r.__module__.startswith("deploy_kit.render") for r in config_rules.RULES)
