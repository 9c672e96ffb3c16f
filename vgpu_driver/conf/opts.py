"""All options, for oslo-config-generator (``oslo.config.opts``)."""

from __future__ import annotations

from typing import Any

from vgpu_driver.conf import default, devices, libvirt, placement


def list_opts() -> list[tuple[Any, list[Any]]]:
    return [
        *default.list_opts(),
        *devices.list_opts(),
        *libvirt.list_opts(),
        *placement.list_opts(),
    ]
