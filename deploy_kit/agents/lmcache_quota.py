#!/usr/bin/python3
# Managed by deploykit; local changes are overwritten.
"""Set one cache_salt's quota on the local LMCache server, then read it back: the unit's
ExecStartPost (render/lmcache_quota.py), so every start (systemd's, the self-heal agent's,
the roll's) sets it again. LMCache keeps quotas in memory only, and a salt without one has a
limit of 0: its chunks are evicted within a second (LMCache 0.5.6
v1/multiprocess/http_apis/quota_api.py:1-11). A failure here fails the unit's start.

    lmcache_quota.py --port 6556 --salt team-a --limit-gb 12.5 [--timeout 60]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any

# a quota the server reports back may differ by its int(limit_gb * 2**30) rounding
TOLERANCE_GB = 2.0 ** -29


class QuotaError(Exception):
    """The server refused the quota, or never answered within the timeout."""


def _call(method: str, url: str, body: dict[str, Any] | None, timeout: float) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read().decode() or "null")


def set_quota(port: int, salt: str, limit_gb: float, timeout: float = 60.0,
              poll: float = 1.0, host: str = "127.0.0.1") -> dict[str, Any]:
    """PUT the quota until the server takes it (it answers 503 while its engine starts),
    then GET it back; returns the GET's answer."""
    url = f"http://{host}:{port}/quota/{salt}"
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        try:
            _call("PUT", url, {"limit_gb": limit_gb}, poll + 4)
            got = _call("GET", url, None, poll + 4)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:200]
            if exc.code != 503:  # a refusal (400: a bad value) does not heal by waiting
                raise QuotaError(f"PUT {url}: HTTP {exc.code} {detail}") from None
            last = f"HTTP 503 {detail}"
        except (OSError, ValueError) as exc:  # not listening yet, reset, not JSON
            last = str(exc)
        else:
            if not isinstance(got, dict) or not got.get("exists") or \
                    abs(float(got.get("limit_gb", -1)) - limit_gb) > TOLERANCE_GB:
                raise QuotaError(f"GET {url} after the PUT answered {got!r}")
            return got
        if time.monotonic() >= deadline:
            raise QuotaError(f"{url} never took the quota in {timeout:g} s: {last}")
        time.sleep(poll)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--salt", required=True)
    parser.add_argument("--limit-gb", type=float, required=True)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    try:
        got = set_quota(args.port, args.salt, args.limit_gb, args.timeout)
    except QuotaError as exc:
        sys.exit(f"LMCache quota for cache_salt {args.salt!r}: {exc}")  # exit 1: start fails
    print(f"LMCache quota for cache_salt {args.salt!r}: {got['limit_gb']:.3f} GiB")


if __name__ == "__main__":
    main()
