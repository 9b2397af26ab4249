"""SSH to inventory hosts with paramiko (the same user, port and key Ansible uses)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from deploy_kit.config.site import Host


def run_on(host: Host, script: str, timeout: float = 30.0) -> str:
    """Run a shell script on the host (locally when Ansible connects locally)."""
    conn = host.connection
    if conn.get("ansible_connection") == "local":
        return subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                              timeout=timeout).stdout
    import paramiko

    client = paramiko.SSHClient()
    # deploykit's Ansible settings do not pin host keys either (host_key_checking=False)
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    key = conn.get("ansible_ssh_private_key_file")
    client.connect(host.address, port=int(conn.get("ansible_port", 22)),
                   username=conn.get("ansible_user", "root"),
                   key_filename=str(Path(key).expanduser()) if key else None,
                   timeout=10, banner_timeout=10, auth_timeout=10,
                   look_for_keys=key is None, allow_agent=key is None)
    try:
        _stdin, stdout, _stderr = client.exec_command(script, timeout=timeout)
        return str(stdout.read().decode())
    finally:
        client.close()


def sections(output: str) -> dict[str, str]:
    """Split `### name` delimited output into {name: text}."""
    parts: dict[str, str] = {}
    current = None
    lines: list[str] = []
    for line in output.splitlines():
        if line.startswith("### "):
            if current is not None:
                parts[current] = "\n".join(lines)
            current, lines = line[4:].strip(), []
        else:
            lines.append(line)
    if current is not None:
        parts[current] = "\n".join(lines)
    return parts
