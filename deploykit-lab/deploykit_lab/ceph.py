"""A one-OSD Ceph cluster on this machine (mon, mgr, bluestore OSD on a sparse file).
Size-1 settings: there is one OSD. The lab's is bound to the lab bridge so the hosts reach
it (LAB); the loopback integration tests make one of their own on 127.0.0.1 (Cluster)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from deploykit_lab.layout import CEPH_DIR, GATEWAY, NETWORK_PREFIX, PREFIX_LEN
from deploykit_lab.system import LabError, log, run


@dataclass(frozen=True)
class Cluster:
    directory: Path
    address: str  # the monitor's (and the OSD's) address
    network: str  # the public network, CIDR

    @property
    def mon_host(self) -> str:
        return f"[v2:{self.address}:3300,v1:{self.address}:6789]"

    @property
    def conf(self) -> Path:
        return self.directory / "ceph.conf"


LAB = Cluster(CEPH_DIR, GATEWAY, f"{NETWORK_PREFIX}.0/{PREFIX_LEN}")
MON_HOST = LAB.mon_host


def ceph_conf(fsid: str, cluster: Cluster = LAB) -> str:
    b = cluster.directory
    return f"""[global]
fsid = {fsid}
mon host = {cluster.mon_host}
mon initial members = a
public network = {cluster.network}
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
keyring = {b}/$name.keyring
run dir = {b}/run
admin socket = {b}/run/$name.asok
log file = {b}/log/$name.log
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 2
mon max pg per osd = 1000
ms bind ipv6 = false
[mon]
mon data = {b}/mon/$id
[mgr]
mgr data = {b}/mgr/$id
[osd]
osd data = {b}/osd/$id
osd objectstore = bluestore
bluestore block path = {b}/osd/block.$id
bluestore block size = 10737418240
bluestore block create = true
"""


def ceph(*args: str, timeout: float = 60, cluster: Cluster = LAB
         ) -> subprocess.CompletedProcess[str]:
    return run(["ceph", "--conf", str(cluster.conf), *args], timeout=timeout)


def _start(argv: list[str], name: str, cluster: Cluster = LAB) -> int:
    log_file = (cluster.directory / "log" / f"{name}.out").open("a")
    proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            env={"CEPH_CONF": str(cluster.conf),
                                 "PATH": "/usr/sbin:/usr/bin:/bin"})
    log(f"started {name} pid {proc.pid}")
    return proc.pid


def _await(what: str, probe: object, timeout: float, cluster: Cluster = LAB) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if callable(probe) and probe():
                return
        except (LabError, subprocess.TimeoutExpired):
            pass
        time.sleep(1)
    raise LabError(f"Ceph: {what} not ready after {timeout:.0f} s",
                   hint=f"see {cluster.directory}/log")


def bootstrap(cluster: Cluster = LAB) -> dict[str, object]:
    """Create and start the cluster; returns what the state file needs (fsid, pids)."""
    for sub in ("mon/a", "mgr/x", "osd", "run", "log"):
        (cluster.directory / sub).mkdir(parents=True, exist_ok=True)
    fsid = str(uuid.uuid4())
    cluster.conf.write_text(ceph_conf(fsid, cluster))
    b = str(cluster.directory)
    auth = ["ceph-authtool"]
    run([*auth, "--create-keyring", f"{b}/mon.keyring", "--gen-key", "-n", "mon.",
         "--cap", "mon", "allow *"])
    run([*auth, "--create-keyring", f"{b}/client.admin.keyring", "--gen-key", "-n",
         "client.admin", "--cap", "mon", "allow *", "--cap", "osd", "allow *",
         "--cap", "mds", "allow *", "--cap", "mgr", "allow *"])
    run([*auth, f"{b}/mon.keyring", "--import-keyring", f"{b}/client.admin.keyring"])
    for keyring in ("mon.keyring", "client.admin.keyring"):
        (cluster.directory / keyring).chmod(0o600)
    run(["monmaptool", "--create", "--addv", "a", cluster.mon_host, "--fsid", fsid,
         f"{b}/monmap"])
    conf = ["--conf", str(cluster.conf)]
    run(["ceph-mon", *conf, "--mkfs", "-i", "a", "--monmap", f"{b}/monmap",
         "--keyring", f"{b}/mon.keyring"])
    pids = {"mon.a": _start(["ceph-mon", *conf, "-f", "-i", "a"], "mon.a", cluster)}
    _await("monitor", lambda: ceph("mon", "stat", timeout=10, cluster=cluster).returncode == 0,
           60, cluster)
    ceph("auth", "get-or-create", "mgr.x", "mon", "allow profile mgr", "osd", "allow *",
         "mds", "allow *", "-o", f"{b}/mgr.x.keyring", cluster=cluster)
    pids["mgr.x"] = _start(["ceph-mgr", *conf, "-f", "-i", "x"], "mgr.x", cluster)
    osd_uuid = str(uuid.uuid4())
    osd_id = ceph("osd", "new", osd_uuid, cluster=cluster).stdout.strip()
    ceph("auth", "get-or-create", f"osd.{osd_id}", "mon", "allow profile osd", "mgr",
         "allow profile osd", "osd", "allow *", "-o", f"{b}/osd.{osd_id}.keyring",
         cluster=cluster)
    (cluster.directory / "osd" / osd_id).mkdir(parents=True, exist_ok=True)
    run(["ceph-osd", *conf, "-i", osd_id, "--mkfs", "--osd-uuid", osd_uuid], timeout=300)
    pids[f"osd.{osd_id}"] = _start(["ceph-osd", *conf, "-f", "-i", osd_id], f"osd.{osd_id}",
                                   cluster)

    def osd_up() -> bool:
        stat = json.loads(ceph("osd", "stat", "-f", "json", timeout=10,
                               cluster=cluster).stdout)
        return int(stat.get("num_up_osds", 0)) >= 1

    _await("OSD", osd_up, 120, cluster)
    return {"fsid": fsid, "mon_host": cluster.mon_host, "pids": pids,
            "conf": str(cluster.conf)}


def start_radosgw(cluster: Cluster, name: str, endpoint: str, dns_name: str) -> int:
    """One radosgw (beast on `endpoint`, host:port) with vhost routing for `dns_name`; its
    pid. The lab's gateways run on its hosts through the roles; this one serves the
    loopback integration tests."""
    b = str(cluster.directory)
    run(["ceph", "--conf", str(cluster.conf), "auth", "get-or-create", f"client.{name}",
         "mon", "allow rw", "osd", "allow rwx", "mgr", "allow rw", "-o",
         f"{b}/client.{name}.keyring"])
    (cluster.directory / f"client.{name}.keyring").chmod(0o600)
    (cluster.directory / "rgw" / name).mkdir(parents=True, exist_ok=True)
    return _start(["radosgw", "--conf", str(cluster.conf), "-f", "-n", f"client.{name}",
                   "--rgw-frontends", f"beast endpoint={endpoint}",
                   "--rgw-dns-name", dns_name, "--rgw-data", f"{b}/rgw/{name}"],
                  name, cluster)
