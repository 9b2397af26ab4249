"""A team host's rendered LMCache server unit against the real `lmcache server` 0.5.6 (the
CPU stack's venv, loopback ports): LMCache parses the L2 adapter's IsolatedLRU eviction and
starts its L2 eviction controller, and the unit's ExecStartPost (deploykit's quota program
under the venv's python) sets the team's quota, which the server's quota API then reports.
The S3 endpoint is never reached: the adapter connects lazily, and no chunk is stored."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml

from deploy_kit import agents
from deploy_kit.config import names
from deploy_kit.config.models import HostConfig
from deploy_kit.ops.site import open_site
from deploy_kit.render import lmcache_server
from deploy_kit.render.files import render_site
from tests.conftest import CPU_TWO_INSTANCES
from tests.integration.test_consul_dns import free_port
from tests.upstream import renders

STARTED = "Application startup complete"


def _exec_start_posts(unit: str) -> list[list[str]]:
    text = unit.replace("\\\n", " ")
    return [shlex.split(line.removeprefix("ExecStartPost=")) for line in text.splitlines()
            if line.startswith("ExecStartPost=")]


def _team_unit(root: Path, venv: Path) -> str:
    inventory = json.loads(json.dumps(CPU_TWO_INSTANCES))
    serving = inventory["all"]["children"]["vllm"]
    serving["hosts"] = {"cpu1": {"ansible_host": "10.0.1.1"},
                        "cpu2": {"ansible_host": "10.0.1.2"}}
    serving["vars"] |= {"vllm_venv": str(venv), "lmcache_server_l1_size_gb": 1,
                        "vllm_max_model_len": 1024,
                        "lmcache_server_port": free_port(),
                        "lmcache_server_http_port": free_port(),
                        "lmcache_server_metrics_port": free_port()}
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (root / "group_vars" / "all.yml").write_text(yaml.safe_dump({"teams": [
        {"name": "alpha", "models": ["Qwen/Qwen3-8B"], "cache_salt": "alpha-salt",
         "quota_bytes": 3 * 2**30}]}))
    site = open_site(str(root))
    return render_site(site)["cpu1"][lmcache_server.UNIT_PATH].content


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        answer: dict = json.loads(response.read())
    return answer


def test_the_rendered_unit_starts_with_isolated_lru_and_sets_the_teams_quota(
        cpu_stack: Path, tmp_path: Path) -> None:
    unit = _team_unit(tmp_path / "inv", cpu_stack)
    argv = renders.exec_start(unit)
    adapter = json.loads(argv[argv.index("--l2-adapter") + 1])
    assert adapter["eviction"]["eviction_policy"] == "IsolatedLRU"
    wait_port, set_quota = _exec_start_posts(unit)
    assert set_quota[0] == names.LMCACHE_QUOTA_SCRIPT
    port = int(set_quota[set_quota.index("--port") + 1])
    # the role installs the program under the venv's python (roles/serving/tasks/lmcache.yml)
    set_quota = [str(cpu_stack / "bin" / "python3"), str(agents.LMCACHE_QUOTA), *set_quota[1:]]
    env = {**os.environ, **lmcache_server.server_env(_site_config(tmp_path)),
           "AWS_ACCESS_KEY_ID": "unused", "AWS_SECRET_ACCESS_KEY": "unused",
           "LMCACHE_DISABLE_BANNER": "1"}
    for key in ("AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        env.pop(key, None)  # no profile here: the keys above, never used
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        started = time.monotonic()
        deadline = started + 240
        while STARTED not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "lmcache server never started"
            time.sleep(0.5)
        took = time.monotonic() - started
        assert subprocess.run(wait_port, timeout=30, check=False).returncode == 0
        done = subprocess.run(set_quota, capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stderr
        assert "'alpha-salt': 1.500 GiB" in done.stdout  # 3 GiB over the team's two hosts
        base = f"http://127.0.0.1:{port}"
        assert _get(f"{base}/quota/alpha-salt") | {"current_usage_gb": 0.0} == {
            "cache_salt": "alpha-salt", "limit_gb": 1.5, "current_usage_gb": 0.0,
            "exists": True}
        assert _get(f"{base}/quota")["users"].keys() == {"alpha-salt"}
        # a refusal fails the start: a negative limit is LMCache's 400, not retried
        refused = subprocess.run([*set_quota[:-6], "--salt", "alpha-salt", "--limit-gb",
                                  "-1", "--timeout", "5"], capture_output=True, text=True,
                                 timeout=60, check=False)
        assert refused.returncode == 1 and "HTTP 400" in refused.stderr, refused.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text(errors="replace")
    assert "Starting L2EvictionController" in text
    assert "Initialized S3L2Adapter" in text
    print(f"lmcache server started in {took:.1f} s")


def _site_config(tmp_path: Path) -> HostConfig:
    return open_site(str(tmp_path / "inv")).hosts["cpu1"].config
