"""`render -o DIR` as one step: the tree is written into a sibling temporary directory and
swapped into DIR's place, so DIR holds either the previous render or the whole new one, a
host gone from the inventory leaves no folder, and a failed render leaves DIR as it was.

DIR is replaced only when deploykit wrote it (its MARKER file is there) or it is empty; an
operator's directory given by mistake is refused, never emptied.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from deploy_kit.render.files import Tree, UnsafeOutput, write_tree

MARKER = ".deploykit-render"
MARKER_TEXT = ("written by `deploykit render -o`: the next render replaces this whole "
               "directory\n")
RENAME_EXCHANGE = 2  # linux/fs.h


def check_replaceable(out: Path) -> None:
    """Refuse (exit 2, one line naming the path and the fix) an OUT render must not replace."""
    if out.is_symlink():
        raise UnsafeOutput(f"{out} is a symlink: give render -o the directory itself "
                           f"({out.resolve()})")
    if not out.exists():
        return
    if not out.is_dir():
        raise UnsafeOutput(f"{out} exists and is not a directory: give render -o a new or "
                           "empty directory")
    if not (out / MARKER).is_file() and any(out.iterdir()):
        raise UnsafeOutput(f"{out} is not empty and was not written by deploykit render "
                           f"(no {MARKER} file): give render -o a new or empty directory, or "
                           "remove it first")


def replace_tree(tree: Tree, out: Path,
                 before_swap: Callable[[Path], None] | None = None) -> int:
    """Write `tree` into a temporary sibling of `out`, then put it in `out`'s place; returns
    the number of files written. `before_swap(tmp)` may add files to the new tree first."""
    check_replaceable(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    except OSError as exc:  # the new tree is written beside OUT, then renamed
        raise UnsafeOutput(f"cannot write beside {out} ({exc.strerror}): give render -o a "
                           "directory in a folder you can write to") from None
    try:
        # the directory keeps its mode (a play's 0700 temporary directory); a new one gets
        # what mkdir would give it
        mode = out.stat().st_mode & 0o7777 if out.is_dir() else 0o777 & ~_umask()
        count = write_tree(tree, tmp)
        if before_swap is not None:
            before_swap(tmp)
        (tmp / MARKER).write_text(MARKER_TEXT)
        os.chmod(tmp, mode)
        _swap(tmp, out)
    finally:
        if tmp.exists() or tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)  # the new tree on failure, else the old
    return count


def _swap(new: Path, out: Path) -> None:
    """`new` becomes `out`; the previous `out` (if any) ends up at `new`'s path, to remove.
    Linux swaps both names in one step (renameat2 RENAME_EXCHANGE); elsewhere, or where the
    file system cannot, two renames leave a moment with no `out`."""
    if not out.exists():
        os.rename(new, out)
        return
    if _exchange(new, out):
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.rename(out, old / "tree")
    try:
        os.rename(new, out)
    except OSError:
        os.rename(old / "tree", out)  # OUT as it was
        old.rmdir()
        raise
    os.rename(old, new)  # removed by the caller, as the exchange leaves it


def _exchange(a: Path, b: Path) -> bool:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    return bool(renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b),
                          RENAME_EXCHANGE) == 0)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
