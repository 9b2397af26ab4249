"""A stand-in for `lmcache server` (bench/gpu-proof.py's protocol test): /healthcheck and
/status on --http-port; on --port, the "L1" vLLM stores prompts in and looks them up."""

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STORE: set[str] = set()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/healthcheck":
            self.reply(200, {"status": "healthy"})
        elif self.path == "/status":
            self.reply(200, {"l1_keys": len(STORE)})
        elif self.path.startswith("/has/"):
            self.reply(200 if self.path[5:] in STORE else 404, {})
        else:
            self.reply(404, {})

    def do_POST(self) -> None:
        STORE.add(self.path[7:])  # /store/<key>
        self.reply(200, {})


parser = argparse.ArgumentParser()
parser.add_argument("command")
parser.add_argument("--port", type=int)
parser.add_argument("--http-port", type=int)
args, _ = parser.parse_known_args()
mq = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
threading.Thread(target=mq.serve_forever, daemon=True).start()
ThreadingHTTPServer(("127.0.0.1", args.http_port), Handler).serve_forever()
