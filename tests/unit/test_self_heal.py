"""The LMCache agent (deploy_kit/agents/lmcache_heal.py, its settings rendered by
render/self_heal.py): the module itself, driven with a settings file against a fake systemd
(systemctl, journalctl on PATH), a fake S3 (boto3 and botocore imported from the fakes,
holding the lease with RGW's If-None-Match semantics) and a real HTTP /health; and what the
render writes."""

from __future__ import annotations

import contextlib
import fcntl
import http.server
import io
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_kit.agents import lmcache_heal
from deploy_kit.ops.site import open_site
from deploy_kit.plan import lease
from deploy_kit.plan.plan import build_plan
from deploy_kit.render import self_heal
from deploy_kit.render.files import render_site
from tests.conftest import CPU_TWO_INSTANCES, InventoryFactory

# LMCache's breaker line as its logger writes it (colors included: journalctl -o cat)
BREAKER = ("\x1b[31;20m[2026-12-06 10:00:00,123] LMCache ERROR:\x1b[0m S3L2Adapter disabled "
           "after 3 consecutive connection failures \x1b[3m(s3_l2_adapter.py:1030:"
           "lmcache.v1.distributed.l2_adapters.s3_l2_adapter)\x1b[0m")

SYSTEMCTL = r'''#!/bin/sh
# show -p ActiveState -p InvocationID UNIT | restart UNIT | stop UNIT | start UNIT
state="$FAKE/units"
eval unit=\${$#}
case "$1" in
show)
  if [ -f "$state/$unit" ]; then
    echo ActiveState=active; echo "InvocationID=$(cat "$state/$unit")"
  else
    echo ActiveState=inactive; echo InvocationID=
  fi ;;
restart)
  echo "$unit" >> "$FAKE/restarts"
  [ -f "$FAKE/fail-$unit" ] && exit 1
  echo "$(cat "$state/$unit" 2>/dev/null)x" > "$state/$unit" ;;
stop)
  echo "stop $unit" >> "$FAKE/stops"
  rm -f "$state/$unit" ;;
start)
  echo "$unit" >> "$FAKE/restarts"
  [ -f "$FAKE/fail-$unit" ] && exit 1
  echo "$unit-started-$(wc -l < "$FAKE/restarts" | tr -d ' ')" > "$state/$unit"
  [ -x "$FAKE/on-start" ] && "$FAKE/on-start" "$unit"
  exit 0 ;;
esac
'''

JOURNALCTL = r'''#!/bin/sh
# _SYSTEMD_INVOCATION_ID=ID ... [--after-cursor N]: the lines of $FAKE/journal/ID after line N
id=""; after=0
while [ $# -gt 0 ]; do
  case "$1" in
    _SYSTEMD_INVOCATION_ID=*) id="${1#_SYSTEMD_INVOCATION_ID=}" ;;
    --after-cursor) shift; after="$1" ;;
  esac
  shift
done
file="$FAKE/journal/$id"
[ -f "$file" ] || exit 0
echo "$after" >> "$FAKE/journal-reads"
tail -n +$((after + 1)) "$file"
echo "-- cursor: $(wc -l < "$file" | tr -d ' ')"
'''

FAKE_BOTO3 = '''
import json, os

from botocore.exceptions import ClientError, EndpointConnectionError

STORE = os.path.join(os.environ["FAKE"], "s3.json")


class Body:
    def __init__(self, data):
        self.data = data

    def read(self, amt=None):
        return self.data if amt is None else self.data[:amt]


def _error(status, code):
    return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "op")


class Client:
    def _load(self):
        if os.path.exists(os.path.join(os.environ["FAKE"], "s3-down")):
            raise EndpointConnectionError(endpoint_url="https://s3.test")
        assert os.environ["AWS_CONFIG_FILE"] and os.environ["AWS_SHARED_CREDENTIALS_FILE"]
        try:
            with open(STORE) as handle:
                return json.load(handle)
        except OSError:
            return {}

    def _save(self, objects):
        with open(STORE, "w") as handle:
            json.dump(objects, handle)

    def get_object(self, Bucket, Key):
        objects = self._load()
        if Bucket + "/" + Key not in objects:
            raise _error(404, "NoSuchKey")
        return {"Body": Body(objects[Bucket + "/" + Key].encode()), "ETag": '"e"'}

    def put_object(self, Bucket, Key, Body, IfNoneMatch=None, **kwargs):
        objects = self._load()
        if IfNoneMatch == "*" and Bucket + "/" + Key in objects:
            raise _error(412, "PreconditionFailed")
        objects[Bucket + "/" + Key] = Body.decode()
        self._save(objects)
        return {"ETag": '"e"'}

    def list_objects_v2(self, Bucket, Prefix, ContinuationToken=None):
        keys = sorted(k[len(Bucket) + 1:] for k in self._load() if k.startswith(Bucket + "/"))
        keys = [k for k in keys if k.startswith(Prefix)]
        start = int(ContinuationToken or 0)  # two keys a page: the agent must follow pages
        page = {"Contents": [{"Key": k} for k in keys[start:start + 2]],
                "IsTruncated": start + 2 < len(keys)}
        if page["IsTruncated"]:
            page["NextContinuationToken"] = str(start + 2)
        return page


class session:
    class Session:
        def __init__(self, profile_name):
            assert profile_name == "lmcache"

        def client(self, service, config=None):
            return Client()
'''

