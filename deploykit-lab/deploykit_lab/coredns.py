"""A real CoreDNS binary built from the Go module proxy (tools/coredns), cached."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from deploy_kit.project import project_dir
from deploykit_lab.inventory import coredns_binary
from deploykit_lab.layout import CACHE_DIR
from deploykit_lab.system import LabError, cache_lock, run

# The CoreDNS version is pinned by tools/coredns/go.mod and go.sum.


def go_binary() -> str:
    for candidate in (shutil.which("go"), "/usr/local/go/bin/go", "/usr/lib/go/bin/go"):
        if candidate and Path(candidate).exists():
            return candidate
    raise LabError("the lab builds CoreDNS with Go, and no `go` was found",
                   hint="install Go (apt-get install golang-go) or put a coredns binary at "
                        f"{coredns_binary()}")


def ensure_coredns() -> Path:
    with cache_lock("coredns"):
        return _ensure_coredns()


def _ensure_coredns() -> Path:
    target = coredns_binary()
    if target.exists():
        return target
    source = project_dir() / "tools" / "coredns"
    build = CACHE_DIR / "coredns-build"
    shutil.rmtree(build, ignore_errors=True)
    shutil.copytree(source, build)
    env = {"GOPATH": str(CACHE_DIR / "gopath"), "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0",
           "HOME": os.environ.get("HOME", "/root"), "GOCACHE": str(CACHE_DIR / "gocache")}
    go = go_binary()
    run([go, "-C", str(build), "build", "-trimpath", "-ldflags", "-s -w", "-o",
         str(target) + ".tmp", "."], env=env, timeout=1800)
    Path(str(target) + ".tmp").rename(target)
    shutil.rmtree(build, ignore_errors=True)
    return target
