"""Flags as Ansible users expect: several -i form one inventory; -b, -K, --become-user, -u,
--private-key and -f on every verb that reaches hosts, handed to ansible-playbook and to the
host transport; --list-hosts/--list-tasks print Ansible's own listing and change nothing;
a -K password is asked once and never travels in argv, a log or a run record."""

from __future__ import annotations

import io
import shlex
import stat
from pathlib import Path
from typing import Any

import pytest

from deploy_kit.flows.request import ConnectionOptions, on_site, reaching
from deploy_kit.ops.site import open_site
from tests.cli import run_cli
from tests.conftest import InventoryFactory

MORE_INI = "[vllm]\ngpu3 ansible_host=10.0.1.3 vllm_accelerator=cuda\n"
HOST_VERBS = (("up",), ("down",), ("verify",), ("doctor", "x"), ("cache", "stats"),
              ("cache", "purge"), ("bench", "storage"), ("bench", "ttft"))


def _two_sources(make_inventory: InventoryFactory, tmp_path: Path) -> tuple[Path, Path]:
    more = tmp_path / "more.ini"
    more.write_text(MORE_INI)
    return make_inventory(), more


def test_several_inventories_form_one_site(make_inventory: InventoryFactory,
                                           tmp_path: Path) -> None:
    first, more = _two_sources(make_inventory, tmp_path)
    site = open_site([str(first), str(more)])
    assert {"gpu1", "gpu2", "gpu3"} == {h.name for h in site.group("vllm")}
    assert list(site.inventory_sources) == [first.resolve(), more.resolve()]
    assert open_site([str(first)]).inventory_sources == (first.resolve(),)
    # a source named twice is read once
    assert open_site([str(first), str(first)]).inventory_sources == (first.resolve(),)


def test_print_command_passes_every_inventory_and_the_connection_flags(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    first, more = _two_sources(make_inventory, tmp_path)
    result = run_cli("up", "-i", str(first), "-i", str(more), "-u", "bob", "--private-key",
                     "keys/id", "--become-user", "svc", "-K", "-b", "-f", "9",
                     "--print-command", env={"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")},
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    words = shlex.split(result.stdout)
    assert [words[i + 1] for i, w in enumerate(words) if w == "-i"] == [
        str(first.resolve()), str(more.resolve())]
    assert words[words.index("--user") + 1] == "bob"
    assert words[words.index("--private-key") + 1] == str(tmp_path / "keys" / "id")
    assert words[words.index("--become-user") + 1] == "svc"
    assert words[words.index("--forks") + 1] == "9"
    # nothing was asked: the printed command lets Ansible ask
    assert {"--become", "--ask-become-pass"} <= set(words)
    assert not (tmp_path / "runs").exists()


def test_list_hosts_and_list_tasks_print_ansibles_listing_and_change_nothing(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    first, more = _two_sources(make_inventory, tmp_path)
    runs = tmp_path / "runs"
    hosts = run_cli("up", "-i", str(first), "-i", str(more), "--list-hosts", "--limit", "vllm",
                    env={"DEPLOYKIT_RUNS_DIR": str(runs)}, cwd=tmp_path)
    assert hosts.returncode == 0, hosts.stderr
    assert "play #14 (vllm:!deploykit_converged): Deploy the serving hosts" in hosts.stdout
    listed = {ln.strip() for ln in hosts.stdout.splitlines()}
    assert {"gpu1", "gpu2", "gpu3"} <= listed and "rgw1" not in listed  # both -i, the limit
    # -K asks nothing for a listing (no terminal here: asking would be a usage error)
    tasks = run_cli("down", "-i", str(first), "--list-tasks", "-K",
                    env={"DEPLOYKIT_RUNS_DIR": str(runs)}, cwd=tmp_path)
    assert tasks.returncode == 0, tasks.stderr
    assert "playbook: " in tasks.stdout and "TAGS:" in tasks.stdout
    assert not runs.exists()  # no run record, no rendered tree: nothing ran


@pytest.mark.parametrize("verb", HOST_VERBS, ids=" ".join)
def test_every_verb_that_reaches_hosts_takes_the_connection_flags(verb: tuple[str, ...]
                                                                  ) -> None:
    shown = run_cli(*[v for v in verb if v != "x"], "--help", env={"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    for flag in ("--become", "--ask-become-pass", "--become-user", "--user", "--private-key",
                 "--forks", "-K", "-u", "-f", "-b"):
        assert flag in shown.stdout, (verb, flag)


def test_a_become_password_is_asked_once_kept_private_and_removed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def getpass(prompt: str) -> str:
        asked.append(prompt)
        return "s3cret"

    monkeypatch.setattr("getpass.getpass", getpass)
    monkeypatch.setattr("sys.stdin", _Tty())
    with reaching(ConnectionOptions(become=True, ask_become_pass=True)) as ready:
        path = ready.become_password_file
        assert path is not None and path.read_text() == "s3cret\n"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        argv = ready.argv()
        assert argv == ["--become", "--become-password-file", str(path)]
        assert "s3cret" not in " ".join(argv)
    assert asked == ["BECOME password: "] and not path.exists()


def test_ask_become_pass_without_a_terminal_is_a_usage_error(
        make_inventory: InventoryFactory) -> None:
    refused = run_cli("verify", "-i", str(make_inventory()), "-K")
    assert refused.returncode == 2 and "needs a terminal" in refused.stderr, refused


def test_the_transport_hands_the_connection_flags_to_ansible(
        make_inventory: InventoryFactory, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """What verify, doctor, cache and bench reach hosts with (deploy_kit.transport.hosts)."""
    import ansible_runner

    from deploy_kit.transport.hosts import run_many

    seen: dict[str, Any] = {}

    def run(**kwargs: Any) -> Any:
        seen.update(kwargs)
        return type("Result", (), {"status": "successful"})()

    monkeypatch.setattr(ansible_runner, "run", run)
    first, more = _two_sources(make_inventory, tmp_path)
    site = on_site(open_site([str(first), str(more)]),
                   ConnectionOptions(become=True, user="bob", private_key=Path("/k/id"),
                                     become_user="svc", forks=3))
    run_many(site, [(site.hosts["gpu3"], "true")])
    assert seen["inventory"] == [str(first.resolve()), str(more.resolve())]
    words = shlex.split(seen["cmdline"])
    assert words[:9] == ["--become", "--become-user", "svc", "--user", "bob",
                         "--private-key", "/k/id", "--forks", "3"]
    assert words.count("--forks") == 1  # -f wins over the transport's own read forks
    assert "ANSIBLE_CONFIG" not in seen["envvars"]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_flag_means_no_word() -> None:
    assert ConnectionOptions().argv() == []


def test_render_of_several_inventories_writes_every_host(make_inventory: InventoryFactory,
                                                         tmp_path: Path) -> None:
    """Names read from a YAML source through Ansible's loader are tagged strings; the
    rendered YAML files must still be written."""
    first, more = _two_sources(make_inventory, tmp_path)
    out = tmp_path / "out"
    result = run_cli("render", "-i", str(first), "-i", str(more), "-o", str(out), "--for-roles")
    assert result.returncode == 0, result.stderr
    assert {"gpu1", "gpu2", "gpu3", "rgw1", "adm1"} <= {p.name for p in out.iterdir()}
