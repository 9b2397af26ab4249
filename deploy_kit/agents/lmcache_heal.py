#!/usr/bin/python3
# Managed by deploykit; local changes are overwritten.
"""deploykit's LMCache agent on this serving host (deploy_kit/render/self_heal.py).

  heal     restart a process whose current invocation logged LMCache's S3 breaker, once S3
           answers again (polled every few seconds), with backoff
           (deploykit-lmcache-heal.timer, every 30 s)
  restart  restart this host's LMCache and vLLM (deploykit-lmcache-restart.timer, after each
           RGW lifecycle window: LMCache trusts its record of what S3 stores until then)

One host of the site at a time: a lease in the cache bucket, numbered objects each created
with If-None-Match: * (RGW refuses a second create of the same key), the newest one holding
it until its holder marks it free, once every instance's /health answers again. Each
restart is a journal record (journalctl -t deploykit-heal) and node exporter textfile
metrics (deploykit_lmcache_heals_total).

What this host acts on (its units and ports, the words, the S3 profile, the lease) is the
JSON file CONFIG, written by the render (render/self_heal.py agent_config). The serving role
installs this file with the serving venv's python in its first line: boto3 is imported
from there, when S3 is asked."""

from __future__ import annotations

import fcntl
import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

# beside the agent: a directory the role creates and owns, wherever lmcache_config_dir is
CONFIG = "/usr/local/libexec/deploykit/lmcache-heal.json"
# this host's settings, read from CONFIG by main()
C: dict[str, Any] = {}


def configure(path: str) -> None:
    with open(path) as handle:
        settings = json.load(handle)
    C.clear()
    C.update(settings)


# A logged field is at most this long, printable and one word: lease records and journal
# lines are written by others (any serving identity, the vLLM process), and a line break in
# one would forge a deploykit-heal journal record
MAX_FIELD = 200


def clean(value: object) -> str:
    """`value` as one printable word: control and format characters dropped, blanks as _."""
    text = "".join(c for c in str(value)[:MAX_FIELD * 4] if c.isprintable())
    return text.replace(" ", "_")[:MAX_FIELD]


def log(event: str, **fields: object) -> None:
    words = " ".join(f"{k}={clean(v)}" for k, v in fields.items())
    print(f"{event} host={clean(C['host'])} {words}".rstrip(), flush=True)


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def invocation(unit: str) -> str:
    """The unit's running process's InvocationID; '' when it does not run."""
    out = run(["systemctl", "show", "-p", "ActiveState", "-p", "InvocationID", unit]).stdout
    values = {key: value for key, _, value in
              (line.partition("=") for line in out.splitlines() if "=" in line)}
    return values.get("InvocationID", "") if values.get("ActiveState") == "active" else ""


def breaker_line(unit: str, state: dict[str, Any]) -> str | None:
    """The first breaker line of the unit's current process (verify and `up` read the same
    words); the journal is read from where the last run stopped."""
    units = state.setdefault("units", {})
    current = invocation(unit)
    if not current:
        units.pop(unit, None)
        return None
    seen = units.get(unit) or {}
    if seen.get("invocation") != current:  # a new process: read from its start
        seen = {"invocation": current, "cursor": None, "line": None}
    if not seen["line"]:
        rule = re.compile(C["breaker_pattern"])
        # -o cat: each line as the process wrote it, which the pattern is anchored to
        # (core/patterns.py BREAKER: LMCache's logger prefix and suffix)
        argv = ["journalctl", "_SYSTEMD_INVOCATION_ID=" + current, "-o", "cat",
                "--no-pager", "-q", "--show-cursor"]
        if seen["cursor"]:
            argv += ["--after-cursor", seen["cursor"]]
        for line in run(argv).stdout.splitlines():
            if line.startswith("-- cursor: "):
                seen["cursor"] = line[len("-- cursor: "):]
            elif seen["line"] is None and rule.search(line):
                seen["line"] = clean(line.strip())
    units[unit] = seen
    found: str | None = seen["line"]
    return found


# --- the lease: one host of the site restarts at a time ---------------------------------

class Unreachable(Exception):
    """S3 does not answer: storage is not back."""


# Lease objects are written by every serving identity of the site, so none is trusted as it
# is: only keys `<lease_key>.<12 ASCII digits>` count, a record is read to at most
# MAX_LEASE_BYTES, and one that is not {host: a short host name, expires: a time no further
# than lease_ttl ahead, ...} holds nothing (lease(): None).
LEASE_NUMBER = re.compile(r"[0-9]{12}")
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
MAX_LEASE_BYTES = 4096
MAX_LEASE_PAGES = 100  # 100,000 keys: far more than restarts within the lifecycle window
CLOCK_SKEW = 300  # seconds another host's clock may run ahead of this one's


