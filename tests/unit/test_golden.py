"""Every rendered artefact against reviewed golden files (refresh: pytest --update-golden)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from deploy_kit.ops.site import open_site
from deploy_kit.render.files import render_site, write_tree
from tests.conftest import REPO

GOLDEN = REPO / "tests" / "golden"
CASES = {"example": REPO / "inventory" / "example"}
CASES |= {p.name: p / "inventory" for p in sorted(GOLDEN.iterdir()) if (p / "inventory").is_dir()}


MODES = "MODES"  # git keeps only 644/755, so file modes are recorded beside the tree

# The dashboard and the alert rules with their promtool tests are ~950 lines a case, and a
# site changes only a few values in them (its S3 name, its gateway count). One case carries
# them whole: example, the only one with a monitoring host. The others leave them out, and
# test_monitoring.py's test_golden_cases_monitoring_differs_only_in_site_values checks that
# they render the example's files with their own values.
MONITORING_CASE = "example"
MONITORING_ONCE = ("_cluster/monitoring/dashboard.json", "_cluster/monitoring/rules.yml",
                   "_cluster/monitoring/rules.test.yml")


def tree_of(root: Path) -> dict[str, tuple[str, int]]:
    return {str(p.relative_to(root)): (p.read_text(), p.stat().st_mode & 0o777)
            for p in sorted(root.rglob("*")) if p.is_file()}


# Most files are 0644; MODES names the others (and so fails when a file gains or loses a
# mode of its own).
COMMON_MODE = 0o644

# The monitoring host's copies of site-wide files: asserted equal to the _cluster/ file and
# kept once, in _cluster/, like MONITORING_ONCE.
SAME_AS_CLUSTER = {
    "etc/prometheus/deploykit/rules.yml": "_cluster/monitoring/rules.yml",
    "etc/prometheus/deploykit/targets/deploykit-vllm.json":
        "_cluster/monitoring/targets/deploykit-vllm.json",
}


def modes_text(tree: dict[str, tuple[str, int]]) -> str:
    return "".join(f"{oct(mode)[2:]} {path}\n" for path, (_, mode) in sorted(tree.items())
                   if mode != COMMON_MODE)


def drop_cluster_copies(out: Path) -> None:
    """Remove each host's copy of a SAME_AS_CLUSTER file once it equals the site's."""
    for host in (p for p in out.iterdir() if p.is_dir() and p.name != "_cluster"):
        for copy, original in SAME_AS_CLUSTER.items():
            if (host / copy).is_file():
                assert (host / copy).read_text() == (out / original).read_text(), \
                    f"{host.name}/{copy} differs from {original}"
                (host / copy).unlink()


@pytest.mark.parametrize("case", sorted(CASES))
def test_render_matches_golden(case: str, tmp_path: Path, update_golden: bool,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DK_GOLDEN_ACCESS", "GOLDENACCESSKEY")
    monkeypatch.setenv("DK_GOLDEN_SECRET", "golden-secret-not-real")
    out = tmp_path / "out"
    write_tree(render_site(open_site(str(CASES[case]))), out)
    modes = modes_text(tree_of(out))  # the copies' modes too
    drop_cluster_copies(out)
    if case != MONITORING_CASE:
        for path in MONITORING_ONCE:
            (out / path).unlink(missing_ok=True)
    expected = GOLDEN / case / "expected"
    got = tree_of(out)
    if update_golden:
        shutil.rmtree(expected, ignore_errors=True)
        shutil.copytree(out, expected)
        (GOLDEN / case / MODES).write_text(modes)
    want = tree_of(expected)
    assert sorted(got) == sorted(want), "set of rendered files changed"
    for path in want:
        assert got[path][0] == want[path][0], f"{case}/{path} differs from golden"
    assert modes == (GOLDEN / case / MODES).read_text(), f"{case}: file modes differ"
