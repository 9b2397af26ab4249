"""TLS at the concentrators (deploykit_s3_tls): chain, names and expiry as a client sees them."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.verify.model import Finding, Observation, Status, check

WARN_DAYS = 30  # the same window in which `deploykit up` reissues (deploy_kit/render/tls.py)


@check("s3-tls-certificate", tags=("s3", "tls"),
       summary="every concentrator's certificate verifies against the site CA for "
               "<bucket>.<fqdn>, names <fqdn> and *.<fqdn>, and is not about to expire")
def certificate(obs: Observation) -> Iterator[Finding]:
    if not obs.pinned.get("tls") and not obs.tls:
        # not skipped for want of data: the site chose plain HTTP, say so
        yield Finding("s3-tls-certificate", Status.INFO, "site",
                      "deploykit_s3_tls is false: the S3 name is served over plain HTTP")
        return
    for t in obs.tls:
        target = f"{t.address}:{t.port}"
        if t.handshake_error:
            yield Finding("s3-tls-certificate", Status.FAIL, target,
                          f"no TLS handshake with SNI {t.sni}: {t.handshake_error}",
                          "does HAProxy bind the S3 port with `ssl crt`? rerun `deploykit up`")
            continue
        problems = []
        if t.verify_error:
            problems.append(f"does not verify against the site CA: {t.verify_error}")
        wanted = [obs.fqdn, f"*.{obs.fqdn}"]
        missing = [n for n in wanted if n not in t.dns_sans]
        if missing:
            problems.append(f"SANs {t.dns_sans} lack {', '.join(missing)}")
        if t.days_left is not None and t.days_left < 0:
            problems.append(f"expired on {t.not_after}")
        if problems:
            yield Finding("s3-tls-certificate", Status.FAIL, target, "; ".join(problems),
                          "rerun `deploykit up` (it reissues from the site CA) and check "
                          "that the serving hosts trust that CA")
        elif t.days_left is not None and t.days_left < WARN_DAYS:
            yield Finding("s3-tls-certificate", Status.WARN, target,
                          f"expires in {t.days_left:.0f} days ({t.not_after})",
                          "rerun `deploykit up`: it reissues certificates within 30 days")
        else:
            yield Finding("s3-tls-certificate", Status.PASS, target,
                          f"verified for {t.sni} by {t.issuer}; SANs {', '.join(t.dns_sans)}; "
                          f"valid until {t.not_after}")
