"""verify never reports green for a selection that names nothing, nor for hosts it could not
reach: unknown --check ids and --limit terms are usage errors (exit 2) listing what exists,
raised before any host is contacted. (Unreachable hosts: tests/integration/test_transport.py.)"""

from __future__ import annotations

import time

import pytest

from deploy_kit.config.selection import SelectionError, check_ids, limited_hosts
from deploy_kit.ops.site import open_site
from tests.cli import run_cli
from tests.conftest import InventoryFactory


def test_check_ids_refuse_unknown_names_and_list_the_known_ones() -> None:
    assert check_ids(None, ["a"]) is None
    assert check_ids(["a", "lmcache-roundtrip"], ["a", "b"]) == {"a", "lmcache-roundtrip"}
    with pytest.raises(SelectionError, match=r"no check named nope; checks: a, b, lmcache-"):
        check_ids(["a", "nope"], ["a", "b"])


def test_limit_takes_names_groups_and_globs_and_refuses_a_term_matching_nothing(
        make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory()))
    assert limited_hosts(site, "gpu1") == {"gpu1"}
    assert limited_hosts(site, "vllm") == {"gpu1", "gpu2"}
    assert limited_hosts(site, "rgw*,gpu2") == {"rgw1", "rgw2", "gpu2"}
    assert limited_hosts(site, "rgw:dns") == {"rgw1", "rgw2", "dns1"}
    with pytest.raises(SelectionError, match=r"--limit 'vllm_cuda' matches no host; hosts: "
                                             r"adm1, c1, .*groups: ceph_admin, consul_servers"):
        limited_hosts(site, "gpu1,vllm_cuda")


def test_verify_refuses_an_unknown_check_and_an_empty_limit_with_exit_2(
        make_inventory: InventoryFactory) -> None:
    inventory = str(make_inventory())  # 10.0.x hosts: a contacted host would take seconds
    started = time.monotonic()
    unknown = run_cli("verify", "-i", inventory, "--check", "no-such-check")
    assert unknown.returncode == 2, unknown
    assert "no check named no-such-check" in unknown.stderr and "s3-roundtrip" in unknown.stderr
    empty = run_cli("verify", "-i", inventory, "--limit", "vllm_cuda")
    assert empty.returncode == 2 and "matches no host" in empty.stderr, empty
    assert time.monotonic() - started < 5  # refused before any probe ran


def test_a_limit_names_the_groups_whose_checks_it_leaves_without_hosts(
        make_inventory: InventoryFactory) -> None:
    """verify --limit: checks whose every host is outside skip, naming the group they need;
    a group with one host inside is read (its checks run on that host)."""
    import deploy_kit.verify.checks  # noqa: F401  (registers the checks)
    from deploy_kit.verify.gather import outside_limit, planned
    from deploy_kit.verify.model import Status, evaluate

    site = open_site(str(make_inventory()))
    assert outside_limit(site, None, consul=True) == {}
    why = outside_limit(site, {"gpu1", "rgw1"}, consul=True)
    assert why == {"ceph": "needs ceph_admin (adm1), outside --limit",
                   "consul": "needs consul_servers (c1), outside --limit",
                   "dns": "needs dns (dns1), outside --limit"}
    assert "consul" not in outside_limit(site, {"gpu1"}, consul=False)
    obs = planned(site)
    obs.outside_limit = why
    found = {f.check: f for f in evaluate(obs, {"ceph-pools", "s3-roundtrip"})}
    assert (found["ceph-pools"].status, found["ceph-pools"].message) == (Status.SKIP, why["ceph"])
    assert found["s3-roundtrip"].message == "nothing to check"  # rgw1 is inside the limit


def test_limit_takes_ansibles_exclusions_intersections_and_regexes(
        make_inventory: InventoryFactory) -> None:
    site = open_site(str(make_inventory()))
    assert limited_hosts(site, "vllm:!gpu2") == {"gpu1"}
    assert limited_hosts(site, "rgw:&rgw1") == {"rgw1"}
    assert limited_hosts(site, "!vllm") == {"adm1", "rgw1", "rgw2", "c1", "dns1"}
    assert limited_hosts(site, "~gpu[12]") == {"gpu1", "gpu2"}
    with pytest.raises(SelectionError, match="matches no host"):
        limited_hosts(site, "vllm:!gpu9")
    with pytest.raises(SelectionError, match="leaves no host"):
        limited_hosts(site, "vllm:&rgw")
    with pytest.raises(SelectionError, match="subscripts"):
        limited_hosts(site, "vllm[0]")
    assert limited_hosts(site, "gpu[!2]") == {"gpu1"}  # a glob class, not a subscript
