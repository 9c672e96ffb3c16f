"""What a provider would offer with one type enabled alone: the
configuration (:func:`enabled`) and the totals the planner gives, and
an L40S card to size (:func:`l40s`)."""

from __future__ import annotations

from vgpu_driver.model.config import DeviceConfig, TypeConfig
from vgpu_driver.model.device import (
    HostInventory,
    PhysicalFunction,
    SriovType,
    VirtualFunction,
)
from vgpu_driver.model.inventory import plan_providers


def enabled(
    type_id: str,
    max_instances: int | None = None,
    addresses: tuple[str, ...] = (),
) -> DeviceConfig:
    return DeviceConfig(
        (
            TypeConfig(
                type_id,
                "VGPU",
                addresses,
                max_instances,
                (),
                True,
                f"mdev_{type_id}",
            ),
        )
    )


def totals(
    inventory: HostInventory, config: DeviceConfig
) -> dict[str, tuple[int, str | None]]:
    plans = plan_providers("cn", config, inventory, held={})
    return {p.device: (p.total, p.limit) for p in plans}


def total_of(
    inventory: HostInventory, type_id: str, device: str, **kwargs: int
) -> tuple[int, str | None]:
    """The total and limit of ``device``'s provider with ``type_id``
    enabled alone (0 when it gets no provider)."""
    found = totals(inventory, enabled(type_id, **kwargs))
    return found.get(device, (0, None))


def l40s(
    *placed: tuple[int, str], free: tuple[SriovType, ...], count: int = 32
) -> PhysicalFunction:
    """An L40S (48 GB) in mixed-size mode: ``placed`` VFs hold those
    types, the others list ``free`` (``count`` VFs in all: more than its
    32 stand for a driver whose word overstates)."""
    vfs = [
        VirtualFunction(f"0000:41:00.{4 + i}", number)
        for i, (number, _) in enumerate(placed)
    ]
    vfs += [
        VirtualFunction(f"0000:41:{1 + i // 8:02x}.{i % 8}", 0, free)
        for i in range(count - len(vfs))
    ]
    seen = tuple(SriovType(n, name) for n, name in placed)
    return PhysicalFunction(
        "pci_0000_41_00_0",
        "0000:41:00.0",
        "0x10de",
        "0x26b9",
        "nvidia",
        vfs=tuple(vfs),
        seen_types=seen,
    )


Q4 = SriovType(1150, "NVIDIA L40S-4Q")
