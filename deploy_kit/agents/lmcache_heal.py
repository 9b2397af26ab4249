#!/usr/bin/python3
# Managed by deploykit; local changes are overwritten.
"""deploykit's LMCache agent on this serving host (deploy_kit/render/self_heal.py).

  heal     restart a process whose current invocation logged LMCache's S3 breaker, once S3
           answers again (polled every few seconds), with backoff
           (deploykit-lmcache-heal.timer, every 30 s)
  restart  restart this host's LMCache and vLLM (deploykit-lmcache-restart.timer, after each
           RGW lifecycle window: LMCache trusts its record of what S3 stores until then)

A few hosts of the model at a time: slots of a lease in the cache bucket, each slot a run of
numbered objects created with If-None-Match: * (RGW refuses a second create of the same
key), its newest one holding the slot until its holder marks it free, once every instance's
/health answers again. Heals and scheduled restarts have a pool each, and a scheduled
restart does not start while a heal holds a slot. Each restart is a journal record
(journalctl -t deploykit-heal) and node exporter textfile metrics
(deploykit_lmcache_heals_total).

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
import zlib
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


# --- the lease: a few hosts of the model restart at a time ---------------------------------

class Unreachable(Exception):
    """S3 does not answer: storage is not back."""


# Two pools of C["slots"] slots each under `<lease_key>/<domain>/`: `restart-<k>` for the
# scheduled restarts, `heal-<k>` for the breaker heals. A slot is a run of numbered objects
# `<slot>.<12 ASCII digits>`, the newest one its lease. Lease objects are written by every
# serving identity of the model, so none is trusted as it is: only keys of a slot of this
# host's pools count, a record is read to at most MAX_LEASE_BYTES, and one that is not
# {host: a short host name, expires: a time no further than lease_ttl ahead, ...} holds
# nothing (lease(): None).
POOLS = ("restart", "heal")
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


def held_by_other(record: dict[str, Any] | None, now: float) -> bool:
    """A trusted record of another host's lease that has not expired."""
    return bool(record and record["host"] and record["host"] != C["host"]
                and record["expires"] > now)


def held(record: dict[str, Any] | None, now: float) -> bool:
    """A trusted record of a lease (any host's, this one's too) that has not expired."""
    return bool(record and record["host"] and record["expires"] > now)


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


def slot_key(pool: str, k: int) -> str:
    return f"{C['lease_key']}/{C['domain']}/{pool}-{k:d}"


def lease_key(slot: str, n: int) -> str:
    return f"{slot}.{n:012d}"


def slot_order(pool: str) -> list[str]:
    """The pool's slots, starting at one of this host's own: hosts try them in different
    orders, so few race for the same number."""
    count = max(1, int(C["slots"]))
    first = zlib.crc32(C["host"].encode()) % count
    return [slot_key(pool, (first + i) % count) for i in range(count)]


def list_keys(client: Any, prefix: str) -> list[str]:
    """Every key under prefix. Keys are numbered; each restart creates the next one, never
    deletes (lifecycle expiry removes old ones), so the serving identity needs no delete
    right."""
    from botocore.exceptions import BotoCoreError, ClientError

    keys: list[str] = []
    token: str | None = None
    try:
        for _ in range(MAX_LEASE_PAGES):
            extra: dict[str, str] = {"ContinuationToken": token} if token else {}
            page = client.list_objects_v2(Bucket=C["bucket"], Prefix=prefix, **extra)
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
    return [k for k in keys if k.startswith(prefix)]


def numbers(keys: list[str], slots: set[str]) -> dict[str, int]:
    """The newest number of each slot in `slots` that `keys` hold."""
    newest: dict[str, int] = {}
    for key in keys:
        slot, _, number = key.rpartition(".")
        if slot in slots and LEASE_NUMBER.fullmatch(number):
            newest[slot] = max(newest.get(slot, 0), int(number))
    return newest


def survey(client: Any) -> dict[str, tuple[int, dict[str, Any]]]:
    """Every slot of both pools that has a number: slot -> (its newest number, that record
    as read_lease trusts it). One listing for all of them."""
    slots = {slot_key(pool, k) for pool in POOLS for k in range(max(1, int(C["slots"])))}
    newest = numbers(list_keys(client, f"{C['lease_key']}/{C['domain']}/"), slots)
    return {slot: (n, read_lease(client, slot, n)) for slot, n in sorted(newest.items())}


