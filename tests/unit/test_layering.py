"""The package's layering, enforced on the module graph (every import counted, also those
inside functions and under TYPE_CHECKING: `ast.walk` sees them all).

Each module of deploy_kit/ belongs to a layer, given by its directory; a module imports only
from its own layer or a lower one, and no chain of imports leads back to the module it
started from (nor in the lab's package). Pure logic (core, config, plan, render, verify's
model and checks) never reaches I/O, not even through another module.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "deploy_kit"
LAB = REPO / "deploykit-lab" / "deploykit_lab"

# Bottom up. A directory of deploy_kit/ is its own layer; the few top-level modules are
# placed by TOP_LEVEL. "agents" (programs the roles copy onto the hosts, run there with the
# host's python alone) is the lowest: it imports nothing of deploy_kit (test_agents.py holds
# it to the standard library), and the controller imports it only for its paths. "leaf"
# (the version, console, project paths, safe_read) sits below core, which uses two of them:
# geometry reads config.json through safe_read, and the envelope stamps __version__.
LAYERS = ("agents", "leaf", "core", "config", "plan", "render", "ansible", "ops", "transport",
          "cache", "verify", "status", "flows", "bench", "plugins", "cli")
RANK = {name: rank for rank, name in enumerate(LAYERS)}
TOP_LEVEL = {
    "deploy_kit": "leaf",  # __version__ only
    "deploy_kit.console": "leaf",
    "deploy_kit.project": "leaf",
    "deploy_kit.safe_read": "leaf",
    "deploy_kit.plugins": "plugins",  # entry points: verbs for the CLI, drivers for verify
    "deploy_kit.__main__": "cli",
}
PURE_LAYERS = {"core", "config", "plan", "render"}
PURE_MODULES = ("deploy_kit.verify.model", "deploy_kit.verify.checks",  # with submodules
                "deploy_kit.status.model", "deploy_kit.status.view")
IO_LAYERS = {"ansible", "ops", "transport", "cache", "flows", "bench", "plugins", "cli"}
IO_MODULES = ("deploy_kit.console", "deploy_kit.verify.probes", "deploy_kit.verify.gather",
              "deploy_kit.verify.roundtrip", "deploy_kit.status.gather", "deploy_kit.status.runs")

# Functions longer than MAX_FUNCTION_LINES, each with the reason it may be for now.
MAX_FUNCTION_LINES = 100
LONG_FUNCTIONS: set[str] = set()


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted name -> file, for every module of the package."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        dotted = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        found[dotted.removesuffix(".__init__")] = path
    return found


def layer(module: str) -> str | None:
    if module in TOP_LEVEL:
        return TOP_LEVEL[module]
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in RANK else None


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module an imported name lives in: the longest known prefix of it."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in known:
            return ".".join(parts)
        parts.pop()
    return None


def graph(package: Path = PACKAGE) -> dict[str, dict[str, int]]:
    """module -> {imported module of the package: line of the first such import}."""
    known = modules(package)
    edges: dict[str, dict[str, int]] = defaultdict(dict)
    for module, path in known.items():
        parent = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = parent.split(".")[:len(parent.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                names = [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                target = _resolve(name, known) if name.split(".")[0] == package.name \
                    else None
                if target is not None and target != module:
                    edges[module].setdefault(target, node.lineno)
    return edges


def where(module: str, target: str, edges: dict[str, dict[str, int]]) -> str:
    path = {**modules(PACKAGE), **modules(LAB)}[module].relative_to(REPO)
    return f"{path}:{edges[module][target]} imports {target}"


def test_every_module_has_a_layer() -> None:
    unclassified = sorted(str(path.relative_to(REPO)) for module, path in modules().items()
                          if layer(module) is None)
    assert not unclassified, ("modules in no layer (put them in a layer's directory, or add "
                              f"them to TOP_LEVEL in this test): {unclassified}")


def test_no_module_imports_a_higher_layer() -> None:
    edges = graph()
    upward = [f"{where(a, b, edges)} ({layer(b) or 'no layer'} is above {layer(a)})"
              for a in sorted(edges) for b in sorted(edges[a])
              if RANK[layer(b) or "cli"] > RANK[layer(a) or "leaf"]]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(_cycle_in(sorted(component), edges))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _cycle_in(component: list[str], edges: dict[str, dict[str, int]]) -> list[str]:
    """A shortest path from the component's first module back to itself."""
    members, start = set(component), component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(edges.get(v, {})):
                if w == start:
                    return [*paths[v], start]
                if w in members and w not in paths:
                    paths[w] = [*paths[v], w]
                    following.append(w)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


