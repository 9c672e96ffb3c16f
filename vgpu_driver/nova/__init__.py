"""Use this library from a stock nova-compute.

Nova loads its compute driver as ``nova.virt.<compute_driver>``, so a
driver outside Nova's tree needs a name under ``nova.virt``.
:func:`enable` gives :mod:`vgpu_driver.nova.driver` the name
``nova.virt.vgpu_libvirt``; ``nova-compute-vgpu`` (this package's wrapper
of ``nova-compute``) calls it before starting the service. An operator:

1. installs ``vgpu-driver[nova]`` into nova-compute's environment;
2. sets ``[DEFAULT] compute_driver = vgpu_libvirt.LibvirtDriver`` in
   nova.conf (``[devices]`` and ``[mdev_<type>]`` stay as they are);
3. runs ``nova-compute-vgpu`` with nova-compute's usual arguments.

Nothing is imported from Nova until :func:`enable` is called.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

ALIAS = "nova.virt.vgpu_libvirt"
COMPUTE_DRIVER = "vgpu_libvirt.LibvirtDriver"


def nova_state_path(state_path: str, nodename: str) -> str:
    """Where the integration keeps a compute node's records:
    ``[devices] state_path/<nodename>`` (``vgpu-driver --nova-node``).
    Raises ValueError for a name that is not one path component."""
    if not nodename or "/" in nodename or nodename in (".", ".."):
        raise ValueError(
            f"--nova-node {nodename!r} is not a compute node name; give "
            "the node's hypervisor hostname"
        )
    return os.path.join(state_path, nodename)


def enable() -> ModuleType:
    """Make ``compute_driver = vgpu_libvirt.LibvirtDriver`` loadable by
    Nova in this process. Idempotent; returns the driver module."""
    module = importlib.import_module("vgpu_driver.nova.driver")
    sys.modules[ALIAS] = module
    virt = importlib.import_module("nova.virt")
    setattr(virt, ALIAS.rsplit(".", 1)[1], module)
    return module


def main() -> None:
    """``nova-compute-vgpu``: nova-compute, with this driver loadable."""
    # nova.cmd.compute first: it sets up Nova's concurrency (monkey
    # patching) before any other Nova module is imported
    compute = importlib.import_module("nova.cmd.compute")
    enable()
    compute.main()
