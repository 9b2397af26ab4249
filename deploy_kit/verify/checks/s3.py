"""S3: concentrators answer, the deployed keys work, a chunk round-trips, lifecycle is set."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.verify.model import Finding, Observation, Status, check


@check("s3-concentrator-reachable", tags=("s3",),
       summary="every RGW host's concentrator answers on the S3 and monitor ports")
def concentrator(obs: Observation) -> Iterator[Finding]:
    for c in obs.concentrators:
        if c.s3_status is None or c.health_status != 200:
            detail = c.error or f"S3 port HTTP {c.s3_status}, /health HTTP {c.health_status}"
            yield Finding("s3-concentrator-reachable", Status.FAIL, c.address,
                          f"concentrator on {c.address} is down: {detail}",
                          "systemctl status haproxy on that host (or the cephadm concentrator)")
        else:
            yield Finding("s3-concentrator-reachable", Status.PASS, c.address,
                          f"S3 HTTP {c.s3_status}, /health 200")


@check("s3-credentials-valid", tags=("s3", "lmcache"),
       summary="the deployed credentials profile signs requests RGW accepts")
def credentials(obs: Observation) -> Iterator[Finding]:
    for p in obs.s3:
        if p.purpose != "auth":
            continue  # a round trip's status is no statement about a host's profile
        target = f"{p.credentials_from} → {p.address}"
        if p.auth_status in (401, 403):
            yield Finding("s3-credentials-valid", Status.FAIL, target,
                          f"RGW answered {p.auth_status} to the profile of {p.credentials_from}",
                          "wrong keys: use the RGW user's keys (radosgw-admin user info), "
                          "not the Ceph admin key; rerun `deploykit up`")
        elif p.auth_status is None:
            yield Finding("s3-credentials-valid", Status.FAIL, target,
                          f"no signed answer: {p.error or 'no credentials profile'}",
                          "is the credentials profile deployed (serving role)?")
        elif p.auth_status == 404:
            yield Finding("s3-credentials-valid", Status.FAIL, target,
                          f"bucket {obs.bucket} does not exist", "rerun `deploykit up`")
        else:
            yield Finding("s3-credentials-valid", Status.PASS, target,
                          f"signed HEAD bucket: HTTP {p.auth_status}")


@check("s3-roundtrip", tags=("s3",),
       summary="PUT/HEAD/GET/DELETE of a chunk-sized object through <bucket>.<fqdn>")
def roundtrip(obs: Observation) -> Iterator[Finding]:
    for p in obs.s3:
        if p.purpose != "roundtrip":
            continue  # s3-credentials-valid judges the signed HEADs
        target = f"{p.host_header} via {p.address}"
        if p.put is None:
            yield Finding("s3-roundtrip", Status.FAIL, target,
                          f"no answer to the PUT: {p.error or 'no response'}",
                          "is that gateway up and reachable from the controller?")
            continue
        ok = (p.put, p.head, p.get) == (200, 200, 200) and p.delete == 204 and p.same
        if ok:
            yield Finding("s3-roundtrip", Status.PASS, target,
                          f"{p.bytes:,} B byte-identical")
        else:
            yield Finding("s3-roundtrip", Status.FAIL, target,
                          f"PUT {p.put} HEAD {p.head} GET {p.get} DELETE {p.delete} "
                          f"identical={p.same}", "see the gateway log on that host")


@check("s3-vhost-routing", tags=("s3", "ceph"),
       summary="RGW routes <bucket>.<fqdn> to the bucket (rgw_dns_name set)")
def vhost(obs: Observation) -> Iterator[Finding]:
    for p in obs.s3:
        if p.anonymous_bucket is None:
            continue
        # the bucket the probed name carries: each host's sharing group's (a team's too)
        suffix = f".{obs.fqdn}"
        bucket = p.host_header[:-len(suffix)] if p.host_header.endswith(suffix) else obs.bucket
        if p.anonymous_bucket == bucket:
            yield Finding("s3-vhost-routing", Status.PASS, p.address,
                          f"{p.host_header} routed to bucket {bucket}")
        else:
            yield Finding("s3-vhost-routing", Status.FAIL, p.address,
                          f"{p.host_header} routed to {p.anonymous_bucket or 'no bucket'}",
                          f"set rgw_dns_name = {obs.fqdn} on every gateway (LMCache sends "
                          "virtual-hosted requests only)")


def _normalise(rules: list[dict[str, object]]) -> list[dict[str, object]]:
    out = []
    for rule in rules:
        r = dict(rule)
        if "Prefix" in r and "Filter" not in r:
            r["Filter"] = {"Prefix": r.pop("Prefix")}
        out.append(r)
    return sorted(out, key=lambda r: str(r.get("ID")))


@check("s3-bucket-lifecycle", tags=("s3",), severity="warning",
       summary="the bucket expires cache objects as planned")
def lifecycle(obs: Observation) -> Iterator[Finding]:
    # the admin host's read (owner rights); else a round trip's (verify --limit)
    seen = [obs.lifecycle] if obs.lifecycle is not None else \
        [p.lifecycle for p in obs.s3 if p.lifecycle is not None][:1]
    for rules in seen:
        if _normalise(rules or []) == _normalise(obs.expected_lifecycle["Rules"]):
            yield Finding("s3-bucket-lifecycle", Status.PASS, obs.bucket, "lifecycle as planned")
        else:
            yield Finding("s3-bucket-lifecycle", Status.FAIL, obs.bucket,
                          f"lifecycle differs: {rules}", "rerun `deploykit up`")
