"""ansible-runner as `up`/`down` use it, on a real (local-connection) playbook: every
option reaches ansible-playbook as the word it was, however it is quoted. CI caught
`up` failing before any task ran when the inline -e JSON (it has spaces) was split."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import yaml
from rich.console import Console

from deploy_kit.ansible.command import RunRequest
from deploy_kit.ansible.runner import run_playbook


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
