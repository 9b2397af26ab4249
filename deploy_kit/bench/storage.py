"""`deploykit bench storage`: chunk-sized PUT/GET/HEAD through the S3 name, awscrt (the
client LMCache uses) against boto3 in the same run; elbencho or warp rows when installed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from deploy_kit.bench import storage_chart
from deploy_kit.cache.store import delete_objects, list_objects, open_bucket
from deploy_kit.config.site import Site
from deploy_kit.core.errors import DeployKitError
from deploy_kit.plan.breakeven import losing_contexts
from deploy_kit.plan.plan import build_plan
from deploy_kit.plan.sizing import s3_requests
from deploy_kit.transport.hosts import run_on


def run(site: Site, threads: list[int], objects: int, out: Path,
        object_bytes: int | None = None) -> dict[str, Any]:
    plan = build_plan(site)
    if not plan.models:
        raise DeployKitError("bench storage needs a serving model to size its objects")
    model = plan.models[0]
    bucket = open_bucket(site)
    s = site.settings
    host_header = bucket.host if s.deploykit_s3_port == 80 else f"{bucket.host}:{bucket.port}"
    job = {"host": host_header, "bucket": s.deploykit_s3_bucket, "port": s.deploykit_s3_port,
           "region": s.deploykit_s3_region, "size": object_bytes or model.object_bytes,
           "objects": objects,
           "threads": threads, "access_key": bucket.credentials.access_key,
           "addresses": sorted(h.address for h in site.group("rgw")),
           "secret_key": bucket.credentials.secret_key}
    client = site.group("vllm")[0] if site.group("vllm") else None
    argv = [sys.executable, "-m", "deploy_kit.bench.storage_worker"]
    netns = f"dklab-{client.name}" if client else ""
    etc = Path("/etc/netns") / netns
    try:
        if client and Path(f"/run/netns/{netns}").exists():
            # the lab: measure from a serving host's network, resolving through its CoreDNS
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "resolv.conf").write_text(run_on(site, client, "cat /etc/resolv.conf"))
            argv = ["ip", "netns", "exec", netns, *argv]
        done = subprocess.run(argv, input=json.dumps(job), capture_output=True, text=True,
                              timeout=3600)
    finally:
        if netns:
            shutil.rmtree(etc, ignore_errors=True)
        leftovers = list_objects(bucket, "deploykit-bench/")
        delete_objects(bucket, [o.key for o in leftovers])
    if done.returncode != 0:
        raise DeployKitError(f"storage worker failed: {done.stderr.strip()[-400:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    for row in result["results"]:
        if row.get("op") == "GET":
            row["kv_tokens_per_s_restorable"] = int(row["gb_per_s"] * 1e9 /
                                                    model.bytes_per_token)
    result["object_bytes"] = object_bytes or model.object_bytes
    requests = s3_requests(result["object_bytes"])
    result["s3_requests_per_object"] = {"put": requests.put, "get": requests.get}
    result["name"] = host_header
    result["model"] = model.model
    result["measured_from"] = client.name if client else "controller"
    result["breakeven"] = breakeven_verdict(plan.serving_groups, result["results"],
                                            client.name if client else None)
    result["other_tools"] = {tool: ("installed; not run by deploykit yet" if shutil.which(tool)
                                    else "not installed") for tool in ("elbencho", "warp")}
    out.mkdir(parents=True, exist_ok=True)
    from deploy_kit.core.envelope import dumps

    (out / "storage.json").write_text(dumps("bench-storage", 1, site.name, result))
    storage_chart.plot(result, out / "storage.png")
    result["files"] = [str(out / "storage.json"), str(out / "storage.png")]
    return result


def breakeven_verdict(groups: list[Any], rows: list[dict[str, Any]],
                      host: str | None) -> dict[str, Any] | None:
    """The best awscrt GET throughput through the S3 name (LMCache's client and path)
    against the break-even bandwidth of the measured host's serving group (`plan`)."""
    gets = [r["gb_per_s"] for r in rows if r.get("op") == "GET" and r.get("client") == "awscrt"]
    group = next((g for g in groups if host in g.hosts), groups[0] if groups else None)
    if not gets or group is None:
        return None
    measured_gbps = max(gets) * 8
    return {"model": group.model, "device": group.device, "measured_gbps": measured_gbps,
            "breakeven_gbps": {r.context_tokens: r.breakeven_storage_gbps for r in group.rows},
            "losing_contexts": losing_contexts(group, measured_gbps)}


def breakeven_line(verdict: dict[str, Any] | None) -> str | None:
    if verdict is None:
        return None
    where = f"{verdict['model']} on {verdict['device']}"
    if not verdict["losing_contexts"]:
        return (f"remote KV beats recompute at every planned context length for {where} "
                f"(GET {verdict['measured_gbps']:.1f} Gbit/s)")
    lengths = ", ".join(f"{t // 1024}K" for t in verdict["losing_contexts"])
    first = verdict["losing_contexts"][0]
    return (f"WARN: remote KV loses to recompute at {lengths} tokens for {where}: GET "
            f"{verdict['measured_gbps']:.1f} Gbit/s per host, break-even at {first // 1024}K "
            f"is {verdict['breakeven_gbps'][first]:.1f} Gbit/s (`deploykit plan`)")


def describe(result: dict[str, Any]) -> list[str]:
    per = result.get("s3_requests_per_object", {"put": 1, "get": 1})
    lines = [f"{result['model']}: {result['object_bytes']:,} B objects ({per['put']} requests "
             f"to store, {per['get']} to read each through awscrt), measured from "
             f"{result['measured_from']}"]
    for r in result["results"]:
        if r.get("op") == "error":
            lines.append(f"{r['client']:7} t={r['threads']:<3} error: {r['error']}")
            continue
        extra = (f" {r['kv_tokens_per_s_restorable']:,} KV tok/s" if r["op"] == "GET" else "")
        where = "name" if r["target"] == result["name"] else r["target"]
        spread = ", ".join(f"{a}:{n}" for a, n in sorted(r.get("connections", {}).items()))
        lines.append(f"{r['client']:7} {where:11} t={r['threads']:<3} {r['op']:4} "
                     f"{r['gb_per_s']:6.3f} GB/s "
                     f"{r['ops_per_s']:7.1f} op/s p50 {r['p50_ms']:7.1f} ms p99 "
                     f"{r['p99_ms']:7.1f} ms{extra} conns[{spread}]")
    verdict = breakeven_line(result.get("breakeven"))
    if verdict:
        lines.append(verdict)
    lines.append("other tools: " + ", ".join(f"{k} {v}" for k, v in
                                             result["other_tools"].items()))
    return lines

