"""Jinja filters that hand roles the files deploykit's Python builders render.

One renderer, two front doors: `deploykit render` and the roles call the same builders,
so what `render` shows is byte for byte what a role writes.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from deploy_kit.config.open import open_site
from deploy_kit.config.site import Site
from deploy_kit.render import files as rendered


def _stamp(inventory_dir: str) -> float:
    """Newest mtime under the inventory: a changed inventory is read again."""
    newest = 0.0
    for root, _dirs, names in os.walk(inventory_dir):
        for name in names:
            newest = max(newest, os.stat(os.path.join(root, name)).st_mtime)
    return newest


@lru_cache(maxsize=8)
def _site(inventory_dir: str, stamp: float) -> Site:
    return open_site(inventory_dir)


def site_of(inventory_dir: str) -> Site:
    directory = str(Path(inventory_dir).resolve())
    return _site(directory, _stamp(directory))


def deploykit_file(path: str, inventory_dir: str, host: str) -> str:
    """Content of one non-secret file that `host` receives."""
    site = site_of(inventory_dir)
    files = rendered.host_files(site, site.hosts[host])
    if path not in files:
        raise KeyError(f"deploykit renders no {path} for {host}")
    if files[path].secret:
        raise KeyError(f"{path} holds secrets: use deploykit_credentials")
    return files[path].content


def deploykit_host_paths(inventory_dir: str, host: str) -> list[str]:
    site = site_of(inventory_dir)
    return sorted(rendered.host_files(site, site.hosts[host]))


def deploykit_cluster_file(name: str, inventory_dir: str) -> str:
    return rendered.cluster_files(site_of(inventory_dir))[name].content


def deploykit_credentials(keys: dict[str, str], inventory_dir: str, host: str) -> str:
    """The AWS credentials profile, with the keys Ansible holds (vault or RGW)."""
    from deploy_kit.render.names import aws_profile
    from deploy_kit.render.templating import render_template

    config = site_of(inventory_dir).hosts[host].config
    return render_template("aws-credentials.j2", profile=aws_profile(config),
                           access_key=keys["access_key"], secret_key=keys["secret_key"])


def deploykit_settings(inventory_dir: str, host: str) -> dict[str, Any]:
    """The host's validated settings, defaults filled in (what the roles act on)."""
    config = site_of(inventory_dir).hosts[host].config
    return config.model_dump(mode="json", exclude={"deploykit_s3_access_key",
                                                   "deploykit_s3_secret_key"})


def deploykit_lifecycle(inventory_dir: str) -> dict[str, Any]:
    from deploy_kit.render.storage import lifecycle_rules

    return lifecycle_rules(site_of(inventory_dir).settings)


def deploykit_ceph_features(inventory_dir: str) -> dict[str, Any]:
    from deploy_kit import compat

    table = compat.ceph(site_of(inventory_dir).settings.deploykit_ceph_version)
    return {"concentrator": table.has_concentrator, "noautoscale_flag": table.has_noautoscale_flag,
            "release": table.release}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "deploykit_file": deploykit_file,
            "deploykit_host_paths": deploykit_host_paths,
            "deploykit_cluster_file": deploykit_cluster_file,
            "deploykit_credentials": deploykit_credentials,
            "deploykit_settings": deploykit_settings,
            "deploykit_lifecycle": deploykit_lifecycle,
            "deploykit_ceph_features": deploykit_ceph_features,
        }
