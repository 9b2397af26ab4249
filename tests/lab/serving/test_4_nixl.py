"""NIXL's OBJ plugin against the lab RGW: LMCache's own NIXL storage backend in
dynamic mode, with CPU buffers, stores chunks from lab3's network namespace through the
nixl_backend_params deploykit renders for lab3 (endpoint by the S3 name, region, bucket,
checksums) and lab3's AWS profile; lab4 hits them byte-identical; another seed misses. The
objects are then in the bucket under NIXL's names, and are removed.

The lab's hosts run the S3 path (CPU vLLM cannot take the in-process NIXL connector), so
`--roundtrip-store nixl` renders the NIXL config from each host's settings and runs it from
a controller venv: the hosts' own lock plus the pinned NIXL."""

from __future__ import annotations

import json
import subprocess

import pytest

from deploy_kit.verify.roundtrip import nixl_object_name
from deploykit_lab.driver_venv import ensure_driver_venv
from tests.lab.conftest import CEPH_CONF, Lab, chunk_bytes, lab_model_on_host

pytestmark = pytest.mark.lab


def _bucket_objects() -> dict[str, int]:
    """S3 name -> size of every object in the bucket. RGW's index escapes a name that starts
    with '_' (as NIXL's do: the model path's '/' becomes '_') as '__…'; its locator keeps
    the name S3 clients use."""
    listing = json.loads(subprocess.run(
        ["radosgw-admin", "--conf", CEPH_CONF, "bucket", "list", "--bucket", "lmcache",
         "--max-entries", "10000"], check=True, capture_output=True, text=True).stdout)
    return {entry.get("locator") or entry["name"]: int(entry["meta"]["size"])
            for entry in listing}


def test_nixl_obj_roundtrip_through_the_rendered_params(converged: Lab) -> None:
    ensure_driver_venv()
    result = converged.deploykit("verify", "--inventory", "lab", "--roundtrip-store", "nixl",
                                 "--json", "--check", "s3-credentials-valid")
    findings = {f["check"]: f for f in json.loads(result.stdout)["findings"]}
    trip = findings["lmcache-roundtrip"]
    assert trip["status"] == "pass", trip
    assert trip["target"] == "lab3 → lab4" and "hit 2/2, byte-identical" in trip["message"]
    assert "NIXL OBJ at http://s3.lab.test/lmcache" in trip["message"]
    names = findings["lmcache-object-names"]
    assert names["status"] == "pass", names
    mismatch = findings["lmcache-seed-mismatch"]
    assert mismatch["status"] == "pass" and "misses (0/2 hits)" in mismatch["message"]

    # NIXL's objects are really in the bucket, under LMCache's key with '/' and '@' as '_'
    prefix = nixl_object_name(f"{lab_model_on_host()}@1@0@")
    written = {n: size for n, size in _bucket_objects().items() if n.startswith(prefix)}
    assert len(written) == 2 and all(n.endswith("_bfloat16") for n in written), written
    assert set(written.values()) == {chunk_bytes()}  # one 256-token chunk of the lab model
    assert names["message"].removeprefix("NIXL objects named ") in written
    for name in written:
        subprocess.run(["radosgw-admin", "--conf", CEPH_CONF, "object", "rm", "--bucket",
                        "lmcache", "--object", name], check=True, capture_output=True)
    assert not [n for n in _bucket_objects() if n.startswith(prefix)]
