"""Unit tests have no hosts: `up` reads no converge record (every host is a first install,
so no upgrade flow starts) unless a test replaces read_versions with records of its own.
Each test has its own site-lock directory: the lock is keyed by the site's S3 name, bucket and
datacenter, which every copy of the example shares, so tests on parallel workers would
otherwise wait for (and be refused by) each other's locks."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _no_host_records(monkeypatch: pytest.MonkeyPatch) -> None:
    from deploy_kit.transport import records

    def none(site: Any, hosts: Any = None) -> dict[str, Any]:
        return {}

    monkeypatch.setattr(records, "read_versions", none)


@pytest.fixture(autouse=True)
def _own_lock_dir(monkeypatch: pytest.MonkeyPatch,
                  tmp_path_factory: pytest.TempPathFactory) -> None:
    from deploy_kit.ops.site_lock import LOCK_DIR_ENV

    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path_factory.mktemp("site-locks") / "locks"))
