"""The router hosts' wheels, staged once on the controller (air-gapped sites, the lab).

The router group installs `vllm-router` from a hash-pinned lock shipped with deploykit
(deploy_kit/data/router/, `deploy_kit.core.router_lock`). `stage` downloads exactly the
files of that lock for one target (Python version and machine) into
`<out>/router-vllm-router-<version>-py<XY>[-<machine>]/`, with the lock beside them as
`requirements.lock` and the same `wheelhouse.tar` the serving wheelhouse has, so one install
recipe (`pip install --no-index --find-links DIR --no-deps --require-hashes -r
DIR/requirements.lock`) reads both.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from deploy_kit.core.router_lock import Locked, lock_text, parse_lock
from deploy_kit.ops.wheelhouse import (
    ARCHIVE_NAME,
    LOCK_NAME,
    WheelhouseError,
    sha256,
    write_archive,
)

MACHINES = ("x86_64", "aarch64")
# the router hosts' C library: Debian 12 (newer hosts have a newer one)
DEFAULT_GLIBC = "2.36"


def platforms(machine: str, glibc: str = DEFAULT_GLIBC) -> list[str]:
    """Every manylinux tag a `machine` host with this glibc installs (PEP 600), newest
    first. pip does not widen a `manylinux_2_X` --platform by itself, so all are named."""
    if machine not in MACHINES:
        raise WheelhouseError(f"no router wheels for machine {machine!r}",
                              hint=f"one of: {', '.join(MACHINES)}")
    major, minor = (int(p) for p in glibc.split(".")[:2])
    oldest = 5 if machine == "x86_64" else 17  # aarch64 wheels start at manylinux2014
    tags = [f"manylinux_{major}_{m}_{machine}" for m in range(minor, oldest - 1, -1)]
    legacy = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}
    return [*tags, *(f"{tag}_{machine}" for tag, m in legacy.items()
                     if oldest <= m <= minor)]


def target_environment(python_version: str, machine: str) -> dict[str, str]:
    """The marker variables of a CPython `python_version` Linux `machine` host."""
    return {"python_version": python_version, "python_full_version": f"{python_version}.0",
            "platform_machine": machine, "platform_system": "Linux", "sys_platform": "linux",
            "os_name": "posix", "implementation_name": "cpython",
            "platform_python_implementation": "CPython"}


def applicable(locked: list[Locked], python_version: str, machine: str) -> list[Locked]:
    """The lock's requirements a host of this target installs (its markers evaluated for
    the target, not for the controller that stages them)."""
    from packaging.markers import Marker

    env = target_environment(python_version, machine)
    return [r for r in locked if r.marker is None or Marker(r.marker).evaluate(env)]


def stage_name(version: str, python_version: str, platform: str) -> str:
    """router-vllm-router-0.1.17-py311 (x86_64), ...-py312-aarch64: the serving
    wheelhouse's naming (`Recipe.name`), x86_64 implied as there."""
    py = python_version.replace(".", "")
    machine = "" if platform == "x86_64" else f"-{platform}"
    return f"router-vllm-router-{version}-py{py}{machine}"


def target_lock(locked: list[Locked]) -> str:
    """A requirements file of these requirements without markers: pip evaluates a marker
    for the Python that runs it, which is the controller's, not the target's."""
    return "".join(f"{r.pin} " + " ".join(f"--hash=sha256:{h}" for h in r.hashes) + "\n"
                   for r in locked)


def download_argv(requirements: Path, python_version: str, platform: str, dest: Path,
                  glibc: str = DEFAULT_GLIBC, python: str = sys.executable) -> list[str]:
    """The `pip download` that fetches exactly the hashed wheels of `requirements` for a
    CPython `python_version` host of machine `platform`."""
    argv = [python, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
            "--only-binary=:all:", "--implementation", "cp", "--python-version",
            python_version]
    for tag in platforms(platform, glibc):
        argv += ["--platform", tag]
    return [*argv, "--dest", str(dest), "--requirement", str(requirements)]


def staged(directory: Path, text: str, python_version: str, platform: str) -> bool:
    """True when `directory` holds this lock as requirements.lock, the archive, and for
    each requirement the target installs exactly one wheel of that name and version whose
    sha256 the lock allows (and no other wheel)."""
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import InvalidVersion, Version

    lock = directory / LOCK_NAME
    if not lock.is_file() or lock.read_text() != text or \
            not (directory / ARCHIVE_NAME).is_file():
        return False
    wanted = {canonicalize_name(r.name): r
              for r in applicable(parse_lock(text), python_version, platform)}
    wheels = sorted(directory.glob("*.whl"))
    if len(wheels) != len(wanted):
        return False
    for wheel in wheels:
        try:
            name, version, _, _ = parse_wheel_filename(wheel.name)
        except ValueError:
            return False
        requirement = wanted.pop(name, None)
        try:
            if requirement is None or version != Version(requirement.version) or \
                    sha256(wheel) not in requirement.hashes:
                return False
        except InvalidVersion:
            return False
    return not wanted


def stage(version: str, python_version: str, platform: str, out: Path,
          glibc: str = DEFAULT_GLIBC) -> Path:
    """out/<stage_name>/ with the locked wheels of vllm-router `version` for a CPython
    `python_version` host of machine `platform` (x86_64, aarch64), requirements.lock and
    wheelhouse.tar. Left alone when it already holds them (hashes checked); built again
    from empty beside it and swapped in otherwise."""
    text = lock_text(version)
    target = out / stage_name(version, python_version, platform)
    if staged(target, text, python_version, platform):
        return target
    wanted = applicable(parse_lock(text), python_version, platform)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        _download(wanted, python_version, platform, partial, glibc, version)
        (partial / LOCK_NAME).write_text(text)
        write_archive(partial)
        if not staged(partial, text, python_version, platform):
            raise WheelhouseError(f"pip did not download exactly the vllm-router {version} "
                                  f"lock's wheels for Python {python_version} {platform}",
                                  hint="stage again; if it persists, regenerate the lock "
                                       "(tools/router_lock.py)")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def _download(wanted: list[Locked], python_version: str, platform: str, dest: Path,
              glibc: str, version: str) -> None:
    with tempfile.TemporaryDirectory(prefix="router-lock-") as scratch:
        requirements = Path(scratch) / "target.lock"
        requirements.write_text(target_lock(wanted))
        argv = download_argv(requirements, python_version, platform, dest, glibc)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800,
                              check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise WheelhouseError(f"pip download of the vllm-router {version} lock failed: "
                              f"{' / '.join(tail)}",
                              hint="check the registry is reachable (or stage on a machine "
                                   "that reaches it and copy the directory)")
