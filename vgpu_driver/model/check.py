"""Checks of the configuration against what the host has."""

from __future__ import annotations

from vgpu_driver.model.config import DeviceConfig, Problem
from vgpu_driver.model.device import HostInventory


def unknown_addresses(
    config: DeviceConfig, inventory: HostInventory
) -> list[Problem]:
    """``device_addresses`` entries that are not mdev parents of this host
    (the spec's "fat-fingered PCI ID")."""
    present = inventory.addresses()
    problems = []
    for type_cfg in config.types:
        for address in type_cfg.addresses:
            if address not in present:
                problems.append(
                    Problem(
                        type_cfg.group,
                        "device_addresses",
                        address,
                        "no mdev-capable device or SR-IOV GPU with this "
                        "address is on the host; check the address with "
                        "'vgpu-driver discover'",
                    )
                )
    return problems
