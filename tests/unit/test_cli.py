"""The CLI end to end, in process (tests/cli.py): exit codes, stdout/stderr split,
one-line errors. The installed entry point itself: test_cli_subprocess.py."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from deploy_kit.core.errors import EnvironmentProblem, VerifyFailed
from tests.cli import Result, run_cli
from tests.conftest import REPO, InventoryFactory


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return run_cli(*args, env=env, cwd=REPO)


def test_plan_json_has_the_geometry_numbers() -> None:
    result = run("plan", "--inventory", "inventory/example", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["schema"] == "deploykit-plan/2" and plan["site"] == "example"
    assert plan["deployment"]["s3_fqdn"] and plan["generated"] and plan["deploykit_version"]
    model = plan["models"][0]
    assert (model["bytes_per_token"], model["object_bytes"], model["objects_per_chunk"]) == \
        (262_144, 32 * 1024 * 1024, 2)
    assert plan["dns"]["expected_a_records"] == 4
    assert [s["phase"] for s in plan["rollout"]][:3] == ["ceph_rgw_pools", "ceph_rgw",
                                                         "ceph_rgw_s3"]


def test_plan_by_name_and_human_output() -> None:
    result = run("plan", "-i", "example")
    assert result.returncode == 0
    assert result.stderr == ""  # the plan is the command's data: stdout, redirectable
    assert "262,144 B/token" in result.stdout and "4 A records" in result.stdout


def test_bad_inventory_exit_3_every_problem_one_line_each(
        make_inventory: InventoryFactory) -> None:
    root = make_inventory(vllm={"lmcache_chunk_size": 250, "vllm_block_size": 16},
                          all={"deploykit_s3_secret_key": "plain-secret-in-git",
                               "vllm_prot": 1})
    result = run("render", "-i", str(root), "--out", str(root / "out"))
    assert result.returncode == 3
    lines = [ln for ln in result.stderr.splitlines() if " — " in ln]
    assert len(lines) == 3  # chunk (both hosts named), inline secret, misspelt key
    assert any("vllm_prot: unknown key (hosts adm1, c1," in ln and
               ln.endswith("— did you mean vllm_port?") for ln in lines)
    assert any("lmcache_chunk_size: 250 is not a multiple" in ln and "(hosts gpu1, gpu2)" in ln
               for ln in lines)
    assert "plain-secret-in-git" not in result.stderr + result.stdout
    assert not (root / "out").exists()  # nothing written, nothing touched


def test_render_writes_tree_with_modes(tmp_path: Path) -> None:
    result = run("render", "-i", "example", "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    creds = tmp_path / "gpu-h100-1" / "etc" / "deploykit" / "aws" / "credentials"
    assert creds.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "_cluster" / "cephadm" / "rgw-spec.yaml").is_file()
    assert "vault is encrypted" not in result.stderr


def test_usage_errors_exit_2() -> None:
    assert run("plan").returncode == 2
    assert run("no-such-command").returncode == 2


def test_missing_inventory_exit_3() -> None:
    result = run("validate", "-i", "does-not-exist")
    assert result.returncode == 3 and "no such inventory" in result.stderr


def _raise(exc: BaseException) -> Callable[..., None]:
    def fail(*args: object, **kwargs: object) -> None:
        raise exc
    return fail


@pytest.mark.parametrize(("exc", "code", "says"), [
    (RuntimeError("boom"), 1, "internal error: RuntimeError: boom"),
    (KeyboardInterrupt(), 130, ""),
    (EnvironmentProblem("needs root", hint="run as root"), 7, "error: needs root"),
    (VerifyFailed("2 check(s) failed"), 6, "error: 2 check(s) failed"),
    (SystemExit(4), 4, ""),
])
def test_exceptions_become_exit_codes_in_process(monkeypatch: pytest.MonkeyPatch,
                                                 exc: BaseException, code: int,
                                                 says: str) -> None:
    monkeypatch.setattr("deploy_kit.ops.site.open_site", _raise(exc))
    result = run("validate", "-i", "example")
    assert result.returncode == code, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr


def test_debug_shows_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("deploy_kit.ops.site.open_site", _raise(RuntimeError("boom")))
    assert "--debug" in run("validate", "-i", "example").stderr
    result = run("validate", "-i", "example", "--debug")
    assert result.returncode == 1 and "Traceback" in result.stderr


def test_a_run_reads_the_variables_it_is_given(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-password-file"
    result = run("validate", "-i", "example",
                 env={"ANSIBLE_VAULT_PASSWORD_FILE": str(missing)})
    assert result.returncode == 3
    assert f"{missing}: ANSIBLE_VAULT_PASSWORD_FILE: " in result.stderr
    assert "ANSIBLE_VAULT_PASSWORD_FILE" not in os.environ  # the run's, not the process's
    assert run("validate", "-i", "example").returncode == 0


def test_error_text_is_never_read_as_markup(monkeypatch: pytest.MonkeyPatch) -> None:
    """A path with `[/]` in an error or hint: printed as written, the documented exit code,
    no traceback (rich markup once crashed the error handler itself)."""
    from deploy_kit.cli import app as cli_app
    from deploy_kit.core.errors import DeployKitError

    def fail(*_: object, **__: object) -> None:
        raise DeployKitError("cannot read /srv/x[/]y/[bold]z.json", hint="see /srv/[red]x[/]")

    monkeypatch.setattr(cli_app, "command", lambda: SimpleNamespace(main=fail))
    result = run_cli("validate", "-i", "whatever")
    assert result.returncode == DeployKitError("x").exit_code
    assert "cannot read /srv/x[/]y/[bold]z.json" in result.stderr
    assert "hint: see /srv/[red]x[/]" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout

    def crash(*_: object, **__: object) -> None:
        raise RuntimeError("bad [/] markup")

    monkeypatch.setattr(cli_app, "command", lambda: SimpleNamespace(main=crash))
    result = run_cli("validate")
    assert result.returncode == 1 and "RuntimeError: bad [/] markup" in result.stderr


def test_bench_ttft_on_a_live_site_says_what_it_will_do_and_asks() -> None:
    """It restarts a serving host and deletes objects: without a terminal and without --yes
    it refuses (exit 2) before any host is contacted, having said which hosts and keys."""
    result = run("bench", "ttft", "-i", "example")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "pass --yes" in result.stderr
    said = " ".join((result.stdout + result.stderr).split())
    assert "restarts vllm and lmcache-server on the first of" in said, said
    assert "Qwen_Qwen3-32B@" in said, said
