"""Two real `deploykit up` processes on one site: the second is refused at once, naming
the first, while the first goes on to its end; the lock then goes with it.

The first run is held mid-converge cheaply: every host's SSH port is a local listener that
accepts and never speaks, so ssh waits for a banner (Ansible's timeout) until the test
closes the listener; the run then ends with the hosts unreachable (exit 5)."""

from __future__ import annotations

import copy
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from deploy_kit.core.exit_codes import ExitCode
from deploy_kit.ops import site_lock
from tests.conftest import BASE_HOSTS

REPO = Path(__file__).resolve().parents[2]


def _silent_listeners(count: int) -> tuple[list[socket.socket], int]:
    """127.0.0.10.. on one free port: a TCP accept with no SSH banner ever."""
    first = socket.create_server(("127.0.0.10", 0))
    port = first.getsockname()[1]
    return [first] + [socket.create_server((f"127.0.0.{10 + i}", port))
                      for i in range(1, count)], port


def _inventory(root: Path, port: int) -> int:
    hosts = copy.deepcopy(BASE_HOSTS)
    n = 0
    for group in hosts["all"]["children"].values():
        for name, hv in group["hosts"].items():
            hv["deploykit_address"] = hv.pop("ansible_host")
            hv |= {"ansible_host": f"127.0.0.{10 + n}", "ansible_port": port}
            group["hosts"][name] = hv
            n += 1
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return n


def _deploykit(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "deploy_kit", *args], cwd=REPO, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_second_up_is_refused_naming_the_first_which_completes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "inv"
    listeners, port = _silent_listeners(7)
    assert _inventory(root, port) == 7
    # ANSIBLE_TIMEOUT: the run's first play (the upgrade survey) waits it out once before
    # the converge records its run; 20 s then leaves the converge 20 s of holding the lock
    # while the second run is refused (about 1 s): 65 s -> 26 s
    env = {**os.environ, "COLUMNS": "400", site_lock.LOCK_DIR_ENV: str(tmp_path / "locks"),
           "DEPLOYKIT_RUNS_DIR": str(tmp_path / "runs"), "ANSIBLE_TIMEOUT": "20",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "deploykit-lab"),
                                          os.environ.get("PYTHONPATH", "")])}
    monkeypatch.setenv(site_lock.LOCK_DIR_ENV, env[site_lock.LOCK_DIR_ENV])
    from deploy_kit.ops.site import open_site

    lock_file = site_lock.lock_path(open_site(str(root)))  # the site's identity
    first = _deploykit("up", "-i", str(root), env=env)
    accepted: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 120
        holder: dict[str, object] = {}
        # the first run is at its hosts: mid-converge (its run record named), lock held;
        # whichever host it reaches first (the upgrade survey, the secrets check)
        while not (accepted and holder.get("run")):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first run never reached a host"
            ready, _, _ = select.select(listeners, [], [], 0.5)
            accepted.extend(listener.accept()[0] for listener in ready)
            holder = json.loads(lock_file.read_text() or "{}") if lock_file.exists() else {}
        assert holder["pid"] == first.pid and holder["verb"] == "up" and holder["run"]

        start = time.monotonic()
        second = _deploykit("up", "-i", str(root), env=env)
        out, err = second.communicate(timeout=120)
        assert second.returncode == ExitCode.ENVIRONMENT, out + err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, err
        assert f"pid {first.pid}" in errors[0] and holder["run"] in errors[0]
        assert "PLAY" not in out  # refused before Ansible started
        assert first.poll() is None  # the first goes on
        print(f"second run refused in {time.monotonic() - start:.1f} s: {errors[0]}")
    finally:
        for s in accepted + listeners:
            s.close()  # ssh sees the port close: the hosts are unreachable, the run ends
    out, err = first.communicate(timeout=180)
    assert first.returncode == ExitCode.HOSTS_UNREACHABLE, out + err
    assert lock_file.read_text() == ""  # released, and a third run could take it
    with site_lock.site_lock(open_site(str(root)), "up"):
        pass
