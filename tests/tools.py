"""Helpers for tests that need a real external tool (haproxy, coredns, ceph)."""

from __future__ import annotations

import os
import shutil

import pytest


def require_tool(name: str) -> str:
    """Path of `name`; CI (DEPLOYKIT_REQUIRE_TOOLS=1) fails instead of skipping without it."""
    path = shutil.which(name)
    if path:
        return path
    if os.environ.get("DEPLOYKIT_REQUIRE_TOOLS") == "1":
        pytest.fail(f"{name} is required here (DEPLOYKIT_REQUIRE_TOOLS=1) but not installed")
    pytest.skip(f"{name} not installed")
