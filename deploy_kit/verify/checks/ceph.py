"""Ceph: pools as planned and the RGW daemons running."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.verify.model import Finding, Observation, Status, check


@check("ceph-pools", tags=("ceph",), summary="pools exist with the planned PGs, size, "
       "min_size and application rgw")
def pools(obs: Observation) -> Iterator[Finding]:
    if obs.pools is None:
        if obs.ceph_error:
            yield Finding("ceph-pools", Status.FAIL, "ceph_admin",
                          f"cannot read the cluster: {obs.ceph_error}",
                          "check deploykit_ceph_conf and the admin keyring on ceph_admin")
        return
    have = {p["pool_name"]: p for p in obs.pools}
    for want in obs.expected_pools:
        pool = have.get(want["name"])
        if pool is None:
            yield Finding("ceph-pools", Status.FAIL, want["name"], "pool missing",
                          "rerun `deploykit up` (pools must exist before any gateway)")
            continue
        diffs = [f"{k} {pool.get(src)} (planned {want[k]})" for k, src in
                 (("pg_num", "pg_num"), ("size", "size"), ("min_size", "min_size"))
                 if pool.get(src) != want[k]]
        if want.get("application", "rgw") not in pool.get("application_metadata", {}):
            diffs.append("application rgw not enabled")
        if diffs:
            yield Finding("ceph-pools", Status.FAIL, want["name"], "; ".join(diffs),
                          "rerun `deploykit up`")
        else:
            yield Finding("ceph-pools", Status.PASS, want["name"], "as planned")


@check("ceph-rgw-daemons", tags=("ceph",), summary="every planned RGW daemon is up")
def daemons(obs: Observation) -> Iterator[Finding]:
    if obs.rgw_daemons is None:
        return
    status = Status.PASS if obs.rgw_daemons >= obs.expected_rgw_daemons else Status.FAIL
    yield Finding("ceph-rgw-daemons", status, "rgw",
                  f"{obs.rgw_daemons} of {obs.expected_rgw_daemons} gateways active",
                  "" if status == Status.PASS else "systemctl status ceph-radosgw@* on the hosts")
