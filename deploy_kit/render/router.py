"""The router: vllm-router in front of every vLLM instance of the site, on each `router` host.

vllm-router (PyPI, vllm-project/router: a Rust router; docs/routing.md has the evidence and
why it was chosen) listens on 127.0.0.1 only, for three reasons found in its 0.1.17 source
and measured against it:

- it proxies any path it does not know to a backend, and serves `/add_worker`,
  `/remove_worker`, `/workers` and `/flush_cache` to anyone who reaches it;
- its `--api-key` is only what it sends on its own calls to the instances (the prefix and
  KV logic ask each instance to tokenize every request); it checks no client key;
- it answers every origin's CORS preflight.

So a front (HAProxy, the serving front's pattern) owns router_port: `/v1/...` with a key
HAProxy knows (the SHA-256 of each accepted `Authorization` value, as the serving front),
`/health`, and `/metrics` (the router's own Prometheus port) from the monitoring hosts or
with the key; anything else is 404 there. The key the router sends the instances comes from
a 0600 env file through a launcher (launch.py), never argv: a unit file is world-readable.

Every instance's public port is a backend (from the plan, so an instance added or removed
follows on the next `up`); the client's own `Authorization` travels through to the
instance, whose front and vLLM check it again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from deploy_kit.config import names
from deploy_kit.config.instances import instances
from deploy_kit.config.site import Host, Site
from deploy_kit.render.serving_front import LOOPBACK_SOURCES, MAXCONN, TIMEOUT_S
from deploy_kit.render.templating import exec_lines, exec_start, render_template

# deploykit's names for the routing logics -> vllm-router 0.1.17's --policy (src/policies)
POLICIES = {"prefixaware": "cache_aware", "kvaware": "kv_aware", "session": "consistent_hash",
            "roundrobin": "round_robin"}
# a backend leaves the rotation after this many failed checks and returns after one good one
HEALTH_FAILURES = 2
HEALTH_TIMEOUT_S = 5


def url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


@dataclass(frozen=True)
class Backend:
    name: str  # the instance as plan and verify name it (`lab3`, `lab3/1`)
    host: str  # its inventory host
    url: str  # its serving front: http://<address>:<vllm_port + i>
    events: str | None  # where the serving front passes its KV events on, when published
    block_size: int
    seed: int
    model: str  # what clients send as `model`


def backends(site: Site) -> list[Backend]:
    found: list[Backend] = []
    for host in site.group("vllm"):
        c = host.config
        events = bool(c.vllm_kv_events)  # unset: on where the site has routers (site.py)
        for i in instances(host.name, c):
            found.append(Backend(
                i.name, host.name, f"http://{url_host(host.address)}:{i.port}",
                f"tcp://{url_host(host.address)}:{c.vllm_kv_events_port + i.index}"
                if events else None,
                host.block_size, c.vllm_python_hash_seed, c.served_model_name))
    return found


def router_argv(site: Site, host: Host) -> list[str]:
    c = host.config
    found = backends(site)
    argv = [f"{c.router_venv}/bin/python", names.ROUTER_LAUNCHER_PATH,
            "--host", "127.0.0.1", "--port", str(c.router_loopback_port),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(c.router_metrics_port),
            "--worker-urls", *(b.url for b in found),
            "--policy", POLICIES[c.router_routing_logic],
            "--health-check-interval-secs", str(c.router_health_check_interval),
            "--health-failure-threshold", str(HEALTH_FAILURES),
            "--health-success-threshold", "1",
            "--health-check-timeout-secs", str(HEALTH_TIMEOUT_S),
            # a stopped instance is back in the rotation within a check or two, not 30 s
            "--cb-timeout-duration-secs", str(2 * c.router_health_check_interval),
            "--log-level", "info"]
    if c.router_routing_logic == "kvaware" and found:
        argv += ["--kv-event-model", found[0].model,
                 "--kv-event-block-size", str(found[0].block_size)]
        for b in found:
            if b.events:
                argv += ["--kv-event-source", f"{b.url}={b.events}"]
    return argv + list(c.router_extra_args)


# Reads the key from the environment (EnvironmentFile, 0600) and hands it to vllm-router's
# own entry point as --api-key: in argv it would be in the unit file and in `ps`.
LAUNCHER = '''\
# {header}
# vllm-router with its instance key from VLLM_ROUTER_API_KEY (render/router.py)
import os
import sys

from vllm_router.launch_router import main

key = os.environ.pop("VLLM_ROUTER_API_KEY", "")
if key:
    sys.argv += ["--api-key", key]
sys.exit(main())
'''


def render_launcher() -> str:
    return LAUNCHER.format(header=names.HEADER)


def render_unit(site: Site, host: Host) -> str:
    c = host.config
    return render_template("vllm-router.service.j2", user=c.router_user,
                           loopback_port=c.router_loopback_port,
                           secret_env=names.ROUTER_SECRET_ENV_PATH if c.vllm_uses_api_key
                           else None,
                           exec_start=exec_start(exec_lines(router_argv(site, host), head=2)))


def render_secret_env(host: Host) -> str:
    """A marker only: the role writes the value (no_log), as the serving hosts' key."""
    return render_template("vllm.env.j2", env={"VLLM_ROUTER_API_KEY": "<secret:vllm_api_key>"})


def metrics_sources(site: Site, host: Host) -> list[str]:
    found = [*LOOPBACK_SOURCES, *(h.address for h in site.group("monitoring")),
             *host.config.vllm_metrics_sources]
    return list(dict.fromkeys(found))


def render_front(site: Site, host: Host) -> str:
    c = host.config
    return render_template("vllm-router-front.cfg.j2", port=c.router_port,
                           router=c.router_loopback_port, metrics=c.router_metrics_port,
                           sources=metrics_sources(site, host), keyed=c.vllm_uses_api_key,
                           keys_path=names.ROUTER_FRONT_KEYS_PATH, maxconn=MAXCONN,
                           timeout=TIMEOUT_S)


def render_front_unit() -> str:
    return render_template("vllm-front.service.j2", unit=names.ROUTER_FRONT_UNIT,
                           config=names.ROUTER_FRONT_CFG_PATH,
                           description="vLLM router front (HAProxy): the router's public port")


def consul_service(host: Host) -> dict[str, Any]:
    """Registered on every router host; healthy while its front answers /health (the router
    has a healthy instance), so CoreDNS answers router_fqdn with the routers that can serve."""
    c = host.config
    name = c.router_service_name
    return {"service": {
        "name": name, "id": f"{name}-{host.name}", "address": host.address,
        "port": c.router_port, "tags": ["vllm-router"],
        "checks": [{"id": f"{name}-{host.name}-router", "name": "vLLM router health",
                    "http": f"http://{url_host(host.address)}:{c.router_port}/health",
                    "interval": c.consul_check_interval, "timeout": c.consul_check_timeout}],
    }}


def dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"
