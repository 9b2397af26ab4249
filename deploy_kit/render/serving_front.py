"""The serving front: one HAProxy per serving host on every vLLM instance's public port.

vLLM's API key guards only paths under /v1, /v2, /inference and /cohere
(AuthenticationMiddleware's GUARDED_PREFIX); `POST /invocations` (the SageMaker router,
always mounted) runs completions with no key, and so do /pooling, /score, /rerank and
/classify (vllm-project/vllm#58144). So vLLM listens on 127.0.0.1 only
(render/vllm.py), and the front forwards three things and refuses the rest itself:

- `/v1/...`: vLLM checks the key; with a key the front also refuses (401) a request that
  carries no `Authorization: Bearer` header, so an unkeyed one never reaches vLLM;
- `/health`: open, as vLLM's own (load balancers, the role's gates);
- where the site has routers, `/v1/...` only from them, loopback, the monitoring hosts
  and vllm_direct_sources (403 for anyone else): clients go through the routers;
- `/metrics`: from loopback, the monitoring group's hosts and vllm_metrics_sources, or
  with the API key (verify's and bench's counter reads from the controller); else 403.

Everything else (any other path, any method) is 404 from HAProxy. Every response names
the instance that gave it (X-Deploykit-Instance, an opaque tag): how verify and bench see
where a router sent a request. vLLM's KV events (ZMQ, on loopback) are passed on, as TCP,
to the router hosts alone: they carry the token ids of every prompt. The key is never in
this file: the role writes the SHA-256 digests of the accepted `Authorization` values to
a 0600 file HAProxy reads as an ACL pattern list (key_digest), re-read on every reload.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from deploy_kit.config import names
from deploy_kit.config.instances import instances
from deploy_kit.config.site import Host, Site
from deploy_kit.render.templating import render_template

# what the front lets read /metrics besides the monitoring hosts: the host itself
LOOPBACK_SOURCES = ("127.0.0.1", "::1")
# HAProxy's global connection limit for the front (about two descriptors each)
MAXCONN = 4096
# a completion may think for minutes before its first byte, and a stream stays open while
# it generates: the front must not cut either (client, server and tunnel timeouts)
TIMEOUT_S = 3600


@dataclass(frozen=True)
class FrontPort:
    unit: str  # the instance's unit (`vllm`, `vllm-1`): the frontend's and backend's name
    public: int  # vllm_port + i: where the front listens
    loopback: int  # vllm_loopback_port + i: where vLLM listens, on 127.0.0.1
    tag: str  # X-Deploykit-Instance: which instance answered (instance_tag)
    events: int  # vllm_kv_events_port + i: the KV events, passed on to the routers
    events_loopback: int  # vllm_kv_events_loopback_port + i: vLLM's ZMQ publisher


def instance_tag(name: str) -> str:
    """What the front writes in every response's X-Deploykit-Instance: an opaque digest of
    the instance's name (`gpu1/2`), so verify and bench learn which instance answered a
    request sent through a router, while clients learn no host names."""
    return hashlib.sha256(f"deploykit-instance:{name}".encode()).hexdigest()[:12]


def ports(host: Host) -> list[FrontPort]:
    c = host.config
    return [FrontPort(i.unit, i.port, i.loopback_port, instance_tag(i.name),
                      c.vllm_kv_events_port + i.index, c.vllm_kv_events_loopback_port + i.index)
            for i in instances(host.name, c)]


def router_sources(site: Site) -> list[str]:
    return list(dict.fromkeys(h.address for h in site.group("router")))


def direct_sources(site: Site, host: Host) -> list[str]:
    """Where a site has routers: who may send /v1 requests to an instance directly. The
    routers, loopback, the monitoring hosts, then vllm_direct_sources (the controller that
    runs verify and bench); [] where the site has no routers (anyone with the key)."""
    if not site.group("router"):
        return []
    found = [*LOOPBACK_SOURCES, *router_sources(site),
             *(h.address for h in site.group("monitoring")), *host.config.vllm_direct_sources]
    return list(dict.fromkeys(found))


def metrics_sources(site: Site, host: Host) -> list[str]:
    """Who may read /metrics without the key: loopback, every monitoring host (its
    Prometheus scrapes the public port), then the site's own list; each once, in order."""
    found = [*LOOPBACK_SOURCES, *(h.address for h in site.group("monitoring")),
             *host.config.vllm_metrics_sources]
    return list(dict.fromkeys(found))


def key_digest(key: str) -> str:
    """What the keys file holds for one API key: the SHA-256 of the `Authorization` value
    vLLM accepts, in HAProxy's `hex` (upper case); the role writes one line per key
    (deploykit.kvcache.vllm_front_digest, no_log)."""
    return hashlib.sha256(f"Bearer {key}".encode()).hexdigest().upper()


def render_config(site: Site, host: Host) -> str:
    c = host.config
    return render_template("vllm-front.cfg.j2", fronts=ports(host),
                           sources=metrics_sources(site, host), keyed=c.vllm_uses_api_key,
                           direct=direct_sources(site, host),
                           events=bool(c.vllm_kv_events), routers=router_sources(site),
                           keys_path=names.VLLM_FRONT_KEYS_PATH, maxconn=MAXCONN,
                           timeout=TIMEOUT_S)


def render_unit() -> str:
    return render_template("vllm-front.service.j2", unit=names.VLLM_FRONT_UNIT,
                           config=names.VLLM_FRONT_CFG_PATH,
                           description="vLLM serving front (HAProxy): the public ports of "
                                       "this host's vLLM instances")
