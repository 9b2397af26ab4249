"""A stand-in for `vllm serve` (bench/gpu-proof.py's protocol test): a cold prompt takes
10 us per token and is stored in the fake LMCache server; a prompt the server holds is an
external hit of all but its last token; one this process saw is a local prefix hit."""

import hashlib
import http.client
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

argv = sys.argv[1:]
assert argv[0] == "serve" and "--load-format" in argv
PORT = int(argv[argv.index("--port") + 1])
MQ = json.loads(argv[argv.index("--kv-transfer-config") + 1])["kv_connector_extra_config"][
    "lmcache.mp.port"]
SEEN: set[str] = set()
COUNTERS = {"vllm:external_prefix_cache_hits_total": 0.0,
            "vllm:external_prefix_cache_queries_total": 0.0, "vllm:prefix_cache_hits_total": 0.0}


def server(method: str, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", MQ, timeout=5)
    conn.request(method, path)
    status = conn.getresponse().status
    conn.close()
    return status


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/health":
            body = b""
        elif self.path == "/metrics":
            body = "".join(f'{k}{{engine="0"}} {v}\n' for k, v in COUNTERS.items()).encode()
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ids = request["prompt"]
        key = hashlib.sha256(json.dumps(ids).encode()).hexdigest()
        COUNTERS["vllm:external_prefix_cache_queries_total"] += len(ids)
        if key in SEEN:
            COUNTERS["vllm:prefix_cache_hits_total"] += len(ids) - 1
        elif server("GET", f"/has/{key}") == 200:
            COUNTERS["vllm:external_prefix_cache_hits_total"] += len(ids) - 1
        else:
            time.sleep(len(ids) * 1e-5)
            server("POST", f"/store/{key}")
        SEEN.add(key)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for chunk in ({"choices": [{"text": "x"}]},
                      {"choices": [], "usage": {"prompt_tokens": len(ids)}}):
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")


ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
