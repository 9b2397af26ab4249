"""`up --check` changes nothing on the controller either: no CA, key or certificate lands
beside the inventory. What would be created or issued is reported, made in a private
scratch directory for the run (the roles still have a file to compare) and removed after."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from deploy_kit.ansible import runner
from deploy_kit.ansible.events import RunRecord
from deploy_kit.ops import tls
from deploy_kit.ops.rundir import SETTINGS_PATH
from deploy_kit.ops.site import open_site
from tests.cli import run_cli
from tests.conftest import InventoryFactory

TLS = {"deploykit_s3_tls": True, "deploykit_s3_port": 443, "deploykit_s3_fqdn": "s3.t.test"}


def tree_digest(root: Path) -> str:
    """Every path below root with its type, mode and content: equal means byte-identical."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            st = path.lstat()
            h.update(f"{path.relative_to(root)}\0{st.st_mode:o}\0".encode())
            if path.is_file() and not path.is_symlink():
                h.update(path.read_bytes())
    return h.hexdigest()


@pytest.fixture
def fake_runner(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The playbook run replaced: records the request and what the rendered tree's rgw1
    and gpu settings name as TLS sources, and whether those files exist during the run."""
    seen: list[dict[str, Any]] = []

    def run(request: Any, console: Any, record_dir: Path,
            env: Any = None) -> tuple[RunRecord, Path, int]:
        rendered = record_dir / "rendered"
        rgw = json.loads((rendered / "rgw1" / SETTINGS_PATH.lstrip("/")).read_text())
        pem, ca = Path(rgw["_ceph_rgw_tls_pem_src"]), Path(rgw["_deploykit_tls_ca_cert_src"])
        seen.append({"check": request.check, "pem": pem, "ca": ca,
                     "exist": pem.is_file() and ca.is_file()})
        return RunRecord(), record_dir, 0

    monkeypatch.setattr(runner, "run_playbook", run)
    return seen


def test_up_check_writes_no_ca_key_or_certificate(
        make_inventory: InventoryFactory, tmp_path: Path,
        fake_runner: list[dict[str, Any]]) -> None:
    root = make_inventory(all=TLS)
    before = tree_digest(root)
    runs = {"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")}
    printed = run_cli("up", "-i", str(root), "--check", "--print-command", env=runs)
    assert printed.returncode == 0, printed.stderr
    assert tree_digest(root) == before
    result = run_cli("up", "-i", str(root), "--check", env=runs)
    assert result.returncode == 0, result.stderr
    assert tree_digest(root) == before and not (root / ".deploykit-tls").exists()
    assert "would create the site CA" in result.stderr
    assert "would issue the certificate of rgw1" in result.stderr
    assert "would issue the certificate of rgw2" in result.stderr
    # the roles had would-be files to compare during the run; none is left afterwards
    (run,) = fake_runner
    assert run["check"] and run["exist"]
    assert root not in run["pem"].parents and root not in run["ca"].parents
    assert not run["pem"].exists() and not run["ca"].exists()


def test_up_check_uses_what_is_already_issued(
        make_inventory: InventoryFactory, tmp_path: Path,
        fake_runner: list[dict[str, Any]]) -> None:
    """A certificate that still fits is compared where it is (the run reports no change);
    only a host whose certificate would be reissued gets a would-be one."""
    root = make_inventory(all=TLS)
    tls.ensure_site_tls(open_site(str(root)))
    (root / ".deploykit-tls" / "rgw2.pem").unlink()
    before = tree_digest(root)
    result = run_cli("up", "-i", str(root), "-C",
                     env={"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")})
    assert result.returncode == 0, result.stderr
    assert tree_digest(root) == before
    assert "would issue the certificate of rgw2" in result.stderr
    assert "rgw1" not in result.stderr and "would create" not in result.stderr
    (run,) = fake_runner
    assert run["pem"] == root / ".deploykit-tls" / "rgw1.pem"
    assert run["ca"] == root / ".deploykit-tls" / "ca.crt"


def test_a_real_up_still_issues(make_inventory: InventoryFactory, tmp_path: Path,
                                fake_runner: list[dict[str, Any]]) -> None:
    root = make_inventory(all=TLS)
    result = run_cli("up", "-i", str(root), env={"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")})
    assert result.returncode == 0, result.stderr
    assert (root / ".deploykit-tls" / "ca.key").is_file()
    assert fake_runner[0]["pem"] == root / ".deploykit-tls" / "rgw1.pem"


def test_the_render_play_in_check_mode_writes_nothing_beside_the_inventory(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    """`render --for-roles --check` (the render play of `ansible-playbook --check`): the
    would-be material goes into the play's private output directory."""
    root = make_inventory(all=TLS)
    before = tree_digest(root)
    out = tmp_path / "out"
    result = run_cli("render", "-i", str(root), "--for-roles", "--check", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert tree_digest(root) == before
    rgw = json.loads((out / "rgw1" / SETTINGS_PATH.lstrip("/")).read_text())
    assert Path(rgw["_ceph_rgw_tls_pem_src"]).parent == out / ".deploykit-check-tls"
    assert Path(rgw["_ceph_rgw_tls_pem_src"]).is_file()
    # without --check the render play issues as `up` does
    again = run_cli("render", "-i", str(root), "--for-roles", "-o", str(tmp_path / "o2"))
    assert again.returncode == 0, again.stderr
    assert (root / ".deploykit-tls" / "rgw1.pem").is_file()
