"""Write deploy_kit/data/router/vllm-router-<version>.lock: the router hosts' pinned set.

    .venv/bin/python tools/router_lock.py                      # vllm-router 0.1.17
    .venv/bin/python tools/router_lock.py --version 0.1.18
    .venv/bin/python tools/router_lock.py --interpreter 3.12=/usr/bin/python3.12

The lock pins `vllm-router==<version>` and everything it needs, each `name==version` with
the sha256 of every wheel a router host can install, so a host runs

    pip install --require-hashes --no-deps -r vllm-router-<version>.lock

and gets exactly those bytes (`deploy_kit.ops.router_wheels.stage` downloads the same files
for air-gapped hosts and the lab).

How it is made:

* Targets: CPython 3.11 and 3.12 (Debian 12 and newer) on Linux x86_64 and aarch64, wheels
  only, manylinux up to glibc 2.28 (vllm-router's own wheels need 2.28; newer hosts install
  older manylinux wheels too).
* Per target, pip's own resolver: `pip install --dry-run --ignore-installed --report` with
  `--only-binary=:all: --python-version --platform ...` against PyPI. Run it with the project
  venv's pip (26.x): pip 23.2 still refuses --platform with --dry-run. pip evaluates the
  dependencies' markers for the interpreter that runs it, not for --python-version, so each
  Python version resolves under that Python (`pip --python`) when one is found
  (`--interpreter` names it otherwise), and every marker of the resolved metadata is checked
  to mean the same for the target as for the interpreter that resolved (platform_machine
  included): if one does not, the script stops instead of guessing.
* The four sets are united: a package at one version everywhere is pinned plainly; one that
  resolves to different versions, or is needed by some targets only, is pinned per target
  with environment markers (`; python_version == "3.11"`).
* Digests from PyPI's JSON API, `/pypi/<name>/<version>/json` (`urls[].digests.sha256`; the
  project's `/pypi/<name>/json` `releases[<version>]` where that answers 404, as some mirrors
  and proxies do): every wheel of the pinned version that one of the line's targets installs
  (py3-none-any, cp3X-abi3, cp311/cp312, any manylinux of the machine); no sdist. The file
  pip chose for each target must be among them.

The output is deterministic (sorted, no dates): the same PyPI state gives the same bytes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's deploy_kit, whichever one the venv installed

from deploy_kit.ops.router_wheels import platforms, target_environment  # noqa: E402

OUT_DIR = ROOT / "deploy_kit" / "data" / "router"
PYTHONS = ("3.11", "3.12")
MACHINES = ("x86_64", "aarch64")
GLIBC = "2.28"  # vllm-router's manylinux_2_28 wheels: hosts older than that cannot run it
INDEX = "https://pypi.org/simple"
JSON_API = "https://pypi.org/pypi"


@dataclass(frozen=True, order=True)
class Target:
    python: str
    machine: str

    def __str__(self) -> str:
        return f"CPython {self.python} {self.machine}"


TARGETS = tuple(Target(p, m) for p, m in itertools.product(PYTHONS, MACHINES))


# ---- resolution ----------------------------------------------------------------------------


def interpreter_for(python: str, given: dict[str, str]) -> str | None:
    """An interpreter of that version to resolve under: --interpreter, this one, or
    python3.X on PATH (one that runs: a pyenv shim of a Python not enabled does not)."""
    if python in given:
        return given[python]
    if f"{sys.version_info.major}.{sys.version_info.minor}" == python:
        return sys.executable
    candidate = shutil.which(f"python{python}")
    if candidate:
        probe = subprocess.run([candidate, "-c", "import sys; print(*sys.version_info[:2], "
                                "sep='.')"], capture_output=True, text=True, check=False)
        if probe.returncode == 0 and probe.stdout.strip() == python:
            return candidate
    return None


def resolve(version: str, target: Target, interpreter: str | None) -> dict[str, Any]:
    """pip's installation report for vllm-router==version on the target."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL",
                        "PIP_NO_INDEX"}}
    with tempfile.TemporaryDirectory(prefix="router-lock-") as scratch:
        report = Path(scratch) / "report.json"
        argv = [sys.executable, "-m", "pip"]
        if interpreter and Path(interpreter).resolve() != Path(sys.executable).resolve():
            argv += ["--python", interpreter]
        argv += ["install", "--quiet", "--dry-run", "--ignore-installed", "--report",
                 str(report), "--index-url", INDEX, "--only-binary=:all:", "--implementation",
                 "cp", "--python-version", target.python]
        for tag in platforms(target.machine, GLIBC):
            argv += ["--platform", tag]
        argv.append(f"vllm-router=={version}")
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            sys.exit(f"resolving for {target} failed:\n{proc.stderr or proc.stdout}")
        data: dict[str, Any] = json.loads(report.read_text())
    return data