@pytest.mark.parametrize("package", [PACKAGE, LAB], ids=["deploy_kit", "deploykit_lab"])
def test_no_file_import_cycles(package: Path) -> None:
    edges = graph(package)
    described = [" -> ".join(cycle) + ":\n    " +
                 "\n    ".join(where(a, b, edges) for a, b in pairwise(cycle))
                 for cycle in cycles(edges)]
    assert not described, "modules import each other:\n" + "\n".join(described)


def test_the_cycle_finder_finds_cycles() -> None:
    edges = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "d": 4}, "d": {}}
    assert cycles(edges) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def _is(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_pure_code_reaches_no_io() -> None:
    """Not even through a module in between: everything a pure module imports, and all that
    imports in turn, is pure or a low leaf (project, safe_read)."""
    edges = graph()

    def io(module: str) -> bool:
        return layer(module) in IO_LAYERS or _is(module, IO_MODULES)

    bad = []
    for start in sorted(modules()):
        if not (layer(start) in PURE_LAYERS or _is(start, PURE_MODULES)):
            continue
        seen, todo, via = {start}, [start], {start: start}
        while todo:
            v = todo.pop()
            for w in sorted(edges.get(v, {})):
                if w in seen:
                    continue
                seen.add(w)
                via[w] = v
                if io(w):
                    bad.append(f"{start} reaches {w}: {where(v, w, edges)}")
                else:
                    todo.append(w)
    assert not bad, "pure code reaches I/O:\n" + "\n".join(bad)


def test_the_product_never_imports_the_lab() -> None:
    """The lab (deploykit-lab/, its own distribution) reaches the CLI only through entry
    points (deploy_kit/plugins.py); no module of the product names it."""
    assert not (PACKAGE / "lab").exists()
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            offenders += [f"{path.relative_to(REPO)}: {n}" for n in names
                          if n.split(".")[0] in ("deploykit_lab", "tests")]
    assert not offenders, offenders


def test_the_graph_sees_real_edges() -> None:
    edges = graph()  # guard against a parser that finds nothing and passes everything
    between_layers = defaultdict(set)
    for a, targets in edges.items():
        between_layers[layer(a)] |= {layer(b) for b in targets}
    assert "config" in between_layers["plan"]
    assert "transport" in between_layers["cache"]
    assert "deploy_kit.config.site" in edges["deploy_kit.plan.plan"]
    assert "deploy_kit.ops.site" in edges["deploy_kit.cli.site_cmds"]  # inside a function
    assert "deploy_kit.config.names" in edges["deploy_kit.render.files"]  # from package import
    assert "deploy_kit.verify.roundtrip" in edges["deploy_kit.plugins"]  # under TYPE_CHECKING


def test_no_function_is_over_100_lines() -> None:
    lengths = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{path.relative_to(REPO)}:{node.name}"
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                lengths[name] = max(lines, lengths.get(name, 0))
    long = sorted(f"{name} ({n} lines)" for name, n in lengths.items()
                  if n > MAX_FUNCTION_LINES and name not in LONG_FUNCTIONS)
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"
    stale = sorted(name for name in LONG_FUNCTIONS
                   if lengths.get(name, 0) <= MAX_FUNCTION_LINES)
    assert not stale, f"LONG_FUNCTIONS lists functions that are short now or gone: {stale}"
