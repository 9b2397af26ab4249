"""The connection flags reach Ansible in the host transport for real (what verify, doctor,
cache and bench use): become with a become-user and a password file, through ansible-runner
and the local connection (root becomes `nobody` with sudo)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path

import pytest

from deploy_kit.config.models import HostConfig
from deploy_kit.config.site import Host
from deploy_kit.flows.request import ConnectionOptions
from deploy_kit.transport.hosts import run_many
from tests.local_site import local_site


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("sudo") is None
                    or not Path("/usr/bin/python3").is_file(),
                    reason="needs root, sudo (root asks no password) and a system python3 "
                           "that nobody can run")
def test_become_flags_reach_the_transport(tmp_path: Path) -> None:
    a = Host(name="a", address="127.0.0.1", groups=frozenset(), config=HostConfig(),
             sources={}, geometry=None)
    site = local_site(tmp_path / "inv", [a])
    hosts = site.root / "hosts.yml"  # a Python that `nobody` can run (the venv's may not be)
    hosts.write_text(hosts.read_text().replace(sys.executable, "/usr/bin/python3"))
    password = tmp_path / "private" / "become-password"
    password.parent.mkdir(mode=0o700)
    password.write_text("unused\n")
    password.chmod(0o600)
    plain = run_many(site, [(a, "id -un")], timeout=30)
    assert plain[0].stdout == "root", plain
    connection = ConnectionOptions(become=True, become_user="nobody",
                                   become_password_file=password, forks=2)
    became = run_many(dataclasses.replace(site, connection=tuple(connection.argv())),
                      [(a, "id -un")], timeout=30)
    assert became[0].error is None, became
    assert became[0].stdout == "nobody", became


def test_the_transport_reads_the_ansible_cfg_of_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """verify's reads run under the user's ansible.cfg too: here ./ansible.cfg names a
    Python that does not exist, and Ansible's error says so."""
    for name in [k for k in os.environ if k.startswith("ANSIBLE_")]:
        monkeypatch.delenv(name)
    project = tmp_path / "project"
    project.mkdir()
    (project / "ansible.cfg").write_text("[defaults]\ninterpreter_python = /nonexistent/py3\n")
    monkeypatch.chdir(project)
    a = Host(name="a", address="127.0.0.1", groups=frozenset(), config=HostConfig(),
             sources={}, geometry=None)
    site = local_site(tmp_path / "inv", [a])
    hosts = site.root / "hosts.yml"  # the interpreter left to the configuration
    hosts.write_text(hosts.read_text().replace(f"ansible_python_interpreter: {sys.executable}",
                                               ""))
    assert "ansible_python_interpreter" not in hosts.read_text()
    [result] = run_many(site, [(a, "echo ok")], timeout=30)
    assert result.error is not None and "/nonexistent/py3" in result.error, result
    (project / "ansible.cfg").write_text(f"[defaults]\ninterpreter_python = {sys.executable}\n")
    [result] = run_many(site, [(a, "echo ok")], timeout=30)
    assert result.stdout == "ok", result