def newest(client: Any, slot: str) -> int:
    """The newest number of one slot (0: none)."""
    return numbers(list_keys(client, slot + "."), {slot}).get(slot, 0)


def read_lease(client: Any, slot: str, n: int) -> dict[str, Any]:
    """Number n of a slot as lease() trusts it; {} when it is missing or untrusted."""
    status, got = _call(client.get_object, Key=lease_key(slot, n))
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
    name = slot.rpartition("/")[2]
    if len(data) > MAX_LEASE_BYTES:
        log("lease-untrusted", slot=name, number=n, why="too_long")
        return {}
    try:
        record = lease(json.loads(data or b"{}"), time.time())
    except (ValueError, RecursionError):
        record = None
    if record is None:
        log("lease-untrusted", slot=name, number=n)
        return {}
    return record


def acquire(client: Any, pool: str, reason: str,
            taken: dict[str, tuple[int, dict[str, Any]]] | None = None
            ) -> tuple[str, int] | dict[str, Any]:
    """(slot, number) of the pool's slot this host now holds; else a holder's record."""
    taken = survey(client) if taken is None else taken
    now = time.time()
    holders: list[dict[str, Any]] = []
    for slot in slot_order(pool):
        n, record = taken.get(slot, (0, {}))
        if held_by_other(record, now):
            holders.append(record)
            continue
        if record.get("host"):  # expired (its holder died mid-restart), or this host's own
            log("lease-takeover", slot=slot.rpartition("/")[2], previous=record["host"],
                since=int(record["since"]))
        body = json.dumps({"host": C["host"], "reason": reason, "since": now,
                           "expires": now + C["lease_ttl"]}).encode()
        status, _ = _call(client.put_object, Key=lease_key(slot, n + 1), Body=body,
                          IfNoneMatch="*", ContentType="application/json")
        # read back: a store that ignored the condition would still show the last writer here
        mine = read_lease(client, slot, n + 1) if status == 200 else {}
        if mine.get("host") == C["host"] and newest(client, slot) == n + 1:
            return slot, n + 1
        # another host took this number first: its record, then the next slot
        winner = newest(client, slot)
        holders.append((read_lease(client, slot, winner) if winner else {})
                       or {"host": "?", "status": status})
    return holders[0] if holders else {"host": "?"}


def release(client: Any, slot: str, n: int) -> None:
    """Free number n of a slot, only while this host holds it: a lease taken over after it
    expired is the new holder's."""
    record = read_lease(client, slot, n)
    if record.get("host") != C["host"] or newest(client, slot) != n:
        log("lease-release-skipped", slot=slot.rpartition("/")[2], number=n,
            holder=record.get("host") or "-")
        return
    body = json.dumps({"host": "", "released_by": C["host"], "at": time.time()}).encode()
    status, _ = _call(client.put_object, Key=lease_key(slot, n), Body=body,
                      ContentType="application/json")
    if status != 200:
        log("lease-release-failed", status=status)


# --- the restart ---------------------------------------------------------------------------

def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def healthy(port: int) -> bool:
    return answers(f"http://127.0.0.1:{port:d}/health")


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


def restart(units: list[str], reason: str = "scheduled") -> list[str]:
    """Restart `units` as the rolling play does (roles/serving/tasks/roll.yml): the server
    (on CPU hosts its instances require it and restart with it), then, where they do not,
    each running instance behind its health gate, one at a time; a breaker heal of a GPU
    server host restarts the server alone (heal_server). The units that failed."""
    running = [i for i in C["instances"] if invocation(i["unit"])]
    server = C["server"]
    if server and server in units:
        if reason == "breaker" and C["server_only_heal"]:
            return heal_server(server, running)
        failed = restart_unit(server)
        if failed or C["with_server"]:
            return failed + gate(running)
        units = [i["unit"] for i in running]
    return roll(running, units)


def roll(running: list[dict[str, Any]], units: list[str]) -> list[str]:
    """Each running instance in `units`, one at a time behind its gate; the units that
    failed."""
    for instance in running:
        if instance["unit"] in units:
            failed = restart_unit(instance["unit"]) or gate([instance])
            if failed:
                return failed
    return []


