"""Helpers for tests that need a real external tool (haproxy, coredns, ceph)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy_kit.transport.hosts import ShellResult

REPO = Path(__file__).resolve().parents[1]


def require_tool(name: str) -> str:
    """Path of `name`; CI (DEPLOYKIT_REQUIRE_TOOLS=1) fails instead of skipping without it."""
    path = shutil.which(name)
    if path:
        return path
    if os.environ.get("DEPLOYKIT_REQUIRE_TOOLS") == "1":
        pytest.fail(f"{name} is required here (DEPLOYKIT_REQUIRE_TOOLS=1) but not installed")
    pytest.skip(f"{name} not installed")


def ansible_module(module: str, args: dict, check: bool = False,
                   secrets: dict[str, str] | None = None, tmp: Path | None = None,
                   ok: bool = True) -> dict:
    """One module run on localhost as a role runs it (the collection through ansible.cfg);
    secrets travel in an extra-vars file, never in argv. Returns Ansible's JSON result,
    of a run that must succeed (ok) or fail (not ok)."""
    ansible = Path(sys.executable).parent / "ansible"
    argv = [str(ansible), "localhost", "-m", f"deploykit.kvcache.{module}", "-a", json.dumps(args)]
    if secrets:
        assert tmp is not None
        extra = tmp / "secrets.json"
        extra.write_text(json.dumps(secrets))
        extra.chmod(0o600)
        argv += ["-e", f"@{extra}"]
    if check:
        argv.append("--check")
    # ad-hoc's own output: `localhost | CHANGED => {the module's JSON result}`
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_LOCALHOST_WARNING": "false"}
    result = subprocess.run([*argv, "--one-line"], capture_output=True, text=True,
                            timeout=300, cwd=REPO, env=env)
    assert (result.returncode == 0) == ok, result.stdout[-3000:] + result.stderr[-3000:]
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("localhost | "))
    outcome: dict = json.loads(line.split(" => ", 1)[1])
    if secrets:
        for value in secrets.values():
            assert value not in result.stdout + result.stderr
    return outcome


def run_script_here(host: str, script: str, timeout: float = 60) -> ShellResult:
    """What the transport returns for a probe's script on `host`, with the script run on
    this machine instead (against loopback services standing in for the host's own)."""
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                          timeout=timeout)
    return ShellResult(host, done.stdout, done.returncode, None, done.stderr)


@contextlib.contextmanager
def udp_server(handler: type[socketserver.BaseRequestHandler]) -> Iterator[int]:
    """A threaded UDP server on a free 127.0.0.1 port (a fake DNS upstream): its port."""
    from tests.integration.test_consul_dns import free_port

    server = socketserver.ThreadingUDPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()



ROUTER_VENVS = Path(os.environ.get("DEPLOYKIT_ROUTER_VENVS", "/var/cache/deploykit/router-venv"))


def vllm_router() -> str:
    """vllm-router's console script as a router host gets it: installed from deploykit's
    hash-pinned lock (the lab's staged wheels when prefetch made them, else PyPI) into a
    cached venv on first use; $DEPLOYKIT_VLLM_ROUTER names another. Without one: a skip,
    or a failure in CI (DEPLOYKIT_REQUIRE_TOOLS=1)."""
    given = os.environ.get("DEPLOYKIT_VLLM_ROUTER")
    if given:
        return given
    from deploy_kit.config.models import HostConfig
    from deploy_kit.core import router_lock
    from deploy_kit.ops import router_wheels

    version = HostConfig.model_fields["router_version"].default
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    venv = ROUTER_VENVS / f"{version}-py{py.replace('.', '')}"
    script = venv / "bin" / "vllm-router"
    if script.exists():
        return str(script)
    staged = Path("/var/cache/deploykit/wheelhouse") / router_wheels.stage_name(
        version, py, os.uname().machine)
    offline = ["--no-index", "--find-links", str(staged)] if \
        (staged / "requirements.lock").exists() else []
    try:
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                       capture_output=True, timeout=120)
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-deps",
                        "--require-hashes", *offline, "-r",
                        str(router_lock.lock_path(version))],
                       check=True, capture_output=True, text=True, timeout=600)
    except (subprocess.SubprocessError, OSError) as exc:
        shutil.rmtree(venv, ignore_errors=True)
        detail = getattr(exc, "stderr", "") or str(exc)
        if os.environ.get("DEPLOYKIT_REQUIRE_TOOLS") == "1":
            pytest.fail(f"vllm-router {version} could not be installed: {detail[-800:]}")
        pytest.skip(f"vllm-router {version} not installable here: {detail[-200:]}")
    return str(script)
