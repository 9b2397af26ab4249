"""A team's LMCache quota on the server topology: the L2 adapter's per-salt eviction, each
host's share of the team's quota, and the quota program the unit runs at every start (here
against a small HTTP server that answers as LMCache 0.5.6's quota API does; the real server
is tests/upstream/test_lmcache_quota.py)."""

from __future__ import annotations

import json
import shlex
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from deploy_kit.agents import lmcache_quota as agent
from deploy_kit.config import names
from deploy_kit.config.site import Site
from deploy_kit.ops.site import open_site
from deploy_kit.plan.plan import cache_bytes
from deploy_kit.render import lmcache_quota, lmcache_server
from deploy_kit.render.files import render_site
from tests.conftest import CPU_TWO_INSTANCES

GIB = 2**30


def team_site(tmp_path: Path, teams: list[dict[str, Any]], **serving: Any) -> Site:
    inventory = json.loads(json.dumps(CPU_TWO_INSTANCES))
    vllm = inventory["all"]["children"]["vllm"]
    vllm["hosts"] = {"cpu1": {"ansible_host": "10.0.1.1"}, "cpu2": {"ansible_host": "10.0.1.2"},
                     "cpu3": {"ansible_host": "10.0.1.3", "vllm_model": "Qwen/Qwen3-32B"}}
    vllm["vars"] |= serving
    root = tmp_path / "inv"
    (root / "group_vars").mkdir(parents=True, exist_ok=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (root / "group_vars" / "all.yml").write_text(yaml.safe_dump({"teams": teams}))
    return open_site(str(root))


ALPHA = {"name": "alpha", "models": ["Qwen/Qwen3-8B"], "quota_bytes": 100 * GIB}
BETA = {"name": "beta", "models": ["Qwen/Qwen3-32B"], "cache_salt": "beta-salt"}


def unit_of(site: Site, host: str) -> str:
    return render_site(site)[host][lmcache_server.UNIT_PATH].content


def set_quota_line(unit: str) -> list[str] | None:
    text = unit.replace("\\\n", " ")
    found = [shlex.split(line.removeprefix("ExecStartPost=")) for line in text.splitlines()
             if line.startswith(f"ExecStartPost={names.LMCACHE_QUOTA_SCRIPT}")]
    assert len(found) <= 1
    return found[0] if found else None


def adapter_of(unit: str) -> dict[str, Any]:
    argv = shlex.split(unit.replace("\\\n", " ").split("ExecStart=")[1].splitlines()[0])
    parsed: dict[str, Any] = json.loads(argv[argv.index("--l2-adapter") + 1])
    return parsed


def test_each_host_gets_its_share_of_its_teams_quota(tmp_path: Path) -> None:
    site = team_site(tmp_path, [ALPHA, BETA])
    # alpha: its quota over its two hosts; beta: plan's bytes for its one host's model only
    assert lmcache_quota.salt_quota(site, site.hosts["cpu1"]) == \
        lmcache_quota.SaltQuota("alpha", 50.0)
    beta = lmcache_quota.salt_quota(site, site.hosts["cpu3"])
    assert beta is not None and beta.salt == "beta-salt"
    team = site.hosts["cpu3"].config.team
    assert team is not None
    assert lmcache_quota.team_quota_bytes(site, team) == cache_bytes(site, {"cpu3"}) > 0
    assert cache_bytes(site, {"cpu3"}) < cache_bytes(site)
    assert beta.limit_gb == cache_bytes(site, {"cpu3"}) / GIB


def test_the_unit_sets_the_quota_the_agent_parses(tmp_path: Path) -> None:
    site = team_site(tmp_path, [ALPHA, BETA])
    unit = unit_of(site, "cpu2")
    assert adapter_of(unit)["eviction"] == {"eviction_policy": "IsolatedLRU",
                                            "trigger_watermark": 0.9, "eviction_ratio": 0.1}
    line = set_quota_line(unit)
    assert line is not None
    # after the port wait: the quota API's port is open when the program runs
    assert unit.index("/dev/tcp/127.0.0.1/6556") < unit.index(names.LMCACHE_QUOTA_SCRIPT)
    seen: dict[str, Any] = {}
    real = agent.set_quota

    def record(port: int, salt: str, limit_gb: float, timeout: float) -> dict[str, Any]:
        seen.update(port=port, salt=salt, limit_gb=limit_gb, timeout=timeout)
        return {"limit_gb": limit_gb}

    agent.set_quota = record  # type: ignore[assignment]
    try:
        agent.main(line[1:])
    finally:
        agent.set_quota = real  # type: ignore[assignment]
    assert seen == {"port": 6556, "salt": "alpha", "limit_gb": 50.0,
                    "timeout": lmcache_quota.QUOTA_TIMEOUT_S}


@pytest.mark.parametrize(("teams", "serving", "why"), [
    ([], {}, "no team"),
    ([{**ALPHA, "quota_bytes": 0}], {}, "team quota 0: a limit of 0 would evict everything"),
    ([ALPHA], {"lmcache_topology": "inprocess", "vllm_accelerator": "cuda",
               "vllm_max_model_len": 8192}, "in-process LMCache ignores cache_salt"),
])
def test_no_per_salt_eviction(tmp_path: Path, teams: list[dict[str, Any]],
                              serving: dict[str, Any], why: str) -> None:
    site = team_site(tmp_path, teams, **serving)
    assert lmcache_quota.salt_quota(site, site.hosts["cpu1"]) is None, why
    unit = render_site(site)["cpu1"].get(lmcache_server.UNIT_PATH)
    if unit is not None:
        assert set_quota_line(unit.content) is None
        assert "eviction" not in adapter_of(unit.content)


class FakeQuotaAPI(BaseHTTPRequestHandler):
    """LMCache 0.5.6's quota API (quota_api.py:70-131): 503 until the engine is up, 400 for a
    negative limit, the quota back on GET."""

    unavailable = 0
    quotas: ClassVar[dict[str, float]] = {}

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:
        salt = self.path.removeprefix("/quota/")
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if FakeQuotaAPI.unavailable:
            FakeQuotaAPI.unavailable -= 1
            return self._answer(503, {"error": "engine not initialized"})
        if float(body["limit_gb"]) < 0:
            return self._answer(400, {"error": "limit_gb must be non-negative"})
        FakeQuotaAPI.quotas[salt] = float(body["limit_gb"])
        return self._answer(200, {"cache_salt": salt, "limit_gb": body["limit_gb"],
                                  "status": "ok"})

    def do_GET(self) -> None:
        salt = self.path.removeprefix("/quota/")
        self._answer(200, {"cache_salt": salt, "limit_gb": FakeQuotaAPI.quotas.get(salt, 0.0),
                           "current_usage_gb": 0.0, "exists": salt in FakeQuotaAPI.quotas})

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[int]:
    FakeQuotaAPI.unavailable, FakeQuotaAPI.quotas = 0, {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeQuotaAPI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_the_agent_waits_out_a_starting_engine(api: int) -> None:
    FakeQuotaAPI.unavailable = 2
    got = agent.set_quota(api, "alpha", 12.5, timeout=10, poll=0.05)
    assert got["exists"] and got["limit_gb"] == 12.5
    assert FakeQuotaAPI.unavailable == 0


def test_a_refused_quota_fails_the_start_at_once(api: int,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        agent.main(["--port", str(api), "--salt", "alpha", "--limit-gb", "-1",
                    "--timeout", "30"])
    assert exc.value.code != 0
    assert "HTTP 400" in str(exc.value.code)


def test_no_server_fails_after_the_timeout() -> None:
    from tests.integration.test_consul_dns import free_port

    with pytest.raises(agent.QuotaError, match=r"never took the quota in 0\.3 s"):
        agent.set_quota(free_port(), "alpha", 1.0, timeout=0.3, poll=0.1)
