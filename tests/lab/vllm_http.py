"""HTTP helpers for the lab's serving hosts (vLLM's OpenAI API, /health and /metrics).

vLLM serves behind an API key by default: the OpenAI calls send the key of the effective
site (the inventory, its vault, or the store `deploykit up` generated it into), as every
client of deploykit does. /health needs none; the serving front lets the controller (no
monitoring host) read /metrics with the key, as verify does."""

from __future__ import annotations

import functools
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.lab.conftest import LAB_INVENTORY, VAULT_PASSWORD, lab_model

SERVING = {"lab3": "10.99.0.13", "lab4": "10.99.0.14"}


def get(url: str, timeout: float = 3) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def metric(address: str, name: str, port: int = 8000) -> float:
    request = urllib.request.Request(f"http://{address}:{port}/metrics",
                                     headers=headers(address))
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


@functools.lru_cache(maxsize=4)
def _site(stamp: tuple[float, ...]) -> Any:
    from deploy_kit.ops.secrets_store import with_stored
    from deploy_kit.ops.site import open_site

    # every lab profile has a vault: its generated secrets are in the vault file
    vault = Path(VAULT_PASSWORD) if Path(VAULT_PASSWORD).exists() else None
    return with_stored(open_site(str(LAB_INVENTORY), vault))


def api_key(address: str) -> str | None:
    """The key the vLLM on `address` requires, from the effective site (None: it needs none)."""
    from deploy_kit.ops.secrets_store import STORE_DIR, STORE_FILE, VAULT_FILE
    from deploy_kit.transport.openai import api_key as key_of

    files = [LAB_INVENTORY / "group_vars" / "all", LAB_INVENTORY / STORE_DIR / STORE_FILE,
             LAB_INVENTORY / VAULT_FILE]
    stamp = tuple(p.stat().st_mtime if p.exists() else 0.0 for p in files)  # reread on change
    host = next(h for h in _site(stamp).hosts.values() if h.address == address)
    return key_of(host)


def headers(address: str) -> dict[str, str]:
    key = api_key(address)
    return {"Authorization": f"Bearer {key}"} if key else {}


def models(address: str, port: int = 8000) -> list[str]:
    request = urllib.request.Request(f"http://{address}:{port}/v1/models",
                                     headers=headers(address))
    with urllib.request.urlopen(request, timeout=10) as response:
        return [m["id"] for m in json.loads(response.read())["data"]]


def complete(address: str, tokens: list[int], port: int = 8000) -> dict:
    body = json.dumps({"model": lab_model().name, "prompt": tokens, "max_tokens": 4,
                       "temperature": 0}).encode()
    request = urllib.request.Request(f"http://{address}:{port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json",
                                              **headers(address)})
    with urllib.request.urlopen(request, timeout=300) as response:
        result: dict = json.loads(response.read())
    return result


def wait_healthy(address: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if get(f"http://{address}:8000/health") == 200:
            return
        time.sleep(2)
    raise AssertionError(f"{address}: vLLM not healthy after {timeout} s")


def poll_health_during(action: Callable[[], dict]) -> tuple[list[dict[str, int]], dict]:
    """Run `action` while polling every serving host's /health every 0.5 s."""
    polls: list[dict[str, int]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            polls.append({n: get(f"http://{a}:8000/health", 2) for n, a in SERVING.items()})
            time.sleep(0.5)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        result = action()
    finally:
        stop.set()
        poller.join(timeout=10)
    return polls, result


def assert_rolled(polls: list[dict[str, int]]) -> None:
    """Every host restarted (down at some poll) and at every poll one host answered."""
    down = {n for p in polls for n, code in p.items() if code != 200}
    assert down == set(SERVING), f"not every host restarted: down at some poll = {down}"
    assert all(any(code == 200 for code in p.values()) for p in polls), \
        [p for p in polls if not any(code == 200 for code in p.values())][:3]
    assert len(polls) > 20
