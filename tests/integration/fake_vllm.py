"""A stand-in for one vLLM instance behind its serving front, for router tests on loopback
(stdlib only, one thread per request).

What it answers, as vLLM 0.32 and the serving front do:
- GET /health (200), GET /v1/models (the served model), GET /metrics (the prefix-cache
  counters `vllm:prefix_cache_queries_total` / `vllm:prefix_cache_hits_total`, with the key);
- POST /tokenize: vLLM's `{"count", "max_model_len", "tokens", "token_strs"}` for a `prompt`
  string or chat `messages` (one fake token per 4 characters, the same on every instance),
  which the router's cache-aware logic calls on every instance when a prompt is text;
  the /v1/.../render paths the router asks first are 404 (vLLM 0.32 has none);
- POST /v1/completions and /v1/chat/completions behind the API key (401 without it), plain
  or streamed (SSE with usage), after `delay_s`;
- every answer carries the serving front's `X-Deploykit-Instance: <instance_tag(name)>`.

Its prefix cache is vLLM's in miniature: full 16-token blocks, chained by prefix, counted in
the hit counter when a later prompt starts with them.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from deploy_kit.render.serving_front import instance_tag

BLOCK = 16
MODEL = "fake-model"


def fake_tokens(text: str) -> list[int]:
    """One token per 4 characters, deterministic across instances (as a shared tokenizer)."""
    return [sum(text[i:i + 4].encode()) % 50000 + 4 * (i % 7) for i in range(0, len(text), 4)]


def prompt_tokens(body: dict[str, Any]) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return list(prompt)
    if isinstance(prompt, str):
        return fake_tokens(prompt)
    return fake_tokens("".join(str(m.get("content", "")) for m in body.get("messages", [])))


@dataclass
class FakeInstance:
    name: str  # the instance as the inventory names it (`cpu1`, `cpu1/1`)
    port: int
    address: str = "127.0.0.1"
    api_key: str | None = None
    # what a completion waits before its first token: a fixed step, and a prefill time per
    # prompt token its prefix cache did not hold (a hit is fast, a cold prompt slow)
    delay_s: float = 0.0
    prefill_s_per_token: float = 0.0
    model: str = MODEL
    blocks: set[str] = field(default_factory=set)
    hits: int = 0
    queries: int = 0
    completions: list[list[int]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    server: http.server.ThreadingHTTPServer | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def tag(self) -> str:
        return instance_tag(self.name)

    def cache(self, tokens: list[int]) -> int:
        """vLLM's prefix cache: tokens of the leading full blocks already held; the prompt's
        full blocks are held afterwards."""
        hit, chain, counting = 0, "", True
        with self.lock:
            for i in range(0, len(tokens) - len(tokens) % BLOCK, BLOCK):
                chain = hashlib.sha256(f"{chain}:{tokens[i:i + BLOCK]}".encode()).hexdigest()
                if counting and chain in self.blocks:
                    hit += BLOCK
                else:
                    counting = False
                self.blocks.add(chain)
            self.hits += hit
            self.queries += len(tokens)
        return hit

    def start(self) -> FakeInstance:
        self.server = http.server.ThreadingHTTPServer((self.address, self.port),
                                                     _handler(self))
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def _handler(inst: FakeInstance) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # TCP_NODELAY, as vLLM's server (uvicorn) sets it: without it a streamed answer's
        # small writes on the router's kept-alive connection wait for a delayed ACK (40 ms)
        disable_nagle_algorithm = True

        def log_message(self, *args: Any) -> None:
            pass

        def _keyed(self) -> bool:
            return inst.api_key is None or \
                self.headers.get("Authorization") == f"Bearer {inst.api_key}"

        def _send(self, status: int, body: bytes | dict[str, Any],
                  ctype: str = "application/json") -> None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("X-Deploykit-Instance", inst.tag)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            inst.paths.append(f"GET {self.path}")
            if self.path == "/health":
                return self._send(200, b"", "text/plain")
            if self.path == "/v1/models":
                if not self._keyed():
                    return self._send(401, {"error": "Unauthorized"})
                return self._send(200, {"object": "list", "data": [
                    {"id": inst.model, "object": "model", "max_model_len": 4096}]})
            if self.path == "/metrics":
                if not self._keyed():
                    return self._send(403, b"forbidden\n", "text/plain")
                labels = f'{{model_name="{inst.model}"}}'
                text = "".join(f"{name}{labels} {float(value)}\n" for name, value in (
                    ("vllm:prefix_cache_queries_total", inst.queries),
                    ("vllm:prefix_cache_hits_total", inst.hits),
                    # no connector here: LMCache's counters stay 0, as on a host whose
                    # repeats vLLM's own prefix cache answers
                    ("vllm:external_prefix_cache_queries_total", 0),
                    ("vllm:external_prefix_cache_hits_total", 0)))
                return self._send(200, text.encode(), "text/plain")
            return self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            inst.paths.append(f"POST {self.path}")
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                return self._send(400, {"error": "bad json"})
            if self.path == "/tokenize":
                tokens = prompt_tokens(body)
                return self._send(200, {"count": len(tokens), "max_model_len": 4096,
                                        "tokens": tokens, "token_strs": None})
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                return self._send(404, {"error": "not found"})
            if not self._keyed():
                return self._send(401, {"error": "Unauthorized"})
            tokens = prompt_tokens(body)
            inst.completions.append(tokens)
            hit = inst.cache(tokens)
            wait = inst.delay_s + inst.prefill_s_per_token * (len(tokens) - hit)
            if wait:
                time.sleep(wait)
            usage = {"prompt_tokens": len(tokens), "completion_tokens": 1,
                     "total_tokens": len(tokens) + 1}
            choice = {"index": 0, "text": "x", "finish_reason": "length"}
            if body.get("stream"):
                return self._stream(choice, usage)
            return self._send(200, {"id": "cmpl-fake", "object": "text_completion",
                                    "model": inst.model, "choices": [choice], "usage": usage})

        def _stream(self, choice: dict[str, Any], usage: dict[str, Any]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("X-Deploykit-Instance", inst.tag)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in ({"choices": [choice]}, {"choices": [], "usage": usage}):
                self._chunk(f"data: {json.dumps(event)}\n\n".encode())
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler
