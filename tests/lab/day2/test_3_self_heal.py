"""A tier that heals itself (docs/day2.md, self-heal): under load, both concentrators stop
long enough for the LMCache server of each serving host to turn S3 off (its breaker); once
storage is back, with no operator command, each host's agent (deploykit-lmcache-heal.timer,
render/self_heal.py) restarts its LMCache, one host at a time (the lease in the bucket),
behind the instances' /health. Asserted: healed within five minutes of storage's return,
verify green, the journal's heal records of the two hosts do not overlap, the heal counter
went up, and no prompt failed for a client that balances as a load balancer does.

What "no failed request" means here: a host whose LMCache restarts cannot serve for the
restart (on CPU hosts its instances restart with the server), so the client below does
what a balancer in front of vLLM replicas does: it sends only to replicas whose /health
answers, and a request that got no response at all goes to the next replica: refused
(nginx's proxy_next_upstream error, HAProxy's redispatch), or closed with no status line
(HAProxy's `retry-on empty-response`; vLLM 0.32 leaves a request accepted after its engine
stopped unanswered until vllm.service's ExecStop kills the API server), or answered 5xx
(HAProxy's `retry-on 500 502 503 504`: a stopping vLLM answers 500 to a request its engine
refuses) -- and each 5xx is asserted to come from a replica inside its own restart. Any
other answer that is not a completion counts as failed. The lease keeps the other host up.

The client pauses PAUSE_S after each answer: the lab's four hosts share two cores, and a
closed-loop client kept them busy enough that a restarting vLLM took 136 s to reach its
model load (35 s quiet); a GPU fleet's restart does not compete with serving for the CPU.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import threading
import time
import urllib.error
from pathlib import Path

import pytest

from tests.lab.conftest import LAB_INVENTORY, Lab, lab_model
from tests.lab.load import FreshPrompts
from tests.lab.vllm_http import SERVING, complete, get, headers

pytestmark = pytest.mark.lab

GATEWAYS = ("10.99.0.11", "10.99.0.12")
BREAKER = "S3L2Adapter disabled after"
HEAL_WITHIN_S = 300  # the done-when: five minutes
PAUSE_S = 2.0  # after each answered prompt (see above)
TEXTFILE = "/var/lib/prometheus/node-exporter/deploykit_lmcache_heal.prom"
TIMINGS = Path("/tmp/deploykit-lab-self-heal.json")  # the numbers docs/day2.md reports


def replicas() -> list[tuple[str, str, int]]:
    """(host, address, port) of every vLLM instance of the lab, from its inventory."""
    from deploy_kit.ops.site import open_site
    from deploy_kit.render.vllm import host_instances

    site = open_site(str(LAB_INVENTORY))
    return [(name, SERVING[name], i.port) for name in SERVING
            for i in host_instances(site.hosts[name])]


class BalancedPrompts(FreshPrompts):
    """FreshPrompts through a load balancer's eyes: healthy replicas only, and a request
    refused before it was read goes to the next one."""

    def __init__(self) -> None:
        super().__init__()
        self.replicas = replicas()
        self.skipped = 0  # sends a /health failure kept from a replica
        self.redispatched = 0
        self.empty = 0  # of them, closed with no status line
        self.answered_5xx: list[tuple[float, str, int]] = []  # of them, (time, host, status)

    def run(self) -> None:
        turn = 0
        while not self.stop.is_set():
            tokens = [self.rng.randrange(3, 259) for _ in range(256 * 2 + 5)]
            for step in range(len(self.replicas)):
                host, address, port = self.replicas[(turn + step) % len(self.replicas)]
                if get(f"http://{address}:{port}/health") != 200:
                    self.skipped += 1
                    continue
                try:
                    answer = send(address, port, tokens)
                except urllib.error.HTTPError as exc:
                    if exc.code >= 500:  # retry-on 500 502 503 504: asserted to fall in
                        self.answered_5xx.append((time.time(), host, exc.code))  # a restart
                        self.redispatched += 1
                        continue
                    self.errors.append(f"{host}:{port}: {exc}")
                except urllib.error.URLError as exc:
                    if isinstance(exc.reason, ConnectionRefusedError):
                        self.redispatched += 1
                        continue
                    self.errors.append(f"{host}:{port}: {exc}")
                except (http.client.RemoteDisconnected, ConnectionResetError):
                    self.redispatched += 1  # no status line: nothing was answered
                    self.empty += 1
                    continue
                except OSError as exc:
                    self.errors.append(f"{host}:{port}: {exc}")
                else:
                    try:
                        json.loads(answer.read())["choices"][0]["text"]
                        self.sent += 1
                    except (OSError, ValueError, KeyError, IndexError) as exc:
                        self.errors.append(f"{host}:{port}: after the status line: {exc!r}")
                    time.sleep(PAUSE_S)
                break
            else:
                time.sleep(0.5)  # no replica healthy: a balancer answers 503 (counted below)
                self.errors.append("no healthy replica")
            turn += 1


def send(address: str, port: int, tokens: list[int]) -> http.client.HTTPResponse:
    """POST a completion; returns once the status line is in (the body is read after)."""
    body = json.dumps({"model": lab_model().name, "prompt": tokens, "max_tokens": 4,
                       "temperature": 0}).encode()
    request = urllib.request.Request(f"http://{address}:{port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json",
                                              **headers(address)})
    answer: http.client.HTTPResponse = urllib.request.urlopen(request, timeout=300)
    return answer


def tripped(lab: Lab, address: str) -> bool:
    out = lab.ssh(address, "id=$(systemctl show -p InvocationID --value lmcache-server); "
                           "journalctl _SYSTEMD_INVOCATION_ID=$id -q --no-pager | "
                           f"grep -c '{BREAKER}' || true")
    return int(out.strip() or 0) > 0


def heal_records(lab: Lab, address: str) -> list[dict]:
    """The agent's journal records on a host: event, fields, time (s)."""
    out = lab.ssh(address, "journalctl -t deploykit-heal -o json --no-pager -q || true")
    records = []
    for line in out.splitlines():
        entry = json.loads(line)
        words = str(entry.get("MESSAGE", "")).split()
        if not words:
            continue
        fields = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        records.append({"event": words[0], **fields,
                        "at": int(entry["__REALTIME_TIMESTAMP"]) / 1e6})
    return records


