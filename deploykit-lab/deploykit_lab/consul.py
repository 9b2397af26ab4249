"""A real Consul agent built from the Go module proxy (go/consul), cached with its sha256.

Consul is pinned to v1.16.3 by go/consul/go.mod and go.sum: the last MPL-2.0 release line
(1.17 and later are BUSL). The first build takes about 11 minutes on two cores; later lab runs
reuse /var/cache/deploykit/consul-1.16.3/. Roles install it from the controller and check the
sha256 recorded here, so lab hosts never reach a registry.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from deploykit_lab.layout import CACHE_DIR, GO_DIR
from deploykit_lab.system import cache_lock, go_binary, run

CONSUL_VERSION = "1.16.3"
CONSUL_MODULE = "github.com/hashicorp/consul"


def consul_dir() -> Path:
    return CACHE_DIR / f"consul-{CONSUL_VERSION}"


def consul_binary() -> Path:
    return consul_dir() / "consul"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def consul_sha256() -> str:
    """The checksum recorded when the binary was built (roles verify the installed copy)."""
    return (consul_dir() / "consul.sha256").read_text().split()[0]


def ensure_consul() -> Path:
    with cache_lock("consul"):
        return _ensure_consul()


def _ensure_consul() -> Path:
    target = consul_binary()
    recorded = consul_dir() / "consul.sha256"
    if target.exists() and recorded.exists():
        return target
    consul_dir().mkdir(parents=True, exist_ok=True)
    source = GO_DIR / "consul"
    build = CACHE_DIR / "consul-build"
    shutil.rmtree(build, ignore_errors=True)
    shutil.copytree(source, build)
    env = {"GOPATH": str(CACHE_DIR / "gopath"), "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0",
           "HOME": os.environ.get("HOME", "/root"), "GOCACHE": str(CACHE_DIR / "gocache")}
    tmp = Path(str(target) + ".tmp")
    run([go_binary(), "-C", str(build), "build", "-trimpath", "-ldflags", "-s -w", "-o",
         str(tmp), CONSUL_MODULE], env=env, timeout=3600)
    tmp.rename(target)
    recorded.write_text(f"{sha256_file(target)}  consul\n")
    shutil.rmtree(build, ignore_errors=True)
    return target