def lease(record: Any, now: float) -> dict[str, Any] | None:
    """A lease record as the agent may act on it, or None for one it cannot trust (a
    non-mapping, a missing or odd host, an expiry not a number or beyond now + lease_ttl).
    A freed lease is {"host": ""}."""
    if not isinstance(record, dict):
        return None
    host = record.get("host")
    if host == "":
        return {"host": ""}
    expires: Any = record.get("expires")
    since: Any = record.get("since", 0)
    if not isinstance(host, str) or not HOST_NAME.fullmatch(host):
        return None
    for number in (expires, since):
        if isinstance(number, bool) or not isinstance(number, int | float) \
                or number != number or abs(number) == float("inf"):
            return None
    if expires > now + C["lease_ttl"] + CLOCK_SKEW:  # held "for ever": not a lease we honour
        return None
    reason = record.get("reason")
    return {"host": host, "expires": float(expires), "since": float(since),
            "reason": reason if isinstance(reason, str) else ""}


def s3() -> Any:
    os.environ["AWS_CONFIG_FILE"] = C["aws_config"]
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = C["aws_credentials"]
    if C["tls"]:  # the site CA is in the system store (tls_trust.yml); botocore reads certifi's
        found = [p for p in (ssl.get_default_verify_paths().cafile,
                             "/etc/ssl/certs/ca-certificates.crt",
                             "/etc/pki/tls/certs/ca-bundle.crt") if p]
        os.environ["AWS_CA_BUNDLE"] = next(p for p in found if os.path.exists(p))
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=5, read_timeout=15, retries={"max_attempts": 1})
    return boto3.session.Session(profile_name=C["profile"]).client("s3", config=config)


def _call(method: Callable[..., Any], **kwargs: Any) -> tuple[int, Any]:
    """One S3 call; (status, response). Raises Unreachable when S3 does not answer."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return 200, method(Bucket=C["bucket"], **kwargs)
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        if status >= 500 or status == 0:
            raise Unreachable(
                f"HTTP {status} {exc.response.get('Error', {}).get('Code')}") from exc
        return status, exc.response
    except BotoCoreError as exc:
        raise Unreachable(type(exc).__name__) from exc


def current(client: Any) -> tuple[int, dict[str, Any] | None]:
    """The newest lease key and its record: (n, record), (0, None) when there is none.
    Keys are numbered; each restart creates the next one, never deletes (lifecycle expiry
    removes old ones), so the serving identity needs no delete right."""
    from botocore.exceptions import BotoCoreError, ClientError

    keys: list[str] = []
    token: str | None = None
    try:
        for _ in range(MAX_LEASE_PAGES):
            extra: dict[str, str] = {"ContinuationToken": token} if token else {}
            page = client.list_objects_v2(Bucket=C["bucket"], Prefix=C["lease_key"] + ".",
                                          **extra)
            keys += [str(o.get("Key", "")) for o in page.get("Contents", [])
                     if isinstance(o, dict)]
            if not page.get("IsTruncated"):
                break
            token = page["NextContinuationToken"]
        else:
            raise Unreachable("too many lease objects to list")
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        raise Unreachable(f"HTTP {status} listing the lease") from exc
    except BotoCoreError as exc:
        raise Unreachable(type(exc).__name__) from exc
    prefix = C["lease_key"] + "."
    numbers = [int(k[len(prefix):]) for k in keys
               if k.startswith(prefix) and LEASE_NUMBER.fullmatch(k[len(prefix):])]
    if not numbers:
        return 0, None
    n = max(numbers)
    return n, read_lease(client, n)


def lease_key(n: int) -> str:
    return f"{C['lease_key']}.{n:012d}"


def read_lease(client: Any, n: int) -> dict[str, Any]:
    """Lease number n as lease() trusts it; {} when it is missing or untrusted."""
    status, got = _call(client.get_object, Key=lease_key(n))
    if status == 404:
        return {}
    if status != 200:
        raise Unreachable(f"HTTP {status} reading the lease")
    body = got["Body"]
    try:
        data = body.read(MAX_LEASE_BYTES + 1)
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()
    if len(data) > MAX_LEASE_BYTES:
        log("lease-untrusted", number=n, why="too_long")
        return {}
    try:
        record = lease(json.loads(data or b"{}"), time.time())
    except (ValueError, RecursionError):
        record = None
    if record is None:
        log("lease-untrusted", number=n)
        return {}
    return record


def acquire(client: Any, reason: str) -> int | dict[str, Any]:
    """The lease key number this host now holds; else the holder's record."""
    n, held = current(client)
    now = time.time()
    if held and held["host"] and held["host"] != C["host"] and held["expires"] > now:
        return held
    if held and held["host"]:  # expired (its holder died mid-restart), or this host's own
        log("lease-takeover", previous=held["host"], since=int(held["since"]))
    body = json.dumps({"host": C["host"], "reason": reason, "since": now,
                       "expires": now + C["lease_ttl"]}).encode()
    status, _ = _call(client.put_object, Key=lease_key(n + 1), Body=body, IfNoneMatch="*",
                      ContentType="application/json")
    # read back: a store that ignored the condition would still show the last writer here
    mine = read_lease(client, n + 1) if status == 200 else {}
    if mine.get("host") == C["host"] and current(client)[0] == n + 1:
        return n + 1
    return current(client)[1] or {"host": "?", "status": status}


