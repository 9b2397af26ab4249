"""A stopped vLLM is a verify FAIL naming its host, and its unit leaves no KV segment behind."""

from __future__ import annotations

import json

import pytest

from tests.lab.conftest import Lab
from tests.lab.vllm_http import (
    SERVING,
    wait_healthy,
)

pytestmark = pytest.mark.lab


SEGMENT_OWNERS = r"""for f in /dev/shm/lmcache_kv_*; do
  [ -e "$f" ] || continue
  p=${f#/dev/shm/lmcache_kv_}; p=${p%%_*}
  if [ -d "/proc/$p" ]; then echo "$f $(cat /proc/$p/comm) alive"; else echo "$f gone"; fi
done"""


def test_stopped_vllm_fails_verify_naming_the_host(converged: Lab) -> None:
    address = SERVING["lab4"]
    converged.ssh(address, "systemctl stop vllm")
    try:
        # the unit's ExecStopPost removed vLLM's KV segment (it leaks a GiB per stop): no
        # lmcache_kv_<pid>_<n> is left whose process is gone. A segment whose owner lives is
        # not vLLM's (the unit's processes are all gone when ExecStopPost runs): it is named,
        # with its owner, in the message of any failure.
        segments = converged.ssh(address, SEGMENT_OWNERS).splitlines()
        assert not [line for line in segments if line.endswith(" gone")], segments
        result = converged.deploykit("verify", "--inventory", "lab", "--json", check=False)
        findings = json.loads(result.stdout)["findings"]
        assert result.returncode == 6
        failed = [f for f in findings if f["check"] == "vllm-service" and f["status"] == "fail"]
        assert [f["target"] for f in failed] == ["lab4"], failed
    finally:
        # the LMCache server dropped the stopped vLLM's KV registration; start both fresh
        converged.ssh(address, "systemctl restart lmcache-server && systemctl start vllm")
        wait_healthy(address, timeout=600)


