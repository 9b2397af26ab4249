"""Consul's view over its HTTP API, read on a Consul server through the transport: members and
the `s3` service's health per node."""

from __future__ import annotations

import json
import shlex
from typing import Any

from deploy_kit.transport.hosts import ShellResult, TransportError, sections
from deploy_kit.verify.model import ConsulMember, ConsulServiceNode, ConsulView

# serf member status codes (/v1/agent/members)
MEMBER_STATUS = {0: "none", 1: "alive", 2: "leaving", 3: "left", 4: "failed"}
_RANK = {"passing": 0, "warning": 1, "critical": 2, "maintenance": 3}


def parse_members(data: list[dict[str, Any]]) -> list[ConsulMember]:
    return [ConsulMember(str(m.get("Name", "")), str(m.get("Addr", "")),
                         MEMBER_STATUS.get(int(m.get("Status", 0)), "none"))
            for m in data]


def parse_health(data: list[dict[str, Any]]) -> list[ConsulServiceNode]:
    """One entry per service instance; its status is its worst check (serfHealth included)."""
    out = []
    for entry in data:
        node = entry.get("Node") or {}
        service = entry.get("Service") or {}
        checks = entry.get("Checks") or []
        worst = max((str(c.get("Status", "critical")) for c in checks),
                    key=lambda s: _RANK.get(s, 3), default="passing")
        failing = [str(c.get("Output", "")).strip() for c in checks
                   if c.get("Status") != "passing"]
        out.append(ConsulServiceNode(str(node.get("Node", "")),
                                     str(service.get("Address") or node.get("Address", "")),
                                     worst, "; ".join(f for f in failing if f)[:300]))
    return out


def script(port: int, service: str) -> str:
    """Read Consul's view on a Consul server itself (the API listens on loopback): no token
    is sent, so the agent's default token (the read-only DNS token under ACLs) applies.
    python3 is what every host Ansible manages has; an HTTP error prints its status."""
    program = (
        "import sys, urllib.request, urllib.error\n"
        f"for name, path in (('members', '/v1/agent/members'), "
        f"('health', '/v1/health/service/{service}')):\n"
        "    print('### ' + name)\n"
        "    try:\n"
        f"        with urllib.request.urlopen('http://127.0.0.1:{port}' + path, timeout=5) as r:\n"
        "            print(r.read().decode())\n"
        "    except urllib.error.HTTPError as e:\n"
        "        print('HTTP %d %s' % (e.code, e.read()[:200].decode('utf-8', 'replace')))\n"
        "    except OSError as e:\n"
        "        print('%s: %s' % (type(e).__name__, e))\n")
    return f"python3 -c {shlex.quote(program)}"


def _json(parts: dict[str, str], name: str) -> Any:
    text = parts.get(name, "").strip()
    try:
        return json.loads(text)
    except ValueError:
        raise ValueError(f"{name}: {' '.join(text.split())[:300] or 'no answer'}") from None


def from_output(view: ConsulView, results: list[tuple[str, ShellResult]]) -> ConsulView:
    """The first server whose agent answered both reads; else every server's reason."""
    errors = []
    for server, result in results:
        try:
            parts = sections(result.text())
            members = _json(parts, "members")
            health = _json(parts, "health")
        except TransportError as exc:  # names the host itself
            errors.append(str(exc))
            continue
        except ValueError as exc:
            errors.append(f"{server}: {exc}")
            continue
        view.server = server
        view.members = parse_members(members)
        view.instances = parse_health(health)
        view.error = None
        return view
    view.error = "; ".join(errors) or "no consul server"
    return view
