"""verify's router probes and `bench ttft --via-router` against the real vllm-router on
loopback: three stand-ins for vLLM instances behind their serving fronts (fake_vllm.py:
/tokenize as vLLM, the X-Deploykit-Instance header as the serving front), two routers
started from the rendered argv (render/router.py), each behind the real HAProxy on its
rendered router front.

The router is vllm-router's console script installed from deploykit's hash-pinned lock,
as a router host installs it (tests/tools.py vllm_router; $DEPLOYKIT_VLLM_ROUTER names
another); CI fails without it. No lab, no systemd: every process is
started here and stopped at the end."""

from __future__ import annotations

import copy
import http.client
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

import deploy_kit.verify.checks  # noqa: F401  (registers the checks)
from deploy_kit.bench import ttft, ttft_report, ttft_router
from deploy_kit.config import names
from deploy_kit.config.site import Site
from deploy_kit.ops.site import open_site
from deploy_kit.render.router import render_front, render_launcher, router_argv
from deploy_kit.render.serving_front import key_digest
from deploy_kit.verify import gather
from deploy_kit.verify.model import Observation, Status, evaluate
from deploy_kit.verify.probes import router_probe
from tests.conftest import CPU_TWO_INSTANCES, InventoryFactory, encrypt_vault, vault_password_file
from tests.integration.fake_vllm import FakeInstance
from tests.integration.test_consul_dns import free_port
from tests.tools import require_tool, vllm_router

KEY = "router-probe-key"
@pytest.fixture(scope="module")
def router_script() -> str:
    return vllm_router()


ROUTER_CHECKS = {"router-health", "routing-sticky"}


BACKENDS = {"cpu1": "127.0.0.11", "cpu2": "127.0.0.12", "cpu3": "127.0.0.13"}
ROUTERS = {"r1": "127.0.0.21", "r2": "127.0.0.22"}


def _inventory(make_inventory: InventoryFactory, ports: dict[str, int], logic: str) -> Path:
    """Three one-instance CPU serving hosts and two routers, each on its own loopback
    address; the API key from an encrypted vault file."""
    hosts: dict[str, Any] = copy.deepcopy(CPU_TWO_INSTANCES)
    children = hosts["all"]["children"]
    children["vllm"]["hosts"] = {n: {"ansible_host": a} for n, a in BACKENDS.items()}
    children["vllm"]["vars"].update(vllm_served_model_name="fake-model",
                                    vllm_port=ports["vllm"])
    children["router"] = {"hosts": {n: {"ansible_host": a} for n, a in ROUTERS.items()},
                          "vars": {"router_routing_logic": logic}}
    return make_inventory(hosts, files={"group_vars/all/vault.yml": encrypt_vault(
        yaml.safe_dump({"vault_vllm_api_key": KEY}))},
        all={"vllm_api_key": "{{ vault_vllm_api_key }}", "router_port": ports["front"]})


@dataclass
class Routed:
    site: Site
    fakes: dict[str, FakeInstance]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.terminate()
        proc.wait(timeout=10)


