"""vLLM's OpenAI server, as the cache checks and `bench ttft` talk to it: prompts sent as
token-id lists (exact lengths, no tokenizer on the controller), streamed completions timed
on the controller, and the Prometheus counters that say where prompt tokens came from.

Pure parts (prompt_ids, timing, parse_metrics, delta) are unit-tested from recorded data;
the HTTP parts are plain http.client against host.address:vllm_port; api_key and
model_name say what a host's inventory asks the client to send.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any

from deploy_kit.config.site import Host
from deploy_kit.core.patterns import EXTERNAL_HITS, EXTERNAL_QUERIES, LOCAL_HITS, LOCAL_QUERIES

# Token ids that exist in every tokenizer deploykit serves: the lab's byte-level tokenizer
# has its 256 byte tokens at 3..258; real models (vocab >= 32,000) take 1000..30999. Ids
# are never decoded on the controller, so no tokenizer is read.
BYTE_TOKENS = (3, 259)
LARGE_VOCAB_TOKENS = (1000, 31000)

BY_SOURCE = "vllm:prompt_tokens_by_source_total"
COUNTERS = (EXTERNAL_HITS, EXTERNAL_QUERIES, LOCAL_HITS, LOCAL_QUERIES)


def token_range(accelerator: str | None) -> tuple[int, int]:
    """[lo, hi) of prompt token ids: byte tokens on `cpu` (the lab's model), else 1000..30999."""
    return BYTE_TOKENS if accelerator == "cpu" else LARGE_VOCAB_TOKENS


def prompt_ids(length: int, seed: str, ids: tuple[int, int] = BYTE_TOKENS) -> list[int]:
    """A fresh, reproducible random prompt: same seed, same ids; another seed shares no
    256-token chunk with it (nothing is cached by accident)."""
    rng = random.Random(seed)
    return [rng.randrange(ids[0], ids[1]) for _ in range(length)]


@dataclass
class Timing:
    """One streamed completion, timed on the client."""

    ttft_s: float | None = None  # first chunk that carries a choice
    total_s: float | None = None
    tpot_s: float | None = None  # (last - first) / (completion_tokens - 1)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None
    # X-Deploykit-Instance of the answer: which instance's serving front answered (a request
    # through a router learns it only so); None where the answer carried none
    instance: str | None = None


def timing(events: list[tuple[float, dict[str, Any]]], total_s: float | None = None) -> Timing:
    """TTFT and TPOT from (seconds since the request was sent, decoded SSE data) pairs."""
    result = Timing(total_s=total_s)
    first = last = None
    for t, data in events:
        if data.get("choices"):
            first = t if first is None else first
            last = t
        usage = data.get("usage")
        if usage:
            result.prompt_tokens = usage.get("prompt_tokens")
            result.completion_tokens = usage.get("completion_tokens")
    result.ttft_s = first
    n = result.completion_tokens
    if first is not None and last is not None and n and n > 1:
        result.tpot_s = (last - first) / (n - 1)
    if first is None:
        result.error = "the stream carried no choice"
    return result


def sse_data(line: bytes) -> dict[str, Any] | None:
    """The JSON of one `data: {...}` line; None for keep-alives, comments and [DONE]."""
    line = line.strip()
    if not line.startswith(b"data:"):
        return None
    payload = line[5:].strip()
    if payload == b"[DONE]" or not payload:
        return None
    loaded = json.loads(payload)
    return loaded if isinstance(loaded, dict) else None


INSTANCE_HEADER = "X-Deploykit-Instance"


def _headers(api_key: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def stream_completion(address: str, port: int, model: str, ids: list[int], max_tokens: int,
                      api_key: str | None = None, timeout: float = 900.0,
                      host_header: str | None = None, cache_salt: str | None = None
                      ) -> Timing:
    """POST /v1/completions with `stream` and usage; greedy, `ignore_eos` so TPOT spans
    max_tokens tokens. `host_header`: the name the request is for (the routers' name, sent
    to one router's address). `cache_salt`: vLLM's per-request field, a team's (LMCache's
    server keys its chunks and quota by it)."""
    fields: dict[str, Any] = {"model": model, "prompt": ids, "max_tokens": max_tokens,
                              "temperature": 0, "ignore_eos": True, "stream": True,
                              "stream_options": {"include_usage": True}}
    if cache_salt is not None:
        fields["cache_salt"] = cache_salt
    body = json.dumps(fields).encode()
    events: list[tuple[float, dict[str, Any]]] = []
    headers = _headers(api_key) | ({"Host": host_header} if host_header else {})
    conn = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        start = time.perf_counter()
        conn.request("POST", "/v1/completions", body=body, headers=headers)
        response = conn.getresponse()
        instance = response.getheader(INSTANCE_HEADER)
        if response.status != 200:
            text = response.read(400).decode(errors="replace")
            return Timing(error=f"HTTP {response.status}: {text}", instance=instance)
        while True:
            line = response.readline()
            if not line:
                break
            data = sse_data(line)
            if data is not None:
                events.append((time.perf_counter() - start, data))
        found = timing(events, time.perf_counter() - start)
        found.instance = instance
        return found
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return Timing(error=f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


def get(address: str, port: int, path: str, api_key: str | None = None,
        timeout: float = 5.0) -> tuple[int | None, bytes]:
    conn = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        conn.request("GET", path, headers=_headers(api_key))
        response = conn.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException):
        return None, b""
    finally:
        conn.close()


@dataclass
class Served:
    """What /health, /v1/models and /version say."""

    health: int | None = None
    models: list[dict[str, Any]] = field(default_factory=list)
    version: str | None = None

    @property
    def model(self) -> str | None:
        return str(self.models[0]["id"]) if self.models else None

    @property
    def max_model_len(self) -> int | None:
        value = self.models[0].get("max_model_len") if self.models else None
        return int(value) if isinstance(value, int) else None


def served(address: str, port: int, api_key: str | None = None) -> Served:
    result = Served()
    result.health, _ = get(address, port, "/health")
    status, body = get(address, port, "/v1/models", api_key)
    if status == 200:
        with contextlib.suppress(ValueError, AttributeError):
            result.models = list(json.loads(body).get("data", []))
    status, body = get(address, port, "/version")
    if status == 200:
        with contextlib.suppress(ValueError, AttributeError):
            result.version = str(json.loads(body).get("version"))
    return result


def api_key(host: Host) -> str | None:
    secret = getattr(host.config, "vllm_api_key", None)
    return secret.get_secret_value() if secret is not None else None


def model_name(host: Host, seen: Served | None = None) -> str:
    c = host.config
    if seen is not None and seen.model:
        return seen.model
    # what vLLM serves the model as: a local model directory by its name, not its path
    return str(getattr(c, "served_model_name", None) or c.vllm_model)


_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+'
                     r'(?P<value>[-+0-9.eEinfNa]+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> dict[str, float]:
    """The prefix-cache counters from Prometheus text, summed over engines and models;
    `vllm:prompt_tokens_by_source_total` becomes one key per source (`...{source=X}`).
    A counter vLLM does not export is absent (not 0)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        name = m["name"]
        if name in COUNTERS:
            key = name
        elif name == BY_SOURCE:
            labels = dict(_LABEL.findall(m["labels"] or ""))
            key = f"{name}{{source={labels.get('source', '')}}}"
        else:
            continue
        try:
            out[key] = out.get(key, 0.0) + float(m["value"])
        except ValueError:
            continue
    return out


def metrics(address: str, port: int, api_key: str | None = None) -> dict[str, float] | None:
    """vLLM's counters now; None when /metrics does not answer. The serving front lets the
    monitoring hosts read them, and anyone else with the API key (render/serving_front.py)."""
    status, body = get(address, port, "/metrics", api_key, timeout=10.0)
    if status != 200:
        return None
    return parse_metrics(body.decode(errors="replace"))


@dataclass(frozen=True)
class Hits:
    """Where one request's prompt tokens came from (counter deltas around it)."""

    external: int  # LMCache (or another KV connector)
    local: int  # vLLM's own prefix cache
    queried: int  # tokens the connector was asked for


def delta(before: dict[str, float] | None, after: dict[str, float] | None) -> Hits | None:
    """Counter deltas; None when either side is unreadable or the counters are missing.
    On a busy host the delta includes other requests (it can only grow, never shrink)."""
    if before is None or after is None or EXTERNAL_HITS not in after:
        return None

    def d(key: str) -> int:
        return int(after.get(key, 0.0) - before.get(key, 0.0))

    return Hits(external=d(EXTERNAL_HITS), local=d(LOCAL_HITS), queried=d(EXTERNAL_QUERIES))
