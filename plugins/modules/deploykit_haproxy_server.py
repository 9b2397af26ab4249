#!/usr/bin/python
"""Drain, hold or release one HAProxy server through the admin socket."""

from __future__ import annotations

import csv
import io
import socket
import time

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: deploykit_haproxy_server
short_description: Set an HAProxy backend server to ready, drain or maint, and wait for it
description: >-
  Talks to HAProxy's admin socket. state=drain stops new requests to the server while its
  open ones finish (with wait_idle, until its current sessions reach 0); state=maint takes
  it out entirely; state=ready puts it back (with wait_up, until its health check passes).
  The socket's runtime state is lost when HAProxy restarts or reloads, which leaves every
  server ready: the state the config describes.
options:
  backend: {type: str, required: true, description: the backend (proxy) name}
  server: {type: str, required: true, description: the server's name in that backend}
  state: {type: str, required: true, choices: [ready, drain, maint], description: wanted state}
  socket: {type: path, default: /run/haproxy/admin.sock, description: the admin socket}
  wait_idle: {type: bool, default: false, description: wait until the server has no session}
  wait_up: {type: bool, default: false, description: wait until the health check says UP}
  timeout: {type: int, default: 60, description: seconds to wait before failing}
author: deploykit
"""

EXAMPLES = r"""
- name: Drain the first gateway and wait for its requests to finish
  deploykit.kvcache.deploykit_haproxy_server:
    backend: rgw
    server: rgw.host1.0
    state: drain
    wait_idle: true
"""

RETURN = r"""
status: {description: HAProxy's status for the server at the end (UP, DRAIN, MAINT, ...), type: str}
sessions: {description: its current sessions at the end, type: int}
"""


def command(path: str, line: str) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(line.encode() + b"\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def server_row(path: str, backend: str, server: str) -> dict[str, str] | None:
    text = command(path, "show stat").lstrip("# ")
    for row in csv.DictReader(io.StringIO(text)):
        if row.get("pxname") == backend and row.get("svname") == server:
            return row
    return None


def in_state(status: str, state: str) -> bool:
    """`show stat` says MAINT / DRAIN (possibly with a reason), anything else is ready."""
    if state == "maint":
        return status.startswith("MAINT")
    if state == "drain":
        return status.startswith("DRAIN")
    return not status.startswith(("MAINT", "DRAIN"))


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "backend": {"type": "str", "required": True},
            "server": {"type": "str", "required": True},
            "state": {"type": "str", "required": True, "choices": ["ready", "drain", "maint"]},
            "socket": {"type": "path", "default": "/run/haproxy/admin.sock"},
            "wait_idle": {"type": "bool", "default": False},
            "wait_up": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    p = module.params
    name = f"{p['backend']}/{p['server']}"
    try:
        row = server_row(p["socket"], p["backend"], p["server"])
    except OSError as exc:
        module.fail_json(msg=f"cannot reach HAProxy's admin socket {p['socket']}: {exc}")
    if row is None:
        module.fail_json(msg=f"HAProxy has no server {name}")
    changed = not in_state(row["status"], p["state"])
    if changed and not module.check_mode:
        reply = command(p["socket"], f"set server {name} state {p['state']}").strip()
        if reply:  # HAProxy answers an accepted command with an empty line
            module.fail_json(msg=f"HAProxy refused `set server {name} state {p['state']}`: {reply}")
    deadline = time.monotonic() + p["timeout"]
    while not module.check_mode:
        row = server_row(p["socket"], p["backend"], p["server"]) or row
        idle = not p["wait_idle"] or int(row.get("scur") or 0) == 0
        up = not p["wait_up"] or row["status"].startswith("UP")
        if idle and up:
            break
        if time.monotonic() > deadline:
            module.fail_json(msg=f"{name} is {row['status']} with {row.get('scur')} open "
                                 f"sessions after {p['timeout']} s", status=row["status"])
        time.sleep(0.5)
    module.exit_json(changed=changed, status=row["status"], sessions=int(row.get("scur") or 0))


if __name__ == "__main__":
    main()
