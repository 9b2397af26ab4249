"""What the fleet-scale shortcuts (bench/render_scale.py) must keep: each equals the plain
computation it replaced, on the shipped example and on words that need quoting."""

from __future__ import annotations

from deploy_kit.config.site import GROUPS
from deploy_kit.ops.site import open_site
from deploy_kit.render import monitoring
from deploy_kit.render.templating import (
    environment,
    exec_lines,
    exec_start,
    render_env_file,
    render_template,
)

# what vllm.service.j2 and lmcache-server.service.j2 wrote before exec_start
JINJA_EXEC_START = ('{% for line in exec_lines %}{{ line | map("systemd_quote") | join(" ") }}'
                    '{{ " \\\\\\n    " if not loop.last }}{% endfor %}')


def test_group_is_the_inventory_ordered_scan_and_follows_limit() -> None:
    site = open_site("inventory/example")
    for group in (*GROUPS, "vllm_cuda", "no_such_group"):
        assert site.group(group) == [h for h in site.hosts.values() if group in h.groups]
    site.group("vllm")  # indexed: a limited site must not reuse the index
    limited = site.limit({"gpu-h100-1", "rgw1"})
    assert [h.name for h in limited.group("vllm")] == ["gpu-h100-1"]
    assert [h.name for h in limited.group("rgw")] == ["rgw1"]


def test_exec_start_quotes_as_the_template_did() -> None:
    argv = ["/opt/vllm/bin/vllm", "serve", "/models/it's here", "--port", "8000",
            "--hf-overrides", '{"rope_parameters":{"factor":4.0}}', "--enforce-eager",
            "--extra", "100%", "$HOME", "back\\slash", "--x", "a b", "c"]
    for head in (2, 3):
        lines = exec_lines(argv, head=head)
        want = environment().from_string(JINJA_EXEC_START).render(exec_lines=lines)
        assert exec_start(lines) == want
        assert exec_start(lines) == want  # cached: the same text again


def test_env_file_keeps_each_environment_and_its_order() -> None:
    first = {"B": "1", "A": "two words"}
    second = {"A": "two words", "B": "1"}
    for env in (first, second, first):
        assert render_env_file(env) == render_template("vllm.env.j2", env=env)
    assert render_env_file(first) != render_env_file(second)


def test_scrape_targets_are_per_site() -> None:
    site = open_site("inventory/example")
    limited = site.limit({"gpu-h100-1", "mon1"})
    full = monitoring.scrape_targets(site).groups[monitoring.VLLM]
    few = monitoring.scrape_targets(limited).groups[monitoring.VLLM]
    assert {g["labels"]["host"] for g in few} == {"gpu-h100-1"}
    assert len(full) > len(few)
    assert monitoring.scrape_targets(site).groups[monitoring.VLLM] == full
