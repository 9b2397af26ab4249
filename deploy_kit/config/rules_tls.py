"""TLS to the gateways: LMCache's disable_tls against deploykit_s3_tls, and the site CA's
settings (its certificate and key together, a directory of its own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from deploy_kit.config import rules_paths
from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.site import Site
from deploy_kit.core.errors import Problem

RULES, rule = collector()


@rule
def tls_consistent(site: Site) -> Iterator[Problem]:
    """lmcache_extra_config.disable_tls must agree with deploykit_s3_tls."""
    for host in site.group("vllm"):
        c = host.config
        if "disable_tls" not in c.lmcache_extra_config:
            continue
        disable = c.lmcache_extra_config["disable_tls"]
        if (disable is True and c.deploykit_s3_tls) or \
                (disable is False and not c.deploykit_s3_tls):
            yield Problem(_src(site, host, "lmcache_extra_config"),
                          "lmcache_extra_config.disable_tls",
                          f"{disable} contradicts deploykit_s3_tls {c.deploykit_s3_tls} "
                          "(every S3 request would fail)",
                          "remove it: deploykit sets disable_tls from deploykit_s3_tls",
                          hosts=(host.name,))
        elif not isinstance(disable, bool):
            yield Problem(_src(site, host, "lmcache_extra_config"),
                          "lmcache_extra_config.disable_tls", f"{disable!r} is not true/false",
                          "remove it: deploykit sets it from deploykit_s3_tls",
                          hosts=(host.name,))


def _tls_dir_problem(site: Site) -> str | None:
    """Why deploykit_tls_dir cannot be the CA's private directory, or None: `up` chmods it
    0700 and writes a `.gitignore` of `*` there, so it must be nothing else's."""
    value = Path(str(site.settings.deploykit_tls_dir)).expanduser()
    given = value if value.is_absolute() else site.root / value  # as render.tls resolves it
    if given.is_symlink():
        return f"{given} is a symlink"
    # `/`, system directories and those above them, the home directory, the inventory
    why = rules_paths.controller_dir_problem(site, given, trees=("/proc", "/sys", "/dev", "/boot"))
    if why:
        return why
    target = given.resolve()
    if target.exists() and not target.is_dir():
        return f"{target} is not a directory"
    if target.is_dir():
        from deploy_kit.safe_read import UnreadableFile, read_text

        try:
            ours = read_text(target / ".gitignore", 4096).startswith("# deploykit's CA")
        except (OSError, UnreadableFile):
            ours = False
        if not ours and any(target.iterdir()):
            return f"{target} already holds other files"
    return None


@rule
def tls_settings_valid(site: Site) -> Iterator[Problem]:
    """A taken CA needs its certificate and its key; one CA, directory and lifetime site-wide
    (every concentrator certificate is issued from the same CA on the controller: the four
    are site.SITE_KEYS, held to one value by rules_site.site_values_agree)."""
    s = site.settings
    if s.deploykit_tls_dir and (why := _tls_dir_problem(site)):
        yield Problem(site.settings_source("deploykit_tls_dir"), "deploykit_tls_dir", why,
                      "name a directory of its own (up makes it 0700 and git-ignores all of "
                      "it), e.g. .deploykit-tls beside the inventory")
    if not s.deploykit_s3_tls:
        return
    if (s.deploykit_tls_ca_cert is None) != (s.deploykit_tls_ca_key is None):
        missing = "deploykit_tls_ca_key" if s.deploykit_tls_ca_key is None \
            else "deploykit_tls_ca_cert"
        yield Problem(site.settings_source(missing), missing,
                      "an existing CA needs both its certificate and its key",
                      "set deploykit_tls_ca_cert and deploykit_tls_ca_key, or neither "
                      "(deploykit then creates a CA)")
    for key in ("deploykit_tls_ca_cert", "deploykit_tls_ca_key", "deploykit_tls_dir"):
        value = getattr(s, key)
        if value is not None and (not value or "\n" in value or "\x00" in value):
            yield Problem(site.settings_source(key), key, f"{value!r} is not a path",
                          "give a path on the controller (relative: to the inventory)")

