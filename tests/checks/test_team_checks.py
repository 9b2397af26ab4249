"""The team checks beyond pass/fail (test_checks.py has those): a site with fewer than two
teams, a team no probe reached, a bucket with no chunk yet; and the team probe's requests,
against a small S3 server that answers as RGW does for a team identity (its own bucket
allowed, every other refused)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from deploy_kit.transport.sigv4 import Credentials
from deploy_kit.verify.model import (
    EncryptionProbe,
    Observation,
    Status,
    TeamIsolationProbe,
    evaluate,
)
from deploy_kit.verify.probes import team_probe
from tests.checks.test_checks import healthy


def _found(obs: Observation, check: str) -> list[tuple[Status, str, str]]:
    return [(f.status, f.target, f.message) for f in evaluate(obs, {check})]


def test_one_team_or_none_is_information_not_a_skip() -> None:
    # a site verify passes with nothing skipped (the core lab) has no teams: nothing was
    # left unprobed, so no SKIP
    obs = healthy()
    obs.teams, obs.team_isolation = {"alpha": "lmcache-alpha"}, []
    assert _found(obs, "team-isolation") == [
        (Status.INFO, "site", "the site has 1 team(s): isolation between teams needs two")]
    obs.teams, obs.teams_serving, obs.encrypting = {}, set(), {}
    assert [f[0] for f in _found(obs, "team-cache-hit")] == [Status.INFO]
    assert [f[0] for f in _found(obs, "encryption")] == [Status.INFO]


def test_a_team_not_probed_is_named() -> None:
    obs = healthy()
    obs.teams["gamma"] = "lmcache-gamma"
    skipped = [f for f in _found(obs, "team-isolation") if f[0] == Status.SKIP]
    assert skipped == [(Status.SKIP, "team gamma", "not probed: it has no serving host")]
    obs.teams_serving.add("gamma")
    skipped = [f for f in _found(obs, "team-isolation") if f[0] == Status.SKIP]
    assert "no serving host's keys could be read" in skipped[0][2]


def test_the_pass_names_both_buckets() -> None:
    found = _found(healthy(), "team-isolation")
    assert (Status.PASS, "team alpha (gpu1)", "its bucket lmcache-alpha: PUT, GET, LIST, "
            "DELETE; refused (403) GET, PUT, LIST on team beta's lmcache-beta") in found


def test_no_chunk_yet_skips_and_says_how_to_get_one() -> None:
    obs = healthy()
    obs.encryption[0].key = obs.encryption[0].size = obs.encryption[0].first_byte = None
    [(status, _, message)] = _found(obs, "encryption")
    assert status == Status.SKIP and "no chunk stored yet" in message


def test_a_team_hit_is_reported_per_team() -> None:
    found = _found(healthy(), "team-cache-hit")
    assert found[0] == (Status.PASS, "team alpha", "with the team's cache_salt: 512 of 512 "
                        "repeated tokens from LMCache (100%) on gpu1")
    assert found[1][:2] == (Status.PASS, "team beta")


LISTING = (b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws'
           b'.com/doc/2006-03-01/"><Name>lmcache-alpha</Name><Prefix>Qwen/Qwen3-8B@</Prefix>'
           b'<KeyCount>1</KeyCount><MaxKeys>1</MaxKeys><IsTruncated>true</IsTruncated>'
           b'<Contents><Key>Qwen/Qwen3-8B@1@0@5f1c@alpha</Key><LastModified>2026-12-08T00:00:'
           b'00.000Z</LastModified><ETag>"x"</ETag><Size>37748765</Size><StorageClass>STANDARD'
           b'</StorageClass></Contents></ListBucketResult>')


class FakeRGW(BaseHTTPRequestHandler):
    """Allows `own` (a bucket, by the Host header), refuses (403) every other; remembers
    each request's (method, bucket, path, Range, Content-MD5)."""

    own = "lmcache-alpha"
    seen: ClassVar[list[tuple[str, str, str, str | None, str | None]]] = []

    def _handle(self) -> None:
        bucket = self.headers["Host"].split(".", 1)[0]
        type(self).seen.append((self.command, bucket, self.path, self.headers.get("Range"),
                                self.headers.get("Content-MD5")))
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if bucket != self.own:
            code, body = 403, b"<Error><Code>AccessDenied</Code></Error>"
        elif self.command == "GET" and "list-type=2" in self.path:
            code, body = 200, LISTING
        elif self.command == "GET" and self.headers.get("Range") == "bytes=0-0":
            code, body = 206, b"\x01"
        elif self.command == "DELETE":
            code, body = 204, b""
        else:
            code, body = 200, b"ok"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_DELETE = do_HEAD = _handle

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def rgw() -> Iterator[int]:
    FakeRGW.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeRGW)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


CREDS = Credentials("AKIA", "secret")


def test_the_isolation_probe_asks_each_bucket_by_its_name(rgw: int) -> None:
    p = team_probe.isolation("127.0.0.1", rgw, "s3.t.test", "default",
                             TeamIsolationProbe("alpha", "gpu1", "lmcache-alpha"), CREDS,
                             {"beta": "lmcache-beta"})
    assert p.error is None
    assert p.own == {"PUT": 200, "GET": 200, "LIST": 200, "DELETE": 204}
    assert p.refused == {"beta": ("lmcache-beta", {"GET": 403, "PUT": 403, "LIST": 403})}
    other = [s for s in FakeRGW.seen if s[1] == "lmcache-beta"]
    # the PUT on the other team's bucket carries an invalid digest: refused or not, no write
    assert [s[4] for s in other if s[0] == "PUT"] == ["deploykit-verify-not-a-digest"]
    assert all("deploykit-verify" in s[2] or "list-type=2" in s[2] for s in other)


def test_the_encryption_probe_reads_one_listed_chunks_first_byte(rgw: int) -> None:
    p = team_probe.encryption("127.0.0.1", rgw, "s3.t.test", "default",
                              EncryptionProbe("lmcache-alpha", "gpu1", "Qwen/Qwen3-8B@",
                                              37_748_736), CREDS)
    assert (p.error, p.key, p.size, p.first_byte) == (
        None, "Qwen/Qwen3-8B@1@0@5f1c@alpha", 37_748_765, 0x01)
    assert FakeRGW.seen[0][2] == "/?list-type=2&max-keys=1&prefix=Qwen%2FQwen3-8B%40"
    assert FakeRGW.seen[1][2:4] == ("/Qwen/Qwen3-8B%401%400%405f1c%40alpha", "bytes=0-0")


def test_an_empty_listing_is_no_chunk_yet() -> None:
    empty = b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></ListBucketResult>'
    assert team_probe.first_object(empty) is None
    assert team_probe.first_object(LISTING) == ("Qwen/Qwen3-8B@1@0@5f1c@alpha", 37_748_765)


@pytest.mark.parametrize(("symptom", "check"), [
    ("team beta can read team alpha's bucket", "team-isolation"),
    ("one team gets no hits after a restart", "team-cache-hit"),
    ("lmcache-server: cache_salt='alpha' over quota, evicting", "team-cache-hit"),
    ("the chunks in the bucket are plaintext", "encryption"),
])
def test_doctor_maps_team_symptoms(symptom: str, check: str) -> None:
    from deploy_kit.verify.doctor import diagnose
    from deploy_kit.verify.model import CHECKS

    suggested = [c for _, checks in diagnose(symptom) for c in checks]
    assert check in suggested and set(suggested) <= set(CHECKS)
