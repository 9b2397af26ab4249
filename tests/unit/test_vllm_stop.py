"""vllm.service's ExecStop, run by sh against real processes: SIGTERM, wait while the
engine process lives (it drains), kill an API server that outlives its engine by the grace."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy_kit.ops.site import open_site
from deploy_kit.render.vllm import host_instances, render_unit
from tests.conftest import CPU_TWO_INSTANCES, InventoryFactory

# main: ignores SIGTERM (vLLM's handler), runs an "engine" child named like vLLM's
# (comm VLLM::EngineCor) that exits ENGINE_S after the SIGTERM; then main hangs
# (HANG=1: the API server waiting on a request its engine never answers) or exits.
API_SERVER = """
import os, signal, subprocess, sys, time
engine = subprocess.Popen([sys.argv[1], "3600"])
def term(*_):
    time.sleep(float(os.environ["ENGINE_S"]))
    engine.kill(); engine.wait()
    if os.environ["HANG"] == "0":
        sys.exit(0)
signal.signal(signal.SIGTERM, term)
while True:
    time.sleep(0.1)
"""


def exec_stop(make_inventory: InventoryFactory, grace: int) -> str:
    site = open_site(str(make_inventory(CPU_TWO_INSTANCES)))
    host = next(h for h in site.hosts.values() if host_instances(h))
    unit = render_unit(host, host_instances(host)[0])
    line = next(x for x in unit.splitlines() if x.startswith("ExecStop="))
    script = re.fullmatch(r"ExecStop=/bin/sh -c '(.*)'", line)
    assert script, line
    # systemd turns $$ into $; the grace is shortened for the test
    return script.group(1).replace("$$", "$").replace("-ge 10", f"-ge {grace}")


def stop(tmp_path: Path, script: str, engine_s: float, hang: bool) -> tuple[float, int]:
    engine = tmp_path / "VLLM::EngineCore"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", engine)
    main = subprocess.Popen([sys.executable, "-c", API_SERVER, str(engine)],
                            env={**os.environ, "ENGINE_S": str(engine_s),
                                 "HANG": "1" if hang else "0"})
    deadline = time.monotonic() + 10
    while not subprocess.run(["pgrep", "-P", str(main.pid)], capture_output=True).stdout:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    started = time.monotonic()
    subprocess.run(["sh", "-c", script], env={**os.environ, "MAINPID": str(main.pid)},
                   check=True, timeout=60)
    main.wait(timeout=5)
    return time.monotonic() - started, main.returncode


@pytest.mark.skipif(not shutil.which("pgrep"), reason="procps's pgrep")
def test_an_api_server_hung_after_its_engine_left_is_killed_after_the_grace(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    script = exec_stop(make_inventory, grace=2)
    seconds, code = stop(tmp_path, script, engine_s=3, hang=True)
    assert code == -signal.SIGKILL
    assert seconds >= 3 + 1  # never while the engine drains; then a grace of whole seconds


@pytest.mark.skipif(not shutil.which("pgrep"), reason="procps's pgrep")
def test_a_clean_exit_after_the_drain_is_left_alone(make_inventory: InventoryFactory,
                                                    tmp_path: Path) -> None:
    script = exec_stop(make_inventory, grace=2)
    _, code = stop(tmp_path, script, engine_s=1, hang=False)
    assert code == 0  # exited by itself: never killed