def heals_total(lab: Lab, address: str) -> float:
    text = lab.ssh(address, f"cat {TEXTFILE} 2>/dev/null || true")
    for line in text.splitlines():
        if line.startswith('deploykit_lmcache_heals_total{reason="breaker"}'):
            return float(line.split()[-1])
    return 0.0


def test_a_storage_outage_trips_the_breaker_and_the_site_heals_itself(converged: Lab) -> None:
    for address in SERVING.values():
        assert converged.ssh(address, "systemctl is-active deploykit-lmcache-heal.timer"
                             ).strip() == "active"
        assert not [r for r in heal_records(converged, address) if r.get("reason") == "breaker"]
    rng = random.Random(time.time_ns())
    with BalancedPrompts() as load:
        outage = time.monotonic()
        for gateway in GATEWAYS:
            converged.ssh(gateway, "systemctl stop haproxy")
        try:
            deadline = time.monotonic() + 240
            # each fresh prompt is two chunks LMCache fails to store: three in a row trip it
            while not all(tripped(converged, a) for a in SERVING.values()):
                assert time.monotonic() < deadline, "an LMCache never turned S3 off"
                for address in SERVING.values():
                    threading.Thread(target=_quietly, args=(address, rng), daemon=True).start()
                time.sleep(3)
            # the agents see the breaker, but S3 does not answer: nothing restarts yet
            time.sleep(35)
            assert all(r["event"] != "heal-start" for a in SERVING.values()
                       for r in heal_records(converged, a))
        finally:
            for gateway in GATEWAYS:
                converged.ssh(gateway, "systemctl start haproxy")
        restored_wall, restored = time.time(), time.monotonic()
        outage_s = restored - outage

        # no operator command from here on
        healed_at = None
        while time.monotonic() - restored < HEAL_WITHIN_S:
            done = {a: [r for r in heal_records(converged, a)
                        if r["event"] == "heal-done" and r["reason"] == "breaker"]
                    for a in SERVING.values()}
            if all(done.values()) and not any(tripped(converged, a) for a in SERVING.values()):
                healed_at = max(r["at"] for rs in done.values() for r in rs)
                break
            time.sleep(5)
        time.sleep(10)  # the load runs on over the healed site
    if healed_at is None:  # everything the agents and the units said, whole, for the reader
        report = {name: {"records": heal_records(converged, a),
                         "tripped": tripped(converged, a),
                         "journal": converged.ssh(a, "journalctl -u deploykit-lmcache-heal "
                                                     "-u lmcache-server -n 60 --no-pager || true")}
                  for name, a in SERVING.items()}
        TIMINGS.write_text(json.dumps(report, indent=2))
        pytest.fail(f"not healed {HEAL_WITHIN_S} s after storage came back: see {TIMINGS}\n"
                    + json.dumps({n: r["records"] for n, r in report.items()}, indent=1))

    rc, findings = verify(converged)
    assert rc == 0, [f for f in findings if f["status"] != "pass"]
    assert {f["target"]: f["status"] for f in findings
            if f["check"] == "lmcache-s3-breaker"} == {"lab3": "pass", "lab4": "pass"}

    # one host at a time: the two heals' [start, done] intervals do not overlap
    spans = {}
    for name, address in SERVING.items():
        records = heal_records(converged, address)
        starts = [r for r in records if r["event"] == "heal-start" and r["reason"] == "breaker"]
        dones = [r for r in records if r["event"] == "heal-done" and r["reason"] == "breaker"]
        assert len(starts) == 1 and len(dones) == 1, records
        assert starts[0]["units"] == "lmcache-server"
        assert starts[0]["at"] >= restored_wall - 1  # not while storage was out
        spans[name] = (starts[0]["at"], dones[0]["at"])
        assert heals_total(converged, address) == 1
    first, second = sorted(spans.values())
    assert first[1] <= second[0], spans

    assert load.errors == [], load.errors[:10]
    assert_5xx_only_while_restarting(load, spans)
    assert load.sent > 0
    TIMINGS.write_text(json.dumps({
        "outage_s": round(outage_s, 1),
        "healed_after_storage_back_s": round(healed_at - restored_wall, 1),
        "heals": {name: {"start_after_storage_back_s": round(s - restored_wall, 1),
                         "restart_and_gate_s": round(e - s, 1)}
                  for name, (s, e) in spans.items()},
        "prompts": {"answered": load.sent, "failed": len(load.errors),
                    "skipped_unhealthy": load.skipped, "redispatched": load.redispatched,
                    "closed_unanswered": load.empty, "answered_5xx": len(load.answered_5xx)},
    }, indent=2))
    print(TIMINGS.read_text())


