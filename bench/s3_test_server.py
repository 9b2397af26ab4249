#!/usr/bin/env python3
"""A small S3 endpoint for tests and air-gapped benchmarks: stdlib only, in memory.

It serves the subset of S3 that LMCache's S3 connector (the AWS CRT client) and boto3 use:
PUT, GET (whole or ranged: `bytes=a-b`, `bytes=a-`, `bytes=-n`), HEAD and DELETE of an
object; multipart uploads (create, upload part, complete, abort); ListObjectsV2. Bodies
sent `aws-chunked` (the SDKs' streaming signature or trailing checksum) are decoded.

It is a TEST endpoint, not storage: it binds 127.0.0.1 by default, keeps every object in
this process's memory, and accepts any SigV4 `Authorization` header without verifying it
(there are no users and no keys). One bucket namespace: virtual-host requests (`Host:
bucket.example` + `/key`, what LMCache sends) store `key`; path-style requests
(`/bucket/key`, boto3 with path addressing) store `bucket/key`; ListObjectsV2 on `/bucket`
lists the keys under `bucket/`, relative to it. ETags are MD5 of the object, and of the
part MD5s with `-N` for a multipart object, as S3 computes them. `GET /?x-deploykit-stats`
(not S3) answers the request counts per operation and the objects held, as JSON.

    python bench/s3_test_server.py [--host 127.0.0.1] [--port 0] [--port-file PATH]

prints `listening on http://HOST:PORT` (and writes PORT to --port-file) once it accepts
connections; SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import re
import signal
import socketserver
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from email.utils import formatdate
from urllib.parse import parse_qs, unquote, urlsplit
from xml.etree import ElementTree
from xml.sax.saxutils import escape

XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"
STATS = "x-deploykit-stats"  # GET /?x-deploykit-stats: request counts and object bytes (JSON)
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


@dataclass
class Stored:
    data: bytes
    etag: str
    modified: float


@dataclass
class Upload:
    key: str
    parts: dict[int, bytes] = field(default_factory=dict)


class Store:
    """The objects and open multipart uploads, behind one lock (operations are short: a
    dict lookup or insert; bodies are read and written outside it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, Stored] = {}
        self.uploads: dict[str, Upload] = {}
        self.requests: dict[str, int] = {}

    def count(self, operation: str) -> None:
        with self.lock:
            self.requests[operation] = self.requests.get(operation, 0) + 1

    def put(self, key: str, data: bytes, etag: str | None = None) -> Stored:
        obj = Stored(data, etag or f'"{hashlib.md5(data).hexdigest()}"', time.time())
        with self.lock:
            self.objects[key] = obj
        return obj

    def get(self, key: str) -> Stored | None:
        with self.lock:
            return self.objects.get(key)


def parse_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """(first, last) inclusive for a satisfiable single range; None: no (usable) Range
    header, serve the whole object; "unsatisfiable": answer 416."""
    if not header:
        return None
    match = _RANGE.match(header.strip())
    if not match or (not match.group(1) and not match.group(2)):
        return None  # S3 ignores a malformed or multi-range header
    first_s, last_s = match.groups()
    if not first_s:  # a suffix: the last n bytes
        n = int(last_s)
        if n == 0 or size == 0:
            return "unsatisfiable"
        return max(0, size - n), size - 1
    first = int(first_s)
    if first >= size:
        return "unsatisfiable"
    last = min(int(last_s), size - 1) if last_s else size - 1
    if last < first:
        return None
    return first, last


def decode_aws_chunked(raw: bytes) -> bytes:
    """The payload of an `aws-chunked` body: `hex-size[;chunk-signature=...]\\r\\n data
    \\r\\n`, ending with a zero-size chunk and optional trailers (checksums), all ignored."""
    out = bytearray()
    pos = 0
    while True:
        end = raw.index(b"\r\n", pos)
        size = int(raw[pos:end].split(b";", 1)[0], 16)
        pos = end + 2
        if size == 0:
            return bytes(out)
        out += raw[pos:pos + size]
        pos += size + 2


def multipart_etag(parts: list[bytes]) -> str:
    digest = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    return f'"{digest}-{len(parts)}"'


