"""Runs last in the day-2 session: `deploykit down` asks, stops every service and keeps the
data, then deletes the data only when told in so many words (the lab itself goes down with
the session)."""

from __future__ import annotations

import pytest

from tests.lab.conftest import Lab, ceph

pytestmark = pytest.mark.lab


def test_deploykit_down_removes_services_and_confirmed_data(converged: Lab) -> None:
    unasked = converged.deploykit("down", "--inventory", "lab", check=False)  # no terminal
    assert unasked.returncode == 2 and "pass --yes" in unasked.stderr, unasked.stderr
    assert converged.ssh("10.99.0.11", "systemctl is-active haproxy").strip() == "active"
    keep = converged.deploykit("down", "--inventory", "lab", "--yes")  # data kept
    assert keep.returncode == 0
    assert "default.rgw.buckets.data" in ceph("osd", "pool", "ls")
    states = converged.ssh("10.99.0.11", "systemctl is-active haproxy coredns "
                           "ceph-radosgw@rgw.lab1.0 || true").split()
    assert states == ["inactive"] * 3, states
    gone = converged.deploykit("down", "--inventory", "lab", "--yes-i-really-mean-it")
    assert gone.returncode == 0
    pools = ceph("osd", "pool", "ls").split()
    assert not {"default.rgw.buckets.data", "default.rgw.buckets.index"} & set(pools)
