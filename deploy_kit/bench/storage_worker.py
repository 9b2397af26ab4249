"""The measuring side of `bench storage`: runs where the S3 name resolves (a serving host's
network namespace in the lab), reads its job as JSON on stdin, prints results as JSON.

Clients: awscrt's S3Client (what LMCache uses: one client, its own connection pool over
every address DNS returns) and boto3 (one connection per thread, path-style).
"""

from __future__ import annotations

import io
import json
import os
import socket
import statistics
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def summarise(op: str, latencies: list[float], nbytes: int, seconds: float) -> dict[str, Any]:
    return {"op": op, "count": len(latencies), "seconds": round(seconds, 3),
            "gb_per_s": round(nbytes / seconds / 1e9, 3) if seconds else 0.0,
            "ops_per_s": round(len(latencies) / seconds, 1) if seconds else 0.0,
            "p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 1)}


def run_crt(job: dict[str, Any], threads: int) -> list[dict[str, Any]]:
    from awscrt import auth, http, s3
    from awscrt import io as crt_io

    elg = crt_io.EventLoopGroup(max(2, threads))
    bootstrap = crt_io.ClientBootstrap(elg, crt_io.DefaultHostResolver(elg))
    creds = auth.AwsCredentialsProvider.new_static(job["access_key"], job["secret_key"])
    client = s3.S3Client(bootstrap=bootstrap, region=job["region"], credential_provider=creds,
                         tls_mode=s3.S3RequestTlsMode.DISABLED, part_size=8 * MIB,
                         throughput_target_gbps=10.0)
    host = job["host"]
    prefix = job.get("path_prefix", "")  # "/<bucket>" for path-style against one address
    payload = os.urandom(job["size"])

    def one(op: str, key: str) -> float:
        headers = http.HttpHeaders([("Host", host)])
        body = None
        kind = {"PUT": s3.S3RequestType.PUT_OBJECT, "GET": s3.S3RequestType.GET_OBJECT,
                "HEAD": s3.S3RequestType.DEFAULT}[op]
        if op == "PUT":
            headers.add("Content-Length", str(len(payload)))
            body = io.BytesIO(payload)
        start = time.perf_counter()
        request = client.make_request(
            type=kind, request=http.HttpRequest(op, f"{prefix}/{key}", headers, body),
            operation_name="HeadObject" if op == "HEAD" else None,
            on_body=(lambda chunk, offset, **kw: None) if op == "GET" else None)
        request.finished_future.result(300)
        return time.perf_counter() - start

    return _phases(job, threads, one)


def run_boto3(job: dict[str, Any], threads: int) -> list[dict[str, Any]]:
    import boto3
    from botocore.config import Config

    local = threading.local()
    payload = os.urandom(job["size"])

    def client() -> Any:
        if not hasattr(local, "s3"):
            local.s3 = boto3.client(
                "s3", endpoint_url=f"http://{job['host'].split('.', 1)[1]}",
                aws_access_key_id=job["access_key"], aws_secret_access_key=job["secret_key"],
                region_name=job["region"], config=Config(
                    s3={"addressing_style": "virtual"}, max_pool_connections=threads,
                    request_checksum_calculation="when_required",
                    response_checksum_validation="when_required"))
        return local.s3

    def one(op: str, key: str) -> float:
        s3 = client()
        start = time.perf_counter()
        if op == "PUT":
            s3.put_object(Bucket=job["bucket"], Key=key, Body=payload)
        elif op == "GET":
            s3.get_object(Bucket=job["bucket"], Key=key)["Body"].read()
        else:
            s3.head_object(Bucket=job["bucket"], Key=key)
        return time.perf_counter() - start

    return _phases(job, threads, one)


def _phases(job: dict[str, Any], threads: int, one: Any) -> list[dict[str, Any]]:
    keys = [f"deploykit-bench/{job['tag']}/{threads}/{i}" for i in range(job["objects"])]
    out = []
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for op, count in (("PUT", len(keys)), ("GET", len(keys)), ("HEAD", len(keys) * 4)):
            batch = (keys * 4)[:count]
            start = time.perf_counter()
            latencies = list(pool.map(lambda k, o=op: one(o, k), batch))
            seconds = time.perf_counter() - start
            out.append(summarise(op, latencies, 0 if op == "HEAD" else job["size"] * count,
                                 seconds))
    return out


def connection_spread(port: int) -> dict[str, int]:
    """Established TCP connections to the S3 port per remote address (from /proc/net/tcp)."""
    spread: Counter[str] = Counter()
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return {}
    for line in lines:
        parts = line.split()
        remote, state = parts[2], parts[3]
        address, hex_port = remote.split(":")
        if state == "01" and int(hex_port, 16) == port:
            spread[socket.inet_ntoa(bytes.fromhex(address)[::-1])] += 1
    return dict(spread)


def main() -> None:
    job = json.loads(sys.stdin.read())
    results = []
    for client_name, runner in (("awscrt", run_crt), ("boto3", run_boto3)):
        for threads in job["threads"]:
            job["tag"] = f"{client_name}-{os.getpid()}"
            spread: dict[str, int] = {}
            stop = threading.Event()

            def sample(stop: threading.Event = stop, spread: dict[str, int] = spread) -> None:
                # often: a small model's chunk objects (2 MiB for the lab's) finish in tens
                # of milliseconds, so a slower sampler saw no connection at all
                while True:
                    for address, n in connection_spread(job["port"]).items():
                        spread[address] = max(spread.get(address, 0), n)
                    if stop.wait(0.01):
                        return

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                rows = runner(job, threads)
            except Exception as exc:  # a client failing is a result row, not a crash
                rows = [{"op": "error", "error": f"{type(exc).__name__}: {exc}"}]
            stop.set()
            sampler.join()
            for row in rows:
                row.update(client=client_name, threads=threads, target=job["host"],
                           connections=spread)
            results.extend(rows)
    for address in job.get("addresses", []):
        # one gateway host alone, path-style: what a single address delivers
        single = dict(job, host=f"{address}:{job['port']}", path_prefix=f"/{job['bucket']}",
                      tag=f"awscrt-{address}")
        threads = max(job["threads"])
        try:
            rows = run_crt(single, threads)
        except Exception as exc:
            rows = [{"op": "error", "error": f"{type(exc).__name__}: {exc}"}]
        for row in rows:
            row.update(client="awscrt", threads=threads, target=address, connections={})
        results.extend(rows)
    print(json.dumps({"results": results,
                      "median_get_gbps": statistics.median(
                          [r["gb_per_s"] for r in results if r.get("op") == "GET"] or [0])}))


if __name__ == "__main__":
    main()
