"""vLLM's own source, read from its sdist with `ast` (no import: a CUDA vLLM needs torch and
GPU wheels): the flags its `serve` parser registers, KVTransferConfig's fields, and the pins
in requirements/."""

from __future__ import annotations

import ast
import re
import tarfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tests.upstream.fetch import cache_dir, download, locked

READY = ".ready"

# Where vLLM builds `vllm serve`'s parser: EngineArgs/AsyncEngineArgs.add_cli_args
# (engine/arg_utils.py), the serve subcommand (entrypoints/cli/serve.py), the module its
# make_arg_parser comes from (FrontendArgs; entrypoints/openai/cli_args.py in 0.10 and 0.26,
# launchers/cli_args.py in 0.32, common/cli_args.py in 0.33 and 0.34) and
# FlexibleArgumentParser (utils/argparse_utils.py; utils/__init__.py in 0.10).
PARSER_FILES = ("vllm/engine/arg_utils.py", "vllm/entrypoints/cli/serve.py",
                "vllm/utils/argparse_utils.py", "vllm/utils/__init__.py")
SERVE = "vllm/entrypoints/cli/serve.py"


def parser_files(root: Path) -> list[str]:
    """PARSER_FILES and the module serve.py imports make_arg_parser from."""
    files = list(PARSER_FILES)
    for node in ast.walk(ast.parse((root / SERVE).read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and \
                any(a.name == "make_arg_parser" for a in node.names):
            files.append(node.module.replace(".", "/") + ".py")
    assert len(files) == len(PARSER_FILES) + 1, f"{root.name}: no make_arg_parser import"
    return files
# FrontendArgs.add_cli_args registers one flag per dataclass field:
#   `f"--{key.replace('_', '-')}"` for key in get_kwargs(cls)
FIELD_LOOP = re.compile(r"""f["']--\{key\.replace\(["']_["'],\s*["']-["']\)\}["']""")


def sdist(version: str) -> Path:
    """vllm-<version>'s sdist, its vllm/*.py and requirements/ unpacked once."""
    root = cache_dir() / "src" / f"vllm-{version}"
    if (root / READY).exists():
        return root
    archive = download("vllm", f"vllm-{version}.tar.gz")
    with locked(f"src-vllm-{version}"):
        if not (root / READY).exists():
            prefix = f"vllm-{version}/"
            with tarfile.open(archive) as tar:
                members = [m for m in tar.getmembers() if m.isfile() and (
                    (m.name.startswith(prefix + "vllm/") and m.name.endswith(".py"))
                    or m.name.startswith(prefix + "requirements/"))]
                tar.extractall(root.parent, members=members, filter="data")
            (root / READY).write_text("ok\n")
    return root


@dataclass(frozen=True)
class ParserFlags:
    flags: frozenset[str]          # every --flag the serve parser accepts
    negatable: frozenset[str]      # --x whose --no-x exists (BooleanOptionalAction)
    where: dict[str, str]          # flag -> file:line that registers it


def _annotations(tree: ast.AST) -> dict[str, str]:
    """field -> annotation source, for every annotated class attribute."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    out.setdefault(stmt.target.id, ast.unparse(stmt.annotation))
    return out


@cache
def bool_fields(root: Path) -> frozenset[str]:
    """Config fields typed with bool anywhere in vllm/config and the parser files: vLLM's
    get_kwargs gives those `argparse.BooleanOptionalAction` (--x and --no-x)."""
    files = [*sorted((root / "vllm" / "config").rglob("*.py")), root / "vllm" / "config.py",
             *(root / f for f in parser_files(root))]
    fields: set[str] = set()
    for path in files:
        if path.is_file():
            for name, annotation in _annotations(ast.parse(path.read_text())).items():
                if re.search(r"\bbool\b", annotation):
                    fields.add(name)
    return frozenset(fields)


@cache
def parser_flags(root: Path) -> ParserFlags:
    flags: dict[str, str] = {}
    negatable: set[str] = set()
    for rel in parser_files(root):
        path = root / rel
        if not path.is_file():
            continue
        text = path.read_text()
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "add_argument":
                names = [a.value for a in node.args if isinstance(a, ast.Constant)
                         and isinstance(a.value, str) and a.value.startswith("--")]
                for name in names:
                    flags.setdefault(name, f"{rel}:{node.lineno}")
                action = next((k.value for k in node.keywords if k.arg == "action"), None)
                if action is not None and any(
                        kind in ast.unparse(action)
                        for kind in ("BooleanOptionalAction", "EnableDisableAction")):
                    negatable.update(names)
        if FIELD_LOOP.search(text):
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name.endswith("FrontendArgs"):
                    for stmt in node.body:
                        if isinstance(stmt, ast.AnnAssign) and \
                                isinstance(stmt.target, ast.Name):
                            flag = "--" + stmt.target.id.replace("_", "-")
                            flags.setdefault(flag, f"{rel}:{stmt.lineno} ({node.name})")
    booleans = bool_fields(root)
    negatable |= {f for f in flags if f[2:].replace("-", "_") in booleans}
    return ParserFlags(frozenset(flags), frozenset(negatable), flags)


def accepts(parsed: ParserFlags, flag: str) -> bool:
    if flag in parsed.flags:
        return True
    return flag.startswith("--no-") and "--" + flag[5:] in parsed.negatable


@cache
def kv_transfer_fields(root: Path) -> frozenset[str]:
    """KVTransferConfig's fields (vllm/config/kv_transfer.py; vllm/config.py before 0.10)."""
    return _config_fields(root, "KVTransferConfig", "kv_transfer.py")


def kv_events_fields(root: Path) -> frozenset[str]:
    """KVEventsConfig's fields (vllm/config/kv_events.py; vllm/config.py before 0.10)."""
    return _config_fields(root, "KVEventsConfig", "kv_events.py")


def _config_fields(root: Path, name: str, module: str) -> frozenset[str]:
    for path in (root / "vllm/config" / module, root / "vllm/config.py"):
        if not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name == name:
                return frozenset(s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                                 and isinstance(s.target, ast.Name))
    raise AssertionError(f"no {name} in {root.name}")


def requirement(root: Path, file: str, package: str) -> str:
    """The specifier a requirements file gives a package ('' when unpinned)."""
    for line in (root / "requirements" / file).read_text().splitlines():
        line = line.split("#")[0].strip()
        match = re.match(rf"^{re.escape(package)}\s*([<>=!~].*)?$", line)
        if match:
            return (match.group(1) or "").replace(" ", "")
    raise AssertionError(f"{package} not in {root.name}/requirements/{file}")


def lowest_allowed(spec: str) -> str:
    """The lowest version a `>=X,<Y` (or `==X`) specifier allows."""
    for part in spec.split(","):
        if part.startswith((">=", "==")):
            return part[2:]
    raise AssertionError(f"no lower bound in {spec!r}")