def release(client: Any, n: int) -> None:
    """Free lease number n, only while this host holds it: a lease taken over after it
    expired is the new holder's."""
    held = read_lease(client, n)
    if held.get("host") != C["host"] or current(client)[0] != n:
        log("lease-release-skipped", number=n, holder=held.get("host") or "-")
        return
    body = json.dumps({"host": "", "released_by": C["host"], "at": time.time()}).encode()
    status, _ = _call(client.put_object, Key=lease_key(n), Body=body,
                      ContentType="application/json")
    if status != 200:
        log("lease-release-failed", status=status)


# --- the restart ---------------------------------------------------------------------------

def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port:d}/health", timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def gate(instances: list[dict[str, Any]]) -> list[str]:
    """Wait for each instance's /health; the units that never answered."""
    deadline = time.monotonic() + C["health_timeout"]
    waiting = list(instances)
    while waiting and time.monotonic() < deadline:
        waiting = [i for i in waiting if not healthy(i["port"])]
        if waiting:
            time.sleep(C["health_poll"])
    return [i["unit"] for i in waiting]


def restart_unit(unit: str) -> list[str]:
    result = run(["systemctl", "restart", unit])
    return [] if result.returncode == 0 else [unit]


def restart(units: list[str]) -> list[str]:
    """Restart `units` as the rolling play does (roles/serving/tasks/roll.yml): the server
    (on CPU hosts its instances require it and restart with it), then, where they do not,
    each running instance behind its health gate, one at a time. The units that failed."""
    running = [i for i in C["instances"] if invocation(i["unit"])]
    server = C["server"]
    if server and server in units:
        failed = restart_unit(server)
        if failed or C["with_server"]:
            return failed + gate(running)
        units = [i["unit"] for i in running]
    for instance in running:
        if instance["unit"] in units:
            failed = restart_unit(instance["unit"]) or gate([instance])
            if failed:
                return failed
    return []


# --- state, backoff, records -------------------------------------------------------------

def load_state() -> dict[str, Any]:
    try:
        with open(C["state"]) as handle:
            state: dict[str, Any] = json.load(handle)
    except (OSError, ValueError):
        return {}
    return state


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as handle:
        handle.write(text)
    os.replace(path + ".tmp", path)  # the collector never reads half a file


def save(state: dict[str, Any]) -> None:
    write(C["state"], json.dumps(state))
    out = ["# HELP deploykit_lmcache_heals_total Restarts of LMCache by deploykit's agent "
           "(reason breaker: its S3 breaker tripped; scheduled: after RGW's lifecycle window)",
           "# TYPE deploykit_lmcache_heals_total counter"]
    counts = state.get("counts", {})
    for reason in ("breaker", "scheduled"):
        out.append(f'deploykit_lmcache_heals_total{{reason="{reason}"}} '
                   f"{int(counts.get(reason, 0))}")
    out += ["# HELP deploykit_lmcache_heal_failures_total Restarts whose instances did not "
            "answer /health in time", "# TYPE deploykit_lmcache_heal_failures_total counter"]
    for reason in ("breaker", "scheduled"):
        out.append(f'deploykit_lmcache_heal_failures_total{{reason="{reason}"}} '
                   f"{int(state.get('failures', {}).get(reason, 0))}")
    out += ["# HELP deploykit_lmcache_heal_last_timestamp_seconds End of the last restart",
            "# TYPE deploykit_lmcache_heal_last_timestamp_seconds gauge"]
    for reason in ("breaker", "scheduled"):
        out.append(f'deploykit_lmcache_heal_last_timestamp_seconds{{reason="{reason}"}} '
                   f"{state.get('last', {}).get(reason, 0):.0f}")
    write(C["textfile"], "\n".join(out) + "\n")


