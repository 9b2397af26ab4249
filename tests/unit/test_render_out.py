"""`render -o DIR` replaces DIR in one step: a host gone from the inventory leaves no
folder, a failed render leaves DIR as it was, and a directory deploykit did not write is
refused with one line that names it and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploy_kit.ops import outdir
from deploy_kit.render.files import RenderedFile, UnsafeOutput
from tests.cli import run_cli
from tests.conftest import InventoryFactory
from tests.unit.test_check_mode_writes_nothing import tree_digest


def _hosts(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir()}


def test_a_host_gone_from_the_inventory_leaves_no_folder(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    root = make_inventory()
    out = tmp_path / "out"
    first = run_cli("render", "-i", str(root), "-o", str(out))
    assert first.returncode == 0, first.stderr
    assert (out / outdir.MARKER).is_file() and "rgw2" in _hosts(out)
    hosts = yaml.safe_load((root / "hosts.yml").read_text())
    groups = hosts["all"]["children"]
    for group in groups.values():
        group.get("hosts", {}).pop("rgw2", None)
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (out / "rgw1" / "stray").write_text("left by hand\n")
    again = run_cli("render", "-i", str(root), "-o", str(out))
    assert again.returncode == 0, again.stderr
    assert "rgw2" not in _hosts(out) and "rgw1" in _hosts(out)
    assert not (out / "rgw1" / "stray").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")] == []


def test_a_failed_render_leaves_out_as_it_was(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    root = make_inventory()
    out = tmp_path / "out"
    assert run_cli("render", "-i", str(root), "-o", str(out)).returncode == 0
    before = tree_digest(out)
    (root / "group_vars" / "all.yml").write_text("lmcache_chunk_size: 7\n")  # invalid
    failed = run_cli("render", "-i", str(root), "-o", str(out))
    assert failed.returncode == 3, failed.stderr
    assert tree_digest(out) == before
    # a failure while writing the new tree (after the inventory loaded) too
    tree = {"h": {"/etc/x.conf": RenderedFile("x\n")}, "../escape": {"/x": RenderedFile("")}}
    with pytest.raises(UnsafeOutput):
        outdir.replace_tree(tree, out)
    assert tree_digest(out) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")] == []


def test_a_directory_deploykit_did_not_write_is_refused(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    root = make_inventory()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    result = run_cli("render", "-i", str(root), "-o", str(mine))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(mine) in lines[0] and "new or empty directory" in lines[0]
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    # an empty directory (a play's temporary directory) is fine, and keeps its mode
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    assert run_cli("render", "-i", str(root), "-o", str(empty)).returncode == 0
    assert (empty.stat().st_mode & 0o777) == 0o700 and (empty / outdir.MARKER).is_file()


def test_the_two_rename_fallback_swaps_too(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Where renameat2 cannot exchange (another OS, some file systems)."""
    monkeypatch.setattr(outdir, "_exchange", lambda a, b: False)
    out = tmp_path / "out"
    outdir.replace_tree({"a": {"/x": RenderedFile("1\n")}}, out)
    outdir.replace_tree({"b": {"/x": RenderedFile("2\n")}}, out)
    assert _hosts(out) == {"b"} and (out / "b" / "x").read_text() == "2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_unwritable_parent_is_one_line(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**_: object) -> str:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("deploy_kit.ops.outdir.tempfile.mkdtemp", refuse)
    with pytest.raises(UnsafeOutput, match=r"cannot write beside .*Permission denied"):
        outdir.replace_tree({"h": {"/x": RenderedFile("")}}, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_fallback_puts_out_back_when_the_new_tree_cannot_move_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setattr(outdir, "_exchange", lambda a, b: False)
    out = tmp_path / "out"
    outdir.replace_tree({"a": {"/x": RenderedFile("1\n")}}, out)
    before = tree_digest(out)
    real = os.rename

    def rename(src: object, dst: object) -> None:
        if Path(str(src)).name.startswith(".out.new-"):
            raise OSError(16, "Device or resource busy")
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr("deploy_kit.ops.outdir.os.rename", rename)
    with pytest.raises(OSError, match="busy"):
        outdir.replace_tree({"b": {"/x": RenderedFile("2\n")}}, out)
    assert tree_digest(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