def _get(address: str, port: int, path: str) -> int | None:
    conn = http.client.HTTPConnection(address, port, timeout=2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def _wait(address: str, port: int, path: str, what: str, proc: subprocess.Popen[bytes]
          ) -> None:
    deadline = time.monotonic() + 30
    while _get(address, port, path) != 200:
        assert proc.poll() is None, f"{what} exited {proc.returncode}"
        assert time.monotonic() < deadline, f"{what} never answered {path}"
        time.sleep(0.2)


@pytest.fixture
def routed(make_inventory: InventoryFactory, tmp_path: Path, router_script: str
           ) -> Iterator[Any]:
    """start(logic, policy=None): the site, its instances and routers running; `policy`
    replaces the rendered --policy (a router that does not do what the site says)."""
    haproxy = require_tool("haproxy")
    started: list[Routed] = []

    def start(logic: str = "prefixaware", policy: str | None = None, delay_s: float = 0.0,
              prefill_s_per_token: float = 0.0) -> Routed:
        ports = {"vllm": free_port(), "front": free_port()}
        root = _inventory(make_inventory, ports, logic)
        site = open_site(str(root), vault_password_file(root.parent))
        run = Routed(site, {n: FakeInstance(n, ports["vllm"], a, api_key=KEY, delay_s=delay_s,
                                            prefill_s_per_token=prefill_s_per_token).start()
                            for n, a in BACKENDS.items()})
        started.append(run)
        # the router host's launcher (render/router.py): the key from the environment
        launcher = tmp_path / "launch.py"
        launcher.write_text(render_launcher())
        python = str(Path(router_script).parent / "python")
        keys = tmp_path / "router-front.keys"
        keys.write_text(key_digest(KEY) + "\n")
        for host in site.group("router"):
            c = host.config
            # two routers on one machine: each its own loopback and metrics port, and its
            # front bound to its own address (on a router host the front owns router_port)
            own, metrics = free_port(), free_port()
            argv = [python, str(launcher), *router_argv(site, host)[2:]]
            argv[argv.index("--port") + 1] = str(own)
            argv[argv.index("--prometheus-port") + 1] = str(metrics)
            if policy is not None:
                argv[argv.index("--policy") + 1] = policy
            log = (tmp_path / f"{host.name}.log").open("wb")
            run.procs[host.name] = subprocess.Popen(
                argv, stdout=log, stderr=log, env={**os.environ, "VLLM_ROUTER_API_KEY": KEY})
            _wait("127.0.0.1", own, "/liveness", f"vllm-router {host.name}",
                  run.procs[host.name])
            cfg = tmp_path / f"{host.name}-front.cfg"
            cfg.write_text(render_front(site, host)
                           .replace(names.ROUTER_FRONT_KEYS_PATH, str(keys))
                           .replace(f"bind :{c.router_port}",
                                    f"bind {host.address}:{c.router_port}")
                           .replace(f"127.0.0.1:{c.router_loopback_port}", f"127.0.0.1:{own}")
                           .replace(f"127.0.0.1:{c.router_metrics_port}",
                                    f"127.0.0.1:{metrics}"))
            check = subprocess.run([haproxy, "-c", "-f", str(cfg)], capture_output=True,
                                   text=True, timeout=30, check=False)
            assert check.returncode == 0, check.stdout + check.stderr
            front = f"{host.name}-front"
            run.procs[front] = subprocess.Popen([haproxy, "-db", "-f", str(cfg)],
                                                stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL)
            _wait(host.address, c.router_port, "/health", front, run.procs[front])
        return run

    yield start
    for run in started:
        for name in list(run.procs):
            run.stop(name)
        for fake in run.fakes.values():
            fake.stop()


def _observe(run: Routed) -> Observation:
    obs = gather.planned(run.site)
    routers = run.site.group("router")
    obs.router_fronts = [router_probe.front(h) for h in routers]
    obs.routing = gather.routing_probes(run.site, obs, routers, None)
    return obs


def test_each_router_is_guarded_and_sends_a_repeat_to_the_instance_that_served_it(
        routed: Any) -> None:
    run = routed()
    obs = _observe(run)
    findings = {(f.check, f.target): f for f in evaluate(obs, ROUTER_CHECKS)}
    for host in run.site.group("router"):
        health = findings["router-health",
                          f"{host.name} ({host.address}:{host.config.router_port})"]
        assert health.status == Status.PASS, health
        assert "/workers 404, /add_worker 404 with the key" in health.message
        assert "unkeyed /v1/completions 401 at the front" in health.message
    for probe in obs.routing:
        sticky = findings["routing-sticky", f"{probe.router} ({probe.address}) as {probe.name}"]
        assert sticky.status == Status.PASS, sticky
        # the instance the header named is the one that got both requests, and its own
        # prefix cache answered the repeat's 18 full blocks
        named = obs.instance_tags[probe.first or ""]
        assert f"both landed on {named}" in sticky.message
        prompts = run.fakes[named].completions
        assert sum(1 for p in prompts if len(p) == router_probe.PROMPT_TOKENS) >= 2
        assert probe.hits_delta == 288
    # what never reached a router: the admin paths and the unkeyed completion
    assert all(f.health == 200 and not f.unkeyed_reached_router for f in obs.router_fronts)


def test_a_router_that_does_not_stick_fails_naming_both_instances(routed: Any) -> None:
    """The site says prefixaware, the routers run round robin: each repeat moves on."""
    run = routed(policy="round_robin")
    found = evaluate(_observe(run), {"routing-sticky"})
    assert [f.status for f in found] == [Status.FAIL, Status.FAIL], found
    for f in found:
        landed = re.search(r"landed on (cpu\d), the first request on (cpu\d) ", f.message)
        assert landed and landed[1] != landed[2], f.message


def test_round_robin_is_not_asked(routed: Any) -> None:
    run = routed(logic="roundrobin")
    found = evaluate(_observe(run), {"routing-sticky"})
    assert {f.status for f in found} == {Status.INFO}
    assert all(fake.completions == [] for fake in run.fakes.values())


def test_a_stopped_router_fails_by_name_and_the_other_still_serves(routed: Any) -> None:
    run = routed()
    run.stop("r2")  # the router; its front still answers, with 503
    obs = _observe(run)
    health = {f.target.split(" ")[0]: f for f in evaluate(obs, {"router-health"})}
    assert health["r1"].status == Status.PASS
    assert health["r2"].status == Status.FAIL and "/health 503" in health["r2"].message
    sticky = {f.target.split(" ")[0]: f.status for f in evaluate(obs, {"routing-sticky"})}
    assert sticky == {"r1": Status.PASS, "r2": Status.SKIP}
    run.stop("r2-front")
    health = {f.target.split(" ")[0]: f for f in
              evaluate(_observe(run), {"router-health"})}
    assert health["r2"].status == Status.FAIL
    assert "the router front does not answer: ConnectionRefusedError" in health["r2"].message


def test_an_endpoint_outside_the_limit_is_not_read(routed: Any) -> None:
    run = routed()
    obs = gather.planned(run.site)
    routers = run.site.group("router")[:1]
    obs.router_fronts = [router_probe.front(h) for h in routers]
    (probe,) = gather.routing_probes(run.site, obs, routers, {"r1"})
    assert probe.first == probe.second and probe.hits_delta is None
    assert probe.hits_note.endswith("is outside --limit")



def test_bench_via_router_names_the_instance_and_states_the_ratio(
        routed: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A step of 50 ms before every first token and 0.2 ms per uncached prompt token: a
    cold 1024-token prompt waits about 0.25 s, a repeat about 0.05 s wherever it lands on
    the instance that holds it."""
    run = routed(delay_s=0.05, prefill_s_per_token=0.0002)
    monkeypatch.setattr(ttft, "manifest", lambda site, hosts: {h.name: {} for h in hosts})
    doc = ttft_router.run(run.site, "loopback", [1024], 2, tmp_path, max_tokens=2)
    assert ttft_report.problems(doc) == [] and doc["notes"] == []
    assert doc["hosts"] == {"router": "r1", "name": names.router_fqdn(run.site.settings)}
    rows = {(r["case"], r["repeat"]): r for r in doc["results"]}
    for rep in (0, 1):
        cold, repeat = rows["router_cold", rep], rows["router_repeat", rep]
        direct = rows["direct_repeat", rep]
        assert repeat["same_instance"] is True and repeat["host"] == cold["host"]
        # the instance that answered the router holds the prompt: the fake that got it
        fake = run.fakes[cold["host"]]
        assert sum(1 for p in fake.completions if len(p) == 1024) >= 2
        assert (cold["local_hit_tokens"], repeat["local_hit_tokens"]) == (0, 1024)
        assert direct["host"] == repeat["host"] and direct["local_hit_tokens"] == 1024
        assert cold["ttft_s"] > 0.2 > repeat["ttft_s"]
        assert repeat["vs_direct_repeat"] == pytest.approx(
            repeat["ttft_s"] / direct["ttft_s"])
    (routing,) = doc["routing"]
    assert routing["same_instance"] == 2 and routing["router_vs_direct_repeat"] is not None
    assert (tmp_path / "ttft.json").exists() and (tmp_path / "ttft.png").exists()
