"""Consul's view over its HTTP API: members and the `s3` service's health per node."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

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


def _get(server: str, port: int, path: str, token: str | None, timeout: float) -> Any:
    request = urllib.request.Request(f"http://{server}:{port}{path}")
    if token:
        request.add_header("X-Consul-Token", token)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def probe(view: ConsulView, port: int = 8500, token: str | None = None,
          servers: list[str] | None = None, timeout: float = 3.0) -> ConsulView:
    """Ask the first consul server that answers; the view keeps which one it was."""
    errors = []
    for server in servers or [view.server]:
        try:
            members = _get(server, port, "/v1/agent/members", token, timeout)
            health = _get(server, port, f"/v1/health/service/{view.service}", token, timeout)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            errors.append(f"{server}: {type(exc).__name__}: {exc}")
            continue
        view.server = server
        view.members = parse_members(members)
        view.instances = parse_health(health)
        view.error = None
        return view
    view.error = "; ".join(errors) or "no consul server"
    return view
