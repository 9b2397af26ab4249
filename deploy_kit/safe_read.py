"""Bounded reads of operator-supplied files: regular files only, size-capped, UTF-8, and
YAML that refuses duplicate keys, deep nesting, cycles and alias bombs.

Every inventory file and every model config.json deploykit reads goes through here, so a
FIFO or a device never blocks, a huge file is refused before it is read, and a broken file
is reported by name instead of crashing.
"""

from __future__ import annotations

import copy
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

MAX_INVENTORY_BYTES = 4 * 1024 * 1024  # one hosts.yml / group_vars file
MAX_JSON_BYTES = 16 * 1024 * 1024  # a model's config.json
MAX_DEPTH = 48  # nesting levels in one YAML/JSON document
MAX_NODES = 200_000  # containers + scalars after alias expansion


class UnreadableFile(ValueError):
    """A file that cannot be used; the message says why, without the file name."""


class UnusableValues(UnreadableFile):
    """Scalars no YAML reader can build (a 5,000-digit integer, a 13th month, `!!int x`):
    Ansible would fail on the file too. `values`: (dotted key, why) for each."""

    def __init__(self, values: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{k}: {why}" for k, why in values))
        self.values = values


class Unusable:
    """Stands in for a scalar its constructor refused, until load_yaml names its key."""

    def __init__(self, why: str) -> None:
        self.why = why


def read_bytes(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; never blocks on a FIFO/device."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UnreadableFile(exc.strerror or type(exc).__name__) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else
                    "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else
                    "a socket" if stat.S_ISSOCK(info.st_mode) else
                    "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file")
            raise UnreadableFile(f"is {kind}, not a regular file")
        if info.st_size > limit:
            raise UnreadableFile(f"is {info.st_size:,} bytes (limit {limit:,})")
        chunks: list[bytes] = []
        total = 0
        while True:  # the size can grow while reading: stop at the limit regardless
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise UnreadableFile(f"is larger than the limit of {limit:,} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def source_problem(path: Path) -> str | None:
    """Why Ansible could not use `path` as an inventory source (-i), or None: it must be a
    readable regular file or a directory it may list (a FIFO would block the reader)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        return f"cannot read: {exc.strerror or type(exc).__name__}"
    if stat.S_ISDIR(info.st_mode):
        ok = os.access(path, os.R_OK | os.X_OK)
    elif stat.S_ISREG(info.st_mode):
        ok = os.access(path, os.R_OK)
    else:
        kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else
                "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else
                "a socket" if stat.S_ISSOCK(info.st_mode) else "not a regular file")
        return f"is {kind}, not an inventory file or directory"
    return None if ok else "cannot read: permission denied"


def read_text(path: Path, limit: int = MAX_INVENTORY_BYTES) -> str:
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise UnreadableFile(f"is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line})"
                             ) from None


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that records duplicate keys and refuses very deep nesting."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[str, int]] = []  # (key, line)
        self._depth = 0
        self.unusable = False  # an Unusable stands in for some scalar

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            return super().construct_object(node, deep)
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError, TypeError) as exc:
            # int() past Python's 4,300-digit limit, date(2026, 13, 1), `!!float abc`:
            # an exception from Python, not a YAMLError; reported with its key instead
            self.recursive_objects.pop(node, None)
            self.unusable = True
            detail = str(exc).split(";")[0].split(":")[0]
            value = str(node.value)
            shown = f"{value[:20]}… ({len(value):,} characters)" if len(value) > 40 else value
            kind = node.tag.rsplit(":", 1)[-1]
            made = Unusable(f"holds {shown!r}, which YAML cannot read as {kind} "
                            f"({detail}, line {node.start_mark.line + 1})")
            self.constructed_objects[node] = made
            return made

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(
                    None, None, f"nesting deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                if isinstance(key_node, yaml.ScalarNode):
                    key = self.construct_scalar(key_node)
                    if key in seen:
                        self.duplicates.append((str(key), key_node.start_mark.line + 1))
                    seen.add(key)
        return super().construct_mapping(node, deep)


class VaultText(str):
    """An inline `!vault |` value (what `ansible-vault encrypt_string` writes): the
    ciphertext, decrypted by the inventory loader when a password is given."""


def _vault_constructor(loader: yaml.SafeLoader, node: yaml.Node) -> VaultText:
    return VaultText(loader.construct_scalar(node))  # type: ignore[arg-type]


StrictLoader.add_constructor("!vault", _vault_constructor)


class YAML11Int(int):
    """An integer YAML 1.1 (PyYAML, so Ansible) reads from a spelling other readers take
    differently: base 60 (`1:20` is 80, YAML 1.2 text) or a leading zero (`017500` is
    octal 8000, YAML 1.2 decimal 17500). `written` is the text as in the file; the
    per-setting edge rule refuses it in a deploykit setting (other keys keep the int)."""

    written: str


def _int_constructor(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    value: int = loader.construct_yaml_int(node)  # type: ignore[arg-type]
    text = str(node.value).replace("_", "").lstrip("+-")
    if ":" in text or (len(text) > 1 and text[0] == "0" and text[1] not in "xXbB"):
        marked = YAML11Int(value)
        marked.written = str(node.value)
        return marked
    return value


StrictLoader.add_constructor("tag:yaml.org,2002:int", _int_constructor)


class UnsafeText(str):
    """A string under Ansible's `!unsafe` tag: Ansible never templates it, so deploykit
    takes it as the literal it is (`{{` in it is text, not Jinja)."""


def _unsafe(value: Any, done: dict[int, Any]) -> Any:
    """`value` with its strings marked; an aliased node is converted once and stays shared
    (an alias bomb stays as small as written, for check_structure to refuse)."""
    if isinstance(value, str):
        return UnsafeText(value)
    if not isinstance(value, (list, dict)):
        return value
    if id(value) not in done:
        done[id(value)] = value  # a recursive alias: check_structure reports the cycle
        done[id(value)] = [_unsafe(v, done) for v in value] if isinstance(value, list) else \
            {k: _unsafe(v, done) for k, v in value.items()}
    return done[id(value)]


def _unsafe_constructor(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    """As Ansible's AnsibleConstructor.construct_yaml_unsafe: the node's own type by the
    implicit rules (`!unsafe 8000` is an int), every string in it marked unsafe."""
    untagged = copy.copy(node)
    untagged.tag = loader.resolve(type(node), node.value, (True, False))  # type: ignore[no-untyped-call]
    return _unsafe(loader.construct_object(untagged, deep=True), {})


StrictLoader.add_constructor("!unsafe", _unsafe_constructor)


def check_structure(data: Any) -> str | None:
    """Why `data` cannot be used (a cycle, too deep, an alias bomb), or None."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def size(node: Any, depth: int) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        key = id(node)
        if key in on_path:
            raise UnreadableFile("refers to itself (a recursive YAML alias)")
        if key in sizes:
            return sizes[key]
        if depth > MAX_DEPTH:
            raise UnreadableFile(f"is nested deeper than {MAX_DEPTH} levels")
        on_path.add(key)
        children = list(node.values()) if isinstance(node, dict) else node
        total = 1
        for child in children:
            total += size(child, depth + 1)
            if total > MAX_NODES:
                raise UnreadableFile(f"expands to more than {MAX_NODES:,} values "
                                     "(YAML aliases)")
        on_path.discard(key)
        sizes[key] = total
        return total

    try:
        size(data, 0)
    except UnreadableFile as exc:
        return str(exc)
    return None


def _unusable(node: Any, where: str) -> Iterator[tuple[str, str]]:
    """(dotted key, why) of every Unusable in a loaded document."""
    if isinstance(node, Unusable):
        yield where or "(document)", node.why
    elif isinstance(node, dict):
        for key, value in node.items():
            name = key.why if isinstance(key, Unusable) else str(key)
            yield from _unusable(value, f"{where}.{name}" if where else name)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _unusable(value, f"{where}[{i}]")


MAX_INT_DIGITS = 4300  # Python's own limit for int <-> str (sys.get_int_max_str_digits)
MAX_INT_BITS = 14_000  # about 4,200 decimal digits


def scalar_problem(data: Any) -> str | None:
    """Why a value read by another reader (Ansible's, for INI inventories and scripts)
    cannot be used: an integer past Python's conversion limit, which every later str() or
    JSON step would fail on. Containers are walked (check_structure bounds them first)."""
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, bool):
            continue
        if isinstance(node, int) and node.bit_length() > MAX_INT_BITS:
            return f"holds an integer of about {int(node.bit_length() * 0.30103):,} digits"
        if isinstance(node, dict):
            stack += node.keys()
            stack += node.values()
        elif isinstance(node, list | tuple):
            stack += node
    return None


def load_yaml(text: str) -> tuple[Any, list[tuple[str, int]]]:
    """(document, duplicate keys); raises yaml.YAMLError or UnreadableFile."""
    loader = StrictLoader(text)
    try:
        try:
            data = loader.get_single_data()
        except RecursionError:
            raise UnreadableFile(f"is nested deeper than {MAX_DEPTH} levels") from None
        why = check_structure(data)
        if why:
            raise UnreadableFile(why)
        if loader.unusable:
            raise UnusableValues(list(_unusable(data, "")))
        return data, loader.duplicates
    finally:
        loader.dispose()
