"""The router's hash-pinned requirement locks (deploy_kit/data/router/vllm-router-<v>.lock).

`tools/router_lock.py` writes one lock per supported `vllm-router` release: the release and
everything it needs, each `name==version` with the sha256 of every wheel that installs on
CPython 3.11/3.12, Linux x86_64/aarch64. The router hosts install exactly that set with
`pip install --require-hashes --no-deps -r <lock>`; `deploy_kit.ops.router_wheels` stages
the same set offline for air-gapped hosts and the lab.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from deploy_kit.core.errors import DeployKitError
from deploy_kit.core.exit_codes import ExitCode

LOCK_DIR = "data/router"
_LOCK_FILE = re.compile(r"^vllm-router-(?P<version>[0-9][0-9A-Za-z.+!-]*)\.lock$")


class RouterLockError(DeployKitError):
    """No lock for the requested router version (it comes from the inventory's pin)."""

    exit_code = ExitCode.INVALID_INVENTORY


@dataclass(frozen=True)
class Locked:
    """One requirement of a lock: `name==version [; marker]` and its allowed digests."""

    name: str
    version: str
    marker: str | None
    hashes: tuple[str, ...]

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


def versions() -> list[str]:
    """Every vllm-router version deploykit ships a lock for, in file-name order."""
    found = []
    for entry in resources.files("deploy_kit").joinpath(LOCK_DIR).iterdir():
        match = _LOCK_FILE.match(entry.name)
        if match:
            found.append(match["version"])
    return sorted(found)


def lock_path(version: str) -> Path:
    """The lock file of vllm-router `version` inside the installed package."""
    name = f"vllm-router-{version}.lock"
    path = Path(str(resources.files("deploy_kit").joinpath(f"{LOCK_DIR}/{name}")))
    if not _LOCK_FILE.match(name) or "/" in version or not path.is_file():
        known = ", ".join(versions()) or "none"
        raise RouterLockError(f"no hash-pinned lock for vllm-router {version} "
                              f"(locks shipped: {known})",
                              hint="pin a router version deploykit ships a lock for, or write "
                                   "one with tools/router_lock.py --version "
                                   f"{version}")
    return path


def lock_text(version: str) -> str:
    return lock_path(version).read_text()


def parse_lock(text: str) -> list[Locked]:
    """The requirements of a lock in file order. Every line must pin `name==version` (a
    marker after `;` allowed) and carry at least one `--hash=sha256:`; anything else raises,
    since `pip --require-hashes` would refuse it on the host anyway."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        pending += line
        if pending.strip():
            logical.append(pending.strip())
        pending = ""
    if pending.strip():
        logical.append(pending.strip())
    out = []
    for line in logical:
        requirement, *options = line.split(" --")
        spec, _, marker = requirement.partition(";")
        name, sep, version = spec.strip().partition("==")
        if not sep or not name.strip() or not version.strip() or any(
                c in version for c in "<>=!~,* "):
            raise RouterLockError(f"lock line is not pinned with ==: {line!r}")
        hashes = []
        for option in options:
            key, _, value = option.strip().partition("=")
            algorithm, _, digest = value.partition(":")
            if key != "hash" or algorithm != "sha256" or not re.fullmatch(r"[0-9a-f]{64}",
                                                                          digest):
                raise RouterLockError(f"lock line has an option other than a sha256 hash: "
                                      f"{line!r}")
            hashes.append(digest)
        if not hashes:
            raise RouterLockError(f"lock line has no --hash: {line!r}")
        out.append(Locked(name.strip(), version.strip(), marker.strip() or None,
                          tuple(hashes)))
    return out