FAKE_BOTOCORE = {
    "__init__.py": "",
    "config.py": "class Config:\n    def __init__(self, **kwargs):\n        self.kwargs = kwargs\n",
    "exceptions.py": '''
class BotoCoreError(Exception):
    pass


class EndpointConnectionError(BotoCoreError):
    def __init__(self, endpoint_url):
        super().__init__(endpoint_url)


class ClientError(Exception):
    def __init__(self, response, operation):
        super().__init__(response["Error"]["Code"])
        self.response = response
''',
}


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        # vLLM's /health, the LMCache server's /healthcheck
        self.send_response(200 if self.path in ("/health", "/healthcheck") else 404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def health_port() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


FAKED = ("boto3", "botocore")
# what the agent sets for botocore (s3()): put back after each run
AWS_VARIABLES = ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CA_BUNDLE")


@contextlib.contextmanager
def fake_host(fake: Path) -> Iterator[None]:
    """The fakes for one run in this process: systemctl and journalctl first on PATH, boto3
    and botocore imported afresh from the fakes (a test may rewrite one), and the process's
    own modules and AWS_* variables as they were afterwards."""
    def faked() -> list[str]:
        return [name for name in sys.modules if name.split(".")[0] in FAKED]

    real = {name: sys.modules.pop(name) for name in faked()}
    aws = {name: os.environ.get(name) for name in AWS_VARIABLES}
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("FAKE", str(fake))
            patch.setenv("PATH", f"{fake / 'bin'}:{os.environ['PATH']}")
            patch.setattr(sys, "dont_write_bytecode", True)
            patch.syspath_prepend(str(fake / "py"))
            yield
    finally:
        for name in faked():
            del sys.modules[name]
        sys.modules.update(real)
        for name, value in aws.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Agent:
    """The agent with its fakes and its settings file: `units` run (unit -> its journal
    lines)."""

    def __init__(self, root: Path, config: dict[str, Any]) -> None:
        self.root = root
        self.fake = root / "fake"
        for d in ("units", "journal", "bin", "py/boto3", "py/botocore"):
            (self.fake / d).mkdir(parents=True, exist_ok=True)
        for name, text in (("systemctl", SYSTEMCTL), ("journalctl", JOURNALCTL)):
            path = self.fake / "bin" / name
            path.write_text(text)
            path.chmod(0o755)
        (self.fake / "py/boto3/__init__.py").write_text(FAKE_BOTO3)
        for name, text in FAKE_BOTOCORE.items():
            (self.fake / "py/botocore" / name).write_text(text)
        self.config = {**config, "state": str(root / "state.json"),
                       "textfile": str(root / "textfile" / "deploykit_lmcache_heal.prom"),
                       "local_lock": str(root / "lock"), "health_timeout": 3,
                       "health_poll": 0.1, "lock_poll": 0.1, "lock_wait": 4,
                       "outage_wait": 0.3, "restart_poll": 0.1, "server_down": 0.1,
                       "reregister_wait": 1}
        self.settings = root / "lmcache-heal.json"

    def runs(self, unit: str, *lines: str) -> None:
        """`unit` runs a fresh process that logged `lines`."""
        invocation = f"{unit}-{len(list((self.fake / 'journal').iterdir()))}"
        (self.fake / "units" / unit).write_text(invocation)
        (self.fake / "journal" / invocation).write_text("".join(f"{x}\n" for x in lines))

    def logs(self, unit: str, line: str) -> None:
        invocation = (self.fake / "units" / unit).read_text().strip()
        with (self.fake / "journal" / invocation).open("a") as handle:
            handle.write(line + "\n")

    def run(self, mode: str = "heal") -> list[str]:
        """One run of `lmcache-heal MODE` with self.config as its settings file (as the render
        writes it): the lines it logged. It returns, as the script exits 0."""
        self.settings.write_text(self_heal.render_config(self.config))
        out = io.StringIO()
        with fake_host(self.fake), contextlib.redirect_stdout(out):
            lmcache_heal.main(mode, str(self.settings))
        return out.getvalue().splitlines()

    def restarts(self) -> list[str]:
        path = self.fake / "restarts"
        return path.read_text().split() if path.exists() else []

    def slot(self, slot: str = "heal-0") -> str:
        """A slot's key (without its number), bucket first."""
        return f"{self.config['bucket']}/{self.config['lease_key']}/site/{slot}"

    def leases(self, slot: str = "heal-0") -> list[dict[str, Any]]:
        """Every lease record of one slot, oldest first."""
        path = self.fake / "s3.json"
        objects = json.loads(path.read_text()) if path.exists() else {}
        prefix = self.slot(slot) + "."
        return [json.loads(objects[k]) for k in sorted(objects) if k.startswith(prefix)]

    def lease(self, slot: str = "heal-0") -> dict[str, Any] | None:
        """The newest lease record of a slot; its host holds it ('' when free)."""
        leases = self.leases(slot)
        return leases[-1] if leases else None

    def hold_lease(self, host: str, expires_in: float, n: int = 7, slot: str = "heal-0",
                   reason: str = "breaker") -> None:
        """`host` holds number n of a slot (three older, freed ones beside it)."""
        import time
        path = self.fake / "s3.json"
        objects = json.loads(path.read_text()) if path.exists() else {}
        for i in range(n - 3, n):
            objects[f"{self.slot(slot)}.{i:012d}"] = json.dumps({"host": ""})
        objects[f"{self.slot(slot)}.{n:012d}"] = json.dumps(
            {"host": host, "reason": reason, "since": 0, "expires": time.time() + expires_in})
        path.write_text(json.dumps(objects))

    def metrics(self) -> dict[str, float]:
        text = (self.root / "textfile" / "deploykit_lmcache_heal.prom").read_text()
        return {m.group(1): float(m.group(2))
                for m in re.finditer(r"^(\S+) (\S+)$", text, re.M)}


def config_of(make_inventory: InventoryFactory, hosts: dict, host: str,
              **group_vars: dict) -> dict[str, Any]:
    site = open_site(str(make_inventory(hosts=hosts, **group_vars)))
    return self_heal.agent_config(site, site.hosts[host])


@pytest.fixture
def cpu_server(make_inventory: InventoryFactory, tmp_path: Path, health_port: int) -> Agent:
    """A CPU host: the LMCache server and two instances that Require it."""
    config = config_of(make_inventory, CPU_TWO_INSTANCES, "cpu1")
    assert config["server"] == "lmcache-server" and config["with_server"]
    assert config["breaker_units"] == ["lmcache-server"]
    config["instances"] = [{**i, "port": health_port} for i in config["instances"]]
    agent = Agent(tmp_path, config)
    agent.runs("lmcache-server", "started")
    for instance in config["instances"]:
        agent.runs(instance["unit"], "serving")
    return agent


def test_a_quiet_host_restarts_nothing_and_reports_zero(cpu_server: Agent) -> None:
    assert cpu_server.run() == []
    assert cpu_server.restarts() == [] and cpu_server.lease() is None
    assert cpu_server.metrics()['deploykit_lmcache_heals_total{reason="breaker"}'] == 0


def test_a_tripped_server_restarts_behind_the_lease_and_gate_and_is_recorded(
        cpu_server: Agent) -> None:
    cpu_server.logs("lmcache-server", f"2026-12-06T10:00:00 lab3 lmcache: {BREAKER}")
    out = cpu_server.run()
    # the server alone: its instances require it and restart with it (roll.yml)
    assert cpu_server.restarts() == ["lmcache-server"]
    assert [line.split()[0] for line in out] == ["heal-start", "heal-done"], out
    assert "host=cpu1" in out[0] and "units=lmcache-server" in out[0]
    assert "reason=breaker" in out[1]
    # lease 1 taken, then freed after the gate (overwritten: the hosts delete nothing)
    assert [lease["host"] for lease in cpu_server.leases()] == [""]
    assert cpu_server.lease()["released_by"] == "cpu1"
    metrics = cpu_server.metrics()
    assert metrics['deploykit_lmcache_heals_total{reason="breaker"}'] == 1
    assert metrics['deploykit_lmcache_heal_last_timestamp_seconds{reason="breaker"}'] > 0
    # the new process logged no breaker: nothing more to do
    assert cpu_server.run() == [] and cpu_server.restarts() == ["lmcache-server"]


def test_the_journal_is_read_from_where_the_last_run_stopped(cpu_server: Agent) -> None:
    cpu_server.logs("lmcache-server", "one")
    cpu_server.run()
    cpu_server.logs("lmcache-server", "two")
    cpu_server.run()
    assert (cpu_server.fake / "journal-reads").read_text().split() == ["0", "2"]


def test_no_heal_while_s3_does_not_answer_and_one_record_of_the_wait(cpu_server: Agent
                                                                       ) -> None:
    cpu_server.logs("lmcache-server", BREAKER)
    (cpu_server.fake / "s3-down").touch()
    first, second = cpu_server.run(), cpu_server.run()
    assert cpu_server.restarts() == []
    assert len(first) == 1 and first[0].startswith("heal-waiting") and \
        "reason=s3-unreachable" in first[0], first
    assert second == []  # the timer asks every 30 s; the journal says it once
    (cpu_server.fake / "s3-down").unlink()
    assert cpu_server.run()[0].startswith("heal-start")
    assert cpu_server.restarts() == ["lmcache-server"]


def test_a_tripped_host_heals_in_the_run_that_sees_storage_come_back(cpu_server: Agent
                                                                     ) -> None:
    """The run polls S3 (lock_poll) for up to outage_wait instead of leaving a tripped host
    to the next tick: storage back mid-run, the same run heals."""
    cpu_server.logs("lmcache-server", BREAKER)
    down = cpu_server.fake / "s3-down"
    down.touch()
    cpu_server.config["outage_wait"] = 30
    threading.Timer(1.0, down.unlink).start()
    out = cpu_server.run()
    assert [line.split()[0] for line in out] == ["heal-waiting", "heal-start", "heal-done"], out
    assert cpu_server.restarts() == ["lmcache-server"]


def test_two_hosts_racing_for_one_number_only_one_wins(cpu_server: Agent) -> None:
    """Both saw number 7 free and create 8: the store refuses the second create (412)."""
    cpu_server.logs("lmcache-server", BREAKER)
    cpu_server.hold_lease("", expires_in=0, n=7)
    key = f"{cpu_server.slot()}.{8:012d}"
    path = cpu_server.fake / "s3.json"
    objects = json.loads(path.read_text())
    # the other host's create of 8 lands between this one's list and its create
    other = json.dumps(json.dumps({"host": "other", "expires": time.time() + 60}))
    fake = cpu_server.fake / "py/boto3/__init__.py"
    fake.write_text(fake.read_text().replace(
        "    def put_object(self, Bucket, Key, Body, IfNoneMatch=None, **kwargs):\n"
        "        objects = self._load()\n",
        "    def put_object(self, Bucket, Key, Body, IfNoneMatch=None, **kwargs):\n"
        "        objects = self._load()\n"
        f"        objects.setdefault({key!r}, {other})\n"
        "        self._save(objects)\n"))
    path.write_text(json.dumps(objects))
    out = cpu_server.run()
    assert cpu_server.restarts() == [] and "by=other" in out[0], out


def test_another_hosts_lease_waits_and_an_expired_one_is_taken_over(cpu_server: Agent
                                                                      ) -> None:
    cpu_server.logs("lmcache-server", BREAKER)
    cpu_server.hold_lease("other", expires_in=600)
    out = cpu_server.run()
    assert cpu_server.restarts() == [] and "by=other" in out[0], out
    assert cpu_server.lease()["host"] == "other"
    cpu_server.hold_lease("other", expires_in=-1)  # its holder died mid-restart
    out = cpu_server.run()
    assert [line.split()[0] for line in out] == ["lease-takeover", "heal-start", "heal-done"]
    assert cpu_server.restarts() == ["lmcache-server"]
    # the next number was taken (the dead holder's stays as it was) and freed
    assert [lease["host"] for lease in cpu_server.leases()] == ["", "", "", "other", ""]


def test_a_heal_waits_its_turn_for_the_lease(cpu_server: Agent) -> None:
    """Hosts one outage tripped heal one after another, not a timer tick apart."""
    cpu_server.logs("lmcache-server", BREAKER)
    cpu_server.hold_lease("other", expires_in=2)  # freed while this run waits (4 s here)
    out = cpu_server.run()
    assert [line.split()[0] for line in out] == ["heal-waiting", "lease-takeover",
                                                 "heal-start", "heal-done"], out
    assert cpu_server.restarts() == ["lmcache-server"]


def _age_last_heal(agent: Agent, seconds: float) -> None:
    """`seconds` pass: the last heal, and a trip already seen, lie that much further back
    (the state file, as a later run finds it)."""
    path = Path(agent.config["state"])
    state = json.loads(path.read_text())
    state["last_heal"]["end"] -= seconds
    if "tripped_since" in state:
        state["tripped_since"] -= seconds
    path.write_text(json.dumps(state))


def _backoff(line: str) -> int:
    assert "reason=backoff" in line, line
    return int(re.search(r"seconds=(\d+)", line).group(1))


def test_a_heal_that_did_not_hold_backs_off_and_the_backoff_grows(cpu_server: Agent) -> None:
    """The new process trips again within `settle` of its heal: storage still fails for
    LMCache although S3 answers the agent. Wait lmcache_self_heal_backoff, then twice that
    after a second such heal."""
    cpu_server.logs("lmcache-server", BREAKER)
    cpu_server.run()
    cpu_server.logs("lmcache-server", BREAKER)  # the new process trips again at once
    out = cpu_server.run()
    assert cpu_server.restarts() == ["lmcache-server"]
    assert 590 <= _backoff(out[0]) <= 600  # lmcache_self_heal_backoff: 10 minutes
    _age_last_heal(cpu_server, 601)  # the backoff is over: the second heal
    out = cpu_server.run()
    assert out[0].startswith("heal-start") and cpu_server.restarts() == ["lmcache-server"] * 2
    cpu_server.logs("lmcache-server", BREAKER)  # and again at once: the gap doubles
    out = cpu_server.run()
    assert 1190 <= _backoff(out[0]) <= 1200
    state = json.loads(Path(cpu_server.config["state"]).read_text())
    assert state["last_heal"]["streak"] == 1


def test_a_new_outage_after_a_heal_that_held_heals_at_once(cpu_server: Agent) -> None:
    """The lab's measured case (the 2026-12-07 review): a heal 89 s after a trip, then a
    second outage four minutes later trips the new process again. Storage is back, so the
    heal starts at once, with no backoff for the heal a few minutes earlier."""
    cpu_server.logs("lmcache-server", BREAKER)
    cpu_server.run()
    _age_last_heal(cpu_server, 240)
    cpu_server.logs("lmcache-server", BREAKER)
    out = cpu_server.run()
    assert [line.split()[0] for line in out] == ["heal-start", "heal-done"], out
    assert cpu_server.restarts() == ["lmcache-server"] * 2
    state = json.loads(Path(cpu_server.config["state"]).read_text())
    assert state["last_heal"]["streak"] == 0


def test_a_failed_heal_backs_off_the_next(make_inventory: InventoryFactory,
                                         tmp_path: Path) -> None:
    config = config_of(make_inventory, CPU_TWO_INSTANCES, "cpu1")
    config["instances"] = [{**i, "port": dead_port()} for i in config["instances"]]
    agent = Agent(tmp_path, config)
    agent.config["health_timeout"] = 0.3
    agent.runs("lmcache-server", BREAKER)
    for instance in config["instances"]:
        agent.runs(instance["unit"], "serving")
    assert agent.run()[-1].startswith("heal-failed")
    _age_last_heal(agent, 300)  # long after: a failed heal still counts
    agent.logs("lmcache-server", BREAKER)
    assert 290 <= _backoff(agent.run()[0]) <= 300


def test_an_instance_that_never_answers_keeps_the_lease(make_inventory: InventoryFactory,
                                                        tmp_path: Path) -> None:
    config = config_of(make_inventory, CPU_TWO_INSTANCES, "cpu1")
    config["instances"] = [{**i, "port": dead_port()} for i in config["instances"]]
    agent = Agent(tmp_path, {**config})
    agent.runs("lmcache-server", BREAKER)
    for instance in config["instances"]:
        agent.runs(instance["unit"], "serving")
    out = agent.run()
    assert out[-1].startswith("heal-failed") and "units=vllm,vllm-1" in out[-1], out
    # no other host goes down while this one is broken (until the lease expires)
    assert agent.lease()["host"] == "cpu1"
    assert agent.metrics()['deploykit_lmcache_heal_failures_total{reason="breaker"}'] == 1


def inprocess_agent(make_inventory: InventoryFactory, tmp_path: Path, port: int) -> Agent:
    hosts = {"all": {"children": {**CPU_TWO_INSTANCES["all"]["children"], "vllm": {
        "hosts": {"gpu1": {"ansible_host": "10.0.1.1", "vllm_instances": 3,
                           "vllm_accelerator_count": 3}},
        "vars": {"vllm_accelerator": "cuda", "lmcache_topology": "inprocess",
                 "vllm_model": "Qwen/Qwen3-8B"}}}}}
    config = config_of(make_inventory, hosts, "gpu1")
    assert config["server"] is None and config["breaker_units"] == ["vllm", "vllm-1", "vllm-2"]
    config["instances"] = [{**i, "port": port} for i in config["instances"]]
    agent = Agent(tmp_path, config)
    for instance in config["instances"]:
        agent.runs(instance["unit"], "serving")
    return agent


def test_in_process_only_the_tripped_instances_restart(make_inventory: InventoryFactory,
                                                       tmp_path: Path, health_port: int
                                                       ) -> None:
    agent = inprocess_agent(make_inventory, tmp_path, health_port)
    agent.logs("vllm-1", BREAKER)
    agent.run()
    assert agent.restarts() == ["vllm-1"]


def test_the_scheduled_restart_rolls_every_running_instance(make_inventory: InventoryFactory,
                                                            tmp_path: Path, health_port: int
                                                            ) -> None:
    agent = inprocess_agent(make_inventory, tmp_path, health_port)
    (agent.fake / "units" / "vllm-2").unlink()  # stopped: left alone
    out = agent.run("restart")
    assert agent.restarts() == ["vllm", "vllm-1"]
    assert "reason=scheduled" in out[-1]
    assert agent.metrics()['deploykit_lmcache_heals_total{reason="scheduled"}'] == 1
    assert agent.metrics()['deploykit_lmcache_heals_total{reason="breaker"}'] == 0


def test_the_scheduled_restart_waits_for_the_lease(cpu_server: Agent) -> None:
    cpu_server.hold_lease("other", expires_in=600)
    out = cpu_server.run("restart")  # lock_wait 4 s here (hours on a host)
    assert cpu_server.restarts() == [] and "by=other" in out[0]


def test_in_process_another_instance_tripping_soon_after_a_heal_heals_at_once(
        make_inventory: InventoryFactory, tmp_path: Path, health_port: int) -> None:
    """One outage trips the instances one after another: a unit the last heal did not
    restart is no sign that heal failed."""
    agent = inprocess_agent(make_inventory, tmp_path, health_port)
    agent.logs("vllm-1", BREAKER)
    agent.run()
    agent.logs("vllm-2", BREAKER)
    out = agent.run()
    assert out[0].startswith("heal-start") and agent.restarts() == ["vllm-1", "vllm-2"], out


REREGISTERED = ("(Worker_TP0 pid=812) \x1b[33;20m[2026-12-06 10:00:40,123] LMCache WARNING:"
                "\x1b[0m Finished re-registering KV caches after server recovery \x1b[3m("
                "vllm_multi_process_adapter.py:1751:lmcache.integration.vllm."
                "vllm_multi_process_adapter)\x1b[0m")


def gpu_server_agent(make_inventory: InventoryFactory, tmp_path: Path, port: int,
                     **settings: Any) -> Agent:
    hosts = {"all": {"children": {**CPU_TWO_INSTANCES["all"]["children"], "vllm": {
        "hosts": {"gpu1": {"ansible_host": "10.0.1.1", "vllm_instances": 2,
                           "vllm_accelerator_count": 4, "vllm_tensor_parallel_size": 2,
                           **settings}},
        "vars": {"vllm_accelerator": "cuda", "lmcache_topology": "server",
                 "vllm_model": "Qwen/Qwen3-8B"}}}}}
    config = config_of(make_inventory, hosts, "gpu1")
    assert config["server"] == "lmcache-server" and not config["with_server"]
    assert config["workers"] == 2
    config["instances"] = [{**i, "port": port} for i in config["instances"]]
    config["server_health_port"] = port
    agent = Agent(tmp_path, config)
    agent.runs("lmcache-server", BREAKER)
    for instance in config["instances"]:
        agent.runs(instance["unit"], "serving")
    return agent


def _reregister_on_start(agent: Agent, *units: str, lines: int = 2) -> None:
    """When the fake starts lmcache-server, each of `units` logs its re-registration (one
    line per worker), as LMCache's heartbeat does a few seconds later."""
    hook = agent.fake / "on-start"
    appends = "".join(
        f'  cat "$FAKE/units/{unit}" | xargs -I{{}} sh -c \'printf "%s\\n" "$1" >> '
        f'"$FAKE/journal/{{}}"\' _ {json.dumps(REREGISTERED)}\n' * lines for unit in units)
    hook.write_text(f'#!/bin/sh\n[ "$1" = lmcache-server ] || exit 0\n{appends}')
    hook.chmod(0o755)


def test_a_gpu_server_host_heals_by_restarting_the_server_alone(
        make_inventory: InventoryFactory, tmp_path: Path, health_port: int) -> None:
    """The breaker is in the server; vLLM's LMCacheMPConnector re-registers with the new
    one: the instances keep serving and are not restarted."""
    agent = gpu_server_agent(make_inventory, tmp_path, health_port)
    assert agent.config["server_only_heal"]
    _reregister_on_start(agent, "vllm", "vllm-1")
    out = agent.run()
    assert agent.restarts() == ["lmcache-server"], out
    assert (agent.fake / "stops").read_text().split() == ["stop", "lmcache-server"]
    assert [line.split()[0] for line in out] == ["heal-start", "heal-done"], out


def test_an_instance_that_does_not_reregister_is_restarted_after_all(
        make_inventory: InventoryFactory, tmp_path: Path, health_port: int) -> None:
    agent = gpu_server_agent(make_inventory, tmp_path, health_port)
    _reregister_on_start(agent, "vllm-1")  # vllm logs nothing; vllm-1 both workers
    out = agent.run()
    assert agent.restarts() == ["lmcache-server", "vllm"], out
    assert any(line.startswith("heal-widened") and "units=vllm " in line + " "
               for line in out), out
    # one worker's line of two is not enough
    agent2 = gpu_server_agent(make_inventory, tmp_path / "two", health_port)
    _reregister_on_start(agent2, "vllm", "vllm-1", lines=1)
    agent2.run()
    assert agent2.restarts() == ["lmcache-server", "vllm", "vllm-1"]


def test_server_only_off_restarts_the_server_then_each_instance(
        make_inventory: InventoryFactory, tmp_path: Path, health_port: int) -> None:
    agent = gpu_server_agent(make_inventory, tmp_path, health_port,
                             lmcache_self_heal_server_only=False)
    assert not agent.config["server_only_heal"]
    agent.run()
    assert agent.restarts() == ["lmcache-server", "vllm", "vllm-1"]


def test_the_scheduled_restart_of_a_gpu_server_host_restarts_everything(
        make_inventory: InventoryFactory, tmp_path: Path, health_port: int) -> None:
    """Its purpose is that no process keeps a record of what S3 stored: it stays whole."""
    agent = gpu_server_agent(make_inventory, tmp_path, health_port)
    _reregister_on_start(agent, "vllm", "vllm-1")
    agent.run("restart")
    assert agent.restarts() == ["lmcache-server", "vllm", "vllm-1"]


def test_a_scheduled_restart_with_nothing_running_restarts_nothing(cpu_server: Agent
                                                                   ) -> None:
    for unit in ("lmcache-server", *(i["unit"] for i in cpu_server.config["instances"])):
        (cpu_server.fake / "units" / unit).unlink()  # down, or under maintenance
    assert cpu_server.run("restart") == ["restart-skipped host=cpu1 reason=nothing_running"]
    assert cpu_server.restarts() == [] and cpu_server.lease() is None


def test_a_heal_leaves_the_host_to_a_run_already_at_work(cpu_server: Agent) -> None:
    """The heal and the scheduled restart hold one local flock; a heal that finds it taken
    returns at once (that run heals too), writing nothing."""
    cpu_server.logs("lmcache-server", BREAKER)
    with open(cpu_server.config["local_lock"], "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert cpu_server.run() == []
    assert cpu_server.restarts() == [] and not Path(cpu_server.config["state"]).exists()
    assert cpu_server.run()[0].startswith("heal-start")  # free again


def test_with_tls_botocore_gets_the_system_trust_store(cpu_server: Agent) -> None:
    """The site CA is in the system store (tls_trust.yml); botocore reads certifi's unless
    told otherwise."""
    cpu_server.config["tls"] = True
    cpu_server.settings.write_text(self_heal.render_config(cpu_server.config))
    lmcache_heal.configure(str(cpu_server.settings))
    before = os.environ.get("AWS_CA_BUNDLE")
    with fake_host(cpu_server.fake):
        lmcache_heal.s3()
        bundle = os.environ["AWS_CA_BUNDLE"]
        assert os.environ["AWS_CONFIG_FILE"] == cpu_server.config["aws_config"]
    assert Path(bundle).is_file()
    assert os.environ.get("AWS_CA_BUNDLE") == before  # this process's own, as it was


@pytest.mark.parametrize("argv", [[], ["heal-all"]])
def test_a_wrong_mode_is_refused_before_anything_is_read(argv: list[str]) -> None:
    """As the script runs on the host (its `__main__`): exit 1 and the usage, with no
    settings file read (there is none here)."""
    done = subprocess.run([sys.executable, str(lmcache_heal.__file__), *argv],
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "usage: lmcache-heal heal|restart\n"
    with pytest.raises(SystemExit, match=r"usage: lmcache-heal heal\|restart"):
        lmcache_heal.main("heal-all", "/nonexistent/lmcache-heal.json")


def test_the_settings_file_is_read_on_each_run(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps({"host": "a", "stale": 1}))
    (tmp_path / "b.json").write_text(json.dumps({"host": "b"}))
    lmcache_heal.configure(str(tmp_path / "a.json"))
    lmcache_heal.configure(str(tmp_path / "b.json"))
    assert lmcache_heal.C == {"host": "b"}


# --- the render ------------------------------------------------------------------------

def rendered(make_inventory: InventoryFactory, **group_vars: dict) -> dict[str, str]:
    site = open_site(str(make_inventory(hosts=CPU_TWO_INSTANCES, **group_vars)))
    return {path: f.content for path, f in render_site(site)["cpu1"].items()}


def test_both_timers_by_default_the_restart_after_the_lifecycle_window(
        make_inventory: InventoryFactory) -> None:
    files = rendered(make_inventory)
    assert set(self_heal.UNITS) | {self_heal.CONFIG} <= set(files)
    assert self_heal.SCRIPT not in files  # the role installs deploykit's own program
    timer = files[self_heal.RESTART_TIMER]
    assert "OnCalendar=*-*-* 06:00:00" in timer and "RandomizedDelaySec=1800" in timer
    assert "OnUnitInactiveSec=30s" in files[self_heal.HEAL_TIMER]
    assert "ExecStart=/usr/local/libexec/deploykit/lmcache-heal heal" in \
        files[self_heal.HEAL_UNIT]
    assert "SyslogIdentifier=deploykit-heal" in files[self_heal.RESTART_UNIT]
    assert json.loads(files[self_heal.CONFIG])["host"] == "cpu1"


@pytest.mark.parametrize(("settings", "absent"), [
    ({"lmcache_self_heal": False}, {self_heal.HEAL_TIMER}),
    ({"lmcache_scheduled_restart": False}, {self_heal.RESTART_TIMER}),
])
def test_an_opt_out_drops_its_timer(make_inventory: InventoryFactory, settings: dict,
                                    absent: set[str]) -> None:
    files = rendered(make_inventory, all=settings)
    assert absent.isdisjoint(files) and set(self_heal.UNITS) - absent <= set(files)


def test_no_expiry_no_scheduled_restart(make_inventory: InventoryFactory) -> None:
    files = rendered(make_inventory, all={"ceph_rgw_s3_lifecycle_days": 0,
                                          "ceph_rgw_s3_quota_bytes": 1 << 40})
    assert self_heal.RESTART_TIMER not in files and self_heal.HEAL_TIMER in files


def test_a_calendar_of_ones_own(make_inventory: InventoryFactory) -> None:
    files = rendered(make_inventory, all={"lmcache_scheduled_restart_calendar": "Sun 03:30",
                                          "lmcache_scheduled_restart_delay": 60})
    assert "OnCalendar=Sun 03:30\nRandomizedDelaySec=60\n" in files[self_heal.RESTART_TIMER]


def test_no_s3_tier_no_agent(make_inventory: InventoryFactory) -> None:
    files = rendered(make_inventory, all={"lmcache_mode": "dram"})
    assert self_heal.CONFIG not in files and set(self_heal.UNITS).isdisjoint(files)


@pytest.mark.parametrize("topology", ["server", "inprocess"])
def test_the_agent_reads_the_units_and_words_up_and_verify_read(
        make_inventory: InventoryFactory, topology: str) -> None:
    from deploy_kit.ops import converged

    hosts = {"all": {"children": {**CPU_TWO_INSTANCES["all"]["children"], "vllm": {
        "hosts": {"gpu1": {"ansible_host": "10.0.1.1", "vllm_instances": 2,
                           "vllm_accelerator_count": 2}},
        "vars": {"vllm_accelerator": "cuda", "lmcache_topology": topology,
                 "vllm_model": "Qwen/Qwen3-8B"}}}}}
    site = open_site(str(make_inventory(hosts=hosts)))
    config = self_heal.agent_config(site, site.hosts["gpu1"])
    assert (config["breaker_units"], config["breaker_pattern"]) == \
        converged.breaker(site.hosts["gpu1"])


def test_lifecycle_keeps_a_week_by_default() -> None:
    from deploy_kit.config.models import HostConfig
    assert HostConfig().ceph_rgw_s3_lifecycle_days >= 7


@pytest.mark.parametrize(("settings", "words"), [
    ({"lmcache_self_heal": False}, "lmcache_self_heal: false (opt-out)"),
    ({"lmcache_scheduled_restart": False}, "lmcache_scheduled_restart: false with lifecycle"),
])
def test_plan_warns_of_an_opt_out(make_inventory: InventoryFactory, settings: dict,
                                  words: str) -> None:
    site = open_site(str(make_inventory(hosts=CPU_TWO_INSTANCES, all=settings)))
    assert any(words in w for w in build_plan(site).warnings)
    quiet = open_site(str(make_inventory(hosts=CPU_TWO_INSTANCES, all={})))
    assert not any(w.startswith(("lmcache_self_heal", "lmcache_scheduled"))
                   for w in build_plan(quiet).warnings)


# --- lease objects any serving identity can write: trusted only as far as checked --------

def _plant(agent: Agent, suffix: str, body: str) -> None:
    """An object `<heal-0 slot>.<suffix>` with `body`, as any bucket writer can create one."""
    path = agent.fake / "s3.json"
    objects = json.loads(path.read_text()) if path.exists() else {}
    objects[f"{agent.slot()}.{suffix}"] = body
    path.write_text(json.dumps(objects))


@pytest.mark.parametrize("suffix", ["²", "٣٣", "0000000000１2", "12", "000000000009x",
                                    "0000000000009"])
def test_a_lease_key_that_is_not_twelve_ascii_digits_is_ignored(cpu_server: Agent,
                                                                suffix: str) -> None:
    cpu_server.logs("lmcache-server", BREAKER)
    _plant(cpu_server, suffix, json.dumps({"host": "mallory", "expires": time.time() + 60}))
    out = cpu_server.run()
    assert cpu_server.restarts() == ["lmcache-server"], out
    assert not any(line.startswith("heal-error") for line in out)


@pytest.mark.parametrize("record", [
    "[1, 2]", '"text"', "null", "{not json", '{"host": "x", "expires": "never"}',
    '{"host": "x", "expires": 4e9}', '{"host": "x", "expires": 1e400}',
    '{"host": "x", "expires": true}', '{"host": ["x"], "expires": 1}',
    '{"host": "x\\ninjected heal-done host=lab9", "expires": 1}',
    '{"host": "' + "x" * 300 + '", "expires": 1}', '{"host": "x", "expires": NaN}',
    '{"host": "x", "expires": 1, "pad": "' + "p" * 5000 + '"}',
    "[" * 5000 + "]" * 5000,
])
def test_an_untrusted_lease_record_holds_nothing_and_crashes_nothing(cpu_server: Agent,
                                                                     record: str) -> None:
    """A list, a string, an expiry that is not a number or lies beyond now + lease_ttl
    ("held for ever"), an odd host, an oversized body: the agent takes the next number."""
    cpu_server.logs("lmcache-server", BREAKER)
    _plant(cpu_server, f"{7:012d}", record)
    out = cpu_server.run()
    assert cpu_server.restarts() == ["lmcache-server"], out
    assert out[0].startswith("lease-untrusted") and "heal-done" in out[-1], out
    assert all(line.split()[0] in {"lease-untrusted", "heal-start", "heal-done"}
               for line in out), out  # one record each: nothing forged, no error
    assert _record(cpu_server, 8)["host"] == ""  # the next number, taken and freed


def _record(agent: Agent, n: int) -> dict[str, Any]:
    objects = json.loads((agent.fake / "s3.json").read_text())
    record: dict[str, Any] = json.loads(
        objects[f"{agent.slot()}.{n:012d}"])
    return record


def test_a_bounded_lease_of_another_host_is_honoured(cpu_server: Agent) -> None:
    cpu_server.logs("lmcache-server", BREAKER)
    ttl = cpu_server.config["lease_ttl"]
    _plant(cpu_server, f"{7:012d}", json.dumps({"host": "gpu-2.lab", "reason": "breaker",
                                                "since": time.time(),
                                                "expires": time.time() + ttl - 5}))
    cpu_server.config["lock_wait"] = 0.2
    out = cpu_server.run()
    assert cpu_server.restarts() == [] and "by=gpu-2.lab" in out[0], out


def test_an_error_in_one_tick_never_ends_the_loop(cpu_server: Agent) -> None:
    """An answer the agent did not expect (a page that is not a mapping) is logged by its
    type, the run ends normally and the state and metrics are still written."""
    cpu_server.logs("lmcache-server", BREAKER)
    fake = cpu_server.fake / "py/boto3/__init__.py"
    fake.write_text(fake.read_text().replace(
        "    def list_objects_v2(self, Bucket, Prefix, ContinuationToken=None):\n",
        "    def list_objects_v2(self, Bucket, Prefix, ContinuationToken=None):\n"
        "        return ['not', 'a', 'page']\n"))
    out = cpu_server.run()
    assert out == [f"heal-error host={cpu_server.config['host']} error=AttributeError"], out
    assert cpu_server.restarts() == []
    assert cpu_server.metrics()['deploykit_lmcache_heals_total{reason="breaker"}'] == 0


def test_release_frees_only_a_lease_this_host_holds(cpu_server: Agent) -> None:
    """A lease taken over while this host restarted (after lease_ttl) is not freed."""
    cpu_server.logs("lmcache-server", BREAKER)
    fake = cpu_server.fake / "py/boto3/__init__.py"
    # between this host's restart and its release, another host's record replaces number 1
    taken = json.dumps(json.dumps({"host": "other", "expires": time.time() + 60}))
    key = f"{cpu_server.slot()}.{1:012d}"
    marker = cpu_server.fake / "restarts"
    fake.write_text(fake.read_text().replace(
        "    def get_object(self, Bucket, Key):\n        objects = self._load()\n",
        "    def get_object(self, Bucket, Key):\n        objects = self._load()\n"
        f"        if os.path.exists({str(marker)!r}):\n"
        f"            objects[{key!r}] = {taken}\n"
        "            self._save(objects)\n"))
    out = cpu_server.run()
    assert cpu_server.restarts() == ["lmcache-server"]
    assert any(line.startswith("lease-release-skipped") and "holder=other" in line
               for line in out), out
    assert cpu_server.lease()["host"] == "other"


def test_logged_fields_are_one_printable_word() -> None:
    lmcache_heal.C["host"] = "cpu1"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        lmcache_heal.log("heal-waiting", by="x\nheal-done host=lab9\r\x1b[2J\u2028", n=3)
    assert out.getvalue().count("\n") == 1
    assert out.getvalue() == "heal-waiting host=cpu1 by=xheal-done_host=lab9[2J n=3\n"
    assert len(lmcache_heal.clean("y" * 10_000)) == lmcache_heal.MAX_FIELD


# --- the breaker: LMCache's own line, never words a client controls -----------------------

LMCACHE_LINES = [
    BREAKER,
    "\x1b[31;20m[2026-12-06 10:00:00,123] LMCache ERROR:\x1b[0m S3 connection disabled after 3 "
    "consecutive failures. All future S3 operations will be skipped. \x1b[3m(s3_connector.py:"
    "697:lmcache.v1.storage_backend.connector.s3_connector)\x1b[0m",
    # without colors, and behind journalctl's short prefix
    "2026-12-06T10:00:00+0000 lab3 python3[812]: [2026-12-06 10:00:00,123] LMCache ERROR: "
    "S3 connection disabled after 3 consecutive failures. All future S3 operations will be "
    "skipped. (s3_connector.py:697:lmcache.v1.storage_backend.connector.s3_connector)",
]
ECHOED = [
    # vLLM's request logging (--enable-log-requests) echoing a client's prompt
    "(APIServer pid=812) INFO 12-06 10:00:00 [logger.py:43] Received request cmpl-1: prompt: "
    f"{LMCACHE_LINES[2].split(': ', 1)[1]!r}, params: SamplingParams(n=1)",
    "INFO 12-06 10:00:00 [logger.py:43] Received request cmpl-1: prompt: 'S3 connection "
    "disabled after 3 consecutive failures', params: SamplingParams(n=1)",
    "2026-12-06T10:00:00+0000 lab3 python3[812]: INFO 12-06 10:00:00 [logger.py:43] prompt: "
    f"{BREAKER!r}",
    # LMCache's words from another logger or at another level
    "[2026-12-06 10:00:00,123] LMCache INFO: S3 connection disabled after 3 consecutive "
    "failures. All future S3 operations will be skipped. (x.py:1:lmcache.v1.other)",
]


def test_the_breaker_pattern_matches_lmcaches_line_and_not_an_echo() -> None:
    from deploy_kit.core.patterns import BREAKER as PATTERN

    rule = re.compile(PATTERN)
    assert [bool(rule.search(line)) for line in LMCACHE_LINES] == [True] * 3
    assert [bool(rule.search(line)) for line in ECHOED] == [False] * len(ECHOED)


@pytest.mark.parametrize("awk", ["mawk", "gawk", "awk", "busybox"])
def test_the_breaker_pattern_is_an_awk_ere(awk: str, tmp_path: Path) -> None:
    """verify's probe and the event counter read it with awk (serving_probe.py)."""
    import shutil

    from deploy_kit.core.patterns import BREAKER as PATTERN

    if shutil.which(awk) is None:
        pytest.skip(f"no {awk} here")
    argv = [awk] + (["awk"] if awk == "busybox" else [])
    text = "".join(line + "\n" for line in LMCACHE_LINES + ECHOED)
    found = subprocess.run([*argv, f"/{PATTERN}/ {{ print NR }}"], input=text.encode(),
                           capture_output=True, check=True).stdout.split()
    assert found == [b"1", b"2", b"3"]


def test_an_echoed_breaker_line_restarts_nothing(cpu_server: Agent) -> None:
    for line in ECHOED:
        cpu_server.logs("lmcache-server", line)
    assert cpu_server.run() == [] and cpu_server.restarts() == []


# --- slots: several hosts at once; heals ahead of scheduled restarts ----------------------

def test_a_free_slot_is_taken_beside_held_ones(cpu_server: Agent) -> None:
    """Three slots, two held by other hosts: this host restarts in the third."""
    cpu_server.config["slots"] = 3
    cpu_server.hold_lease("gpu-2", expires_in=600, slot="restart-0", reason="scheduled")
    cpu_server.hold_lease("gpu-3", expires_in=600, slot="restart-2", reason="scheduled")
    out = cpu_server.run("restart")
    assert [line.split()[0] for line in out] == ["heal-start", "heal-done"], out
    assert "slot=restart-1" in out[0]
    assert cpu_server.lease("restart-1")["released_by"] == "cpu1"
    assert cpu_server.lease("restart-0")["host"] == "gpu-2"


def test_every_slot_held_waits(cpu_server: Agent) -> None:
    cpu_server.config.update(slots=2, lock_wait=0.3)
    for k in (0, 1):
        cpu_server.hold_lease(f"gpu-{k}", expires_in=600, slot=f"restart-{k}",
                              reason="scheduled")
    out = cpu_server.run("restart")
    assert cpu_server.restarts() == [] and "reason=lease-held" in out[0], out


def test_a_slot_beyond_the_pool_holds_nothing(cpu_server: Agent) -> None:
    """A record in `heal-5` of a one-slot pool (another host's old settings, or planted) is
    not a slot of this host's lease."""
    cpu_server.logs("lmcache-server", BREAKER)
    cpu_server.hold_lease("other", expires_in=600, slot="heal-5")
    assert cpu_server.run()[0].startswith("heal-start")


def test_a_breaker_heal_never_waits_for_scheduled_restarts(cpu_server: Agent) -> None:
    """Every scheduled slot held (the daily roll): a tripped host heals at once, in the heal
    pool."""
    cpu_server.config["slots"] = 2
    for k in (0, 1):
        cpu_server.hold_lease(f"gpu-{k}", expires_in=3000, slot=f"restart-{k}",
                              reason="scheduled")
    cpu_server.logs("lmcache-server", BREAKER)
    started = time.monotonic()
    out = cpu_server.run()
    assert [line.split()[0] for line in out] == ["heal-start", "heal-done"], out
    assert time.monotonic() - started < 2 and cpu_server.restarts() == ["lmcache-server"]
    assert "slot=heal-" in out[0]


def test_a_scheduled_restart_yields_to_a_heal(cpu_server: Agent) -> None:
    """A heal holds a slot (any host's): no scheduled restart starts until it is free."""
    cpu_server.config.update(slots=2)
    cpu_server.hold_lease("gpu-7", expires_in=1.5, slot="heal-1")
    out = cpu_server.run("restart")
    assert out[0].startswith("heal-waiting") and "reason=heal-first" in out[0], out
    assert "by=gpu-7" in out[0]
    assert [line.split()[0] for line in out[1:]] == ["heal-start", "heal-done"], out
    assert "reason=scheduled" in out[1]


def test_a_waiting_scheduled_restart_leaves_this_hosts_heal_free(
        cpu_server: Agent, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the scheduled restart waits for a slot it does not hold this host's lock, so
    the heal timer's run (which takes it without waiting) is never turned away."""
    cpu_server.config.update(lock_wait=0.5)
    cpu_server.hold_lease("gpu-2", expires_in=600, slot="restart-0", reason="scheduled")
    free: list[bool] = []
    sleep = time.sleep

    def probe(seconds: float) -> None:
        with open(cpu_server.config["local_lock"], "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                free.append(True)
            except BlockingIOError:
                free.append(False)
        sleep(seconds)

    monkeypatch.setattr(lmcache_heal.time, "sleep", probe)
    cpu_server.run("restart")
    assert free and all(free), free


@pytest.mark.parametrize(("hosts", "slots"), [
    (1, 1), (9, 1), (10, 1), (11, 2), (40, 4), (400, 40), (3, 1),
])
def test_slots_are_sized_from_the_hosts_sharing_the_lease(hosts: int, slots: int) -> None:
    assert lease.sized_slots(hosts) == slots


def test_the_render_sizes_the_slots_from_the_hosts_sharing_the_lease(
        make_inventory: InventoryFactory) -> None:
    hosts = {"all": {"children": {**CPU_TWO_INSTANCES["all"]["children"], "vllm": {
        "hosts": {f"gpu{i}": {"ansible_host": f"10.0.1.{i}"} for i in range(1, 24)},
        "vars": {"vllm_accelerator": "cuda", "lmcache_topology": "inprocess",
                 "vllm_model": "Qwen/Qwen3-8B"}}}}}
    site = open_site(str(make_inventory(hosts=hosts)))
    config = self_heal.agent_config(site, site.hosts["gpu1"])
    assert (config["slots"], config["domain"]) == (3, "site")  # 23 hosts: ceil(23 / 10)
    hosts["all"]["children"]["vllm"]["vars"]["lmcache_scheduled_restart_slots"] = 5
    site = open_site(str(make_inventory(hosts=hosts)))
    assert self_heal.agent_config(site, site.hosts["gpu7"])["slots"] == 5


def test_the_reregistration_pattern_matches_lmcaches_line_and_not_an_echo() -> None:
    from deploy_kit.core.patterns import REREGISTERED as PATTERN

    rule = re.compile(PATTERN)
    plain = REREGISTERED.split(") ", 1)[1]  # without vLLM's worker prefix
    assert rule.search(REREGISTERED) and rule.search(plain)
    assert rule.search(f"2026-12-06T10:00:40+0000 gpu1 python3[812]: {plain}")
    echo = ("(APIServer pid=812) INFO 12-06 10:00:00 [logger.py:43] Received request cmpl-1: "
            f"prompt: {plain!r}, params: SamplingParams(n=1)")
    assert not rule.search(echo)
