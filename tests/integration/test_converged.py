"""A re-run leaves out the hosts whose last converge still holds: the real converged.yml and
record.yml (the shared role, the module, the inputs lookup) around a play that leaves a mark
on each host it runs on, through ansible-playbook on local-connection hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deploy_kit.ops.inputs import code_inputs
from tests.conftest import REPO

HOSTS = ("admin", "gw1", "gw2")


class Fleet:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        # systemctl/journalctl stand-ins: unit states and the journal come from files here
        (self.bin / "systemctl").write_text(
            "#!/bin/sh\n"
            f'if [ "$1" = is-active ]; then shift; for u in "$@"; do '
            f'grep -qx "$u" {root}/active && echo active || echo inactive; done; exit 0; fi\n'
            'if [ "$1" = show ]; then echo 0123abcd; exit 0; fi\nexit 1\n')
        (self.bin / "journalctl").write_text(f"#!/bin/sh\ncat {root}/journal 2>/dev/null\n")
        for tool in ("systemctl", "journalctl"):
            (self.bin / tool).chmod(0o755)
        (root / "active").write_text("haproxy\n")
        (root / "cluster").write_text("pools: a b\n")
        inventory: dict = {"all": {"vars": {"ansible_connection": "local",
                                            "ansible_python_interpreter": sys.executable},
                                   "children": {"ceph_admin": {"hosts": {}},
                                                "rgw": {"hosts": {}}}}}
        for host in HOSTS:
            state = root / "state" / host
            state.mkdir(parents=True)
            self.watched(host).write_text("one\n")
            group = "ceph_admin" if host == "admin" else "rgw"
            inventory["all"]["children"][group]["hosts"][host] = {
                "deploykit_common_record_path": str(state / "converged.json")}
            settings = root / "render" / host / ".deploykit" / "settings.json"
            settings.parent.mkdir(parents=True)
            settings.write_text(json.dumps({"_deploykit_settings_loaded": True,
                                            "_deploykit_converged": {
                "paths": [str(self.watched(host))],
                "units": ["haproxy", "consul"] if host != "admin" else [],
                "probes": [["cat", str(root / "cluster")]] if host == "admin" else [],
                "breaker_units": ["lmcache-server"] if host == "gw2" else [],
                "breaker_pattern": "S3L2Adapter disabled after" if host == "gw2" else None,
            }}))
        # what every render writes once: deploykit's code digest and the roles' input names
        (root / "render" / "_cluster" / ".deploykit").mkdir(parents=True)
        (root / "render" / "_cluster" / ".deploykit" / "inputs.json").write_text(
            json.dumps(code_inputs(REPO)))
        (root / "render" / "_cluster" / ".deploykit" / "site.json").write_text("{}\n")
        (root / "hosts.yml").write_text(yaml.safe_dump(inventory))
        (root / "site.yml").write_text(yaml.safe_dump([
            {"ansible.builtin.import_playbook": str(REPO / "playbooks" / "converged.yml")},
            {"name": "Leave a mark", "hosts": "ceph_admin[0]:rgw:!deploykit_converged",
             "gather_facts": False, "tasks": [{"ansible.builtin.shell": {
                 "cmd": f"echo ran >> {root}/state/{{{{ inventory_hostname }}}}/runs"},
                 "check_mode": False, "tags": ["mark"]}]},
            {"ansible.builtin.import_playbook": str(REPO / "playbooks" / "record.yml")},
        ]))

    def watched(self, host: str) -> Path:
        return self.root / "state" / host / "watched"

    def up(self, *extra: str) -> set[str]:
        """One run; the hosts the marking play ran on."""
        before = {h: self._runs(h) for h in HOSTS}
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
               "PATH": f"{self.bin}:{os.environ['PATH']}"}
        done = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-i",
             str(self.root / "hosts.yml"), str(self.root / "site.yml"),
             "-e", f"deploykit_render_dir={self.root / 'render'}", *extra],
            capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "WARNING" not in done.stderr, done.stderr
        return {h for h in HOSTS if self._runs(h) > before[h]}

    def _runs(self, host: str) -> int:
        runs = self.root / "state" / host / "runs"
        return len(runs.read_text().splitlines()) if runs.exists() else 0


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    fleet = Fleet(tmp_path)
    assert fleet.up() == set(HOSTS)  # no record yet: every host converges
    return fleet


def test_a_rerun_leaves_out_every_host_and_records_nothing_new(fleet: Fleet) -> None:
    record = fleet.root / "state" / "gw1" / "converged.json"
    assert record.stat().st_mode & 0o777 == 0o600
    stamp = record.read_text()
    assert "one" not in stamp and json.loads(stamp)["units"] == ["haproxy"]
    assert fleet.up() == set()
    assert record.read_text() == stamp


def test_an_edited_file_converges_its_host_and_the_admin_host_only(fleet: Fleet) -> None:
    fleet.watched("gw1").write_text("edited by hand\n")
    assert fleet.up() == {"gw1", "admin"}  # admin: the S3 keys come from its play
    assert fleet.up() == set()
    fleet.watched("gw2").chmod(0o666)  # a re-permissioned file is drift too
    assert fleet.up() == {"gw2", "admin"}


def test_a_stopped_unit_converges_its_host(fleet: Fleet) -> None:
    (fleet.root / "active").write_text("")
    assert fleet.up() == {"gw1", "gw2", "admin"}
    # units that were not active at the record (consul here) are not held to it
    assert fleet.up() == set()


def test_a_moved_cluster_converges_every_host(fleet: Fleet) -> None:
    (fleet.root / "cluster").write_text("pools: a\n")  # a pool gone under deploykit
    assert fleet.up() == set(HOSTS)


def test_another_input_converges_every_host_it_reaches(fleet: Fleet) -> None:
    assert fleet.up("-e", "consul_gossip_key=rotated") == set(HOSTS)  # a secret, by digest
    assert fleet.up("-e", "consul_gossip_key=rotated") == set()
    settings = fleet.root / "render" / "gw2" / ".deploykit" / "settings.json"
    settings.write_text(settings.read_text().replace("}}", '}, "x": 1}'))
    assert fleet.up("-e", "consul_gossip_key=rotated") == {"gw2", "admin"}


def test_a_tripped_breaker_converges_the_serving_host(fleet: Fleet) -> None:
    (fleet.root / "journal").write_text(
        "2026-12-06T01:00:00 lab3 lmcache[7]: [2026-12-06 01:00:00,123] LMCache ERROR: "
        "S3L2Adapter disabled after 3 consecutive connection failures (s3_l2_adapter.py:1030:"
        "lmcache.v1.distributed.l2_adapters.s3_l2_adapter)\n")
    assert fleet.up() == {"gw2", "admin"}


def test_full_tags_and_check_mode(fleet: Fleet) -> None:
    assert fleet.up("-e", "deploykit_full=true") == set(HOSTS)
    assert fleet.up("-e", "deploykit_restart_serving=true") == set(HOSTS)
    fleet.watched("gw1").write_text("edited\n")
    assert fleet.up("--tags", "mark") == set(HOSTS)  # a partial run: everything, no record
    assert fleet.up("--check") == {"gw1", "admin"}
    assert fleet.up() == {"gw1", "admin"}  # check mode recorded nothing
    assert fleet.up() == set()
