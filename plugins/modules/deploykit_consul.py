#!/usr/bin/python
"""Ask or tell this host's Consul agent what a roll or a host's removal needs: the leader and
raft peers, which hosts pass, maintenance mode, the service's own checks, leave, the catalog,
force-leave."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.deploykit.kvcache.plugins.module_utils.deploykit_consul_api import call

DOCUMENTATION = r"""
module: deploykit_consul
short_description: One call to a Consul agent's HTTP API for rolling, draining or removing
description: >-
  Through the agent's HTTP API (the token in the X-Consul-Token header, never in a URL).
  Reads run in check mode too; writes (maintenance, leave, force_leave) send nothing in
  check mode and report the change they would make. A read fails on an HTTP status other
  than 200, as ansible.builtin.uri does; leave never fails (status tells).
options:
  url: {type: str, default: "http://127.0.0.1:8500", description: the agent's HTTP API}
  token: {type: str, default: "", no_log: true, description: "ACL token; empty: none sent"}
  action:
    type: str
    required: true
    choices: [leader, peers, passing, maintenance, checks, leave, node, force_leave, service_nodes]
    description: >-
      leader - the raft leader's address as this agent knows it ("" while none: leader).
      peers - the raft peers' addresses (peers).
      passing - the nodes whose instance of service passes every check (nodes).
      maintenance - put the service instance service into maintenance (enable) or out of it.
      checks - this agent's own checks of service, maintenance excluded (checks), and
      whether there is one and all are critical (failing).
      leave - this agent leaves the cluster gracefully.
      node - whether the catalog lists node (listed).
      force_leave - force node out of the cluster and prune it.
      service_nodes - the nodes the catalog lists for service (nodes).
  service: {type: str, default: "", description: "a service name, or for maintenance a service id"}
  node: {type: str, default: "", description: "node, force_leave: the node"}
  enable: {type: bool, default: true, description: "maintenance: on or off"}
  reason: {type: str, default: "", description: "maintenance: why (shown by Consul)"}
author: deploykit
"""

EXAMPLES = r"""
- name: Take this host out of DNS (Consul maintenance mode)
  deploykit.kvcache.deploykit_consul:
    action: maintenance
    service: "s3-{{ inventory_hostname }}"
    reason: deploykit rolling restart
    token: "{{ service_token }}"
  no_log: true
"""

RETURN = r"""
leader: {description: "leader: the leader's address, empty while there is none", type: str}
peers: {description: "peers: the raft peers' addresses", type: list}
status:
  description: "HTTP status of the call (0: agent unreachable, or a write in check mode)"
  type: int
nodes: {description: "passing, service_nodes: node names", type: list}
checks: {description: "checks: CheckID to Status of the service's own checks", type: dict}
failing: {description: "checks: at least one own check, and every one critical", type: bool}
listed: {description: "node: the catalog lists the node", type: bool}
"""

READS = {"leader", "peers", "passing", "checks", "node", "service_nodes"}
MAINTENANCE_CHECK = "_service_maintenance"


def request(action: str, p: dict[str, Any]) -> tuple[str, str]:
    """The method and path (with query) of one action."""
    service, node = quote(p["service"], safe=""), quote(p["node"], safe="")
    if action in ("leader", "peers"):
        return "GET", f"/v1/status/{action}"
    if action == "passing":
        return "GET", f"/v1/health/service/{service}?passing=1"
    if action == "maintenance":
        query = {"enable": "true" if p["enable"] else "false"}
        if p["enable"] and p["reason"]:
            query["reason"] = p["reason"]
        return "PUT", f"/v1/agent/service/maintenance/{service}?{urlencode(query)}"
    if action == "checks":
        return "GET", "/v1/agent/checks"
    if action == "leave":
        return "PUT", "/v1/agent/leave"
    if action == "node":
        return "GET", f"/v1/catalog/node/{node}"
    if action == "force_leave":
        return "PUT", f"/v1/agent/force-leave/{node}?prune=1"
    return "GET", f"/v1/catalog/service/{service}"


def own_checks(body: Any, service: str) -> dict[str, str]:
    """The service's checks on this agent, the maintenance check left out."""
    checks = body.values() if isinstance(body, dict) else []
    return {c["CheckID"]: c.get("Status", "") for c in checks
            if c.get("ServiceName") == service
            and not str(c.get("CheckID", "")).startswith(MAINTENANCE_CHECK)}


def result(action: str, service: str, status: int, body: Any) -> dict[str, Any]:
    """What the module returns for an answer of the agent."""
    if action == "leader":
        return {"leader": body if isinstance(body, str) and status == 200 else ""}
    if action == "peers":
        return {"peers": body if isinstance(body, list) else []}
    if action == "passing":
        rows = body if isinstance(body, list) else []
        return {"nodes": [r["Node"]["Node"] for r in rows]}
    if action == "service_nodes":
        rows = body if isinstance(body, list) else []
        return {"nodes": [r["Node"] for r in rows]}
    if action == "checks":
        own = own_checks(body, service)
        return {"checks": own,
                "failing": bool(own) and all(s == "critical" for s in own.values())}
    if action == "node":
        return {"listed": status == 200 and body is not None}
    return {}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "default": "http://127.0.0.1:8500"},
            "token": {"type": "str", "default": "", "no_log": True},
            "action": {"type": "str", "required": True,
                       "choices": ["leader", "peers", "passing", "maintenance", "checks",
                                   "leave", "node", "force_leave", "service_nodes"]},
            "service": {"type": "str", "default": ""},
            "node": {"type": "str", "default": ""},
            "enable": {"type": "bool", "default": True},
            "reason": {"type": "str", "default": ""},
        },
        required_if=[("action", "passing", ["service"]), ("action", "maintenance", ["service"]),
                     ("action", "checks", ["service"]), ("action", "service_nodes", ["service"]),
                     ("action", "node", ["node"]), ("action", "force_leave", ["node"])],
        supports_check_mode=True,
    )
    p = module.params
    action = p["action"]
    method, path = request(action, p)
    if action not in READS and module.check_mode:
        module.exit_json(changed=True, status=0, msg=f"check mode: {method} {path} not sent")
    status, body = call(p["url"], p["token"], method, path)
    out = {"status": status, **result(action, p["service"], status, body)}
    if action == "leave":
        module.exit_json(changed=status == 200, **out)
    if status != 200:
        module.fail_json(msg=f"{method} {path}: HTTP {status}: {body}", **out)
    module.exit_json(changed=action not in READS, **out)


if __name__ == "__main__":
    main()
