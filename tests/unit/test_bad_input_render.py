"""Bad input beyond the inventory corpus: render never leaves OUT,
the plan refuses a TP that cannot work, and vllm_serial from group_vars reaches plan and up."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from deploy_kit.core.geometry import ModelGeometry, chunk_layout
from deploy_kit.ops.site import open_site
from deploy_kit.plan.plan import build_plan
from deploy_kit.render.files import RenderedFile, UnsafeOutput, render_site, write_tree
from tests.cli import Result, run_cli
from tests.conftest import REPO, InventoryFactory


def run(*args: str) -> Result:
    return run_cli(*args, cwd=REPO)


@pytest.mark.parametrize("marked", [False, True])
def test_render_never_writes_through_a_symlinked_directory_in_out(
        tmp_path: Path, marked: bool) -> None:
    """OUT not written by deploykit is refused whole; one it wrote is replaced whole: its
    symlink is removed with it, never followed."""
    out, outside = tmp_path / "out", tmp_path / "outside"
    (out / "gpu-h100-1").mkdir(parents=True)
    if marked:
        (out / ".deploykit-render").write_text("")
    outside.mkdir()
    (out / "gpu-h100-1" / "etc").symlink_to(outside)
    result = run("render", "-i", "example", "-o", str(out))
    assert result.returncode == (0 if marked else 2), result.stderr
    assert ("not written by deploykit render" in result.stderr) is not marked
    assert "Traceback" not in result.stderr
    assert list(outside.iterdir()) == []
    assert (out / "gpu-h100-1" / "etc").is_symlink() is not marked


@pytest.mark.parametrize("marked", [False, True])
def test_render_never_writes_through_a_symlinked_file_in_out(
        tmp_path: Path, marked: bool) -> None:
    out, victim = tmp_path / "out", tmp_path / "victim"
    victim.write_text("keep me\n")
    target = out / "_cluster" / "s3" / "lifecycle.json"
    target.parent.mkdir(parents=True)
    if marked:
        (out / ".deploykit-render").write_text("")
    target.symlink_to(victim)
    result = run("render", "-i", "example", "-o", str(out))
    assert result.returncode == (0 if marked else 2), result.stderr
    assert victim.read_text() == "keep me\n"
    assert target.is_symlink() is not marked


def test_render_refuses_a_fifo_in_out_without_blocking(tmp_path: Path) -> None:
    target = tmp_path / "h" / "etc" / "x.conf"
    target.parent.mkdir(parents=True)
    os.mkfifo(target)
    with pytest.raises(UnsafeOutput):
        write_tree({"h": {"/etc/x.conf": RenderedFile("x\n")}}, tmp_path)


@pytest.mark.parametrize(("host", "path"), [
    ("../../etc", "/passwd"), ("/etc", "/passwd"), ("h", "/etc/../../../x"), ("", "/x"),
    ("..", "/x")])
def test_write_tree_never_leaves_out(tmp_path: Path, host: str, path: str) -> None:
    out = tmp_path / "a" / "out"
    with pytest.raises(UnsafeOutput):
        write_tree({host: {path: RenderedFile("x\n")}}, out)
    assert {p for p in tmp_path.rglob("*") if p.is_file()} == set()


def test_rerender_over_an_existing_tree_works(tmp_path: Path) -> None:
    site = open_site("inventory/example")
    tree = render_site(site)
    first = write_tree(tree, tmp_path)
    assert write_tree(tree, tmp_path) == first
    creds = tmp_path / "gpu-h100-1" / "etc" / "deploykit" / "aws" / "credentials"
    assert creds.stat().st_mode & 0o777 == 0o600


def test_chunk_layout_refuses_tp_that_does_not_divide_kv_heads() -> None:
    g = ModelGeometry(num_layers=4, num_kv_heads=8, head_dim=128)
    with pytest.raises(ValueError, match="does not divide"):
        chunk_layout(g, chunk_tokens=256, tensor_parallel=3)
    assert chunk_layout(g, chunk_tokens=256, tensor_parallel=16).objects_per_chunk == 16


def test_vllm_serial_from_group_vars_reaches_plan_and_up(
        make_inventory: InventoryFactory) -> None:
    root = make_inventory(vllm={"vllm_serial": 2})
    plan = build_plan(open_site(str(root)))
    assert [s.serial for s in plan.rollout if s.phase == "vllm"] == [2]
    result = run_cli("up", "-i", str(root), "--print-command",
                     env={"DEPLOYKIT_RUNS_DIR": str(root.parent / "runs")}, cwd=REPO)
    assert result.returncode == 0, result.stderr
    words = shlex.split(result.stdout)
    inline = [json.loads(w) for w, prev in zip(words[1:], words, strict=False)
              if prev == "-e" and w.startswith("{")]
    assert inline and inline[0]["vllm_serial"] == 2
    assert not (root.parent / "runs").exists()  # --print-command writes no run record
