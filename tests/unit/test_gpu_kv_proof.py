"""The GPU KV proof's pure parts, without LMCache or torch: the bundled S3 test server's
semantics (whole and ranged GET, multipart, listing, aws-chunked bodies), the proof's
geometry and LMCache settings held to deploykit's own, its arithmetic against the plan,
its result document, and the wheel choice and one-line refusals of its setup stage. The
proof itself runs in `make test-gpu-proof` (CPU) and on a lent GPU (docs/benchmarks.md)."""

from __future__ import annotations

import hashlib
import http.client
import importlib.util
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from deploy_kit.config.models import HostConfig
from deploy_kit.core.geometry import chunk_layout, find_preset
from deploy_kit.render.lmcache import build_lmcache_config

REPO = Path(__file__).resolve().parents[2]


def load(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


s3 = load("s3_test_server", "bench/s3_test_server.py")
proof = load("gpu_kv_proof", "bench/gpu-kv-proof.py")
bundle = load("gpu_kv_bundle", "bench/gpu-kv-bundle.py")


# --- the S3 test server -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def server() -> Iterator[tuple[int, Any]]:
    srv, store = s3.serve("127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    yield srv.server_address[1], store
    srv.shutdown()
    srv.server_close()


def call(port: int, method: str, path: str, body: bytes = b"",
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        # a SigV4 header as the CRT and boto3 send it: accepted, never checked
        sent = {"Authorization": "AWS4-HMAC-SHA256 Credential=x/20261207/default/s3/"
                "aws4_request, SignedHeaders=host, Signature=00", **(headers or {})}
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_put_get_head_delete_and_ranges(server: tuple[int, Any]) -> None:
    port, _ = server
    data = bytes(range(256)) * 40  # 10240 bytes
    status, headers, _ = call(port, "PUT", "/model%40chunk", data)
    assert status == 200 and headers["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    status, headers, body = call(port, "GET", "/model@chunk")
    assert (status, body, headers["Content-Length"]) == (200, data, "10240")
    status, headers, body = call(port, "HEAD", "/model@chunk")
    assert (status, body, headers["Content-Length"]) == (200, b"", "10240")
    for spec, first, last in (("bytes=0-8191", 0, 8191), ("bytes=8192-", 8192, 10239),
                              ("bytes=-100", 10140, 10239), ("bytes=10000-99999", 10000, 10239)):
        status, headers, body = call(port, "GET", "/model@chunk", headers={"Range": spec})
        assert status == 206 and body == data[first:last + 1], spec
        assert headers["Content-Range"] == f"bytes {first}-{last}/10240"
    assert call(port, "GET", "/model@chunk", headers={"Range": "bytes=20000-"})[0] == 416
    assert call(port, "DELETE", "/model@chunk")[0] == 204
    assert call(port, "HEAD", "/model@chunk")[0] == 404
    assert call(port, "GET", "/model@chunk")[0] == 404


def test_parse_range() -> None:
    assert s3.parse_range(None, 10) is None
    assert s3.parse_range("bytes=2-4", 10) == (2, 4)
    assert s3.parse_range("bytes=-3", 10) == (7, 9)
    assert s3.parse_range("bytes=-30", 10) == (0, 9)
    assert s3.parse_range("bytes=10-", 10) == "unsatisfiable"
    assert s3.parse_range("bytes=0-1,4-5", 10) is None  # multi-range: the whole object


def test_multipart_upload_in_listed_order(server: tuple[int, Any]) -> None:
    port, _ = server
    status, _, body = call(port, "POST", "/big?uploads")
    upload_id = body.decode().split("<UploadId>")[1].split("</UploadId>")[0]
    parts = {2: b"b" * 5000, 1: b"a" * 7000, 3: b"c" * 10}
    etags = {}
    for number, data in parts.items():  # out of order, as a parallel client sends them
        status, headers, _ = call(port, "PUT", f"/big?partNumber={number}&uploadId={upload_id}",
                                  data)
        assert status == 200
        etags[number] = headers["ETag"]
    listing = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{etags[n]}</ETag></Part>"
                      for n in (1, 2, 3))
    status, _, body = call(port, "POST", f"/big?uploadId={upload_id}",
                           f"<CompleteMultipartUpload>{listing}</CompleteMultipartUpload>".encode())
    whole = parts[1] + parts[2] + parts[3]
    md5s = b"".join(hashlib.md5(parts[n]).digest() for n in (1, 2, 3))
    etag = f'"{hashlib.md5(md5s).hexdigest()}-3"'  # S3's multipart ETag: md5 of the md5s
    assert status == 200 and f"<ETag>{etag}</ETag>".encode() in body
    assert call(port, "GET", "/big")[2] == whole
    status, _, body = call(port, "POST", f"/big?uploadId={upload_id}", b"")
    assert status == 404  # completed: the upload is gone


def test_aws_chunked_body_is_decoded(server: tuple[int, Any]) -> None:
    port, _ = server
    payload = b"x" * 70000
    framed = (f"{65536:x};chunk-signature=ab\r\n".encode() + payload[:65536] + b"\r\n"
              + f"{70000 - 65536:x};chunk-signature=cd\r\n".encode() + payload[65536:]
              + b"\r\n0;chunk-signature=ef\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n")
    status, _, _ = call(port, "PUT", "/chunked", framed, headers={
        "Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": "70000",
        "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER"})
    assert status == 200 and call(port, "GET", "/chunked")[2] == payload


def test_listing_and_stats(server: tuple[int, Any]) -> None:
    port, _ = server
    for key in ("lmcache/a", "lmcache/b", "other/c"):
        call(port, "PUT", f"/{key}", b"12345")
    status, _, body = call(port, "GET", "/lmcache?list-type=2&prefix=")
    text = body.decode()
    assert status == 200 and "<Key>a</Key>" in text and "<Key>b</Key>" in text
    assert "<KeyCount>2</KeyCount>" in text and "other" not in text
    stats = json.loads(call(port, "GET", f"/?{s3.STATS}")[2])
    assert stats["requests"]["PutObject"] >= 3 and stats["objects"] >= 3


def test_boto3_multipart_against_the_test_server(server: tuple[int, Any]) -> None:
    """A real SDK (SigV4 signed, path-style, a multipart upload, a ranged GET) works."""
    boto3 = pytest.importorskip("boto3")
    from boto3.s3.transfer import TransferConfig
    from botocore.config import Config

    port, _ = server
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}",
                          aws_access_key_id="k", aws_secret_access_key="s",
                          region_name="default",
                          config=Config(s3={"addressing_style": "path"}))
    import io

    data = bytes(range(256)) * (6 * 4096)  # 6 MiB: two parts of 5 MiB and 1 MiB
    client.upload_fileobj(io.BytesIO(data), "bucket", "obj", Config=TransferConfig(
        multipart_threshold=5 * 2**20, multipart_chunksize=5 * 2**20))
    got = client.get_object(Bucket="bucket", Key="obj", Range="bytes=5242870-5242889")
    assert got["Body"].read() == data[5242870:5242890]
    assert client.head_object(Bucket="bucket", Key="obj")["ContentLength"] == len(data)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="bucket")["Contents"]]
    assert keys == ["obj"]


