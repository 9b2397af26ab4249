"""Two teams on the healthy site (test_checks.healthy): each identity uses its own bucket and
is refused the other's, gpu1's bucket encrypts (a stored chunk is a frame), and each team's
cache probe got hits with its salt; and the breakages each team check fails on."""

from __future__ import annotations

from collections.abc import Callable

from deploy_kit.config.models import HostConfig
from deploy_kit.core.geometry import find_preset
from deploy_kit.render.lmcache import object_bytes
from deploy_kit.verify.model import EncryptionProbe, Observation, TeamIsolationProbe

BUCKETS = {"alpha": "lmcache-alpha", "beta": "lmcache-beta"}
# one Qwen3-8B chunk object (256 tokens, TP 1, bf16): 36 x 2 x 8 x 128 x 2 B x 256
PLAINTEXT = object_bytes(HostConfig(vllm_accelerator="cuda", lmcache_topology="server"),
                         find_preset("Qwen/Qwen3-8B"))
assert PLAINTEXT == 37_748_736


def isolation(team: str, host: str) -> TeamIsolationProbe:
    other = next(t for t in BUCKETS if t != team)
    return TeamIsolationProbe(team, host, BUCKETS[team],
                              own={"PUT": 200, "GET": 200, "LIST": 200, "DELETE": 204},
                              refused={other: (BUCKETS[other],
                                               {"GET": 403, "PUT": 403, "LIST": 403})})


def add_teams(obs: Observation) -> None:
    obs.teams, obs.teams_serving = dict(BUCKETS), set(BUCKETS)
    obs.team_isolation = [isolation("alpha", "gpu1"), isolation("beta", "gpu2")]
    obs.encrypting = {"gpu1": BUCKETS["alpha"]}
    obs.encryption = [EncryptionProbe(
        BUCKETS["alpha"], "gpu1", "Qwen/Qwen3-8B@", PLAINTEXT,
        key="Qwen/Qwen3-8B@1@0@5f1c@alpha", size=PLAINTEXT + 29, first_byte=0x01)]
    for probe in obs.cache:
        probe.team = "alpha" if probe.host == "gpu1" else "beta"


def _no_hits(o: Observation) -> None:
    for probe in o.cache:
        if probe.team == "alpha":
            probe.second_external = probe.other_external = probe.sibling_external = 0


TEAM_CASES: list[tuple[str, Callable[[Observation], None], str, str]] = [
    ("team-isolation", lambda o: o.team_isolation[0].refused["beta"][1].update(PUT=400),
     "team alpha (gpu1) → team beta", "not refused PUT on team beta's bucket lmcache-beta"),
    ("team-isolation", lambda o: o.team_isolation[1].refused["alpha"][1].update(LIST=200),
     "team beta (gpu2) → team alpha", "not refused LIST on team alpha's bucket"),
    ("team-isolation", lambda o: o.team_isolation[0].own.update(LIST=403),
     "team alpha (gpu1)", "cannot use its own bucket lmcache-alpha: LIST HTTP 403"),
    ("encryption", lambda o: setattr(o.encryption[0], "first_byte", 0x7B),
     "lmcache-alpha: Qwen/Qwen3-8B@", "first byte is 0x7b, not the frame's version 0x01"),
    ("encryption", lambda o: setattr(o.encryption[0], "size", PLAINTEXT),
     "lmcache-alpha: Qwen/Qwen3-8B@", "37,748,736 bytes, not 37,748,765"),
    ("team-cache-hit", _no_hits, "team alpha", "0 of 512 repeated tokens"),
]