def test_the_scheduled_restart_rolls_the_site_one_host_at_a_time(converged: Lab) -> None:
    """What deploykit-lmcache-restart.timer starts after each lifecycle window (the lab opts
    out of the timer itself: no restart by the clock mid-session), on both hosts at once:
    they restart one after the other behind their /health, and no prompt fails."""
    before = {a: len(heal_records(converged, a)) for a in SERVING.values()}
    with BalancedPrompts() as load:
        started = time.time()
        for address in SERVING.values():
            converged.ssh(address, "systemctl start --no-block deploykit-lmcache-restart.service")
        spans: dict[str, tuple[float, float]] = {}
        deadline = time.monotonic() + HEAL_WITHIN_S
        while len(spans) < len(SERVING) and time.monotonic() < deadline:
            time.sleep(5)
            for name, address in SERVING.items():
                records = heal_records(converged, address)[before[address]:]
                start = [r for r in records if r["event"] == "heal-start"]
                done = [r for r in records if r["event"] == "heal-done"]
                if start and done:
                    assert start[0]["reason"] == done[0]["reason"] == "scheduled", records
                    spans[name] = (start[0]["at"], done[0]["at"])
        time.sleep(10)
    assert len(spans) == len(SERVING), spans
    first, second = sorted(spans.values())
    assert first[1] <= second[0], spans
    assert load.errors == [], load.errors[:10]
    assert_5xx_only_while_restarting(load, spans)
    timings = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else {}
    timings["scheduled_restart"] = {
        "site_rolled_s": round(max(e for _, e in spans.values()) - started, 1),
        "hosts": {name: round(e - s, 1) for name, (s, e) in spans.items()},
        "prompts": {"answered": load.sent, "failed": len(load.errors),
                    "skipped_unhealthy": load.skipped, "redispatched": load.redispatched}}
    TIMINGS.write_text(json.dumps(timings, indent=2))
    print(TIMINGS.read_text())


def assert_5xx_only_while_restarting(load: BalancedPrompts,
                                     spans: dict[str, tuple[float, float]]) -> None:
    """A 5xx the client sent elsewhere came from a replica of a host inside its restart's
    [start, done] (journal times, a second either side), never from one serving."""
    outside = [(round(at, 1), host, code) for at, host, code in load.answered_5xx
               if not spans[host][0] - 1 <= at <= spans[host][1] + 1]
    assert not outside, (outside, spans)


def _quietly(address: str, rng: random.Random) -> None:
    """A fresh prompt straight to a host (it keeps the breaker's error count going)."""
    with contextlib.suppress(OSError):
        complete(address, [rng.randrange(3, 259) for _ in range(256 * 2 + 5)])


def verify(lab: Lab) -> tuple[int, list[dict]]:
    result = lab.deploykit("verify", "--inventory", "lab", "--json", check=False)
    return result.returncode, json.loads(result.stdout)["findings"]
