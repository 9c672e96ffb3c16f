"""Stock Nova takes the driver as operators deploy it: nova-compute
loads it by its compute_driver name, and every Nova method it overrides
accepts Nova's own arguments (run by tools/nova-functional; skipped
where Nova cannot be imported)."""

from __future__ import annotations

import pytest

provider_tree = pytest.importorskip(
    "nova.compute.provider_tree",
    reason="needs Nova with its dependencies: run tools/nova-functional",
)
nova_conf = pytest.importorskip("nova.conf")


def _run(*args):
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    found = subprocess.run(
        [*args],
        capture_output=True,
        text=True,
        cwd="/tmp",
        env={**os.environ, "PATH": path},
        timeout=120,
    )
    return found.returncode, found.stdout + found.stderr


def _overridden():
    """(class, name) of every Nova driver method this package overrides."""
    from nova.virt.libvirt import driver as nova_driver

    from vgpu_driver.nova import driver as vgpu_nova

    found = []
    for klass in vgpu_nova.LibvirtDriver.__mro__:
        if not klass.__module__.startswith("vgpu_driver"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("__") or not callable(value):
                continue
            if hasattr(nova_driver.LibvirtDriver, name):
                found.append((klass, name))
    return found


def test_stock_nova_loads_the_driver_by_its_compute_driver_name():
    """Nova's own loader, as the distribution's nova-compute calls it,
    finds ``vgpu_libvirt.LibvirtDriver`` under ``nova.virt`` (the module
    the wheel installs there) with nothing of this package imported or
    called first."""
    import sys

    code, out = _run(
        sys.executable,
        "-c",
        "import sys\n"
        "import nova.cmd.compute\n"  # Nova's own import order
        "from nova.virt import driver, fake\n"
        "assert not [m for m in sys.modules if m.startswith('vgpu_driver')]\n"
        "found = driver.load_compute_driver(\n"
        "    fake.FakeVirtAPI(), 'vgpu_libvirt.LibvirtDriver')\n"
        "print(type(found).__module__, type(found).__name__)\n",
    )
    assert code == 0, out
    assert "vgpu_driver.nova.driver LibvirtDriver" in out


def test_every_overridden_nova_method_accepts_nova_s_arguments():
    """A caller of Nova's driver (Nova's compute manager, Nova's own
    other methods) can call each override as it calls Nova's: every
    argument Nova's method takes, positional or keyword, binds."""
    import inspect

    from nova.virt.libvirt import driver as nova_driver

    overridden = _overridden()
    assert len(overridden) >= 20  # the integration's whole surface
    for klass, name in overridden:
        theirs = inspect.signature(getattr(nova_driver.LibvirtDriver, name))
        ours = inspect.signature(getattr(klass, name))
        positional, keywords = [], {}
        for param in theirs.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            if param.kind == param.KEYWORD_ONLY:
                keywords[param.name] = object()
            elif param.default is param.empty:
                positional.append(object())
        ours.bind(*positional, **keywords)  # raises TypeError if not
        optional = [
            p.name
            for p in theirs.parameters.values()
            if p.default is not p.empty
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        ours.bind(*positional, **{n: object() for n in optional})
