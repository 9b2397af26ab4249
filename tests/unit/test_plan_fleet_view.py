"""`plan` of a large site stays readable: host lists as Ansible ranges, one serving-host row
per set of identical hosts, one warning line per message; lossless (Ansible's own range
expansion gives every host back) and `--per-host` still lists each one."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from ansible.plugins.inventory import expand_hostname_range

from deploy_kit.core.hostlist import compact_hosts, merge_per_host
from tests.cli import run_cli
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
from fleet_site import generate


def expand(text: str) -> list[str]:
    """A compact_hosts list back into names, by Ansible's inventory range expansion."""
    names: list[str] = []
    for part in text.split(", "):
        names += expand_hostname_range(part) if "[" in part else [part]
    return names


@pytest.mark.parametrize("names", [
    ["gpu01", "gpu02", "gpu03", "gpu05", "gpu06", "gpu08", "gpu09", "gpu10"],
    ["a1", "a10", "a2", "b", "a3", "x-9-y", "x-10-y", "x-11-y", "lab3", "lab4"],
    ["n0099", "n0100", "n0101", "n99", "n100"],  # widths differ: separate runs
    ["only"],
    [],
])
def test_compact_hosts_is_lossless_by_ansible_expansion(names: list[str]) -> None:
    text = compact_hosts(names)
    assert sorted(expand(text) if text else []) == sorted(names)


def test_compact_hosts_shapes() -> None:
    assert compact_hosts([f"gpu{i:03d}" for i in range(1, 129)]) == "gpu[001:128]"
    assert compact_hosts(["lab1", "lab2"]) == "lab1, lab2"  # two read better as two
    assert compact_hosts(["n1", "n2", "n3", "n7"]) == "n[1:3], n7"


def test_merge_per_host_folds_only_lines_naming_one_host() -> None:
    hosts = [f"h{i}" for i in range(1, 5)]
    lines = ["torch pin (h1): fix", "torch pin (h2): fix", "torch pin (h4): fix",
             "site-wide", "pair h1 h2"]
    assert merge_per_host(lines, hosts) == ["torch pin (h1, h2, h4): fix", "site-wide",
                                           "pair h1 h2"]
    # a host name inside a longer token is not that host
    assert merge_per_host(["x (h10): y", "x (h1): y"], ["h1"]) == ["x (h10): y", "x (h1): y"]


def test_plan_of_a_thousand_hosts_is_per_group(tmp_path: Path) -> None:
    site = generate(tmp_path / "site", 1000)
    folded = run_cli("plan", "-i", str(site))
    assert folded.returncode == 0, folded.stderr
    lines = folded.stdout.splitlines()
    assert len(lines) < 120, len(lines)  # was 4,224 lines: every host four times
    serving = {n for n in re.findall(r"\b(?:cuda|rocm|gaudi)-\d{5}\b", (site / "hosts.yml")
                                     .read_text())}
    assert len(serving) == 1000
    rollout = next(line for line in lines if re.match(r"\s+\d+\. vllm", line))
    assert set(expand(rollout.split(": ", 1)[1])) == serving
    rows = [line for line in lines if re.match(r"│ (cuda|rocm|gaudi)-\[", line)]
    assert len(rows) == 3, rows  # one per accelerator group: their hosts are identical
    assert sum(int(re.search(r"\((\d+)\)", r).group(1)) for r in rows) == 1000
    assert sum("torch 2.13" in line for line in lines) <= 3

    per_host = run_cli("plan", "-i", str(site), "--per-host")
    assert per_host.returncode == 0, per_host.stderr
    assert len([line for line in per_host.stdout.splitlines()
                if re.match(r"│ (cuda|rocm|gaudi)-\d{5} ", line)]) == 1000
