"""The routers in the lab: lab1 and lab2 (the gateway hosts, Consul agents with CoreDNS
already) run vllm-router behind their fronts in every serving profile, with lab3's two
instances and lab4's as backends.

From the converged lab: llm.lab.test answers both routers; the same 4K-token prompt sent
twice through the name lands on one instance (the router's prefix tree; the serving front
names the instance in X-Deploykit-Instance); the front refuses a request without the key
and the router's admin paths; and with one router stopped the name answers with the other
only, within Consul's check interval plus the DNS TTL, and serves through it. The router is
started again (and the name answers both) before the test ends. verify's router checks pass
and `bench ttft --via-router` runs. Figures print with -s.
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import pytest
import yaml

from deploy_kit.render.serving_front import instance_tag
from tests.lab.conftest import LAB_INVENTORY, Lab, lab_model
from tests.lab.vllm_http import SERVING, api_key

pytestmark = pytest.mark.lab

ROUTERS = {"lab1": "10.99.0.11", "lab2": "10.99.0.12"}
NAME = "llm.lab.test."
PORT = 8200  # router_port's default: the lab leaves it
INSTANCES = {"lab3": 2, "lab4": 1}  # the serving profile's instances per host


def answers(server: str) -> set[str] | None:
    """The A records of the routers' name from one CoreDNS; None when it does not answer."""
    try:
        reply = dns.query.udp(dns.message.make_query(NAME, "A"), server, timeout=0.5)
    except (OSError, dns.exception.Timeout):
        return None
    return {r.address for rrset in reply.answer for r in rrset}


def wait_answers(expected: set[str], timeout: float) -> float:
    """Seconds until every CoreDNS answers exactly `expected`."""
    start = time.monotonic()
    while True:
        if all(answers(server) == expected for server in ROUTERS.values()):
            return time.monotonic() - start
        assert time.monotonic() - start < timeout, \
            {server: answers(server) for server in ROUTERS.values()}
        time.sleep(0.05)


def request(address: str, path: str, body: dict | None = None,
            key: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request to a router front: status, headers (lower-case names), body."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://{address}:{PORT}{path}", data=data, headers=headers,
                                 method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=600) as response:
            return (response.status, {k.lower(): v for k, v in response.headers.items()},
                    response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def completion(address: str, tokens: list[int]) -> tuple[int, dict[str, str], bytes]:
    return request(address, "/v1/completions",
                   {"model": lab_model().name, "prompt": tokens, "max_tokens": 4,
                    "temperature": 0}, key=api_key(SERVING["lab3"]))


def tags() -> dict[str, str]:
    """X-Deploykit-Instance value -> the instance it names (`lab3/0`, `lab3/1`, `lab4`: the
    lab site's instances as the plan names them)."""
    from deploy_kit.config.instances import instances
    from deploy_kit.ops.site import open_site

    site = open_site(str(LAB_INVENTORY))
    names = [i.name for host in site.group("vllm") for i in instances(host.name, host.config)]
    assert len(names) == sum(INSTANCES.values()), names
    return {instance_tag(name): name for name in names}


def test_the_lab_inventory_routes_from_the_gateway_hosts(converged: Lab) -> None:
    hosts = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())["all"]["children"]
    assert set(hosts["router"]["hosts"]) == set(ROUTERS)
    assert hosts["router"]["vars"]["router_wheel_dir"]  # offline, from the staged lock
    for router in ROUTERS.values():
        assert converged.ssh(router, "systemctl is-active vllm-router vllm-router-front")\
            .split() == ["active", "active"]


def test_the_name_answers_both_routers(converged: Lab) -> None:
    seconds = wait_answers(set(ROUTERS.values()), timeout=30)
    print(f"\nllm.lab.test answers both routers ({seconds:.2f} s after the converge)")


def test_the_same_long_prompt_lands_on_one_instance(converged: Lab) -> None:
    """Through the name, twice, the same 4K tokens: the second request goes where the first
    went (the router's prefix tree), which the serving front's instance header shows."""
    address = sorted(answers(ROUTERS["lab1"]) or [])[0]
    rng = random.Random(46)
    tokens = [rng.randrange(3, 250) for _ in range(4096)]
    landed, seconds = [], []
    for _ in range(2):
        start = time.monotonic()
        status, headers, body = completion(address, tokens)
        seconds.append(time.monotonic() - start)
        assert status == 200, body[:300]
        assert json.loads(body)["usage"]["prompt_tokens"] == 4096
        landed.append(tags()[headers["x-deploykit-instance"]])
    print(f"\n4K prompt twice through {address}: {landed}, "
          f"{seconds[0]:.2f} s then {seconds[1]:.2f} s")
    assert landed[0] == landed[1], landed


