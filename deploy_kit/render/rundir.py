"""The tree the playbooks read: rendered once per run, copied by the roles.

Layout (the same as `deploykit render -o DIR`):
  DIR/<host>/<absolute path>            every non-secret file the host receives
  DIR/<host>/.deploykit/settings.json   the host's validated settings + derived names
  DIR/_cluster/...                      site-wide files (pool script, lifecycle, cephadm spec)
  DIR/_cluster/.deploykit/site.json     site-wide facts the roles branch on

Secret files are left out: the roles write them from keys Ansible holds (RGW or vault), so a
run directory never contains a key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deploy_kit import compat
from deploy_kit.config.models import SECRET_KEYS as MODEL_SECRET_KEYS
from deploy_kit.config.site import Host, Site
from deploy_kit.render import names
from deploy_kit.render.files import CLUSTER, RenderedFile, Tree, render_site, write_tree
from deploy_kit.render.storage import lifecycle_rules

SETTINGS_PATH = "/.deploykit/settings.json"
SITE_PATH = "/.deploykit/site.json"
SECRET_KEYS = frozenset({"deploykit_s3_access_key", "deploykit_s3_secret_key"})
# every vault-only key (S3 keys, Consul ACL tokens and gossip key) stays out of settings.json
SECRET_KEYS = SECRET_KEYS | frozenset(MODEL_SECRET_KEYS)


def host_settings(host: Host, paths: list[str]) -> dict[str, Any]:
    """What the roles act on: every setting with its default filled in, and derived names."""
    c = host.config
    settings = c.model_dump(mode="json", exclude=set(SECRET_KEYS))
    settings["derived"] = {
        "header": names.HEADER,
        "aws_profile": names.aws_profile(c),
        "credentials_path": names.credentials_path(c),
        "rgw_instances": names.rgw_instance_names(host.name, c.ceph_rgw_count_per_host),
        "files": paths,
    }
    return settings


def site_facts(site: Site) -> dict[str, Any]:
    s = site.settings
    table = compat.ceph(s.deploykit_ceph_version)
    return {
        "ceph": {"concentrator": table.has_concentrator,
                 "noautoscale_flag": table.has_noautoscale_flag, "release": table.release},
        "lifecycle": lifecycle_rules(s),
    }


def _json(data: Any) -> RenderedFile:
    return RenderedFile(json.dumps(data, indent=2, sort_keys=True) + "\n")


def with_settings(site: Site, tree: Tree) -> Tree:
    """Add each host's settings and the site facts to a rendered tree."""
    for name, host in site.hosts.items():
        paths = sorted(path for path, f in tree[name].items() if not f.secret)
        tree[name] = {**tree[name], SETTINGS_PATH: _json(host_settings(host, paths))}
    tree[CLUSTER] = {**tree[CLUSTER], SITE_PATH: _json(site_facts(site))}
    return tree


def role_tree(site: Site) -> Tree:
    """What a run hands the playbooks: the rendered site without its secret files."""
    tree = {host: {path: f for path, f in files.items() if not f.secret}
            for host, files in render_site(site).items()}
    return with_settings(site, tree)


def write_run_tree(site: Site, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    return write_tree(role_tree(site), out)
