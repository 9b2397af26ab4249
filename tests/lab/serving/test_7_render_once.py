"""A phase tag runs only its phase on the converged lab (the plain ansible-playbook path is
molecule's: tests/lab/ansible/test_molecule.py)."""

from __future__ import annotations

from tests.lab.conftest import Lab


def test_a_phase_tag_runs_only_that_phase(converged: Lab) -> None:
    summary = converged.converge("--tags", "coredns_configure")
    assert summary["rc"] == 0 and summary["changed"] == 0
    ran = set(summary["task_seconds"])
    assert any(t.endswith("coredns : Write CoreDNS files") for t in ran), ran
    # other roles contribute only their always-run settings, facts and preflight checks
    for other in ("Write the concentrator configuration", "Start and enable the gateways",
                  "Write the LMCache configuration", "Start and enable coredns"):
        assert not any(t.endswith(other) for t in ran), other