# --- geometry and settings held to deploykit's ------------------------------------------------

def s3_host() -> HostConfig:
    return HostConfig(vllm_accelerator="cuda", vllm_accelerator_model="h100",
                      vllm_tensor_parallel_size=2, vllm_model="Qwen/Qwen3-32B",
                      lmcache_mode="s3")


def test_geometry_is_the_examples_tp2_rank() -> None:
    geometry = find_preset(proof.MODEL)
    assert geometry is not None
    assert (geometry.num_layers, geometry.num_kv_heads, geometry.head_dim, geometry.dtype) == (
        proof.NUM_LAYERS, proof.NUM_KV_HEADS, proof.HEAD_DIM, "bfloat16")
    config = s3_host()
    layout = chunk_layout(geometry, chunk_tokens=config.lmcache_chunk_size,
                          tensor_parallel=config.vllm_tensor_parallel_size)
    assert config.lmcache_chunk_size == proof.CHUNK_TOKENS
    assert proof.object_bytes(proof.NUM_LAYERS) == layout.object_bytes == 32 * 2**20
    assert proof.object_bytes(4) == layout.object_bytes // 16


def test_lmcache_settings_are_deploykits_s3_render() -> None:
    rendered = build_lmcache_config(s3_host())
    assert rendered["extra_config"] == proof.S3_EXTRA
    differ = {"enable_async_loading", "pre_caching_hash_algorithm"}  # documented in the proof
    ours = {k: v for k, v in proof.LMCACHE_CONFIG.items() if k not in differ}
    assert ours == {k: rendered[k] for k in ours}
    assert set(rendered) - set(proof.LMCACHE_CONFIG) == {"max_local_cpu_size", "remote_url",
                                                         "extra_config"}


