"""The round trip's local driver on the lab: LMCache from a controller venv, run inside a
serving host's network namespace with that host's resolv.conf and deployed files."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from deploy_kit.config.site import Host
from deploy_kit.verify.roundtrip import HostFiles


def run_in_lab_netns(host: Host, deployed: HostFiles, env: dict[str, str], driver: str,
                     args: list[str]) -> str | None:
    """The driver's output, or None to run it on the host through Ansible like any fleet.
    Only NIXL needs this: the lab hosts' venv has LMCache (their lock) but not NIXL, so a
    NIXL round trip runs from a controller venv, the hosts' lock plus NIXL
    (deploykit_lab.driver_venv, built on first use, about 3 minutes, then cached)."""
    from deploykit_lab.driver_venv import ensure_driver_venv

    netns = f"dklab-{host.name}"
    if host.config.lmcache_mode != "nixl" or not Path(f"/run/netns/{netns}").exists():
        return None
    return _run_in_netns(netns, ensure_driver_venv(), deployed, env, driver, args)


def _run_in_netns(netns: str, venv: Path, deployed: HostFiles, env: dict[str, str],
                  driver: str, args: list[str]) -> str:
    etc = Path("/etc/netns") / netns
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "resolv.conf").write_text(deployed.resolv)  # `ip netns exec` binds it in
    if deployed.ca_bundle:  # TLS: the host's trust store as its update-ca-certificates
        certs = etc / "ssl" / "certs"  # built it; `ip netns exec` binds it over /etc/ssl
        certs.mkdir(parents=True, exist_ok=True)
        (certs / "ca-certificates.crt").write_text(deployed.ca_bundle)
    work = Path(tempfile.mkdtemp(prefix="dk-roundtrip-"))
    os.chmod(work, 0o700)
    try:
        for path, content in deployed.files.items():
            local = work / path.lstrip("/")
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(content)
            local.chmod(0o600)
        for key in ("LMCACHE_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
            if key in env:
                env[key] = str(work / env[key].lstrip("/"))
        (work / "driver.py").write_text(driver)
        result = subprocess.run(
            ["ip", "netns", "exec", netns, str(venv / "bin" / "python"), str(work / "driver.py"),
             *args], env={"PATH": "/usr/bin:/bin", "HOME": str(work),
                          "VLLM_TARGET_DEVICE": "cpu", **env},
            capture_output=True, text=True, timeout=600)
        return result.stdout + ("\n" + result.stderr[-2000:] if result.returncode else "")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(etc, ignore_errors=True)
