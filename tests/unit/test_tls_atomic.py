"""The site CA is created once, as a pair, even by two first runs at the same moment."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from deploy_kit.ops import tls
from deploy_kit.ops.site import open_site
from tests.conftest import InventoryFactory

TLS = {"deploykit_s3_tls": True, "deploykit_s3_port": 443, "deploykit_s3_fqdn": "s3.t.test"}


def _create(root: str, start: object, out: object) -> None:
    """One first run: wait for the others, then ensure the CA (slowed so all overlap)."""
    real = tls.create_ca

    def slow(*args: object, **kwargs: object) -> tuple[bytes, bytes]:
        pem = real(*args, **kwargs)  # type: ignore[arg-type]
        time.sleep(0.3)  # every creator is past its "no CA yet" check before anyone writes
        return pem

    tls.create_ca = slow
    try:
        start.wait()  # type: ignore[attr-defined]
        ca = tls.ensure_ca(open_site(root))
        out.put((os.getpid(), ca.pem, None))  # type: ignore[attr-defined]
    except BaseException as exc:  # reported to the parent, which fails the test
        out.put((os.getpid(), b"", repr(exc)))  # type: ignore[attr-defined]


@pytest.mark.parametrize("creators", [2, 4])
def test_concurrent_first_runs_share_one_ca(make_inventory: InventoryFactory,
                                            creators: int) -> None:
    root = make_inventory(all=TLS)
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Barrier(creators), ctx.Queue()
    procs = [ctx.Process(target=_create, args=(str(root), start, out)) for _ in range(creators)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert [err for _, _, err in results] == [None] * creators
    d = root / ".deploykit-tls"
    on_disk = (d / "ca.crt").read_bytes()
    assert {pem for _, pem, _ in results} == {on_disk}  # every run uses the CA on disk
    cert = x509.load_pem_x509_certificate(on_disk)
    key = serialization.load_pem_private_key((d / "ca.key").read_bytes(), password=None)
    assert key.public_key() == cert.public_key()  # the key is that CA's, not another run's
    assert (d / "ca.crt").stat().st_mode & 0o777 == 0o644
    assert (d / "ca.key").stat().st_mode & 0o777 == 0o600
    assert not [p.name for p in d.iterdir() if p.name.endswith(".tmp")]  # no temp left over


def test_write_private_leaves_no_temp_and_never_shares_one(tmp_path: Path) -> None:
    target = tmp_path / "ca.key"
    (tmp_path / ".ca.key.tmp").write_text("a stale temp of the old fixed name\n")
    tls._write_private(target, b"secret\n")  # the stale name is neither reused nor needed
    assert target.read_bytes() == b"secret\n" and target.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ca.key.tmp", "ca.key"]
