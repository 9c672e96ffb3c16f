"""The writes to the real ``/sys`` a non-root service cannot make itself,
made through ``oslo.privsep`` as Nova makes its own.

Only three kinds of file are ever written, each checked here, in the
privileged process, before it is opened: an mdev type's ``create``, an
mdev's ``remove`` and an NVIDIA VF's ``nvidia/current_vgpu_type``, each
under ``/sys`` and nowhere else (no ``..``, no symlink leading out). The
daemon has ``CAP_DAC_OVERRIDE`` only.

The service starts the daemon through its root helper, as Nova does for
its own context::

    [vgpu_driver_privileged]
    helper_command = sudo privsep-helper --config-file /etc/nova/nova.conf

(with a sudoers line allowing the nova user to run ``privsep-helper``, or
Nova's rootwrap in front of it). A process running as root writes
directly, and so does any reading of a sysfs tree that is not ``/sys``
(a simulated host): nothing is privileged there.
"""

from __future__ import annotations

import os
import re

from oslo_privsep import capabilities, priv_context

SYSFS = "/sys"
_HEX = "[0-9a-fA-F]"
_UUID = rf"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
_BDF = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
# what may be written, relative to /sys, and what may be written there
_ALLOWED = (
    (re.compile(r"(?:[\w:.\-]+/)+mdev_supported_types/[\w\-]+/create"), _UUID),
    (re.compile(rf"bus/mdev/devices/{_UUID}/remove"), r"1"),
    (re.compile(rf"bus/pci/devices/{_BDF}/nvidia/current_vgpu_type"), r"\d+"),
)

sysfs_writer = priv_context.PrivContext(
    "vgpu_driver",
    cfg_section="vgpu_driver_privileged",
    pypath=__name__ + ".sysfs_writer",
    capabilities=[capabilities.CAP_DAC_OVERRIDE],
)


def check(relative: str, value: str) -> str:
    """The absolute path to write ``value`` to, if allowed; ValueError
    otherwise."""
    if ".." in relative.split("/") or relative.startswith("/"):
        raise ValueError(f"refused: {relative!r} is not a path inside /sys")
    for pattern, allowed_value in _ALLOWED:
        if pattern.fullmatch(relative) and re.fullmatch(allowed_value, value):
            path = os.path.join(SYSFS, relative)
            # the device's own directory may be a link (class/mdev_bus):
            # what it leads to must still be in /sys
            real = os.path.realpath(os.path.dirname(path))
            if not (real + "/").startswith(SYSFS + "/"):
                raise ValueError(f"refused: {relative!r} leads out of /sys")
            return path
    raise ValueError(
        f"refused: writing {value!r} to /sys/{relative} is not one of the "
        "writes this library makes"
    )


@sysfs_writer.entrypoint
def write_sysfs(relative: str, value: str) -> None:
    """Write ``value`` to ``/sys/<relative>`` (checked first)."""
    with open(check(relative, value), "w") as handle:
        handle.write(value)
