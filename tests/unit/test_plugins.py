"""Entry-point plugins load behind a guard: one that fails to import is skipped with one
warning line naming it, and the product's verbs keep working."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from deploy_kit import plugins


def entry(value: str, group: str = plugins.VERBS, name: str = "broken") -> EntryPoint:
    return EntryPoint(name=name, value=value, group=group)


def test_a_plugin_that_fails_to_import_is_skipped_with_one_warning_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert plugins.load(entry("no_such_module_for_deploykit:app")) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "deploykit.plugins broken = no_such_module_for_deploykit:app" in err
    assert "ModuleNotFoundError" in err


def test_a_plugin_that_loads_is_returned(capsys: pytest.CaptureFixture[str]) -> None:
    assert plugins.load(entry("os.path:join")) is not None
    assert capsys.readouterr().err == ""


def test_a_broken_verb_plugin_leaves_the_others(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    found = [entry("no_such_module_for_deploykit:app"), entry("os.path:join", name="good")]
    monkeypatch.setattr(plugins, "entry_points", lambda group: found)
    assert list(plugins.verbs()) == ["good"]
    assert "broken" in capsys.readouterr().err


def test_a_broken_roundtrip_driver_falls_through_to_the_next(
        monkeypatch: pytest.MonkeyPatch) -> None:
    group = plugins.ROUNDTRIP_DRIVERS
    found = [entry("no_such_module_for_deploykit:run", group, "a"),
             entry("os.path:join", group, "b")]
    monkeypatch.setattr(plugins, "entry_points", lambda group: found)
    assert plugins.roundtrip_driver() is not None
