"""A real CoreDNS binary built from the Go module proxy (go/coredns), cached."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from deploykit_lab.layout import CACHE_DIR, GO_DIR, coredns_binary
from deploykit_lab.system import cache_lock, go_binary, run

# The CoreDNS version is pinned by go/coredns/go.mod and go.sum.


def ensure_coredns() -> Path:
    with cache_lock("coredns"):
        return _ensure_coredns()


def _ensure_coredns() -> Path:
    target = coredns_binary()
    if target.exists():
        return target
    source = GO_DIR / "coredns"
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
