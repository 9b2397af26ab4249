"""`deploykit remove`: what it refuses before any host is contacted (unknown hosts, the
last gateway, DNS server or Consul server, a lost Consul majority), how it asks, the command
it builds, and the order playbooks/remove.yml takes a host out in (read from the playbook and
the role entry points it includes: the lab proof is tests/lab/day2/test_2_remove_add.py)."""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_kit.cli.app import main
from deploy_kit.cli.environment import Environment
from deploy_kit.ops.site import open_site
from deploy_kit.plan.removal import refusals, steps
from tests.cli import run_cli
from tests.conftest import BASE_HOSTS, REPO, InventoryFactory

PLAYBOOK = REPO / "playbooks" / "remove.yml"

# three Consul servers, which are also the site's two gateways' neighbours
THREE_SERVERS = {"all": {"children": {
    **BASE_HOSTS["all"]["children"],
    "consul_servers": {"hosts": {f"c{i}": {"ansible_host": f"10.0.0.2{i}"} for i in (1, 2, 3)}},
    "dns": {"hosts": {"dns1": {"ansible_host": "10.0.0.31"},
                      "dns2": {"ansible_host": "10.0.0.32"}}},
}}}


def _remove(root: Path, *args: str, tmp_path: Path) -> Any:
    return run_cli("remove", "-i", str(root), *args,
                   env={"DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs")}, cwd=tmp_path)


def _extra(stdout: str) -> dict[str, Any]:
    words = shlex.split(stdout.strip().splitlines()[-1])
    return json.loads(words[words.index("-e") + 1])


def test_print_command_names_the_hosts_and_the_flags(make_inventory: InventoryFactory,
                                                    tmp_path: Path) -> None:
    root = make_inventory()
    plain = _remove(root, "rgw2", "--print-command", tmp_path=tmp_path)
    assert plain.returncode == 0, plain.stderr
    words = shlex.split(plain.stdout.strip().splitlines()[-1])
    assert Path(words[words.index("-i") + 2]) == PLAYBOOK
    assert _extra(plain.stdout) == {"vllm_serial": 1, "deploykit_remove_hosts": ["rgw2"],
                                    "deploykit_remove_purge": False,
                                    "deploykit_remove_force": False}
    both = _remove(root, "rgw2", "gpu1", "--purge-data", "--print-command", tmp_path=tmp_path)
    assert _extra(both.stdout)["deploykit_remove_hosts"] == ["rgw2", "gpu1"]
    assert _extra(both.stdout)["deploykit_remove_purge"] is True
    assert not (tmp_path / "runs").exists()  # printing writes no run record


@pytest.mark.parametrize(("hosts", "words"), [
    (["rgw3"], "rgw3: not a host of"),
    (["rgw1", "rgw2"], "leaves no gateway"),
    (["dns1"], "leaves no DNS server"),
    (["c1"], "leaves no Consul server"),
])
def test_what_would_break_the_site_is_refused_before_any_host(
        make_inventory: InventoryFactory, tmp_path: Path, hosts: list[str], words: str) -> None:
    root = make_inventory()
    for extra in ((), ("--force",)):  # --force lifts none of these
        result = _remove(root, *hosts, "--yes", *extra, tmp_path=tmp_path)
        assert result.returncode == 2, result
        assert words in result.stdout + result.stderr, result
        assert "hint:" in result.stdout + result.stderr  # one line with the fix
    assert not (tmp_path / "runs").exists()  # nothing ran, nothing recorded


