"""Writes the site's identity file on its first `up` (config/identity.py says what it is)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from deploy_kit.config.identity import identity_path, text_of
from deploy_kit.config.site import Site


def ensure_identity(site: Site) -> Path | None:
    """`<inventory>/.deploykit-site.yml` with the name the site has now (the directory's,
    until the file exists), written once, completely or not at all; the path when written,
    None when the file was there already (it was read and checked opening the site)."""
    path = identity_path(site.root)
    if path.exists() or path.is_symlink():
        return None
    fd, tmp = tempfile.mkstemp(dir=site.root, prefix=f"{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text_of(site.name))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # committed beside hosts.yml: no secret in it
        os.link(tmp, path)  # never over a file another run wrote meanwhile
    except FileExistsError:
        return None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path