def test_plan_figures_and_the_comparison() -> None:
    plan = bundle.plan_figures()
    assert plan is not None
    assert plan["chunk_bytes"] == 64 * 2**20 and plan["object_bytes"] == 32 * 2**20
    assert plan["storage_gbps"] == HostConfig.model_fields["deploykit_storage_gbps"].default
    assert plan["tensor_parallel"] == 2 and plan["device"] == "h100"
    assert [r["context_tokens"] for r in plan["rows"]] == [4096, 8192, 16384, 32768]
    at_plan = proof.against_plan(plan, plan["storage_gbps"], plan["storage_gbps"] / 2)
    assert at_plan["measured_load_vs_plan"] == 1.0 and at_plan["measured_store_vs_plan"] == 0.5
    assert at_plan["chunk_s_at_measured_load"] == pytest.approx(at_plan["plan_chunk_s"])
    assert at_plan["plan_chunk_s"] == pytest.approx(64 * 2**20 * 8 / 25e9)
    # a rank's share at the host's whole rate: half the planner's storage time
    for row, ctx in zip(plan["rows"], at_plan["contexts"], strict=True):
        assert ctx["load_s_at_measured"] == pytest.approx(row["storage_s"] / 2)
    assert proof.against_plan(None, 1.0, 1.0) == {}


def test_rates() -> None:
    r = proof.rates(8 * 2**20, 0.5, chunks=4, tokens=1024)
    assert r["gb_per_s"] == pytest.approx(8 * 2**20 / 0.5 / 1e9)
    assert r["gbit_per_s"] == pytest.approx(r["gb_per_s"] * 8)
    assert (r["s_per_chunk"], r["us_per_token"]) == (0.125, pytest.approx(488.28125))
    assert proof.rates(1, 0.0, 1, 1)["gb_per_s"] is None


# --- the result document ----------------------------------------------------------------------

def fake_doc(tmp_path: Path) -> dict[str, Any]:
    args = proof.parse(["--device", "cpu", "--layers", "4", "--out", str(tmp_path)])
    doc = proof.new_doc(args, "2026-12-07T00:00:00+0000")
    doc["geometry"] = {"model": proof.MODEL, "tensor_parallel": 2, "layers": 4, "kv_heads": 4,
                       "head_dim": 128, "chunk_tokens": 256,
                       "object_bytes": proof.object_bytes(4)}
    doc["lmcache"] = {"version": "0.5.6", "extension": "pure-torch fallback (CpuDeviceOps)"}
    doc["s3"] = {"server": "bench/s3_test_server.py (in memory, 127.0.0.1)"}
    doc["plan"] = bundle.plan_figures()
    for seconds in (0.2, 0.4):
        n = 8 * proof.object_bytes(4)
        doc["repeats"].append({"chunks": 8, "tokens": 2048, "identical": True, "bytes": n,
                               "store": proof.rates(n, seconds, 8, 2048),
                               "load": proof.rates(n, seconds * 2, 8, 2048)})
    return doc


