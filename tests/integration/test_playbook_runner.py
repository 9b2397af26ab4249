"""ansible-runner as `up`/`down` use it, on a real (local-connection) playbook: every
option reaches ansible-playbook as the word it was, however it is quoted. CI caught
`up` failing before any task ran when the inline -e JSON (it has spaces) was split."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from deploy_kit.ansible.command import RunRequest
from deploy_kit.ansible.runner import run_playbook
from tests.cli import run_cli
from tests.conftest import InventoryFactory


def test_inline_and_file_vars_reach_the_play_as_given(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"here": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    vars_file = tmp_path / "vars with space.json"
    vars_file.write_text(json.dumps({"from_file": "a b"}))
    seen = tmp_path / "seen.json"
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False,
        "tasks": [{"ansible.builtin.copy": {
            "dest": str(seen), "mode": "0600",
            "content": "{{ {'inline': inline, 'quoted': quoted, 'from_file': from_file}"
                       " | to_json }}"}}]}]))
    inline = {"inline": {"spaced words": "it's \"quoted\"", "n": 2}}
    request = RunRequest(
        verb="test", playbook=playbook, inventory=inventory, extra_vars_files=(vars_file,),
        extra_vars_inline=(json.dumps(inline), "quoted='x y'"))
    record_dir = tmp_path / "run"
    record_dir.mkdir()
    record, _, rc = run_playbook(request, Console(file=io.StringIO()), record_dir)
    assert rc == 0, (record_dir / "ansible.log").read_text()[-2000:]
    assert json.loads(seen.read_text()) == {**inline, "quoted": "x y", "from_file": "a b"}
    assert record.total_changed == 1


def test_a_run_uses_the_ansible_cfg_of_the_working_directory_and_every_inventory(
        tmp_path: Path, monkeypatch: Any) -> None:
    """`up`'s runs read the user's ansible.cfg (here ./ansible.cfg: forks 7, remote_user
    alice) as ansible-playbook would, with several -i merged, and the connection flags."""
    import os

    for name in [k for k in os.environ if k.startswith("ANSIBLE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "ansible.cfg").write_text("[defaults]\nforks = 7\nremote_user = alice\n")
    monkeypatch.chdir(tmp_path)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    first, second = tmp_path / "one.yml", tmp_path / "two.yml"
    first.write_text(yaml.safe_dump({"all": {"hosts": {"here": local}}}))
    second.write_text(yaml.safe_dump({"all": {"hosts": {"there": local}}}))
    seen = tmp_path / "seen"
    seen.mkdir()
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False,
        "tasks": [{"ansible.builtin.copy": {
            "dest": f"{seen}/{{{{ inventory_hostname }}}}.json", "mode": "0600",
            "content": "{{ {'forks': ansible_forks, 'user': ansible_user | default(''),"
                       " 'config': ansible_config_file} | to_json }}"}}]}]))
    request = RunRequest(verb="test", playbook=playbook, inventory=first,
                         more_inventories=(second,), connection=("--user", "bob"))
    record_dir = tmp_path / "run"
    record_dir.mkdir()
    _record, _, rc = run_playbook(request, Console(file=io.StringIO()), record_dir)
    assert rc == 0, (record_dir / "ansible.log").read_text()[-2000:]
    for host in ("here", "there"):  # both inventories
        got = json.loads((seen / f"{host}.json").read_text())
        assert got["forks"] == 7 and got["config"] == str(tmp_path / "ansible.cfg"), got
        assert got["user"] == "bob", got  # -u wins over remote_user, as for ansible-playbook
    plain = RunRequest(verb="test", playbook=playbook, inventory=first)
    _record, _, rc = run_playbook(plain, Console(file=io.StringIO()), record_dir)
    assert rc == 0
    assert json.loads((seen / "here.json").read_text())["user"] == "alice"  # remote_user


def test_the_printed_command_renders_every_inventory(make_inventory: InventoryFactory,
                                                     tmp_path: Path) -> None:
    """`up --print-command` with several -i: the plain ansible-playbook run's render play
    renders the merged inventory (every source), not the first one."""
    import os
    import shlex
    import subprocess

    first = make_inventory()
    more = tmp_path / "more.ini"
    more.write_text("[vllm]\ngpu3 ansible_host=10.0.1.3 vllm_accelerator=cuda\n")
    printed = run_cli("up", "-i", str(first), "-i", str(more), "--print-command",
                      env={"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")}, cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    words = shlex.split(printed.stdout)
    env = dict(w.split("=", 1) for w in words[:2])
    argv = words[2:]
    site = next(i for i, w in enumerate(argv) if w.endswith("/site.yml"))
    # its first play alone, then a look at the tree it rendered (removed when Ansible exits)
    listed = tmp_path / "rendered-hosts.txt"
    wrapper = tmp_path / "render-and-list.yml"
    wrapper.write_text(yaml.safe_dump([
        {"ansible.builtin.import_playbook": str(Path(argv[site]).with_name("render.yml"))},
        {"hosts": "localhost", "gather_facts": False, "tasks": [{
            "ansible.builtin.copy": {
                "content": "{{ lookup('ansible.builtin.pipe', 'ls ' ~ deploykit_render_dir) }}",
                "dest": str(listed), "mode": "0600"}}]}]))
    argv[site] = str(wrapper)
    result = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=300,
                            env={**os.environ, **env})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert {"gpu1", "gpu2", "gpu3"} <= set(listed.read_text().split())


def test_a_become_password_never_reaches_the_run_record(tmp_path: Path) -> None:
    """-K: ansible-playbook reads the password from its file; argv, ansible.log and
    summary.json carry the file's path at most, never the password."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"here": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False,
        "tasks": [{"ansible.builtin.command": "id -un", "changed_when": False}]}]))
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    password = private / "become-password"
    password.write_text("pw-0f9e8d7c\n")
    password.chmod(0o600)
    request = RunRequest(verb="test", playbook=playbook, inventory=inventory, become=True,
                         connection=("--become-password-file", str(password)), verbosity=3)
    record_dir = tmp_path / "run"
    record_dir.mkdir()
    _record, _, rc = run_playbook(request, Console(file=io.StringIO()), record_dir)
    assert rc == 0, (record_dir / "ansible.log").read_text()[-2000:]
    summary = json.loads((record_dir / "summary.json").read_text())
    assert str(password) in summary["argv"]
    for path in record_dir.rglob("*"):
        if path.is_file():
            assert "pw-0f9e8d7c" not in path.read_text(errors="replace"), path