def test_the_router_front_refuses_what_it_must(converged: Lab) -> None:
    address = ROUTERS["lab1"]
    tokens = [5] * 16
    status, _, _ = request(address, "/v1/completions",
                           {"model": lab_model().name, "prompt": tokens, "max_tokens": 1})
    assert status == 401  # no key
    status, _, _ = request(address, "/v1/completions",
                           {"model": lab_model().name, "prompt": tokens, "max_tokens": 1},
                           key="not-the-key")
    assert status == 401
    # the router's own admin paths never reach it, key or not
    key = api_key(SERVING["lab3"])
    for path in ("/add_worker?url=http://10.99.0.1:9", "/remove_worker?url=x", "/workers",
                 "/flush_cache"):
        assert request(address, path, {}, key=key)[0] == 404, path
    assert request(address, "/health")[0] == 200


def test_the_name_answers_through_one_router_while_the_other_is_stopped(
        converged: Lab) -> None:
    settings = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "lab.yml").read_text())
    bound = float(settings["consul_check_interval"].rstrip("s")) + settings["deploykit_dns_ttl"]
    converged.ssh(ROUTERS["lab1"], "systemctl stop vllm-router")
    try:
        out = wait_answers({ROUTERS["lab2"]}, timeout=bound + 30)
        rng = random.Random(7)
        status, headers, body = completion(sorted(answers(ROUTERS["lab2"]) or [])[0],
                                           [rng.randrange(3, 250) for _ in range(64)])
        assert status == 200, body[:300]
        assert headers["x-deploykit-instance"] in tags()
    finally:
        converged.ssh(ROUTERS["lab1"], "systemctl start vllm-router")
    back = wait_answers(set(ROUTERS.values()), timeout=bound + 60)
    print(f"\nlab1's router stopped: out of llm.lab.test after {out:.2f} s "
          f"(bound {bound:.0f} s); back {back:.2f} s after its start")
    assert out <= bound + 2  # a poll and Consul's sync beside the bound


# run on a lab host from stdin (the key in the script text, never in argv): the status of a
# keyed /v1/models to lab3's first instance
DIRECT = '''
import urllib.error, urllib.request
req = urllib.request.Request("http://10.99.0.13:8000/v1/models",
                             headers={"Authorization": "Bearer __KEY__"})
try:
    print(urllib.request.urlopen(req, timeout=30).status)
except urllib.error.HTTPError as exc:
    print(exc.code)
'''


def test_an_instance_takes_v1_from_the_routers_and_direct_sources_only(
        converged: Lab) -> None:
    """lab4 is a serving host, no router: its keyed request to lab3's instance is refused
    (403, the serving front); lab1, a router, and the controller (vllm_direct_sources) are
    served."""
    script = DIRECT.replace("__KEY__", api_key(SERVING["lab3"]) or "")
    assert converged.ssh(SERVING["lab4"], "python3 -", stdin=script).strip() == "403"
    assert converged.ssh(ROUTERS["lab1"], "python3 -", stdin=script).strip() == "200"
    req = urllib.request.Request(f"http://{SERVING['lab3']}:8000/v1/models",
                                 headers={"Authorization": f"Bearer {api_key(SERVING['lab3'])}"})
    with urllib.request.urlopen(req, timeout=30) as response:
        assert response.status == 200


def test_verify_proves_the_routers(converged: Lab) -> None:
    """verify's router checks from the controller: the name, each front, stickiness."""
    checks = ("router-dns", "router-health", "routing-sticky")
    result = converged.deploykit("verify", "--inventory", "lab", "--json",
                                 *(arg for c in checks for arg in ("--check", c)), check=False)
    findings = json.loads(result.stdout)["findings"]
    assert {f["check"] for f in findings} == set(checks), findings
    assert all(f["status"] == "pass" for f in findings), findings
    assert result.returncode == 0, findings


def test_bench_ttft_via_router_repeats_on_the_cold_requests_instance(
        converged: Lab, tmp_path: Path) -> None:
    """One 4K repeat through a router against the same hit sent directly: the repeat goes
    back to the instance the cold request took, and the router's own cost is reported (its
    1.5 target is `make bench`'s to judge: timings are not asserted in tests)."""
    from deploy_kit.bench import ttft_report

    result = converged.deploykit("bench", "ttft", "--inventory", "lab", "--via-router",
                                 "--lengths", "4096", "--repeats", "1", "--out", str(tmp_path))
    doc = json.loads((tmp_path / "ttft.json").read_text())
    print(result.stdout + result.stderr)  # the table, for the record (pytest -s)
    assert doc["schema"] == ttft_report.ROUTER_SCHEMA
    assert ttft_report.problems(doc) == [], ttft_report.problems(doc)
    assert doc["notes"] == [], doc["notes"]  # the controller reached the instances directly
    [routing] = doc["routing"]
    assert routing["n"] == 1 and routing["same_instance"] == 1, routing
    assert routing["router_vs_direct_repeat"] is not None, routing
    print(f"router repeat / direct repeat at 4K: {routing['router_vs_direct_repeat']:.2f}")