def test_result_document_conforms_and_reads(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    doc = fake_doc(tmp_path)
    proof.assemble(doc, started=0.0)
    assert doc["summary"]["store"]["s"] == pytest.approx(0.3)  # the median of 0.2 and 0.4
    assert doc["summary"]["all_identical"] is True
    assert any("CPU mode" in n for n in doc["notes"])
    assert any("4 of 64 layers" in n for n in doc["notes"])
    assert proof.write_result(tmp_path, doc, None) == 0
    written = json.loads((tmp_path / "gpu-kv-proof.json").read_text())
    assert proof.schema_problems(written) == []
    text = (tmp_path / "gpu-kv-proof.txt").read_text()
    assert "gpu-kv-proof ok on cpu" in text and "25 Gbit/s per serving host" in text
    assert "32768 tokens" in text
    assert capsys.readouterr().out == text


def test_a_failure_is_one_line_and_still_a_document(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    doc = fake_doc(tmp_path)
    proof.assemble(doc, started=0.0)
    code = proof.write_result(tmp_path, doc, proof.Fail(proof.EXIT_MEASURE, "bytes differ"))
    assert code == proof.EXIT_MEASURE
    assert capsys.readouterr().err == "gpu-kv-proof: bytes differ\n"
    written = json.loads((tmp_path / "gpu-kv-proof.json").read_text())
    assert (written["status"], written["exit_code"]) == ("failed", proof.EXIT_MEASURE)


# --- setup: wheels for this Python ------------------------------------------------------------

WHEELS = ["lmcache-0.5.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
          "lmcache-0.5.6-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
          "awscrt-0.38.1-cp311-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
          "pyzmq-27.3.0-cp312-abi3-manylinux_2_26_x86_64.manylinux_2_28_x86_64.whl",
          "cachetools-8.0.3-py3-none-any.whl",
          "numpy-2.2.6-cp312-cp312-manylinux_2_17_aarch64.manylinux2014_aarch64.whl"]


def test_pick_wheels_for_each_python() -> None:
    assert proof.pick_wheels(WHEELS, 3, 12) == {
        "lmcache": WHEELS[1], "awscrt": WHEELS[2], "pyzmq": WHEELS[3], "cachetools": WHEELS[4]}
    assert proof.pick_wheels(WHEELS, 3, 11) == {
        "lmcache": WHEELS[0], "awscrt": WHEELS[2], "cachetools": WHEELS[4]}
    assert proof.pick_wheels(WHEELS, 3, 10) == {"cachetools": WHEELS[4]}


def test_setup_refuses_a_python_the_bundle_lacks(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"pythons": ["3.9"], "distributions": ["lmcache"], "assumed_on_machine": []}))
    out = tmp_path / "out"
    code = proof.main(["--bundle", str(tmp_path), "--out", str(out),
                       "--work", str(tmp_path / "work")])
    assert code == proof.EXIT_PRECONDITION
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"has no wheels for Python {sys.version_info[0]}.{sys.version_info[1]}" in err
    assert "(it has 3.9)" in err and "GPU_KV_PYTHONS=" in err
    assert json.loads((out / "gpu-kv-proof.json").read_text())["exit_code"] == 3
    assert not (tmp_path / "work").exists()


def test_setup_without_a_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = proof.main(["--bundle", str(tmp_path / "none"), "--out", str(tmp_path / "out")])
    assert code == proof.EXIT_PRECONDITION
    assert "make gpu-kv-bundle" in capsys.readouterr().err


def test_bundle_lists_are_disjoint_and_pinned() -> None:
    assert not set(bundle.CORE) & set(bundle.IMAGE)
    assert bundle.CORE["lmcache"] == proof.LMCACHE_VERSION == bundle.LMCACHE_VERSION
    assert all(v and v[0].isdigit() for v in (bundle.CORE | bundle.IMAGE).values())