def heal_server(server: str, running: list[dict[str, Any]]) -> list[str]:
    """The breaker is in the LMCache server (its S3 adapter), and vLLM's LMCacheMPConnector
    outlives the server: it pings it every 10 s and, once a ping fails and a later one
    answers, registers its KV caches with the new process (LMCache 0.5.6
    vllm_multi_process_adapter.py, HeartbeatThread and _reregister_kv_caches_callback). So
    the server stops long enough for every instance to see a ping fail (server_down), starts,
    answers /healthcheck, and each instance must log its re-registration (one line per
    worker) within reregister_wait; one that does not is restarted after all, behind its
    gate. Meanwhile the instances serve on, recomputing what they would have loaded."""
    since = int(time.time()) - 1
    if run(["systemctl", "stop", server]).returncode != 0:
        return [server]
    time.sleep(C["server_down"])
    if run(["systemctl", "start", server]).returncode != 0:
        return [server]
    url = f"http://127.0.0.1:{C['server_health_port']:d}/healthcheck"
    deadline = time.monotonic() + C["health_timeout"]
    while not answers(url):
        if time.monotonic() >= deadline:
            return [server]
        time.sleep(C["health_poll"])
    missing = stale(running, since)
    if missing:
        log("heal-widened", units=",".join(i["unit"] for i in missing),
            why="no_reregistration")
        failed = roll(missing, [i["unit"] for i in missing])
        if failed:
            return failed
    return gate(running)


def stale(running: list[dict[str, Any]], since: int) -> list[dict[str, Any]]:
    """The instances that have not logged, since `since`, one re-registration per worker
    within reregister_wait."""
    rule = re.compile(C["reregister_pattern"])
    deadline = time.monotonic() + C["reregister_wait"]
    waiting = list(running)
    while True:
        for instance in list(waiting):
            current = invocation(instance["unit"])
            out = run(["journalctl", "_SYSTEMD_INVOCATION_ID=" + current, "--since",
                       f"@{since:d}", "-o", "cat", "--no-pager", "-q"]).stdout if current else ""
            if sum(1 for line in out.splitlines() if rule.search(line)) >= C["workers"]:
                waiting.remove(instance)
        if not waiting or time.monotonic() >= deadline:
            return waiting
        time.sleep(C["health_poll"])


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


def streak(state: dict[str, Any], tripped: list[str]) -> int:
    """Heals in a row that did not hold, this trip included: 0 when the last heal held.
    A heal did not hold when its units failed their gate, or when a unit it restarted
    logged the breaker again (its new process: breaker_line reads the current one) and
    this trip was first seen within `settle` of that heal's end: storage still fails for
    LMCache. A later trip is a new outage, whenever the last heal was."""
    last = state.get("last_heal")
    if not isinstance(last, dict):
        return 0
    again = set(tripped) & set(last.get("units", []))
    seen = state.get("tripped_since", time.time())
    if last.get("failed") or (again and seen - last.get("end", 0) < C["settle"]):
        return int(last.get("streak", 0)) + 1
    return 0


def backoff_left(state: dict[str, Any], tripped: list[str], now: float) -> float:
    """Seconds before this host may heal again: none after a heal that held; backoff after
    one that did not, doubled for each further one in a row, at most backoff_cap, counted
    from the end of the last heal."""
    count = streak(state, tripped)
    if not count:
        return 0
    gap = min(C["backoff"] * 2 ** (count - 1), C["backoff_cap"])
    left: float = max(0, state["last_heal"].get("end", 0) + gap - now)
    return left


def note(state: dict[str, Any], reason: str, **fields: object) -> None:
    """A reason to wait, logged once until it changes (the timer asks every 30 s)."""
    if state.get("waiting") != reason:
        log("heal-waiting", reason=reason, **fields)
    state["waiting"] = reason


