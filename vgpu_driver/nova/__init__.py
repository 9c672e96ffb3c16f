"""Use this library from a stock nova-compute.

Nova loads its compute driver as ``nova.virt.<compute_driver>``, so a
driver outside Nova's tree needs a module under ``nova.virt``: the wheel
installs ``nova.virt.vgpu_libvirt`` (``shims/`` in the source tree),
which is :mod:`vgpu_driver.nova.driver`. An operator:

1. installs ``vgpu-driver[nova]`` into nova-compute's environment;
2. sets ``[DEFAULT] compute_driver = vgpu_libvirt.LibvirtDriver`` in
   nova.conf (``[devices]`` and ``[mdev_<type>]`` stay as they are);
3. restarts the distribution's nova-compute, unchanged.

Nothing is imported from Nova by this module.
"""

from __future__ import annotations

import os

COMPUTE_DRIVER = "vgpu_libvirt.LibvirtDriver"
# Nova releases whose own vGPU functional suite CI runs with this driver
# (the [nova] extra's range): it overrides private methods of Nova's.
SUPPORTED_NOVA = ((33, 0), (35, 0))  # from, up to (excluded)


def check_nova_version(version: str) -> None:
    """Raise ImportError (Nova's loader reports it as "Unable to load the
    virtualization driver", with this message) on an unsupported Nova."""
    low, high = SUPPORTED_NOVA
    try:
        found = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        found = ()
    if len(found) != 2 or not low <= found < high:
        raise ImportError(
            f"vgpu-driver supports Nova {low[0]}.x to {high[0] - 1}.x and "
            f"this is Nova {version}: install a vgpu-driver release made "
            "for it, or set compute_driver = libvirt.LibvirtDriver"
        )


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
