"""The host transport for real: ansible-runner, the inventory, Ansible's local and ssh
connections. What verify, cache, bench and the round trip rely on: each script's own
stdout and exit code, in order, text Jinja would mangle left alone, scripts past the
kernel's single-argument limit, a timeout per run, and unreachable hosts named with
Ansible's reason (verify exits 5 for them, after printing what it could check)."""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

from deploy_kit.config.models import HostConfig
from deploy_kit.config.site import Host
from deploy_kit.transport.hosts import TransportError, run_many, run_on
from tests.cli import run_cli
from tests.conftest import BASE_HOSTS, InventoryFactory
from tests.local_site import local_site


def _host(name: str) -> Host:
    return Host(name=name, address="127.0.0.1", groups=frozenset(), config=HostConfig(),
                sources={}, geometry=None)


def test_scripts_run_in_order_with_their_own_output_and_exit_code(tmp_path: Path) -> None:
    a, b = _host("a"), _host("b")
    site = local_site(tmp_path / "inv", [a, b])
    big = "x" * 300_000  # over MAX_ARG_STRLEN (128 KiB): travels on stdin, not in argv
    results = run_many(site, [
        (a, "echo '{{ not_jinja }} {% raw %}'; echo oops >&2; exit 3"),
        (b, f"v='{big}'; echo ${{#v}}"),
        (a, "printf '%s' \"$0\""),
    ], timeout=30)
    assert [(r.host, r.stdout, r.rc, r.error) for r in results] == [
        ("a", "{{ not_jinja }} {% raw %}", 3, None),  # stderr is not stdout
        ("b", "300000", 0, None),
        ("a", "/bin/sh", 0, None)]
    assert results[0].stderr == "oops"
    # run_on: a non-zero exit is an error naming the host, the code and stderr's last line
    try:
        run_on(site, a, "echo partial; echo 'no such user' >&2; exit 22")
    except TransportError as exc:
        assert exc.message == "a: the script exited 22: no such user", exc.message
    else:
        raise AssertionError("run_on returned for a failing script")
    assert run_on(site, a, "echo partial; exit 1", check=False) == "partial"


def test_a_host_whose_python_cannot_run_names_the_interpreter_setting(tmp_path: Path) -> None:
    """Ansible could not run its module at all (discovery found a broken shim, a wrong
    ansible_python_interpreter): an error, never an empty "output" read as data."""
    a = _host("a")
    site = local_site(tmp_path / "inv", [a])
    inventory = site.root / "hosts.yml"
    inventory.write_text(inventory.read_text().replace(sys.executable, "/nonexistent/python3"))
    [result] = run_many(site, [(a, "echo ok")], timeout=30)
    assert result.error is not None and "ansible_python_interpreter" in result.error, result
    assert "/nonexistent/python3" in result.error, result


def test_a_script_past_its_timeout_is_an_error_naming_the_host(tmp_path: Path) -> None:
    a = _host("a")
    site = local_site(tmp_path / "inv", [a])
    started = time.monotonic()
    [result] = run_many(site, [(a, "sleep 30")], timeout=2)
    assert time.monotonic() - started < 20
    assert result.error is not None and "Timed out after 2" in result.error, result
    try:
        result.text()
    except TransportError as exc:
        assert exc.message.startswith("a: failed through Ansible")
    else:
        raise AssertionError("text() of a failed script returned")
    assert run_on(site, a, "echo ok") == "ok"


def test_unreachable_hosts_exit_5_naming_them(make_inventory: InventoryFactory,
                                              tmp_path: Path) -> None:
    """Every host on loopback, SSH on a closed port: Ansible reports them unreachable, and
    so does verify (exit 5), after printing what it could check."""
    hosts = copy.deepcopy(BASE_HOSTS)
    for n, (_group, members) in enumerate(hosts["all"]["children"].items()):
        for m, (_name, hostvars) in enumerate(members["hosts"].items()):
            hostvars["ansible_host"] = f"127.0.{n + 1}.{m + 1}"
            hostvars["ansible_port"] = 9
    result = run_cli("verify", "-i", str(make_inventory(hosts)), "--check", "vllm-service",
                     env={"ANSIBLE_SSH_RETRIES": "0"})
    assert result.returncode == 5, result
    assert "unreachable: " in result.stderr and "gpu1: unreachable through Ansible" in \
        result.stderr and "gpu2" in result.stderr, result.stderr
    assert "Connection refused" in result.stderr
    # doctor on the same site: the checks it maps observed nothing, so it is not green
    doctor = run_cli("doctor", "401 Unauthorized", "-i", str(make_inventory(hosts)),
                     env={"ANSIBLE_SSH_RETRIES": "0"})
    assert doctor.returncode == 5, doctor
