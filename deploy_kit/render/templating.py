"""The one Jinja environment for text formats with no serialiser (Corefile, units, INI)."""

from __future__ import annotations

import json
import re
from functools import cache, lru_cache
from typing import Any

import jinja2

from deploy_kit.config.names import HEADER
from deploy_kit.project import roles_dir, templates_dir

_SYSTEMD_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def systemd_text(value: object) -> str:
    """A value inside a unit setting that expands specifiers (Description=, EnvironmentFile=,
    Environment=): `%` doubled, so a path or model name with `%` reaches systemd literally."""
    return str(value).replace("%", "%%")


def systemd_quote(word: str) -> str:
    """Quote one ExecStart word; `%` and `$` are escaped so systemd passes them literally."""
    word = word.replace("%", "%%").replace("$", "$$")
    if _SYSTEMD_PLAIN.match(word):
        return word
    return "'" + word.replace("\\", "\\\\").replace("'", "\\'") + "'"


_ENV_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]*$")


def env_quote(value: object) -> str:
    """One value of a systemd EnvironmentFile. systemd strips quotes and reads backslash
    escapes there, so anything but a plain word is double-quoted, with the four characters
    systemd unescapes inside double quotes (\\ " $ `) escaped: the service sees the
    value byte for byte. (Line breaks never get here: the model refuses them.)"""
    text = str(value)
    if _ENV_PLAIN.match(text):
        return text
    return '"' + re.sub(r'([\\"$`])', r"\\\1", text) + '"'


def exec_lines(argv: list[str], head: int = 3) -> list[list[str]]:
    """Group argv for a readable unit: the command, then one `--flag value` per line."""
    lines: list[list[str]] = [argv[:head]]
    for word in argv[head:]:
        if word.startswith("-") or not lines[-1][0].startswith("-") or len(lines[-1]) > 1:
            lines.append([word])
        else:
            lines[-1].append(word)
    return lines


def exec_start(lines: list[list[str]]) -> str:
    """ExecStart's value for exec_lines: each word quoted, one continued line per group."""
    return _exec_start(tuple(tuple(line) for line in lines))


@lru_cache(maxsize=1024)
def _exec_start(lines: tuple[tuple[str, ...], ...]) -> str:
    # hosts of one group run the same argv but for the port: quoted once, not per host
    # (a pure function of its argument, so a cached result is always the right one)
    return " \\\n    ".join(" ".join(systemd_quote(word) for word in line) for line in lines)


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        # A role's own template (the secret-bearing credentials file, which the role fills
        # with keys only Ansible holds) is searched second, so one file serves both.
        loader=jinja2.FileSystemLoader([str(templates_dir()),
                                        str(roles_dir() / "serving" / "templates")]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # config files, not HTML
        # shipped files, read once per process: no stat() per render to see if they changed
        auto_reload=False,
    )
    env.filters["regex_escape"] = re.escape
    env.filters["systemd_quote"] = systemd_quote
    env.filters["systemd_text"] = systemd_text
    env.filters["env_quote"] = env_quote
    return env


def render_template(name: str, **context: Any) -> str:
    return environment().get_template(name).render(header=HEADER, **context)


def render_env_file(env: dict[str, str]) -> str:
    """An EnvironmentFile (vllm.env.j2) of `env`, in its order."""
    return _render_env_file(tuple(env.items()))


@lru_cache(maxsize=1024)
def _render_env_file(items: tuple[tuple[str, str], ...]) -> str:
    # most serving hosts' instances share one environment: rendered once, not per host
    # (the text depends on the items alone, so a cached result is always the right one)
    return render_template("vllm.env.j2", env=dict(items))


def settings_json(settings: dict[str, Any]) -> str:
    """A host agent's settings file: a JSON object with one sorted key per line (a changed
    setting is a one-line diff), each value on that line."""
    lines = [f"  {json.dumps(key)}: {json.dumps(settings[key], sort_keys=True)}"
             for key in sorted(settings)]
    return "{\n" + ",\n".join(lines) + "\n}\n"