def check_markers(report: dict[str, Any], target: Target) -> None:
    """Stop when a marker pip evaluated for its own interpreter means something else for
    the target (the set it resolved would then be wrong for the target)."""
    resolved_env = {k: str(v) for k, v in report["environment"].items()}
    target_env = resolved_env | target_environment(target.python, target.machine)
    for item in report["install"]:
        extras = ["", *item.get("requested_extras", [])]
        for text in item["metadata"].get("requires_dist", []):
            marker = Requirement(text).marker
            if marker is None:
                continue
            for extra in extras:
                if _evaluate(marker, resolved_env, extra) != _evaluate(marker, target_env,
                                                                       extra):
                    sys.exit(f"{item['metadata']['name']} requires {text!r}: pip evaluated "
                             f"it for Python {resolved_env['python_version']} "
                             f"{resolved_env['platform_machine']}, which differs for "
                             f"{target}; resolve under a matching interpreter "
                             f"(--interpreter {target.python}=PATH)")


def _evaluate(marker: Marker, env: dict[str, str], extra: str) -> bool:
    return marker.evaluate(env | {"extra": extra})


def chosen(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """canonical name -> (version, sha256 of the file pip chose)."""
    out: dict[str, tuple[str, str]] = {}
    for item in report["install"]:
        meta = item["metadata"]
        digest = item["download_info"].get("archive_info", {}).get("hash", "")
        out[canonicalize_name(meta["name"])] = (meta["version"],
                                                digest.removeprefix("sha256="))
    return out


# ---- digests -------------------------------------------------------------------------------


def _get_json(url: str) -> dict[str, Any] | None:
    request = urllib.request.Request(url, headers={"Accept": "application/json",
                                                   "User-Agent": "deploykit-router-lock"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            data: dict[str, Any] = json.load(response)
            return data
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


def release_files(name: str, version: str) -> list[tuple[str, str]]:
    """(filename, sha256) of every wheel PyPI lists for name==version."""
    data = _get_json(f"{JSON_API}/{name}/{version}/json")
    if data is not None:
        files = data["urls"]
    else:
        project = _get_json(f"{JSON_API}/{name}/json")
        if project is None or version not in project.get("releases", {}):
            sys.exit(f"PyPI's JSON API lists no {name} {version}")
        files = project["releases"][version]
    return sorted((f["filename"], f["digests"]["sha256"]) for f in files
                  if f["filename"].endswith(".whl"))


def _interpreter_abis(python: str) -> set[tuple[str, str]]:
    """(interpreter, abi) pairs a CPython `python` installs, whatever the platform."""
    version = tuple(int(p) for p in python.split("."))
    nodot = python.replace(".", "")
    tags = [*cpython_tags(version, abis=[f"cp{nodot}"], platforms=["x"]),
            *compatible_tags(version, f"cp{nodot}", platforms=["x"])]
    return {(t.interpreter, t.abi) for t in tags}


def installs_on(tag: Tag, target: Target) -> bool:
    platform_ok = tag.platform == "any" or re.fullmatch(
        rf"manylinux(_\d+_\d+|1|2010|2014)_{target.machine}", tag.platform) is not None
    return platform_ok and (tag.interpreter, tag.abi) in _interpreter_abis(target.python)


def wheel_installs_on(filename: str, targets: frozenset[Target]) -> bool:
    tags = parse_wheel_filename(filename)[3]
    return any(installs_on(tag, target) for tag in tags for target in targets)


# ---- the lock ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    targets: frozenset[Target]
    hashes: tuple[str, ...] = ()

    @property
    def marker(self) -> str | None:
        return marker_for(self.targets)


def marker_for(targets: frozenset[Target]) -> str | None:
    """None for every target, else the environment marker that selects exactly these."""
    if targets == frozenset(TARGETS):
        return None
    pythons = sorted({t.python for t in targets})
    machines = sorted({t.machine for t in targets})
    if targets == frozenset(Target(p, m) for p in pythons for m in machines):
        parts = []
        if len(pythons) < len(PYTHONS):
            parts.append(_any_of("python_version", pythons))
        if len(machines) < len(MACHINES):
            parts.append(_any_of("platform_machine", machines))
        return " and ".join(f"({p})" if " or " in p and len(parts) > 1 else p
                            for p in parts)
    return " or ".join(f'(python_version == "{t.python}" and platform_machine == '
                       f'"{t.machine}")' for t in sorted(targets))


def _any_of(variable: str, values: list[str]) -> str:
    return " or ".join(f'{variable} == "{v}"' for v in values)


def pins(resolved: dict[Target, dict[str, tuple[str, str]]]) -> list[Pin]:
    """One pin per (name, version), with the targets that install it."""
    where: dict[tuple[str, str], set[Target]] = defaultdict(set)
    for target, packages in resolved.items():
        for name, (version, _) in packages.items():
            where[(name, version)].add(target)
    return [Pin(name, version, frozenset(targets))
            for (name, version), targets in sorted(where.items())]


def with_hashes(pin: Pin, files: list[tuple[str, str]],
                resolved: dict[Target, dict[str, tuple[str, str]]]) -> Pin:
    hashes = tuple(sorted({digest for filename, digest in files
                           if wheel_installs_on(filename, pin.targets)}))
    if not hashes:
        sys.exit(f"PyPI has no wheel of {pin.name} {pin.version} for "
                 f"{', '.join(map(str, sorted(pin.targets)))}")
    for target in pin.targets:
        picked = resolved[target][pin.name][1]
        if picked and picked not in hashes:
            sys.exit(f"pip chose a file of {pin.name} {pin.version} for {target} "
                     f"(sha256 {picked}) that the lock would not allow")
    return Pin(pin.name, pin.version, pin.targets, hashes)


def render(version: str, locked: list[Pin]) -> str:
    hashes = sum(len(p.hashes) for p in locked)
    lines = [
        f"# vllm-router {version} for the router hosts: the release and every package it "
        "needs,",
        "# each pinned with the sha256 of every wheel that installs on CPython "
        f"{' and '.join(PYTHONS)},",
        f"# Linux {' and '.join(MACHINES)} (manylinux; resolved for glibc {GLIBC}, "
        "vllm-router's own floor).",
        "# Wheels only. Install (into a venv):",
        f"#   pip install --require-hashes --no-deps -r vllm-router-{version}.lock",
        "# Made by tools/router_lock.py: pip's resolver per target, the digests from PyPI's "
        "JSON API.",
        f"# Regenerate: .venv/bin/python tools/router_lock.py --version {version}",
        f"# {len({p.name for p in locked})} packages, {hashes} hashes.",
    ]
    for pin in locked:
        marker = f" ; {pin.marker}" if pin.marker else ""
        lines.append(f"{pin.name}=={pin.version}{marker} \\")
        lines += [f"    --hash=sha256:{h}" + (" \\" if i < len(pin.hashes) - 1 else "")
                  for i, h in enumerate(pin.hashes)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="0.1.17", help="the vllm-router release")
    parser.add_argument("--interpreter", action="append", default=[], metavar="X.Y=PATH",
                        help="a CPython X.Y to resolve that version's targets under")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args()
    given = dict(item.split("=", 1) for item in args.interpreter)

    resolved: dict[Target, dict[str, tuple[str, str]]] = {}
    for target in TARGETS:
        interpreter = interpreter_for(target.python, given)
        under = interpreter or (f"{sys.executable} (no CPython {target.python} found: "
                                "its markers are checked instead)")
        print(f"resolving for {target} under {under}", file=sys.stderr)
        report = resolve(args.version, target, interpreter)
        check_markers(report, target)
        resolved[target] = chosen(report)
    locked = [with_hashes(pin, release_files(pin.name, pin.version), resolved)
              for pin in pins(resolved)]
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"vllm-router-{args.version}.lock"
    path.write_text(render(args.version, locked))
    print(f"{path}: {len(locked)} pins, {sum(len(p.hashes) for p in locked)} hashes",
          file=sys.stderr)


if __name__ == "__main__":
    main()
