"""What the tier checks: deploykit's renders of the example, of every golden inventory and of
a variant inventory for each (vLLM row, accelerator, LMCache topology) that none of those
covers, with each serving host's settings beside its rendered files."""

from __future__ import annotations

import copy
import shlex
import shutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from deploy_kit.config.rules_accelerators import TOPOLOGY_CONNECTOR
from deploy_kit.config.site import Host
from deploy_kit.core import compat
from deploy_kit.core.errors import InventoryError
from deploy_kit.ops.site import open_site
from deploy_kit.plan.serving import serving_host
from deploy_kit.render.files import RenderedFile, render_site
from tests.conftest import REPO

EXAMPLE = REPO / "inventory" / "example"
GOLDEN = REPO / "tests" / "golden"

# The example's host of each accelerator, copied into the variants (model, device count);
# cpu borrows the cpu-server golden's sizing (a 32B model at 8K on a small L1).
ACCELERATOR_HOST: dict[str, dict[str, Any]] = {
    "cuda": {"vllm_accelerator": "cuda", "vllm_accelerator_model": "h100",
             "vllm_accelerator_count": 8, "vllm_gpu_memory_utilization": 0.90},
    "rocm": {"vllm_accelerator": "rocm", "vllm_accelerator_model": "mi300x",
             "vllm_accelerator_count": 8},
    "gaudi3": {"vllm_accelerator": "gaudi3", "vllm_accelerator_model": "gaudi3",
               "vllm_accelerator_count": 8},
    "cpu": {"vllm_accelerator": "cpu", "vllm_enforce_eager": True,
            "vllm_enable_prefix_caching": False, "vllm_cpu_kvcache_space": 2,
            "lmcache_server_l1_size_gb": 4, "vllm_max_model_len": 8192, "vllm_block_size": 128},
}
SITE_WHEEL_DIR = "/srv/wheelhouse/site"
LMCACHE = "0.5.6"  # the LMCache this tier checks (compat.yaml's 0.5 series, its pin)
GOLDEN_ENV = {"DK_GOLDEN_ACCESS": "GOLDENACCESSKEY", "DK_GOLDEN_SECRET": "golden-secret-not-real"}


@dataclass(frozen=True)
class ServingRender:
    """One serving host of one render: its settings and its files."""

    source: str          # example, golden/<case> or variant/<row>-<accelerator>-<topology>
    host: Host
    files: dict[str, RenderedFile]

    @property
    def name(self) -> str:
        return f"{self.source}:{self.host.name}"

    @property
    def accelerator(self) -> str:
        return serving_host(self.host).accelerator

    @property
    def vllm_version(self) -> str:
        return self.host.config.vllm_version

    @property
    def vllm_row(self) -> str:
        return compat.vllm(self.vllm_version).series

    @property
    def lmcache_version(self) -> str:
        return self.host.config.lmcache_version

    @property
    def inprocess(self) -> bool:
        return serving_host(self.host).inprocess

    @property
    def topology(self) -> str:
        return "inprocess" if self.inprocess else "server"

    def units(self, prefix: str) -> dict[str, str]:
        return {path: f.content for path, f in self.files.items()
                if path.startswith(f"/etc/systemd/system/{prefix}") and path.endswith(".service")}

    def vllm_argvs(self) -> dict[str, list[str]]:
        """Each vLLM unit's ExecStart, as systemd splits it."""
        return {path: exec_start(text) for path, text in self.units("vllm").items()
                if not path.endswith("vllm-front.service")}


def exec_start(unit: str) -> list[str]:
    """The ExecStart argv of a rendered unit (continuation lines joined; systemd quotes as
    the shell does for these)."""
    text = unit.replace("\\\n", " ")
    lines = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1, f"{len(lines)} ExecStart lines"
    return shlex.split(lines[0].removeprefix("ExecStart="))


def rows() -> list[tuple[str, str]]:
    """Every (vLLM series, accelerator) of compat.yaml."""
    return [(series, accelerator) for series in compat.supported_series("vllm")
            for accelerator in compat.vllm(f"{series}.0").accelerators]


def topologies(series: str, accelerator: str, lmcache_version: str) -> list[str]:
    """The LMCache topologies the row runs: allowed on both sides, and the connector in
    the vLLM row (rules_accelerators.TOPOLOGY_CONNECTOR)."""
    table = compat.vllm(f"{series}.0")
    lm = compat.lmcache(lmcache_version).topologies_for(accelerator)
    return [t for t in table.topologies_for(accelerator) if t in lm
            and TOPOLOGY_CONNECTOR[t] in table.lmcache_connectors]


