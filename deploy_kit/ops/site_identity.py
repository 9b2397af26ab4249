"""Writes the site's identity file on its first `up` (config/identity.py says what it is)."""

from __future__ import annotations

import os
from pathlib import Path

from deploy_kit.config.identity import identity_path, text_of
from deploy_kit.config.site import Site


def ensure_identity(site: Site) -> Path | None:
    """`<inventory>/.deploykit-site.yml` with the name the site has now (the directory's,
    until the file exists), written once, completely or not at all; the path when written,
    None when the file was there already (it was read and checked opening the site)."""
    path = identity_path(site.root)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:  # never over a file (or a link) another run wrote meanwhile
        fd = os.open(path, flags, 0o644)  # committed beside hosts.yml: no secret in it
    except FileExistsError:
        return None
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text_of(site.name))
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:  # complete or absent
        path.unlink(missing_ok=True)
        raise
    return path
