"""systemd expands `%` specifiers in Description=, EnvironmentFile= and Environment=: a value
deploykit writes there from the inventory (a directory, a model path) reaches systemd as
written, `%` doubled, and nothing else in the unit changes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from deploy_kit.ops.site import open_site
from deploy_kit.render.files import host_files
from tests.conftest import InventoryFactory
from tests.unit.test_fit import one_host

SPECIFIER = re.compile(r"%(?!%)")


def _unescape(value: str) -> str:
    return value.replace("%%", "%")


def test_a_percent_in_a_directory_or_model_path_reaches_systemd_literally(
        make_inventory: InventoryFactory, tmp_path: Path) -> None:
    model = tmp_path / "qwen%n"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8,
        "hidden_size": 512}))
    site = open_site(str(make_inventory(one_host(
        vllm_accelerator="cuda", vllm_max_model_len=4096, lmcache_config_dir="/srv/deploy%kit",
        vllm_model=str(model)))))
    files = host_files(site, site.hosts["h1"])
    units = {path: f.content for path, f in files.items() if path.endswith(".service")}
    env_lines = [line for text in units.values() for line in text.splitlines()
                 if line.startswith(("EnvironmentFile=", "Description="))]
    env_files = [_unescape(line.split("=", 1)[1]) for line in env_lines
                 if line.startswith("EnvironmentFile=")]
    assert env_files and all(p.startswith("/srv/deploy%kit/") for p in env_files), env_lines
    assert all(p in files for p in env_files), "each EnvironmentFile= names a rendered file"
    described = [line for line in env_lines if "qwen" in line]
    assert described and all("qwen%%n" in line for line in described), described
    for line in env_lines:
        # a lone `%` anywhere in these settings would be a specifier systemd expands
        value = line.split("=", 1)[1].replace("%%", "")
        assert not SPECIFIER.search(value), line
