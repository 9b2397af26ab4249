"""The serving identities: each reads and writes its own model's objects, and RGW refuses it
every change to the bucket (policy, lifecycle, the bucket itself), the deletion of a chunk,
and every read, write and listing of another model's keys."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.verify.model import Finding, Observation, Status, check

CHECK = "s3-serving-least-privilege"


@check(CHECK, tags=("s3", "lmcache"),
       summary="the serving hosts' S3 identity gets and puts cache objects and is refused "
               "every bucket-level change (403)")
def least_privilege(obs: Observation) -> Iterator[Finding]:
    p = obs.privilege
    if p is None and obs.teams_serving and \
            set(obs.host_buckets.values()) <= set(obs.teams.values()):
        yield Finding(CHECK, Status.SKIP, "site",
                      "every serving host is a team's: a team's identity owns its whole "
                      "bucket, and team-isolation checks it against the others'")
        return
    if p is None:
        return  # no serving host's profile signed a request: s3-credentials-valid says why
    target = f"{p.credentials_from} → {p.address}"
    if p.error is not None:
        yield Finding(CHECK, Status.FAIL, target, f"no answer: {p.error}",
                      "is that gateway up and reachable from the controller?")
        return
    if (p.put, p.get) != (200, 200):
        yield Finding(CHECK, Status.FAIL, target,
                      f"the serving identity cannot use the cache: PUT {p.put} GET {p.get}",
                      "rerun `deploykit up` (it writes the bucket policy that grants them)")
    if p.head_missing != 403:
        yield Finding(CHECK, Status.FAIL, target,
                      f"HEAD of a missing key answered {p.head_missing}, not 403: the identity "
                      "holds s3:ListBucket beyond listings of its own model's keys, so a 404 "
                      "for a missing key and a 403 for a stored one tell it which keys other "
                      "models hold", "rerun `deploykit up` (it writes the per-model policy)")
    accepted = {op: status for op, status in p.refused.items() if status != 403}
    if "DeleteBucket" not in p.refused:
        accepted["DeleteBucket"] = None  # not sent: no object of its own kept the bucket safe
    if accepted:
        shown = ", ".join(f"{op} {'not tried' if s is None else f'HTTP {s}'}"
                          for op, s in sorted(accepted.items()))
        yield Finding(CHECK, Status.FAIL, target,
                      f"the serving identity was not refused: {shown} (403 expected; the "
                      "requests were harmless, a refusal proves the rights)",
                      "the serving hosts hold keys with bucket rights (the owner's?): rerun "
                      "`deploykit up`, which gives them the serving identity's")
    if (p.put, p.get, p.head_missing) == (200, 200, 403) and not accepted:
        yield Finding(CHECK, Status.PASS, target,
                      "objects PUT/GET; refused (403): a missing key, "
                      + ", ".join(sorted(p.refused)))


ISOLATION = "s3-serving-model-isolation"


@check(ISOLATION, tags=("s3", "lmcache"),
       summary="each model's S3 identity is refused (403) every read, write and listing of "
               "another model's keys, and lists its own")
def model_isolation(obs: Observation) -> Iterator[Finding]:
    for p in obs.isolation:
        target = f"{p.identity} ({p.credentials_from}) → {p.other}"
        if p.error is not None:
            yield Finding(ISOLATION, Status.FAIL, target, f"no answer: {p.error}",
                          "is that gateway up and reachable from the controller?")
            continue
        allowed = {op: s for op, s in p.refused.items() if s != 403}
        if allowed:
            shown = ", ".join(f"{op} HTTP {s}" for op, s in sorted(allowed.items(),
                                                                     key=str))
            yield Finding(ISOLATION, Status.FAIL, target,
                          f"not refused on the other model's keys ({p.other_prefix}…): {shown} "
                          "(403 expected; the PUT carried an invalid digest, so nothing was "
                          "written)",
                          "rerun `deploykit up` (it writes the per-model bucket policy); if "
                          "it persists, this host holds another identity's keys: `deploykit "
                          "secrets rotate s3`")
        if p.own_list != 200:
            yield Finding(ISOLATION, Status.FAIL, target,
                          f"cannot list its own model's keys ({p.own_prefix}…): HTTP "
                          f"{p.own_list}", "rerun `deploykit up` (it writes the bucket policy)")
        if not allowed and p.own_list == 200:
            yield Finding(ISOLATION, Status.PASS, target,
                          f"refused (403) {', '.join(p.refused)} on {p.other_prefix}…; "
                          f"lists its own {p.own_prefix}…")
