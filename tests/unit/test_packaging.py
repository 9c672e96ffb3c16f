"""The wheel holds every package of ours, and under Nova's tree only the
module a stock nova-compute loads."""

from __future__ import annotations

import ast
import configparser
import os
from pathlib import Path

import setuptools

ROOT = Path(__file__).resolve().parents[2]
SHIM = "nova.virt.vgpu_libvirt"


def listed() -> tuple[list[str], dict[str, str]]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    packages = parser["options"]["packages"].split()
    package_dir = dict(
        (k.strip(), v.strip())
        for k, _, v in (
            line.partition("=")
            for line in parser["options"]["package_dir"].strip().splitlines()
        )
    )
    return packages, package_dir


def test_every_package_of_ours_is_listed_and_nothing_of_nova_s_but_the_shim():
    packages, package_dir = listed()
    found = setuptools.find_packages(str(ROOT), include=["vgpu_driver*"])
    assert sorted(p for p in packages if p != SHIM) == sorted(found)
    assert [p for p in packages if p.startswith("nova")] == [SHIM]
    assert (ROOT / package_dir[SHIM] / "__init__.py").is_file()


def test_the_shim_is_the_driver_nova_s_loader_asks_for():
    """``compute_driver = vgpu_libvirt.LibvirtDriver`` resolves to
    ``nova.virt.vgpu_libvirt.LibvirtDriver``: the shim must export that
    name from the integration (tests/nova loads it through Nova)."""
    _, package_dir = listed()
    source = (ROOT / package_dir[SHIM] / "__init__.py").read_text()
    tree = ast.parse(source)
    imported = [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]
    assert ("vgpu_driver.nova.driver", "LibvirtDriver") in imported
    setup = (ROOT / "setup.cfg").read_text()
    assert "nova-compute-vgpu" not in setup  # no renamed binary


def test_the_sdist_is_complete(tmp_path):
    """Packagers build from the sdist: it carries the tests, docs,
    release notes, tools, the devstack plugin and the shim."""
    import tarfile

    from setuptools import build_meta

    previous = os.getcwd()
    os.chdir(ROOT)
    try:
        name = build_meta.build_sdist(str(tmp_path))
    finally:
        os.chdir(previous)
    with tarfile.open(tmp_path / name) as archive:
        members = {m.name.split("/", 1)[-1] for m in archive.getmembers()}
    for needed in (
        "tests/unit/test_packaging.py",
        "doc/source/admin/deploying.rst",
        "releasenotes/notes",
        "tools/nova-functional",
        "devstack/plugin.sh",
        "shims/nova_virt_vgpu_libvirt/__init__.py",
        "tox.ini",
        "run",
    ):
        assert any(m == needed or m.startswith(needed) for m in members), (
            needed
        )


def test_an_unsupported_nova_is_refused_naming_the_supported_range():
    import pytest

    from vgpu_driver.nova import check_nova_version

    check_nova_version("34.0.0")
    check_nova_version("33.0.2")
    for version in ("32.2.1", "35.0.0", "unknown"):
        with pytest.raises(ImportError, match=r"supports Nova 33\.x to 34\.x"):
            check_nova_version(version)
    setup = (ROOT / "setup.cfg").read_text()
    assert "nova>=33.0.0,<35" in setup  # the extra says the same


def test_the_version_comes_from_git():
    """No version is written by hand: setuptools-scm derives it from the
    git tags (a release is a tag), and the installed package reports it."""
    from importlib import metadata

    setup = (ROOT / "setup.cfg").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "\nversion =" not in setup
    assert "[tool.setuptools_scm]" in pyproject
    assert "setuptools-scm" in pyproject
    assert metadata.version("vgpu-driver") != "0.1.0"


def test_the_wheel_ships_the_simulated_hosts_without_a_setuptools_warning(
    tmp_path,
):
    """Every data directory is a package of its own: pip builds the wheel
    (with the setuptools it fetches, as ``./run`` installs) without
    setuptools' 'Package would be ignored' box, the first thing ``./run
    demo`` printed on a fresh machine; and the shipped hosts and the
    captures they are filled from are in it."""
    import subprocess
    import sys
    import zipfile

    built = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q"),
            *("--disable-pip-version-check", "-w", str(tmp_path), str(ROOT)),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    assert "would be ignored" not in built.stdout + built.stderr
    (wheel_path,) = tmp_path.glob("vgpu_driver-*.whl")
    with zipfile.ZipFile(wheel_path) as wheel:
        files = set(wheel.namelist())
    data = ROOT / "vgpu_driver" / "sim" / "data"
    shipped = [
        path.relative_to(ROOT).as_posix()
        for path in (*data.glob("*.json"), *data.glob("captures/*.txt"))
    ]
    assert shipped and not set(shipped) - files
