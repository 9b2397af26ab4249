"""The package's layering, enforced: pure logic never imports I/O, and no package imports
another that imports it back (every import counted, also those inside functions)."""

from __future__ import annotations

import ast
from collections import defaultdict

from tests.conftest import REPO

PACKAGE = REPO / "deploy_kit"
# Pure layers: inventory model, KV math, rendering, planning, check logic.
PURE = {"deploy_kit.config", "deploy_kit.geometry", "deploy_kit.sizing", "deploy_kit.render",
        "deploy_kit.plan", "deploy_kit.verify.checks", "deploy_kit.verify.model",
        "deploy_kit.compat"}
IO = {"deploy_kit.ansible", "deploy_kit.transport", "deploy_kit.cli",
      "deploy_kit.verify.probes", "deploy_kit.bench", "deploy_kit.cache",
      "deploy_kit.roundtrip", "deploy_kit.tls"}


def unit(module: str) -> str:
    """deploy_kit.<package>; verify splits into its data model, probes (I/O), checks (pure)
    and the rest (gather, report)."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "verify" and parts[2] in ("checks", "probes", "model"):
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                inside = PACKAGE.joinpath(*target.split(".")[1:])
                is_module = inside.with_suffix(".py").exists() or inside.is_dir()
                if target.startswith("deploy_kit.") and unit(target) != unit(module) \
                        and is_module:
                    edges[unit(module)].add(unit(target))
    return edges


def test_pure_layers_import_no_io() -> None:
    edges = graph()
    bad = {(a, b) for a in PURE for b in edges.get(a, set()) if b in IO}
    assert not bad, f"pure code imports I/O: {sorted(bad)}"


def test_no_import_cycles_between_packages() -> None:
    edges = graph()
    cycles = sorted((a, b) for a in edges for b in edges[a] if a in edges.get(b, set()))
    assert not cycles, f"packages import each other: {cycles}"


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
    assert "deploy_kit.config" in edges["deploy_kit.plan"]
    assert "deploy_kit.transport" in edges["deploy_kit.cache"]
