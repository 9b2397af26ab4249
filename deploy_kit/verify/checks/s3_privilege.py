"""The serving identity: it reads and writes the cache's objects, and RGW refuses it every
change to the bucket (policy, lifecycle, the bucket itself) and the deletion of a chunk."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.verify.model import Finding, Observation, Status, check

CHECK = "s3-serving-least-privilege"


@check(CHECK, tags=("s3", "lmcache"),
       summary="the serving hosts' S3 identity gets and puts cache objects and is refused "
               "every bucket-level change (403)")
def least_privilege(obs: Observation) -> Iterator[Finding]:
    p = obs.privilege
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
    if p.head_missing != 404:
        yield Finding(CHECK, Status.FAIL, target,
                      f"HEAD of a missing key answered {p.head_missing}, not 404 (a lookup "
                      "miss reads as an auth failure)",
                      "rerun `deploykit up`: the bucket policy grants s3:ListBucket")
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
    if (p.put, p.get, p.head_missing) == (200, 200, 404) and not accepted:
        yield Finding(CHECK, Status.PASS, target,
                      "objects PUT/GET, missing key 404; refused (403): "
                      + ", ".join(sorted(p.refused)))