def heal_once(state: dict[str, Any], mode: str) -> bool | str:
    """One pass: True when it restarted, False when there is nothing to do, else why it
    waits ("held": no slot free, or a heal holds one while this is a scheduled restart;
    "unreachable": S3 does not answer). `heal`: the tripped units, if any, in the heal
    pool; `restart`: all, in the restart pool, never while a heal holds a slot."""
    if mode == "heal":
        tripped = {u: line for u in C["breaker_units"] if (line := breaker_line(u, state))}
        if not tripped:
            state.pop("waiting", None)
            state.pop("tripped_since", None)
            return False
        now = time.time()
        state.setdefault("tripped_since", now)
        left = backoff_left(state, list(tripped), now)
        if left > 0:
            note(state, "backoff", seconds=int(left))
            return False
        reason, pool, units = "breaker", "heal", list(tripped)
    else:
        reason, pool = "scheduled", "restart"
        units = ([C["server"]] if C["server"] else []) + [i["unit"] for i in C["instances"]]
        if not any(invocation(u) for u in units):
            log("restart-skipped", reason="nothing_running")
            return False
    try:
        client = s3()
        taken = survey(client)
        if pool == "restart":  # heals first: a scheduled restart does not start beside one
            now = time.time()
            healing = [r for slot, (_, r) in taken.items()
                       if slot.rpartition("/")[2].startswith("heal-") and held(r, now)]
            if healing:
                note(state, "heal-first", by=healing[0]["host"])
                return "held"
        holder = acquire(client, pool, reason, taken)
    except Unreachable as exc:
        note(state, "s3-unreachable", error=exc)
        return "unreachable"
    if isinstance(holder, dict):
        note(state, "lease-held", by=holder.get("host"), reason_there=holder.get("reason"))
        return "held"
    state.pop("waiting", None)
    return restarted(state, client, holder, reason, units)


def restarted(state: dict[str, Any], client: Any, holder: tuple[str, int], reason: str,
              units: list[str]) -> bool:
    """Restart `units` holding number n of a slot (`holder`), record it, free the slot."""
    start = time.time()
    count = streak(state, units) if reason == "breaker" else 0
    log("heal-start", reason=reason, units=",".join(units),
        slot=holder[0].rpartition("/")[2])
    failed = restart(units, reason)
    end = time.time()
    if reason == "breaker":
        state["last_heal"] = {"end": end, "units": units, "failed": bool(failed),
                              "streak": count}
        state.pop("tripped_since", None)
    if failed:
        # the slot stays held (until lease_ttl): no other host takes it while this one is
        # broken, and no scheduled restart starts while it is a heal slot
        state.setdefault("failures", {})[reason] = state.get("failures", {}).get(reason, 0) + 1
        log("heal-failed", reason=reason, units=",".join(failed), seconds=int(end - start))
        return True
    state.setdefault("counts", {})[reason] = state.get("counts", {}).get(reason, 0) + 1
    state.setdefault("last", {})[reason] = end
    log("heal-done", reason=reason, units=",".join(units), seconds=int(end - start))
    try:
        release(client, *holder)
    except Unreachable as exc:  # it expires after lease_ttl
        log("lease-release-failed", error=exc)
    return True


def main(mode: str, config: str = CONFIG) -> None:
    if mode not in ("heal", "restart"):
        sys.exit("usage: lmcache-heal heal|restart")
    configure(config)
    if mode == "heal":
        with open(C["local_lock"], "w") as lock:
            # the heal holds this host's lock for its whole run; a heal finding a restart at
            # work leaves it to it (that restart heals too)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
            passes(mode, lambda: one_pass(mode))
    else:
        # a scheduled restart takes the lock only to look and to restart, never while it
        # waits for a slot: a heal of this host never waits behind it
        def locked() -> bool | str:
            with open(C["local_lock"], "w") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return "held"  # this host's heal is at work
                return one_pass(mode)
        passes(mode, locked)


def one_pass(mode: str) -> bool | str:
    state = load_state()
    try:
        done = heal_once(state, mode)
    except Exception as exc:  # a bad record or answer: this pass only, never the loop
        log("heal-error", error=type(exc).__name__)
        done = False
    save(state)
    return done


def passes(mode: str, attempt: Callable[[], bool | str]) -> None:
    """Pass after pass until done. Each waits its turn for a slot (the hosts a storage
    outage tripped heal a few at a time, not a timer tick apart), and a tripped host polls
    S3 so that it heals seconds after storage is back, not a tick later; a long outage goes
    back to the timer after outage_wait, a scheduled restart waits it out."""
    started = time.monotonic()
    poll = C["lock_poll"] if mode == "heal" else C["restart_poll"]
    while True:
        done = attempt()
        waited = time.monotonic() - started
        waits = done == "held" or (done == "unreachable" and
                                   (mode == "restart" or waited < C["outage_wait"]))
        if not waits or waited >= C["lock_wait"]:
            return
        time.sleep(poll)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
