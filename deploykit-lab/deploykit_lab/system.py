"""The lab's only door to the machine: subprocesses, with output kept in the lab log."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from deploy_kit.core.errors import DeployKitError, EnvironmentProblem
from deploykit_lab.layout import coredns_binary

LOG_FILE = Path("/var/log/deploykit-lab.log")
LOCK_DIR = Path("/var/cache/deploykit/.locks")


class LabError(DeployKitError):
    exit_code = EnvironmentProblem.exit_code


def require_root() -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem("the local lab needs root (network namespaces, mounts, "
                                 "cgroups and Ceph daemons)", hint="run it with sudo")


def log(message: str) -> None:
    with LOG_FILE.open("a") as handle:
        handle.write(message.rstrip() + "\n")


def run(argv: Sequence[str], *, check: bool = True, timeout: float = 600,
        env: dict[str, str] | None = None, input_text: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    log("$ " + " ".join(argv))
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, **(env or {})}, input=input_text,
                            stdin=None if input_text is not None else subprocess.DEVNULL)
    if result.stdout:
        log(result.stdout[-4000:])
    if result.stderr:
        log(result.stderr[-4000:])
    if check and result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise LabError(f"`{' '.join(argv[:4])}…` failed (exit {result.returncode}): "
                       + " | ".join(tail), hint=f"details in {LOG_FILE}")
    return result


def quiet(argv: Sequence[str]) -> bool:
    """Run a best-effort cleanup command; True when it succeeded."""
    return run(argv, check=False, timeout=60).returncode == 0


def missing_packages(packages: Sequence[str]) -> list[str]:
    result = run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\\n", *packages],
                 check=False)
    installed = {line.split()[0] for line in result.stdout.splitlines()
                 if len(line.split()) > 1 and line.split()[1].startswith("ii")}
    return [p for p in packages if p not in installed]


def ensure_packages(packages: Sequence[str]) -> list[str]:
    with cache_lock("apt"):
        missing = missing_packages(packages)
        if missing:
            env = {"DEBIAN_FRONTEND": "noninteractive"}
            wait = ["-o", "DPkg::Lock::Timeout=600"]  # another apt run (CI's setup) may hold it
            run(["apt-get", *wait, "update", "-q"], env=env, timeout=900)
            run(["apt-get", *wait, "install", "-y", "-q", "--no-install-recommends", *missing],
                env=env, timeout=1800)
    return missing


@contextlib.contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """One builder per cached artefact: a prefetch in the background and a `lab up` (or a
    test that needs the binary) wait for each other instead of building the same thing
    twice into the same directory."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    with (LOCK_DIR / f"{name}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def which(name: str) -> str:
    path = shutil.which(name)
    if not path:
        raise LabError(f"{name} not found", hint="deploykit lab up installs it; is apt working?")
    return path


def go_binary() -> str:
    for candidate in (shutil.which("go"), "/usr/local/go/bin/go", "/usr/lib/go/bin/go"):
        if candidate and Path(candidate).exists():
            return candidate
    raise LabError("the lab builds CoreDNS with Go, and no `go` was found",
                   hint="install Go (apt-get install golang-go) or put a coredns binary at "
                        f"{coredns_binary()}")