def backoff_left(state: dict[str, Any], now: float) -> float:
    """Seconds before this host may heal again: backoff after one heal, doubled for each
    further heal within backoff_cap, at most backoff_cap."""
    recent = [t for t in state.get("breaker_heals", []) if now - t < C["backoff_cap"]]
    state["breaker_heals"] = recent
    if not recent:
        return 0
    gap = min(C["backoff"] * 2 ** (len(recent) - 1), C["backoff_cap"])
    left: float = max(0, max(recent) + gap - now)
    return left


def note(state: dict[str, Any], reason: str, **fields: object) -> None:
    """A reason to wait, logged once until it changes (the timer asks every 30 s)."""
    if state.get("waiting") != reason:
        log("heal-waiting", reason=reason, **fields)
    state["waiting"] = reason


def heal_once(state: dict[str, Any], mode: str) -> bool | str:
    """One pass: True when it restarted, False when there is nothing to do, else why it
    waits ("held": another host's lease; "unreachable": S3 does not answer). `heal`: the
    tripped units, if any; `restart`: all."""
    if mode == "heal":
        tripped = {u: line for u in C["breaker_units"] if (line := breaker_line(u, state))}
        if not tripped:
            state.pop("waiting", None)
            return False
        left = backoff_left(state, time.time())
        if left > 0:
            note(state, "backoff", seconds=int(left))
            return False
        reason, units = "breaker", list(tripped)
    else:
        reason = "scheduled"
        units = ([C["server"]] if C["server"] else []) + [i["unit"] for i in C["instances"]]
        if not any(invocation(u) for u in units):
            log("restart-skipped", reason="nothing_running")
            return False
    try:
        client = s3()
        holder = acquire(client, reason)
    except Unreachable as exc:
        note(state, "s3-unreachable", error=exc)
        return "unreachable"
    if isinstance(holder, dict):
        note(state, "lease-held", by=holder.get("host"), reason_there=holder.get("reason"))
        return "held"
    state.pop("waiting", None)
    return restarted(state, client, holder, reason, units)


def restarted(state: dict[str, Any], client: Any, holder: int, reason: str,
              units: list[str]) -> bool:
    """Restart `units` holding lease number `holder`, record it, free the lease."""
    start = time.time()
    log("heal-start", reason=reason, units=",".join(units))
    failed = restart(units)
    end = time.time()
    if failed:
        # the lease stays (until lease_ttl): no other host goes down while this one is broken
        state.setdefault("failures", {})[reason] = state.get("failures", {}).get(reason, 0) + 1
        log("heal-failed", reason=reason, units=",".join(failed), seconds=int(end - start))
        return True
    state.setdefault("counts", {})[reason] = state.get("counts", {}).get(reason, 0) + 1
    state.setdefault("last", {})[reason] = end
    if reason == "breaker":
        state.setdefault("breaker_heals", []).append(end)
    log("heal-done", reason=reason, units=",".join(units), seconds=int(end - start))
    try:
        release(client, holder)
    except Unreachable as exc:  # it expires after lease_ttl
        log("lease-release-failed", error=exc)
    return True


def main(mode: str, config: str = CONFIG) -> None:
    if mode not in ("heal", "restart"):
        sys.exit("usage: lmcache-heal heal|restart")
    configure(config)
    with open(C["local_lock"], "w") as lock:
        # the heal and the scheduled restart, one at a time; a heal finding the other at work
        # leaves it to it (that restart heals too)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (fcntl.LOCK_NB if mode == "heal" else 0))
        except BlockingIOError:
            return
        state = load_state()
        started = time.monotonic()
        while True:
            try:
                done = heal_once(state, mode)
            except Exception as exc:  # a bad record or answer: this tick only, never the loop
                log("heal-error", error=type(exc).__name__)
                done = False
            save(state)
            # each waits its turn for the lease (the hosts a storage outage tripped heal one
            # after another, not a timer tick apart), and a tripped host polls S3 so that it
            # heals seconds after storage is back, not a tick later; a long outage goes
            # back to the timer after outage_wait, a scheduled restart waits it out
            waited = time.monotonic() - started
            waits = done == "held" or (done == "unreachable" and
                                       (mode == "restart" or waited < C["outage_wait"]))
            if not waits or waited >= C["lock_wait"]:
                return
            time.sleep(C["lock_poll"])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