def test_losing_the_consul_majority_is_refused_unless_forced(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    root = make_inventory(THREE_SERVERS)
    one = _remove(root, "c1", "--print-command", tmp_path=tmp_path)
    assert one.returncode == 0, one  # 2 of 3 remain: a majority
    two = _remove(root, "c1", "c2", "--print-command", tmp_path=tmp_path)
    assert two.returncode == 2 and "fewer than a majority" in two.stdout + two.stderr, two
    assert "remove at most 1 server(s) per run" in two.stdout + two.stderr
    forced = _remove(root, "c1", "c2", "--force", "--print-command", tmp_path=tmp_path)
    assert forced.returncode == 0, forced
    assert "--force:" in forced.stdout + forced.stderr  # what it lifted is said
    assert _extra(forced.stdout)["deploykit_remove_force"] is True


def test_static_dns_gateways_need_force(make_inventory: InventoryFactory,
                                        tmp_path: Path) -> None:
    root = make_inventory(all={"deploykit_dns_mode": "static"})
    refused = _remove(root, "rgw2", "--print-command", tmp_path=tmp_path)
    assert refused.returncode == 2 and "deploykit_dns_mode static" in refused.stdout \
        + refused.stderr, refused
    assert _remove(root, "gpu1", "--print-command", tmp_path=tmp_path).returncode == 0
    assert _remove(root, "rgw2", "--force", "--print-command",
                   tmp_path=tmp_path).returncode == 0


def test_refuses_without_a_terminal_unless_yes(make_inventory: InventoryFactory,
                                               tmp_path: Path) -> None:
    root = make_inventory()
    result = _remove(root, "rgw2", tmp_path=tmp_path)
    assert result.returncode == 2 and "pass --yes" in result.stderr, result
    assert not (tmp_path / "runs").exists()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_asks_with_what_happens_per_host_and_stops_on_no(
        make_inventory: InventoryFactory, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_inventory()
    monkeypatch.setenv("DEPLOYKIT_RUNS_DIR", str(tmp_path / "runs"))
    out, err = io.StringIO(), io.StringIO()
    rc = main(["remove", "-i", str(root), "rgw2", "gpu1"],
              Environment(stdin=_Terminal("n\n"), stdout=out, stderr=err,
                          env={**dict(__import__("os").environ), "COLUMNS": "400"},
                          stderr_isatty=False, color=False))
    shown = out.getvalue() + err.getvalue()
    assert rc == 130, shown  # answered no: nothing ran
    assert "rgw2 (" in shown and "gpu1 (" in shown
    assert "take it out of DNS" in shown and "vLLM instances and LMCache server" in shown
    assert "take 2 host(s) out of" in shown
    assert not (tmp_path / "runs").exists()


def test_steps_follow_each_hosts_groups(make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory()))
    gateway = steps(site, "rgw2", purge=False)
    assert gateway[0].startswith("take it out of DNS")
    assert any("leave Consul gracefully (agent)" in s for s in gateway)
    assert gateway[-2].startswith("forget its converge record")
    assert gateway[-1].startswith("keep its files")
    serving = steps(site, "gpu1", purge=True)
    assert not any("DNS" in s or "Consul" in s for s in serving[:-1])
    assert serving[-1].startswith("delete what `down` deletes")
    assert refusals(site, ("rgw2", "gpu1")) == []


# -- the playbook ---------------------------------------------------------------------------

def _entry_point(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The tasks of the role entry point a task includes or imports (deploykit_common's shared
    helpers left closed), so the order is read through ceph_rgw drain, consul leave..."""
    for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
        spec = task.get(key) or {}
        role = str(spec.get("name", "")).removeprefix("deploykit.kvcache.")
        if spec.get("tasks_from") and role != "deploykit_common":
            return yaml.safe_load((REPO / "roles" / role / "tasks" / spec["tasks_from"])
                                  .read_text()) or []
    return []


def _tasks(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for task in tasks:
        found.append(task)
        for key in ("block", "rescue", "always"):
            found += _tasks(task.get(key, []))
        found += _tasks(_entry_point(task))
    return found


def _names(tasks: list[dict[str, Any]]) -> list[str]:
    return [task.get("name", "") for task in _tasks(tasks)]


def test_the_playbook_takes_one_host_at_a_time_out_of_dns_first() -> None:
    plays = yaml.safe_load(PLAYBOOK.read_text())
    host_play = plays[-1]
    assert host_play["serial"] == 1 and host_play["max_fail_percentage"] == 0
    assert host_play["hosts"] == "{{ deploykit_remove_hosts | default([]) }}"
    names = _names(host_play["tasks"])

    def at(prefix: str) -> int:
        hits = [i for i, n in enumerate(names) if n.startswith(prefix)]
        assert len(hits) == 1, (prefix, names)
        return hits[0]

    order = [at("Stop unless another gateway host passes"),
             at("Take this host out of DNS"),
             at("Wait until no DNS server answers with this host"),
             at("Wait out the DNS TTL"),
             at("Stop the concentrator softly (open requests finish)"),
             at("Stop and disable the concentrator and the gateways"),
             at("Stop and disable CoreDNS"),
             at("Lift the maintenance flag"),
             at("Make the agent leave the cluster"),
             at("Stop and disable the Consul agent"),
             at("Wait until the s3 service no longer lists this host"),
             at("Stop and disable the vLLM instances"),
             at("Forget this host's converge record")]
    assert order == sorted(order), [names[i] for i in order]
    assert names[-1] == "Forget this host's converge record"


def test_the_playbook_never_touches_site_data_and_purges_only_on_request() -> None:
    text = PLAYBOOK.read_text()
    assert "ceph_rgw_pools" not in text and "ceph_rgw_s3" not in text  # pools, bucket, user
    host_play = yaml.safe_load(text)[-1]
    purge = next(t for t in host_play["tasks"] if t.get("name", "").startswith("Delete what"))
    assert purge["when"] == "deploykit_remove_purge | default(false) | bool"
    roles = {t["ansible.builtin.include_role"]["tasks_from"] for t in purge["block"]}
    assert roles == {"destroy.yml"}
    elsewhere = [t for t in _tasks(host_play["tasks"]) if t is not purge
                 and t not in purge["block"]]
    destroys = [t["ansible.builtin.include_role"]["name"] for t in elsewhere
                if (t.get("ansible.builtin.include_role") or {}).get("tasks_from")
                == "destroy.yml"]
    assert destroys == ["deploykit.kvcache.serving"], destroys  # stops units, deletes nothing


def test_every_task_that_sends_a_consul_token_hides_it() -> None:
    host_play = yaml.safe_load(PLAYBOOK.read_text())[-1]
    calls = 0
    for task in _tasks(host_play["tasks"]):
        uri = task.get("ansible.builtin.uri")
        if uri is not None:
            assert "headers" in uri and "no_log" in task, task["name"]
        api = task.get("deploykit.kvcache.deploykit_consul")
        if api is not None:  # the module hides its token argument; the task hides the rest
            assert "token" in api and "no_log" in task, task["name"]
            calls += 1
        if "set_fact" in str(task) and "X-Consul-Token" in str(task):
            assert task["no_log"] is True
    assert calls >= 8  # every Consul call of a removal goes through the one module


# -- adding a host ---------------------------------------------------------------------------

def _trees(root: Path) -> dict[str, dict[str, str]]:
    from deploy_kit.ops.rundir import role_tree

    return {host: {path: f.content if isinstance(f.content, str) else repr(f.content)
                   for path, f in files.items()}
            for host, files in role_tree(open_site(str(root))).items()}


@pytest.mark.parametrize(("group", "name", "address", "others", "site_wide"), [
    ("rgw", "rgw3", "10.0.0.13", set(), True),  # CoreDNS reads Consul: no other host's files
    ("vllm", "gpu3", "10.0.1.3", set(), True),  # finds the tier through the S3 name
    ("dns", "dns2", "10.0.0.32", {"gpu1", "gpu2"}, True),  # the serving hosts' resolv.conf
    # every agent's join list, and the Consul servers CoreDNS asks
    ("consul_servers", "c2", "10.0.0.22", {"c1", "rgw1", "rgw2", "dns1"}, False),
])
def test_what_adding_a_host_changes_on_the_others(
        make_inventory: InventoryFactory, tmp_path: Path, group: str, name: str,
        address: str, others: set[str], site_wide: bool) -> None:
    """docs/day2.md "Adding a host": which other hosts' own files a new host changes (what
    `up --limit` must name besides it), and whether the site-wide tree changes (gateways,
    DNS servers and serving hosts are in site.json and the monitoring targets: then a plain
    `up` converges every host once, restarting nothing whose files stayed)."""
    import copy

    before = _trees(make_inventory())
    hosts = copy.deepcopy(BASE_HOSTS)
    entry: dict[str, str] = {"ansible_host": address}
    if group == "vllm":
        entry["vllm_accelerator"] = "cuda"
    hosts["all"]["children"][group]["hosts"][name] = entry
    after = _trees(make_inventory(hosts))
    assert name in after and name not in before
    changed = {h for h in before if h != "_cluster" and before[h] != after[h]}
    assert changed == others, changed
    assert (before["_cluster"] != after["_cluster"]) is site_wide


def test_remove_takes_the_site_lock(make_inventory: InventoryFactory, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Like up and down: while another run holds the site, remove stops at once (exit 7,
    naming the holder) before any host is contacted; --print-command needs no lock."""
    from deploy_kit.core.exit_codes import ExitCode
    from deploy_kit.ops import site_lock
    from tests.unit.test_site_lock import _holder

    monkeypatch.setenv(site_lock.LOCK_DIR_ENV, str(tmp_path / "locks"))
    root = make_inventory()
    proc, release = _holder(root)
    try:
        held = _remove(root, "rgw2", "--yes", tmp_path=tmp_path)
        assert held.returncode == ExitCode.ENVIRONMENT, held.stdout + held.stderr
        assert f"pid {proc.pid}" in held.stderr and "unreachable" not in held.stdout
        assert _remove(root, "rgw2", "--print-command", tmp_path=tmp_path).returncode == 0
    finally:
        release.set()  # type: ignore[attr-defined]
        proc.join(30)


@pytest.mark.parametrize(("removed", "force", "passes"), [
    (["c1"], False, True), (["c1", "c2"], False, False), (["c1", "c2"], True, True)])
def test_a_plain_ansible_run_keeps_the_consul_majority_unless_forced(
        tmp_path: Path, removed: list[str], force: bool, passes: bool) -> None:
    """AWX runs remove.yml without the CLI: its own precheck holds the majority rule too
    (run by ansible-playbook on the controller's play alone, the hosts never contacted)."""
    plays = yaml.safe_load(PLAYBOOK.read_text())
    precheck = next(p for p in plays if p.get("name") == "Check which hosts remove was given")
    (tmp_path / "precheck.yml").write_text(yaml.safe_dump([precheck]))
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(THREE_SERVERS))
    extra = {"deploykit_remove_hosts": removed, "deploykit_remove_force": force}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "hosts.yml",
         "precheck.yml", "-e", json.dumps(extra)], cwd=tmp_path, capture_output=True,
        text=True, env={"PATH": "/usr/bin:/bin", "ANSIBLE_LOCALHOST_WARNING": "false",
                        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
                        "HOME": str(tmp_path)}, timeout=120)
    assert (done.returncode == 0) is passes, done.stdout[-2000:]
    if not passes:
        assert "leaves 1 of 3 Consul servers, fewer than a majority" in done.stdout