def _render(source: str, inventory: Path) -> list[ServingRender]:
    site = open_site(str(inventory))
    tree = render_site(site)
    return [ServingRender(source, host, tree[host.name]) for host in site.group("vllm")]


# the settings of the encrypting variant (KV encrypted at rest: the server's aesgcm serde)
# (256 bits: not the serde's own default of 128, so a field the serde ignored would show)
ENCRYPTED = {"lmcache_l2_encryption": True, "lmcache_l2_encryption_aes_bits": 256}


def _variant_inventory(root: Path, series: str, accelerator: str, topology: str,
                       version: str, wheel_dir: bool, encrypted: bool = False) -> Path:
    """The example with its serving hosts replaced by one host of this row."""
    target = root / f"{series}-{accelerator}-{topology}{'-encrypted' if encrypted else ''}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(EXAMPLE, target)
    hosts = yaml.safe_load((EXAMPLE / "hosts.yml").read_text())
    host = {"ansible_host": "10.67.68.99", **copy.deepcopy(ACCELERATOR_HOST[accelerator]),
            "vllm_version": version, "lmcache_topology": topology,
            **(ENCRYPTED if encrypted else {})}
    if wheel_dir:
        host |= {"vllm_wheel_dir": SITE_WHEEL_DIR, "lmcache_wheel_dir": SITE_WHEEL_DIR}
    group = {"cuda": "vllm_cuda", "rocm": "vllm_rocm", "gaudi3": "vllm_gaudi",
             "cpu": "vllm_cpu"}[accelerator]
    hosts["all"]["children"]["vllm"] = {"children": {group: {"hosts": {
        f"{accelerator}-{series.replace('.', '')}": host}}}}
    (target / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    for gone in ("vllm_cuda", "vllm_rocm", "vllm_gaudi"):  # deploykit refuses stray files
        if gone != group:
            (target / "group_vars" / f"{gone}.yml").unlink(missing_ok=True)
    return target


def variant(root: Path, series: str, accelerator: str, topology: str,
            version: str, encrypted: bool = False) -> list[ServingRender]:
    """A render of the row: the site's wheel directory where the row's build is not on PyPI
    (compat `wheel_source`), or where `validate` asks for one (lmcache_wheel_dir: a
    site-built LMCache), as a site would answer it."""
    wheel_dir = compat.vllm(version).needs_wheelhouse(accelerator)
    inventory = _variant_inventory(root, series, accelerator, topology, version, wheel_dir,
                                   encrypted)
    try:
        return _render(f"variant/{inventory.name}", inventory)
    except InventoryError as exc:
        if wheel_dir or "lmcache_wheel_dir" not in str(exc):
            raise
    inventory = _variant_inventory(root, series, accelerator, topology, version, True,
                                   encrypted)
    return _render(f"variant/{inventory.name}", inventory)


@cache
def all_renders(root: Path) -> tuple[ServingRender, ...]:
    """The example, every golden inventory, then a variant for each uncovered row."""
    renders = _render("example", EXAMPLE)
    for case in sorted(GOLDEN.iterdir()):
        if (case / "inventory").is_dir():
            renders += _render(f"golden/{case.name}", case / "inventory")
    covered = {(r.vllm_row, r.accelerator, r.topology) for r in renders
               if r.lmcache_version == LMCACHE}
    # a variant pins the patch release the example or a golden pins for its row, else .0
    versions = {r.vllm_row: r.vllm_version for r in reversed(renders)}
    for series, accelerator in rows():
        for topology in topologies(series, accelerator, LMCACHE):
            if (series, accelerator, topology) not in covered:
                renders += variant(root, series, accelerator, topology,
                                   versions.get(series, f"{series}.0"))
        # and one unit of the row with the example's rope scaling (the rope replay's input)
        if not any(r.vllm_row == series and r.accelerator == accelerator
                   and r.host.config.vllm_rope_scaling for r in renders):
            topology = topologies(series, accelerator, LMCACHE)[0]
            renders += variant(root, series, accelerator, topology,
                               versions.get(series, f"{series}.0"))
    # and one server-topology host that encrypts its L2 (its serde through LMCache's factory)
    if not any(r.host.config.lmcache_l2_encryption for r in renders):
        series, accelerator = next((s, a) for s, a in rows()
                                   if "server" in topologies(s, a, LMCACHE))
        renders += variant(root, series, accelerator, "server",
                           versions.get(series, f"{series}.0"), encrypted=True)
    return tuple(renders)