def test_a_plain_check_run_of_the_render_play_issues_nothing(make_inventory: InventoryFactory,
                                                             tmp_path: Path) -> None:
    """`ansible-playbook --check` of the collection's render play (the AWX path): no CA, key
    or certificate lands beside the inventory; a real run issues them as `up` does."""
    import os
    import shlex
    import subprocess

    from tests.unit.test_check_mode_writes_nothing import TLS, tree_digest

    root = make_inventory(all=TLS)
    printed = run_cli("up", "-i", str(root), "--print-command",
                      env={"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")}, cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    words = shlex.split(printed.stdout)
    env = {**os.environ, **dict(w.split("=", 1) for w in words[:2])}
    site = next(i for i, w in enumerate(words) if w.endswith("/site.yml"))
    render = [words[2], "-i", str(root), str(Path(words[site]).with_name("render.yml"))]
    before = tree_digest(root)
    checked = subprocess.run([*render, "--check"], capture_output=True, text=True,
                             cwd=tmp_path, env=env, timeout=300)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    assert tree_digest(root) == before
    issued = subprocess.run(render, capture_output=True, text=True, cwd=tmp_path, env=env,
                            timeout=300)
    assert issued.returncode == 0, issued.stdout[-3000:] + issued.stderr[-2000:]
    assert (root / ".deploykit-tls" / "ca.key").is_file()
