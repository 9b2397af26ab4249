"""Download integrity (class 9 of the 2026-12-06 review): what the roles fetch onto every
host as root must come over HTTPS or be pinned by a checksum the inventory (or
compat.yaml) gives, and a URL never carries a login. Versions are checked where they are
typed (models.py `_version`).

The roles download with `get_url` and its `checksum:` (roles/deploykit_common/tasks/
binary.yml): without a pin the checksum is the release's own SHA256SUMS / `.sha256`
fetched from beside the archive, which protects nothing when both come over plain HTTP.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urlsplit

from deploy_kit.config import names
from deploy_kit.config.models import HostConfig
from deploy_kit.config.rulebook import collector
from deploy_kit.config.rulebook import src as _src
from deploy_kit.config.site import Site
from deploy_kit.core import compat
from deploy_kit.core.errors import Problem

RULES, rule = collector()

# characters no download URL needs and shells, YAML or get_url read specially
_UNSAFE = re.compile(r"[\s\"'`<>\\^|{}$;]")


def _archive_pinned(key: str, c: HostConfig) -> bool:
    if key == "consul_binary_url":
        return bool(c.consul_archive_sha256 or compat.consul_release_sha256(c.consul_version))
    legacy = c.coredns_binary_checksum.removeprefix("sha256:")
    return bool(c.coredns_archive_sha256 or legacy)


# the URL setting, its version, the controller-binary setting that replaces it, its groups
DOWNLOADS = {
    "consul_binary_url": ("consul_version", "consul_binary_src",
                          names.CONSUL_AGENT_GROUPS),
    "coredns_binary_url": ("coredns_version", "coredns_binary_src", frozenset({"dns"})),
}
PIN_KEYS = {"consul_binary_url": "consul_archive_sha256",
            "coredns_binary_url": "coredns_archive_sha256"}


def url_problem(key: str, c: HostConfig) -> tuple[str, str] | None:
    """(problem, fix) for the download URL `key`, or None. Never quotes a URL that may
    hold a password."""
    version_key = DOWNLOADS[key][0]
    url = getattr(c, key).replace("{version}", str(getattr(c, version_key)))
    pin = PIN_KEYS[key]
    try:
        parts = urlsplit(url)
        login = parts.username is not None or parts.password is not None
        parts.port  # noqa: B018  (raises on a port that is no number)
    except ValueError:
        return "is not a URL", "give the release archive's https:// URL"
    if login:
        return ("holds a user name or password: a secret in plain inventory text, copied "
                "into every host's settings and logs", "use a URL without a login (a mirror "
                "that needs one belongs behind a proxy or in controller binaries)")
    if _UNSAFE.search(url.replace("{version}", "")):
        return ("has spaces, quotes or shell characters", "give the release archive's "
                "https:// URL ({version} is the only placeholder)")
    if parts.scheme not in ("https", "http", "file"):
        return (f"uses {parts.scheme or 'no'} scheme", "use https:// (or http:// / file:// "
                f"with {pin} set)")
    if parts.scheme != "file" and not parts.hostname:
        return "names no host", "give the release archive's https:// URL"
    if parts.scheme != "https" and not _archive_pinned(key, c):
        return (f"is {parts.scheme}:// without a pinned checksum: anyone on the path can "
                "swap the archive and its checksum file", f"use https://, or set {pin} "
                "to the archive's sha256")
    return None


@rule
def downloads_pinned(site: Site) -> Iterator[Problem]:
    """Each download URL the hosts fetch is HTTPS or pinned, with no login in it."""
    for host in site.hosts.values():
        c = host.config
        for key, (_version, src_key, groups) in DOWNLOADS.items():
            if getattr(c, src_key) or not host.groups & groups:
                continue  # a controller binary replaces the download
            if key == "consul_binary_url" and c.deploykit_dns_mode != "consul":
                continue
            found = url_problem(key, c)
            if found:
                yield Problem(_src(site, host, key), key, found[0], found[1],
                              hosts=(host.name,))


@rule
def consul_release_pinned(site: Site) -> Iterator[Problem]:
    """A Consul release deploykit has no pin for past the MPL line (BUSL-1.1, or a 1.16.x
    of unknown licence) needs its archive's sha256; a major whose configuration deploykit
    does not render is refused."""
    for host in site.hosts.values():
        c = host.config
        if c.deploykit_dns_mode != "consul" or not host.groups & names.CONSUL_AGENT_GROUPS:
            continue
        try:
            wanted = compat.parse_version(c.consul_version)
            licence, _ = compat.consul_licence(c.consul_version)
        except (ValueError, KeyError):
            continue  # the version's own check reports it
        src = _src(site, host, "consul_version")
        if wanted[0] not in compat.consul_majors():
            yield Problem(src, "consul_version", f"{c.consul_version}: deploykit renders "
                          "Consul 1.x's configuration only", "use a 1.x release, e.g. 1.16.3",
                          hosts=(host.name,))
        elif licence != "MPL-2.0" and not compat.consul_release_sha256(c.consul_version) \
                and not c.consul_archive_sha256 and not c.consul_binary_src:
            yield Problem(_src(site, host, "consul_archive_sha256"), "consul_archive_sha256",
                          f"unset for Consul {c.consul_version}, which deploykit has no pin "
                          "for", "set it to the sha256 of consul_"
                          f"{c.consul_version}_linux_amd64.zip from HashiCorp's signed "
                          "SHA256SUMS (or give consul_binary_src with consul_binary_sha256)",
                          hosts=(host.name,))
