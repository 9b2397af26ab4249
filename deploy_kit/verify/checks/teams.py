"""Teams on one tier: each team's identity is refused every other team's bucket and uses its
own; where LMCache encrypts its L2, what is stored is an AES-GCM frame; and each team's
clients (its cache_salt) get hits (pure: judges probes/team_probe.py and the cache probe)."""

from __future__ import annotations

from collections.abc import Iterator

from deploy_kit.verify.model import Finding, Observation, Status, check

ISOLATION = "team-isolation"
ENCRYPTION = "encryption"
TEAM_HITS = "team-cache-hit"

FIX_POLICY = ("rerun `deploykit up` (it writes each team's bucket policy); if it persists, "
              "this host holds another team's keys: `deploykit secrets rotate s3`")


@check(ISOLATION, tags=("s3", "lmcache"),
       summary="each team's S3 identity is refused (403) GET, PUT and LIST on every other "
               "team's bucket, and uses its own")
def team_isolation(obs: Observation) -> Iterator[Finding]:
    if len(obs.teams) < 2:  # nothing skipped: nothing between teams to hold
        yield Finding(ISOLATION, Status.INFO, "site",
                      f"the site has {len(obs.teams)} team(s): isolation between teams "
                      "needs two")
        return
    probed = {p.team for p in obs.team_isolation}
    for team in sorted(set(obs.teams) - probed):
        why = ("no serving host's keys could be read (see s3-credentials-valid)"
               if team in obs.teams_serving else "it has no serving host")
        yield Finding(ISOLATION, Status.SKIP, f"team {team}", f"not probed: {why}")
    for p in obs.team_isolation:
        target = f"team {p.team} ({p.credentials_from})"
        if p.error is not None:
            yield Finding(ISOLATION, Status.FAIL, target, f"no answer: {p.error}",
                          "is that gateway up and reachable from the controller?")
            continue
        denied_own = {op: s for op, s in p.own.items() if s is None or not 200 <= s < 300}
        if denied_own:
            yield Finding(ISOLATION, Status.FAIL, target,
                          f"team {p.team} cannot use its own bucket {p.bucket}: "
                          + ", ".join(f"{op} HTTP {s}" for op, s in denied_own.items()),
                          "rerun `deploykit up` (it writes each team's bucket policy)")
        allowed = [(other, bucket, op, s) for other, (bucket, ops) in sorted(p.refused.items())
                   for op, s in ops.items() if s != 403]
        for other, bucket, op, s in allowed:
            yield Finding(ISOLATION, Status.FAIL, f"{target} → team {other}",
                          f"team {p.team}'s identity was not refused {op} on team {other}'s "
                          f"bucket {bucket}: HTTP {s} (403 expected; a GET of a missing key, "
                          "a PUT with an invalid digest: nothing was read or written)",
                          FIX_POLICY)
        if not denied_own and not allowed:
            yield Finding(ISOLATION, Status.PASS, target,
                          f"its bucket {p.bucket}: " + ", ".join(p.own) + "; refused (403) "
                          "GET, PUT, LIST on " + ", ".join(
                              f"team {t}'s {b}" for t, (b, _) in sorted(p.refused.items())))


@check(ENCRYPTION, tags=("s3", "lmcache"),
       summary="where lmcache_l2_encryption is on, a stored chunk is an AES-GCM frame "
               "(version byte 0x01, the plaintext chunk + 29 bytes)")
def encryption(obs: Observation) -> Iterator[Finding]:
    if not obs.encrypting:
        yield Finding(ENCRYPTION, Status.INFO, "site", "lmcache_l2_encryption is off on every "
                      "serving host: chunks are stored as plaintext KV")
        return
    covered = {p.credentials_from for p in obs.encryption}
    buckets = {p.bucket for p in obs.encryption}
    for host, bucket in sorted(obs.encrypting.items()):
        if host not in covered and bucket not in buckets:
            yield Finding(ENCRYPTION, Status.SKIP, host,
                          f"not probed: no S3 keys read from the host (bucket {bucket})")
    for p in obs.encryption:
        target = f"{p.bucket}: {p.prefix}… ({p.credentials_from})"
        if p.error is not None:
            yield Finding(ENCRYPTION, Status.FAIL, target, f"no stored chunk read: {p.error}",
                          "see s3-credentials-valid; the host's identity must list its keys")
            continue
        if p.key is None:
            yield Finding(ENCRYPTION, Status.SKIP, target,
                          "no chunk stored yet: send the model a prompt of a full chunk, "
                          "then verify again")
            continue
        expected = None if p.plaintext_bytes is None else p.plaintext_bytes + 29
        wrong = []
        if p.first_byte != 0x01:
            wrong.append(f"its first byte is {p.first_byte:#04x}, not the frame's version "
                         "0x01" if p.first_byte is not None else "its first byte was not read")
        if expected is not None and p.size != expected:
            wrong.append(f"{p.size:,} bytes, not {expected:,} (the plaintext chunk "
                         f"{p.plaintext_bytes:,} + 29)")
        if wrong:
            yield Finding(ENCRYPTION, Status.FAIL, target,
                          f"{p.key} is not an AES-GCM frame: " + "; ".join(wrong),
                          "the LMCache server stores plaintext: check the unit's --l2-adapter "
                          "`serde` and restart it (`deploykit up`); chunks stored before "
                          "encryption was on stay until the lifecycle expires them")
        else:
            size = f"{p.size:,} bytes = {p.plaintext_bytes:,} + 29" if expected is not None \
                else f"{p.size:,} bytes (no geometry to size the plaintext)"
            yield Finding(ENCRYPTION, Status.PASS, target,
                          f"{p.key}: version byte 0x01, {size}")


@check(TEAM_HITS, tags=("lmcache", "vllm"),
       summary="each team's clients (its cache_salt) get hits: the cache probe per team")
def team_hits(obs: Observation) -> Iterator[Finding]:
    if not obs.teams_serving:
        yield Finding(TEAM_HITS, Status.INFO, "site", "no serving host is a team's: "
                      "lmcache-cache-hit covers every host")
        return
    teams: dict[str, list[tuple[str, int, int]]] = {}
    for p in obs.cache:
        if p.team is None or not p.serving or p.error:
            continue  # lmcache-cache-hit says why
        got = max(p.second_external or 0, p.other_external or 0, p.sibling_external or 0)
        teams.setdefault(p.team, []).append((p.host, got, p.expected_hit_tokens))
    for team, probes in sorted(teams.items()):
        got = sum(g for _, g, _ in probes)
        expected = sum(e for _, _, e in probes)
        ratio = f"{got:,} of {expected:,} repeated tokens from LMCache" + (
            f" ({100 * got / expected:.0f}%)" if expected else "")
        hosts = ", ".join(h for h, _, _ in probes)
        if got:
            yield Finding(TEAM_HITS, Status.PASS, f"team {team}",
                          f"with the team's cache_salt: {ratio} on {hosts}")
        else:
            yield Finding(TEAM_HITS, Status.FAIL, f"team {team}",
                          f"with the team's cache_salt: {ratio} on {hosts}",
                          "the LMCache server evicts a salt without a quota: journalctl -u "
                          "lmcache-server for 'over quota' and the quota line at its start; "
                          "see lmcache-cache-hit")
