"""The routers from outside, as a client sees them: each router host's front (router_port)
and where each router sends a prompt it has seen before.

- front(): /health without a key; vllm-router's admin routes (/workers, /add_worker) with the
  key, which the front must refuse (404) so they never reach the router; a completion without
  a key, which a keyed front refuses itself (401, and no x-request-id: vllm-router adds one to
  every answer it gives, so its absence shows the request stopped at the front). Only GETs
  reach the admin paths: a POST to /add_worker that got through would change the router.
- routing(): a fresh prompt of PROMPT_TOKENS token ids (max_tokens 1, the API key) sent twice
  to one router's address with the routers' name as Host, and a second fresh prompt once; the
  serving front of the instance that answered writes X-Deploykit-Instance. Each router keeps
  its own prefix tree, so every router is asked, not only the name (which picks one). Where
  the answering instance's vLLM prefix cache is on, its `vllm:prefix_cache_hits_total` is read
  through its serving front just before and after the repeat (a busy site moves it too).
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass

from deploy_kit.config import names
from deploy_kit.config.site import Host
from deploy_kit.core.patterns import LOCAL_HITS
from deploy_kit.render.serving_front import instance_tag
from deploy_kit.transport import openai as oa
from deploy_kit.verify.model import ROUTER_ADMIN, RouterFront, RoutingProbe

TIMEOUT_S = 15.0
# "a few hundred tokens": over vLLM's 16-token blocks and the router's match threshold, well
# under any context; vLLM's prefix cache answers all but the last partial block of a repeat
PROMPT_TOKENS = 300
# between the first answer and the repeat: kvaware learns placement from vLLM's KV events,
# which arrive after the answer
SETTLE_S = 1.0
INSTANCE_HEADER = "x-deploykit-instance"
ROUTER_HEADER = "x-request-id"  # vllm-router adds it to every answer


@dataclass(frozen=True)
class Answer:
    status: int | None
    headers: dict[str, str]  # lower-case names
    error: str | None = None


def request(address: str, port: int, method: str, path: str, *, body: bytes | None = None,
            headers: dict[str, str] | None = None, timeout: float = TIMEOUT_S) -> Answer:
    conn = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        response.read()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()})
    except (OSError, http.client.HTTPException) as exc:
        return Answer(None, {}, f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


def _auth(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def front(router: Host) -> RouterFront:
    c = router.config
    key = oa.api_key(router)
    seen = RouterFront(host=router.name, address=router.address, port=c.router_port,
                       keyed=c.vllm_uses_api_key)
    host = {"Host": names.router_fqdn(c)}
    health = request(router.address, c.router_port, "GET", "/health", headers=host)
    seen.health = health.status
    if health.error:
        seen.errors["/health"] = health.error
    for path in ROUTER_ADMIN:
        answer = request(router.address, c.router_port, "GET", path,
                         headers={**host, **_auth(key)})
        seen.admin[path] = answer.status
        if answer.error:
            seen.errors[path] = answer.error
    body = json.dumps({"model": "deploykit-verify", "prompt": "deploykit router probe",
                       "max_tokens": 1}).encode()
    unkeyed = request(router.address, c.router_port, "POST", "/v1/completions", body=body,
                      headers={**host, "Content-Type": "application/json"})
    seen.unkeyed = unkeyed.status
    seen.unkeyed_reached_router = ROUTER_HEADER in unkeyed.headers
    if unkeyed.error:
        seen.errors["/v1/completions"] = unkeyed.error
    return seen


def completion(router: Host, model: str, ids: list[int], session: str | None) -> Answer:
    c = router.config
    headers = {"Host": names.router_fqdn(c), "Content-Type": "application/json",
               **_auth(oa.api_key(router))}
    if session is not None:
        headers["x-session-id"] = session  # the session logic's key (vllm-router hash_key)
    body = json.dumps({"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0})
    return request(router.address, c.router_port, "POST", "/v1/completions",
                   body=body.encode(), headers=headers, timeout=600.0)


def _landed(answer: Answer) -> tuple[str | None, str | None]:
    """(instance tag, why the request failed)."""
    if answer.status != 200:
        return None, answer.error or f"HTTP {answer.status}"
    return answer.headers.get(INSTANCE_HEADER), None


def _local_hits(endpoint: Host) -> float | None:
    counters = oa.metrics(endpoint.address, endpoint.config.vllm_port, oa.api_key(endpoint))
    return None if counters is None else counters.get(LOCAL_HITS)


def routing(router: Host, model: str, token_ids: tuple[int, int], run_id: str,
            endpoints: dict[str, Host], outside: set[str], serving: bool) -> RoutingProbe:
    """One router's stickiness. `endpoints`: instance tag -> the instance as an endpoint (its
    port as vllm_port); `outside`: tags of instances on hosts outside --limit (not read)."""
    c = router.config
    found = RoutingProbe(router=router.name, address=router.address,
                         name=names.router_fqdn(c), logic=c.router_routing_logic,
                         serving=serving, prompt_tokens=PROMPT_TOKENS)
    if c.router_routing_logic == "roundrobin" or not serving:
        return found
    ids = oa.prompt_ids(PROMPT_TOKENS, f"verify-route-{run_id}-{router.name}", token_ids)
    session = f"deploykit-verify-{run_id}-{router.name}" \
        if c.router_routing_logic == "session" else None
    found.first, found.error = _landed(completion(router, model, ids, session))
    if found.error:
        found.error = f"first request: {found.error}"
        return found
    time.sleep(SETTLE_S)
    target = endpoints.get(found.first or "")
    before = None
    if found.first is None:
        found.hits_note = "the answer named no instance"
    elif target is None:
        found.hits_note = "no instance of the site has that tag"
    elif found.first in outside:
        found.hits_note = f"{target.name} is outside --limit"
    elif target.config.vllm_enable_prefix_caching is False:
        found.hits_note = f"vLLM's prefix cache is off on {target.name}"
    else:
        before = _local_hits(target)
        if before is None:
            found.hits_note = f"{target.name}'s /metrics has no {LOCAL_HITS}"
    found.second, error = _landed(completion(router, model, ids, session))
    if error:
        found.error = f"repeat: {error}"
        return found
    if target is not None and before is not None:
        after = _local_hits(target)
        if after is None:
            found.hits_note = f"{target.name}'s /metrics unreadable after the repeat"
        else:
            found.hits_delta = int(after - before)
    other = oa.prompt_ids(PROMPT_TOKENS, f"verify-route-{run_id}-{router.name}-other",
                          token_ids)
    found.other, _ = _landed(completion(router, model, other,
                                        None if session is None else session + "-other"))
    return found


def instance_endpoints(hosts: list[Host]) -> dict[str, Host]:
    """X-Deploykit-Instance tag -> the instance as an endpoint, for every serving host."""
    from deploy_kit.config.instances import endpoints

    return {instance_tag(e.name): e for h in hosts for e in endpoints(h)}
