"""Unit tests have no hosts: `up` reads no converge record (every host is a first install,
so no upgrade flow starts) unless a test replaces read_versions with records of its own."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _no_host_records(monkeypatch: pytest.MonkeyPatch) -> None:
    from deploy_kit.transport import records

    def none(site: Any, hosts: Any = None) -> dict[str, Any]:
        return {}

    monkeypatch.setattr(records, "read_versions", none)
