"""Downloads for the upstream-replay tier: PyPI's files, fetched once into a cache, each
checked against the sha256 PyPI's index gives; and single members of a large wheel, read with
HTTP range requests (a torch wheel is ~550 MB; its libc10*.so are a few MB)."""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import shutil
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

INDEX = "https://pypi.org/simple"
TIMEOUT = 60
CACHE_ENV = "DEPLOYKIT_UPSTREAM_CACHE"
DEFAULT_CACHE = "/var/cache/deploykit/upstream"


class FetchError(RuntimeError):
    """A download the tier needs failed: the tier fails with this one line."""


def cache_dir() -> Path:
    path = Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def locked(name: str) -> Iterator[None]:
    """One builder per cached artefact, across concurrent runs."""
    locks = cache_dir() / ".locks"
    locks.mkdir(exist_ok=True)
    with (locks / f"{name}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _open(url: str, headers: dict[str, str] | None = None) -> Any:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        return urllib.request.urlopen(request, timeout=TIMEOUT)
    except OSError as exc:  # URLError, HTTPError, timeouts
        raise FetchError(f"GET {url}: {exc}") from exc


def index_files(package: str) -> list[dict[str, Any]]:
    """PyPI's simple index of one project (PEP 691 JSON), as pip reads it."""
    with _open(f"{INDEX}/{package}/",
               {"Accept": "application/vnd.pypi.simple.v1+json"}) as response:
        files: list[dict[str, Any]] = json.load(response)["files"]
    return files


def index_entry(package: str, filename: str) -> dict[str, Any]:
    for entry in index_files(package):
        if entry["filename"] == filename:
            return entry
    raise FetchError(f"{filename} is not in PyPI's index of {package}")


def download(package: str, filename: str) -> Path:
    """One file of a PyPI project, cached under files/ and checked against its sha256."""
    target = cache_dir() / "files" / filename
    if target.is_file():
        return target
    with locked(filename):
        if target.is_file():
            return target
        entry = index_entry(package, filename)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(target.suffix + ".part")
        digest = hashlib.sha256()
        with _open(entry["url"]) as response, partial.open("wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != entry["hashes"]["sha256"]:
            partial.unlink()
            raise FetchError(f"{filename}: sha256 differs from PyPI's index")
        partial.rename(target)
    return target


class RangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file through HTTP range requests: enough for
    zipfile to read the central directory and chosen members."""

    def __init__(self, url: str, size: int) -> None:
        super().__init__()
        self.url, self.size, self.pos = url, size, 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = base + offset
        return self.pos

    def read(self, n: int | None = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        with _open(self.url, {"Range": f"bytes={self.pos}-{end - 1}"}) as response:
            data: bytes = response.read()
        self.pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def wheel_members(package: str, filename: str, members: list[str]) -> dict[str, Path]:
    """Chosen members of a PyPI wheel, fetched by range reads and cached under
    members/<wheel>/. Raises FetchError naming any member the wheel lacks."""
    root = cache_dir() / "members" / filename
    wanted = {m: root / m for m in members}
    if all(p.is_file() for p in wanted.values()):
        return wanted
    with locked(filename):
        entry = index_entry(package, filename)
        remote = io.BufferedReader(RangeFile(entry["url"], int(entry["size"])),
                                   buffer_size=1 << 20)
        with zipfile.ZipFile(remote) as wheel:
            names = set(wheel.namelist())
            missing = [m for m in members if m not in names]
            if missing:
                raise FetchError(f"{filename} has no {', '.join(missing)}")
            for member, path in wanted.items():
                if path.is_file():
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                partial = path.with_name(path.name + ".part")
                with wheel.open(member) as source, partial.open("wb") as out:
                    shutil.copyfileobj(source, out, 1 << 20)
                partial.rename(path)
    return wanted


def wheel_listing(package: str, filename: str) -> list[zipfile.ZipInfo]:
    """The central directory of a remote wheel (a few range reads)."""
    entry = index_entry(package, filename)
    remote = io.BufferedReader(RangeFile(entry["url"], int(entry["size"])),
                               buffer_size=1 << 16)
    with zipfile.ZipFile(remote) as wheel:
        return wheel.infolist()


def unpacked(package: str, filename: str) -> Path:
    """A PyPI wheel unpacked once under unpacked/<wheel>/ (an import path as it stands)."""
    root = cache_dir() / "unpacked" / filename
    if (root / ".ready").exists():
        return root
    wheel = download(package, filename)
    with locked(f"unpacked-{filename}"):
        if not (root / ".ready").exists():
            shutil.rmtree(root, ignore_errors=True)
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(root)
            (root / ".ready").write_text("ok\n")
    return root
