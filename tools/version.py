"""deploykit's version lives in pyproject.toml; this keeps every other place that must
spell it in step, and stages what the execution environment builds from.

  python tools/version.py               print the version
  python tools/version.py --check       exit 1 naming each file that disagrees
  python tools/version.py --set X.Y.Z   write X.Y.Z into pyproject.toml and every copy
  python tools/version.py --check-dist DIR
                                        exit 1 unless DIR holds exactly this version's
                                        wheel and collection (what the EE installs)

The copies: galaxy.yml (ansible-galaxy reads only its own file), deploy_kit/__init__.py
(`deploykit --version` from a checkout, where no installed metadata exists) and the
collection's meta/requirements.txt (the deploykit pin another EE gets from the collection).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
GALAXY = ROOT / "galaxy.yml"
INIT = ROOT / "deploy_kit" / "__init__.py"
REQUIREMENTS = ROOT / "meta" / "requirements.txt"
# Ansible's own packages come with the execution environment's ansible_core/ansible_runner
# (ansible-builder leaves them out of a collection's requirements anyway); the CLI's
# typer/rich are not needed by the collection's plays.
NOT_FOR_THE_COLLECTION = ("ansible-core", "ansible-runner", "typer", "rich")

COPIES = {
    GALAXY: re.compile(r"^version: (?P<v>\S+)$", re.M),
    INIT: re.compile(r'^__version__ = "(?P<v>[^"]+)"$', re.M),
}


def project() -> dict[str, object]:
    return dict(tomllib.loads(PYPROJECT.read_text())["project"])


def version() -> str:
    return str(project()["version"])


def requirements(v: str) -> str:
    """meta/requirements.txt: deploykit itself, pinned, and its runtime dependencies."""
    deps = [str(d) for d in project()["dependencies"]]  # type: ignore[attr-defined]
    kept = sorted(d for d in deps
                  if re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0] not in NOT_FOR_THE_COLLECTION)
    return ("# The deploykit.kvcache collection's Python requirements on the controller (read\n"
            "# by ansible-builder through meta/execution-environment.yml). Written by\n"
            "# tools/version.py from pyproject.toml: do not edit by hand.\n"
            + "".join(f"{r}\n" for r in [f"deploykit=={v}", *kept]))


def problems() -> list[str]:
    v = version()
    out = []
    for path, pattern in COPIES.items():
        found = pattern.search(path.read_text())
        if found is None or found["v"] != v:
            out.append(f"{path.relative_to(ROOT)}: version "
                       f"{found['v'] if found else '(none)'}, pyproject.toml says {v}")
    if not REQUIREMENTS.is_file() or REQUIREMENTS.read_text() != requirements(v):
        out.append(f"{REQUIREMENTS.relative_to(ROOT)} is not what pyproject.toml gives")
    return out


def set_version(v: str) -> None:
    if not re.fullmatch(r"\d+\.\d+\.\d+([a-z0-9.+-]*)", v):
        raise SystemExit(f"{v!r} is no version (X.Y.Z)")
    text = PYPROJECT.read_text()
    PYPROJECT.write_text(re.sub(r'^version = "[^"]+"$', f'version = "{v}"', text, count=1,
                                flags=re.M))
    for path, pattern in COPIES.items():
        text = path.read_text()
        found = pattern.search(text)
        if found is None:
            raise SystemExit(f"{path}: no version line to replace")
        path.write_text(text[:found.start("v")] + v + text[found.end("v"):])
    REQUIREMENTS.write_text(requirements(v))


def dist_problems(dist: Path) -> list[str]:
    """The execution environment installs dist/deploykit-*.whl and
    dist/deploykit-kvcache-*.tar.gz: exactly this version's, nothing older beside them."""
    v = version()
    out = []
    for pattern, want in (("deploykit-*.whl", f"deploykit-{v}-py3-none-any.whl"),
                          ("deploykit-kvcache-*.tar.gz", f"deploykit-kvcache-{v}.tar.gz")):
        found = sorted(p.name for p in dist.glob(pattern))
        if found != [want]:
            out.append(f"{dist}/{pattern}: {', '.join(found) or 'nothing'}; want only {want} "
                       "(make dist)")
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(version())
        return 0
    if argv[0] == "--check":
        found = problems()
    elif argv[0] == "--set" and len(argv) == 2:
        set_version(argv[1])
        found = problems()
    elif argv[0] == "--check-dist" and len(argv) == 2:
        found = problems() + dist_problems(Path(argv[1]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
