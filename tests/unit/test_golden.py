"""Every rendered artefact against reviewed golden files (refresh: pytest --update-golden)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from deploy_kit.config.open import open_site
from deploy_kit.render.files import render_site, write_tree
from tests.conftest import REPO

GOLDEN = REPO / "tests" / "golden"
CASES = {"example": REPO / "inventory" / "example"}
CASES |= {p.name: p / "inventory" for p in sorted(GOLDEN.iterdir()) if (p / "inventory").is_dir()}


def tree_of(root: Path) -> dict[str, tuple[str, int]]:
    return {str(p.relative_to(root)): (p.read_text(), p.stat().st_mode & 0o777)
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_render_matches_golden(case: str, tmp_path: Path, update_golden: bool,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DK_GOLDEN_ACCESS", "GOLDENACCESSKEY")
    monkeypatch.setenv("DK_GOLDEN_SECRET", "golden-secret-not-real")
    out = tmp_path / "out"
    write_tree(render_site(open_site(str(CASES[case]))), out)
    expected = GOLDEN / case / "expected"
    if update_golden:
        shutil.rmtree(expected, ignore_errors=True)
        shutil.copytree(out, expected)
    got, want = tree_of(out), tree_of(expected)
    assert sorted(got) == sorted(want), "set of rendered files changed"
    for path in want:
        assert got[path][0] == want[path][0], f"{case}/{path} differs from golden"
        assert got[path][1] == want[path][1], f"{case}/{path} mode differs"
