"""The site's committed identity: `<inventory>/.deploykit-site.yml` names the site.

The name marks what `up` creates for the site (the RGW user and bucket,
`deploykit-site=<name>`) and names its CAs. Without the file it is the inventory directory's
name, as it always was; `up` writes the file on its first run with that name, so a running
site keeps its marks, and from then on the file wins: a renamed checkout, a CI runner's clone
or an INI file in another directory is the same site. A dot file, so Ansible never reads it
as an inventory source of the directory (like `.deploykit-tls/`); it is meant to be committed.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

from deploy_kit.core.errors import Problem
from deploy_kit.safe_read import UnreadableFile, load_yaml, read_text

IDENTITY_FILE = ".deploykit-site.yml"
KEY = "deploykit_site_name"
MAX_NAME = 128
FIX = f"write one line `{KEY}: NAME` (the name the site's RGW marks carry)"


def identity_path(root: Path) -> Path:
    return root / IDENTITY_FILE


def name_problem(name: object) -> str | None:
    """Why `name` cannot name a site, or None: a short line of printable text (any name a
    directory could have had, so an existing site's name always fits)."""
    if not isinstance(name, str) or not name.strip():
        return "must be a non-empty string"
    if len(name) > MAX_NAME:
        return f"is {len(name)} characters long (at most {MAX_NAME})"
    if name != name.strip():
        return "starts or ends with white space"
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in name):
        return "holds a control or invisible character"
    return None


def read_identity(root: Path) -> tuple[str | None, Problem | None]:
    """(the committed name, or None without the file; a problem with the file). Never
    quotes the file's text: one line naming the file and the key."""
    path = identity_path(root)
    if not path.exists() and not path.is_symlink():
        return None, None
    try:
        doc, duplicates = load_yaml(read_text(path, limit=4096))
    except UnreadableFile as exc:
        return None, Problem(str(path), KEY, f"the file {exc}", FIX)
    except Exception:  # a YAML error quotes the line: name only where it is
        return None, Problem(str(path), KEY, "is not a YAML mapping", FIX)
    if not isinstance(doc, dict) or set(doc) != {KEY} or duplicates:
        extra = sorted(str(k) for k in doc if k != KEY)[:3] if isinstance(doc, dict) else []
        why = f"is the only key allowed (found {', '.join(extra)})" if extra else \
            "is missing (or given twice)"
        return None, Problem(str(path), KEY, why, FIX)
    name = doc[KEY]
    if wrong := name_problem(name):
        return None, Problem(str(path), KEY, wrong, FIX)
    return str(name), None


def text_of(name: str) -> str:
    import yaml

    return ("# This site's identity (docs/security.md, \"Site identity\"): commit it with the\n"
            "# inventory. It marks what deploykit created for the site: never change it on a\n"
            "# running site.\n" + yaml.safe_dump({KEY: name}, allow_unicode=True))