def list_objects_xml(store: Store, bucket: str, query: dict[str, list[str]]) -> bytes:
    """ListObjectsV2 (no delimiter grouping, no continuation beyond max-keys)."""
    prefix = query.get("prefix", [""])[0]
    max_keys = int(query.get("max-keys", ["1000"])[0])
    base = f"{bucket}/" if bucket else ""
    with store.lock:
        items = sorted((k[len(base):], v) for k, v in store.objects.items()
                       if k.startswith(base) and k[len(base):].startswith(prefix))
    shown = items[:max_keys]
    body = "".join(
        f"<Contents><Key>{escape(k)}</Key><Size>{len(v.data)}</Size>"
        f"<ETag>{escape(v.etag)}</ETag><LastModified>"
        f"{time.strftime('%Y-%m-%dT%H:%M:%S.000Z', time.gmtime(v.modified))}</LastModified>"
        "<StorageClass>STANDARD</StorageClass></Contents>" for k, v in shown)
    truncated = "true" if len(items) > max_keys else "false"
    return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="{XMLNS}">'
            f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{len(shown)}</KeyCount><MaxKeys>{max_keys}</MaxKeys>"
            f"<IsTruncated>{truncated}</IsTruncated>{body}</ListBucketResult>").encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the CRT client reuses its connections
    server_version = "deploykit-s3-test"
    store: Store  # set on the subclass that serve() makes

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: one line per request would dominate a benchmark's output

    # --- plumbing -------------------------------------------------------------------------
    def _target(self) -> tuple[str, str, dict[str, list[str]]]:
        """(key, bucket for listing, query). Virtual-host style: the path is the key."""
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        key = unquote(parts.path).lstrip("/")
        return key, key.split("/", 1)[0] if key else "", query

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        encoding = self.headers.get("Content-Encoding", "")
        sha = self.headers.get("x-amz-content-sha256", "")
        if "aws-chunked" in encoding or sha.startswith("STREAMING-"):
            raw = decode_aws_chunked(raw)
        return raw

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              content_type: str = "application/xml") -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if body or status not in (204, 304):
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str, message: str) -> None:
        self._send(status, (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                            f"<Message>{escape(message)}</Message></Error>").encode())

    # --- verbs ----------------------------------------------------------------------------
    def do_PUT(self) -> None:
        key, _, query = self._target()
        data = self._body()
        if "uploadId" in query:
            self.store.count("UploadPart")
            with self.store.lock:
                upload = self.store.uploads.get(query["uploadId"][0])
                if upload is not None:
                    upload.parts[int(query["partNumber"][0])] = data
            if upload is None:
                self._error(404, "NoSuchUpload", "no such upload")
                return
            self._send(200, headers={"ETag": f'"{hashlib.md5(data).hexdigest()}"'})
            return
        self.store.count("PutObject")
        obj = self.store.put(key, data)
        self._send(200, headers={"ETag": obj.etag})

    def do_POST(self) -> None:
        key, _, query = self._target()
        body = self._body()
        if "uploads" in query:
            self.store.count("CreateMultipartUpload")
            upload_id = uuid.uuid4().hex
            with self.store.lock:
                self.store.uploads[upload_id] = Upload(key)
            self._send(200, (f'<?xml version="1.0" encoding="UTF-8"?>'
                             f'<InitiateMultipartUploadResult xmlns="{XMLNS}">'
                             f"<Bucket>bucket</Bucket><Key>{escape(key)}</Key>"
                             f"<UploadId>{upload_id}</UploadId>"
                             "</InitiateMultipartUploadResult>").encode())
            return
        if "uploadId" in query:
            self.store.count("CompleteMultipartUpload")
            with self.store.lock:
                upload = self.store.uploads.pop(query["uploadId"][0], None)
            if upload is None:
                self._error(404, "NoSuchUpload", "no such upload")
                return
            numbers = [int(n.text or 0) for n in ElementTree.fromstring(body).iter()
                       if n.tag.rsplit("}", 1)[-1] == "PartNumber"] if body else []
            numbers = numbers or sorted(upload.parts)
            if any(n not in upload.parts for n in numbers):
                self._error(400, "InvalidPart", "a listed part was never uploaded")
                return
            parts = [upload.parts[n] for n in numbers]
            obj = self.store.put(upload.key, b"".join(parts), multipart_etag(parts))
            self._send(200, (f'<?xml version="1.0" encoding="UTF-8"?>'
                             f'<CompleteMultipartUploadResult xmlns="{XMLNS}">'
                             f"<Bucket>bucket</Bucket><Key>{escape(upload.key)}</Key>"
                             f"<ETag>{escape(obj.etag)}</ETag>"
                             "</CompleteMultipartUploadResult>").encode())
            return
        self._error(400, "InvalidRequest", "unsupported POST")

    def do_GET(self) -> None:
        key, bucket, query = self._target()
        if not key and STATS in query:  # not S3: what a benchmark reads back afterwards
            with self.store.lock:
                stats = {"requests": dict(self.store.requests),
                         "objects": len(self.store.objects),
                         "bytes": sum(len(o.data) for o in self.store.objects.values())}
            self._send(200, json.dumps(stats).encode(), content_type="application/json")
            return
        if "list-type" in query or not key or ("/" not in key and self.path.endswith("/")):
            self.store.count("ListObjectsV2")
            self._send(200, list_objects_xml(self.store, bucket, query))
            return
        self._object(key, "GetObject")

    def do_HEAD(self) -> None:
        key, _, _ = self._target()
        self._object(key, "HeadObject")

    def _object(self, key: str, operation: str) -> None:
        self.store.count(operation)
        obj = self.store.get(key)
        if obj is None:
            self._error(404, "NoSuchKey", "the object does not exist")
            return
        size = len(obj.data)
        headers = {"ETag": obj.etag, "Accept-Ranges": "bytes",
                   "Last-Modified": formatdate(obj.modified, usegmt=True)}
        wanted = parse_range(self.headers.get("Range"), size)
        if wanted == "unsatisfiable":
            headers["Content-Range"] = f"bytes */{size}"
            self._error(416, "InvalidRange", "the requested range is not satisfiable")
            return
        status, view = 200, memoryview(obj.data)
        if isinstance(wanted, tuple):
            first, last = wanted
            status, view = 206, view[first:last + 1]
            headers["Content-Range"] = f"bytes {first}-{last}/{size}"
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(view)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(view)

    def do_DELETE(self) -> None:
        key, _, query = self._target()
        if "uploadId" in query:
            self.store.count("AbortMultipartUpload")
            with self.store.lock:
                self.store.uploads.pop(query["uploadId"][0], None)
        else:
            self.store.count("DeleteObject")
            with self.store.lock:
                self.store.objects.pop(key, None)
        self._send(204)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


def serve(host: str = "127.0.0.1", port: int = 0) -> tuple[Server, Store]:
    """A server bound and ready (not yet serving: call serve_forever, e.g. in a thread)."""
    store = Store()
    handler = type("BoundHandler", (Handler,), {"store": store})
    return Server((host, port), handler), store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--port-file", help="write the bound port here once listening")
    args = parser.parse_args(argv)
    server, _ = serve(args.host, args.port)
    port = server.server_address[1]
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    if args.port_file:
        with open(args.port_file, "w") as out:
            out.write(f"{port}\n")
    print(f"listening on http://{args.host}:{port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
