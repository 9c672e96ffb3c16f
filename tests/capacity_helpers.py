"""What a provider would offer with one type enabled alone: the
configuration (:func:`enabled`) and the totals the planner gives."""

from __future__ import annotations

from vgpu_driver.model.config import DeviceConfig, TypeConfig
from vgpu_driver.model.device import HostInventory
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
