"""A one-OSD Ceph cluster on this machine (mon, mgr, bluestore OSD on a sparse file),
bound to the lab bridge so the hosts reach it. Size-1 settings: there is one OSD."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

from deploy_kit.lab.layout import CEPH_DIR, GATEWAY, NETWORK_PREFIX, PREFIX_LEN
from deploy_kit.lab.system import LabError, log, run

MON_HOST = f"[v2:{GATEWAY}:3300,v1:{GATEWAY}:6789]"


def conf_path() -> Path:
    return CEPH_DIR / "ceph.conf"


def ceph_conf(fsid: str) -> str:
    b = CEPH_DIR
    return f"""[global]
fsid = {fsid}
mon host = {MON_HOST}
mon initial members = a
public network = {NETWORK_PREFIX}.0/{PREFIX_LEN}
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


def ceph(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run(["ceph", "--conf", str(conf_path()), *args], timeout=timeout)


def _daemon(argv: list[str], name: str) -> int:
    log_file = (CEPH_DIR / "log" / f"{name}.out").open("a")
    proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            env={"CEPH_CONF": str(conf_path()), "PATH": "/usr/sbin:/usr/bin:/bin"})
    log(f"started {name} pid {proc.pid}")
    return proc.pid


def _wait(what: str, probe: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if callable(probe) and probe():
                return
        except (LabError, subprocess.TimeoutExpired):
            pass
        time.sleep(1)
    raise LabError(f"Ceph: {what} not ready after {timeout:.0f} s",
                   hint=f"see {CEPH_DIR}/log")


def bootstrap() -> dict[str, object]:
    """Create and start the cluster; returns what the state file needs (fsid, pids)."""
    for sub in ("mon/a", "mgr/x", "osd", "run", "log"):
        (CEPH_DIR / sub).mkdir(parents=True, exist_ok=True)
    fsid = str(uuid.uuid4())
    conf_path().write_text(ceph_conf(fsid))
    b = str(CEPH_DIR)
    auth = ["ceph-authtool"]
    run([*auth, "--create-keyring", f"{b}/mon.keyring", "--gen-key", "-n", "mon.",
         "--cap", "mon", "allow *"])
    run([*auth, "--create-keyring", f"{b}/client.admin.keyring", "--gen-key", "-n",
         "client.admin", "--cap", "mon", "allow *", "--cap", "osd", "allow *",
         "--cap", "mds", "allow *", "--cap", "mgr", "allow *"])
    run([*auth, f"{b}/mon.keyring", "--import-keyring", f"{b}/client.admin.keyring"])
    for keyring in ("mon.keyring", "client.admin.keyring"):
        (CEPH_DIR / keyring).chmod(0o600)
    run(["monmaptool", "--create", "--addv", "a", MON_HOST, "--fsid", fsid, f"{b}/monmap"])
    conf = ["--conf", str(conf_path())]
    run(["ceph-mon", *conf, "--mkfs", "-i", "a", "--monmap", f"{b}/monmap",
         "--keyring", f"{b}/mon.keyring"])
    pids = {"mon.a": _daemon(["ceph-mon", *conf, "-f", "-i", "a"], "mon.a")}
    _wait("monitor", lambda: ceph("mon", "stat", timeout=10).returncode == 0, 60)
    ceph("auth", "get-or-create", "mgr.x", "mon", "allow profile mgr", "osd", "allow *",
         "mds", "allow *", "-o", f"{b}/mgr.x.keyring")
    pids["mgr.x"] = _daemon(["ceph-mgr", *conf, "-f", "-i", "x"], "mgr.x")
    osd_uuid = str(uuid.uuid4())
    osd_id = ceph("osd", "new", osd_uuid).stdout.strip()
    ceph("auth", "get-or-create", f"osd.{osd_id}", "mon", "allow profile osd", "mgr",
         "allow profile osd", "osd", "allow *", "-o", f"{b}/osd.{osd_id}.keyring")
    (CEPH_DIR / "osd" / osd_id).mkdir(parents=True, exist_ok=True)
    run(["ceph-osd", *conf, "-i", osd_id, "--mkfs", "--osd-uuid", osd_uuid], timeout=300)
    pids[f"osd.{osd_id}"] = _daemon(["ceph-osd", *conf, "-f", "-i", osd_id], f"osd.{osd_id}")

    def osd_up() -> bool:
        stat = json.loads(ceph("osd", "stat", "-f", "json", timeout=10).stdout)
        return int(stat.get("num_up_osds", 0)) >= 1

    _wait("OSD", osd_up, 120)
    return {"fsid": fsid, "mon_host": MON_HOST, "pids": pids, "conf": str(conf_path())}
