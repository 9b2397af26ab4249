"""deploykit's own YAML parsed by libyaml reads exactly as PyYAML's safe loader reads it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploy_kit.core import trusted_yaml
from tests.conftest import REPO

OWN = sorted([*(REPO / "deploy_kit" / "data").glob("*.yaml"), *(REPO / "roles").rglob("*.yml"),
              *(REPO / "playbooks").glob("*.yml")])


def test_there_are_files_to_compare() -> None:
    assert len(OWN) > 50


@pytest.mark.parametrize("path", OWN, ids=lambda p: str(p.relative_to(REPO)))
def test_same_document_as_the_safe_loader(path: Path) -> None:
    text = path.read_text()
    assert trusted_yaml.load(text) == yaml.safe_load(text)


def test_tags_and_types_match_on_the_hard_cases() -> None:
    text = "a: 010\nb: 1_000\nc: 0x1f\nd: yes\ne: 2026-12-07\nf: .inf\ng: ~\nh: !!str 12\n"
    assert trusted_yaml.load(text) == yaml.safe_load(text)
