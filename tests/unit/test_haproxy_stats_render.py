"""The HAProxy stats page: loopback by default, its port claimed like every other one."""

from __future__ import annotations

import pytest

from deploy_kit.core.errors import InventoryError
from deploy_kit.ops.site import open_site
from deploy_kit.render.files import render_site
from tests.conftest import REPO, InventoryFactory


def test_the_example_serves_stats_on_loopback_only() -> None:
    rendered = render_site(open_site(str(REPO / "inventory" / "example")))
    cfgs = [files["/etc/haproxy/haproxy.cfg"].content for files in rendered.values()
            if "/etc/haproxy/haproxy.cfg" in files]
    assert cfgs
    for cfg in cfgs:
        monitor = cfg[cfg.index("frontend monitor"):cfg.index("frontend stats")]
        stats = cfg[cfg.index("frontend stats"):]
        assert "stats " not in monitor and "/metrics" in monitor
        assert "    bind 127.0.0.1:1968\n" in stats and "stats auth" in stats


def test_the_stats_port_cannot_be_another_services(make_inventory: InventoryFactory) -> None:
    with pytest.raises(InventoryError) as err:
        open_site(str(make_inventory(all={"ceph_rgw_concentrator_stats_port": 1967})))
    text = "\n".join(str(p) for p in err.value.problems)
    assert "ceph_rgw_concentrator_stats_port" in text and "1967" in text
