"""A real Ceph cluster (mon, mgr, one bluestore OSD) and a real radosgw on loopback, made the
way the lab makes its own (deploykit_lab.ceph), for what needs S3 and Ceph but no nspawn
host: the pool and bucket modules' change / no-change / check-mode behaviour as Ansible
runs them, `deploykit cache stats|purge` against a bucket holding LMCache-named objects,
and a 64 MiB SigV4 round trip through the virtual-hosted bucket name.

Needs root (Ceph's daemons) and the controller's Ceph packages, which `make test`'s
background lab prefetch installs (this waits on its apt lock). Only 127.0.0.1 and
127.0.0.2 are contacted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from deploy_kit.transport.sigv4 import Credentials, request
from tests.cli import Result, run_cli
from tests.conftest import REPO
from tests.tools import ansible_module

ADDRESS, PORT, FQDN, BUCKET = "127.0.0.2", 7480, "s3.loop.test", "lmcache"
VHOST = f"{BUCKET}.{FQDN}"


@dataclass
class Loopback:
    conf: Path
    credentials: Credentials
    inventory: Path


def _require_root() -> None:
    if os.geteuid() != 0:
        if os.environ.get("DEPLOYKIT_REQUIRE_TOOLS") == "1":
            pytest.fail("the loopback Ceph needs root")
        pytest.skip("the loopback Ceph needs root")


def _alive(pid: int) -> bool:
    """Not exited; a child of this process that exited is reaped here (a zombie answers
    kill 0, so without the reap every stop waited the whole deadline)."""
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _stop(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for pid in pids:
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _inventory(root: Path, conf: Path) -> Path:
    """A site whose admin host is this machine and whose one gateway is the loopback RGW
    (the other groups are named but never contacted by what these tests run)."""
    hosts = {"all": {"children": {
        # the interpreter set as on any managed host: discovery here can find a pyenv shim
        "ceph_admin": {"hosts": {"adm": {"ansible_host": "127.0.0.1",
                                         "ansible_connection": "local",
                                         "ansible_python_interpreter": sys.executable}}},
        "rgw": {"hosts": {"rgw1": {"ansible_host": ADDRESS}}},
        "consul_servers": {"hosts": {"c1": {"ansible_host": "10.255.0.21"}}},
        "dns": {"hosts": {"dns1": {"ansible_host": "10.255.0.31"}}},
        # Qwen3-32B at TP 1 on one H100: 32K fits beside vLLM's CUDA graphs, 40K does not
        "vllm": {"hosts": {"gpu1": {"ansible_host": "10.255.1.1", "vllm_accelerator": "cuda",
                                    "vllm_max_model_len": 32768}}},
    }}}
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (root / "group_vars" / "all.yml").write_text(yaml.safe_dump({
        "deploykit_s3_fqdn": FQDN, "deploykit_s3_bucket": BUCKET, "deploykit_s3_port": PORT,
        "deploykit_dns_mode": "static", "deploykit_ceph_conf": str(conf),
        "deploykit_ceph_osd_count": 1}))
    return root


def _anonymous_status() -> int:
    try:
        return request(ADDRESS, PORT, "GET", "/", FQDN, "default", None, timeout=2)[0]
    except OSError:  # not listening yet
        return 0


@pytest.fixture(scope="module")
def loopback(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loopback]:
    _require_root()
    from deploykit_lab import ceph
    from deploykit_lab.layout import CONTROLLER_PACKAGES
    from deploykit_lab.system import ensure_packages

    ensure_packages(CONTROLLER_PACKAGES)  # waits for a background prefetch's apt run
    work = tmp_path_factory.mktemp("ceph")
    cluster = ceph.Cluster(work / "ceph", "127.0.0.1", "127.0.0.0/8")
    pids: list[int] = []
    try:
        state = ceph.bootstrap(cluster)
        pids += [int(p) for p in state["pids"].values()]  # type: ignore[attr-defined]
        pids.append(ceph.start_radosgw(cluster, "rgw.loop", f"{ADDRESS}:{PORT}", FQDN))
        deadline = time.monotonic() + 120
        while _anonymous_status() != 200:
            assert time.monotonic() < deadline, "the loopback radosgw did not answer"
            time.sleep(1)
        user = json.loads(subprocess.run(
            ["radosgw-admin", "--conf", str(cluster.conf), "user", "create", "--uid", BUCKET,
             "--display-name", "deploykit test"], check=True, capture_output=True,
            text=True, timeout=60).stdout)
        key = user["keys"][0]
        credentials = Credentials(key["access_key"], key["secret_key"])
        status, _ = request(ADDRESS, PORT, "PUT", "/", VHOST, "default", credentials)
        assert status == 200, f"creating bucket {BUCKET}: HTTP {status}"
        yield Loopback(cluster.conf, credentials, _inventory(work / "inventory", cluster.conf))
    finally:
        _stop(pids)
        shutil.rmtree(work, ignore_errors=True)


def pool(conf: Path, name: str) -> dict:
    listing = json.loads(subprocess.run(
        ["ceph", "--conf", str(conf), "osd", "pool", "ls", "detail", "-f", "json"],
        check=True, capture_output=True, text=True, timeout=60).stdout)
    found: dict = next(p for p in listing if p["pool_name"] == name)
    return found


def test_pool_module_changes_only_the_difference(loopback: Loopback) -> None:
    args = {"name": "dk-test-pool", "pg_num": 8, "size": 1, "min_size": 1,
            "autoscale_mode": "off", "conf": str(loopback.conf)}
    created = ansible_module("deploykit_ceph_pool", args)
    assert created["changed"] is True, created
    assert (pool(loopback.conf, "dk-test-pool")["pg_num_target"],
            pool(loopback.conf, "dk-test-pool")["size"]) == (8, 1)
    again = ansible_module("deploykit_ceph_pool", args)
    assert again["changed"] is False and again["actions"] == [], again
    # check mode reports the difference and runs none of it
    wanted = ansible_module("deploykit_ceph_pool", {**args, "pg_num": 16}, check=True)
    assert wanted["changed"] is True and any("pg_num" in str(a) for a in wanted["actions"])
    assert pool(loopback.conf, "dk-test-pool")["pg_num_target"] == 8
    grown = ansible_module("deploykit_ceph_pool", {**args, "pg_num": 16})
    assert grown["changed"] is True
    assert not any("size" in str(a).split() for a in grown["actions"]), grown["actions"]
    # pg_num itself ramps towards the target in steps; the target is what was asked
    assert pool(loopback.conf, "dk-test-pool")["pg_num_target"] == 16
    # a re-run during (or after) the ramp asks for nothing
    assert ansible_module("deploykit_ceph_pool", {**args, "pg_num": 16})["changed"] is False
    # to size 2 and back to 1: the mons refuse size 1 unless mon_allow_pool_size_one is on
    ansible_module("deploykit_ceph_pool", {**args, "pg_num": 16, "size": 2})
    assert pool(loopback.conf, "dk-test-pool")["size"] == 2
    shrunk = ansible_module("deploykit_ceph_pool", {**args, "pg_num": 16})
    assert shrunk["actions"][:2] == [
        "ceph config set global mon_allow_pool_size_one true",
        "ceph osd pool set dk-test-pool size 1 --yes-i-really-mean-it"]
    assert pool(loopback.conf, "dk-test-pool")["size"] == 1


def test_bucket_module_writes_the_lifecycle_only_when_it_differs(loopback: Loopback,
                                                                  tmp_path: Path) -> None:
    secrets = {"k_access": loopback.credentials.access_key,
               "k_secret": loopback.credentials.secret_key}
    rules = {"Rules": [{"ID": "expire", "Status": "Enabled", "Filter": {"Prefix": ""},
                        "Expiration": {"Days": 7}}]}
    args = {"endpoint": f"http://{ADDRESS}:{PORT}", "access_key": "{{ k_access }}",
            "secret_key": "{{ k_secret }}", "bucket": "dk-test-bucket", "lifecycle": rules}
    first = ansible_module("deploykit_s3_bucket", args, secrets=secrets, tmp=tmp_path)
    assert first["changed"] and first["created"] and first["lifecycle_changed"], first
    second = ansible_module("deploykit_s3_bucket", args, secrets=secrets, tmp=tmp_path)
    assert not second["changed"] and not second["lifecycle_changed"], second
    rules["Rules"][0]["Expiration"] = {"Days": 3}
    third = ansible_module("deploykit_s3_bucket", args, secrets=secrets, tmp=tmp_path)
    assert third["changed"] and third["lifecycle_changed"] and not third["created"], third


def _put(loopback: Loopback, key: str, body: bytes) -> int:
    status, _ = request(ADDRESS, PORT, "PUT", "/" + urllib.parse.quote(key, safe="-_.~/"),
                        VHOST, "default", loopback.credentials, body)
    return status


def deploykit(*args: str) -> Result:
    return run_cli(*args, cwd=REPO)


def test_64mib_sigv4_round_trip_through_the_bucket_name(loopback: Loopback) -> None:
    payload = os.urandom(64 * 1024 * 1024)
    assert _put(loopback, "deploykit-smoke-object", payload) == 200
    status, body = request(ADDRESS, PORT, "GET", "/deploykit-smoke-object", VHOST, "default",
                           loopback.credentials)
    assert status == 200 and hashlib.sha256(body).digest() == hashlib.sha256(payload).digest()
    status, _ = request(ADDRESS, PORT, "DELETE", "/deploykit-smoke-object", VHOST, "default",
                        loopback.credentials)
    assert status == 204


# LMCache's names: in-process `<model with / as _>@<world>@<rank>@<hash>@<dtype>`, and the
# server topology's `<model path>@<hex>@<rank>@<sha256>` (no dtype, '/' kept)
KEYS = [f"Qwen_Qwen3-8B@2@{rank}@{h}@bfloat16" for h in ("1be814944da4012e", "-d07e2091d48598c")
        for rank in (0, 1)] + ["meta-llama_Llama-3.1-8B-Instruct@1@0@abc123@bfloat16"]


def test_cache_stats_and_purge(loopback: Loopback) -> None:
    for key in KEYS:
        assert _put(loopback, key, os.urandom(4096)) == 200
    inventory = str(loopback.inventory)
    stats = deploykit("cache", "stats", "-i", inventory, "--json")
    assert stats.returncode == 0, stats.stderr
    groups = {(g["model"], g["world_size"]): g for g in json.loads(stats.stdout)["groups"]}
    qwen = groups[("Qwen_Qwen3-8B", 2)]
    assert (qwen["objects"], qwen["chunks"], qwen["bytes"]) == (4, 2, 4 * 4096)
    assert groups[("meta-llama_Llama-3.1-8B-Instruct", 1)]["objects"] == 1
    refused = deploykit("cache", "purge", "-i", inventory, "--model", "Qwen/Qwen3-8B")
    assert refused.returncode == 2  # no terminal and no --yes: nothing deleted
    purged = deploykit("cache", "purge", "-i", inventory, "--model", "Qwen/Qwen3-8B", "--yes")
    assert purged.returncode == 0 and "deleted 4 of 4" in purged.stderr, purged.stderr
    after = json.loads(deploykit("cache", "stats", "-i", inventory, "--json").stdout)
    assert [(g["model"], g["objects"]) for g in after["groups"]] == \
        [("meta-llama_Llama-3.1-8B-Instruct", 1)]
    assert loopback.credentials.secret_key not in stats.stdout + stats.stderr + purged.stderr


def _noautoscale(conf: Path) -> bool:
    done = subprocess.run(["ceph", "--conf", str(conf), "osd", "pool", "get", "noautoscale"],
                          capture_output=True, text=True, timeout=60, check=True)
    return "is on" in done.stdout + done.stderr


# tier 2: the role's record-and-restore logic runs in every `make test` through the unit
# tests of test_autoscale_flag.py; this proof of Ceph's own flag costs about 46 s
@pytest.mark.tier2
def test_cluster_wide_noautoscale_only_when_asked_and_restored(loopback: Loopback,
                                                              tmp_path: Path) -> None:
    """roles/ceph_rgw_pools (the PG autoscaler flag) on a real Ceph: the default leaves the flag
    alone; asked, it sets and records it once; `down`'s restore clears it, and an admin's
    own flag (no record) survives."""
    from tests.unit.test_autoscale_flag import run_tasks

    conf = str(loopback.conf)
    assert not _noautoscale(loopback.conf)
    assert run_tasks(tmp_path, "configure.yml", False, conf=conf)["changed"] == 0
    assert not _noautoscale(loopback.conf)
    assert run_tasks(tmp_path, "configure.yml", True, conf=conf)["changed"] == 2
    assert _noautoscale(loopback.conf)
    assert run_tasks(tmp_path, "configure.yml", True, conf=conf)["changed"] == 0
    assert run_tasks(tmp_path, "restore_autoscale.yml", True, conf=conf)["changed"] == 2
    assert not _noautoscale(loopback.conf)
    subprocess.run(["ceph", "--conf", conf, "osd", "pool", "set", "noautoscale"], check=True,
                   capture_output=True, timeout=60)  # the cluster admin's own
    assert run_tasks(tmp_path, "restore_autoscale.yml", True, conf=conf)["changed"] == 0
    assert _noautoscale(loopback.conf)
    subprocess.run(["ceph", "--conf", conf, "osd", "pool", "unset", "noautoscale"],
                   check=True, capture_output=True, timeout=60)
