"""The device providers a host should report: pure rules.

For each mdev parent (and each NVIDIA SR-IOV physical GPU) that serves an
enabled type, one child provider of the compute node, named as Nova names
it: ``<nodename>_<libvirt device name>``. The VF parents of one GPU (NVIDIA
Ampere before kernel 6.8) are one provider, named after the GPU, whose
total is what the GPU holds (the type's ``max_instance``). A card that
serves several types (mixed size) has a provider per type: the first
type's is the card's provider, each other type's
(``<card's provider>__<type>``) a child of it.

* total = devices of the type that exist on the parent + its
  ``availableInstances`` (SR-IOV: VFs that have the type + VFs that could
  take it); ``max_unit`` = total; never a total of 0, but for the
  provider of a card whose other types' providers are under it (mixed
  size), which stays with no inventory while its first type has no room.
* ``max_instances`` caps a type host-wide: devices in use count first,
  then parents in name order share what is left of the cap.
* ``card_share`` (a card serving several types): a type may hold that
  percent of what the empty card holds of it, the rest of what fits is
  reserved; shares of a card's types adding up to 100 or less cannot be
  over-allocated together.
* A provider that still has devices in use but nothing to offer (its
  device vanished, its type was changed, it is over a lowered cap, it is
  failing) is kept with ``reserved = total`` so nothing in use is orphaned
  and nothing new lands on it; a provider with nothing to offer and
  nothing in use is dropped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

import os_resource_classes as orc

from vgpu_driver.model import health, naming
from vgpu_driver.model.config import DeviceConfig, TypeConfig
from vgpu_driver.model.counting import tally
from vgpu_driver.model.device import HostInventory
from vgpu_driver.model.kept import (
    kept_while_in_use,
    reserved_plan,
)
from vgpu_driver.model.plan_devices import Device, by_device, devices_of
from vgpu_driver.model.provider_figures import (
    PlanPass,
    plan_one,
    type_traits,
    used_units,
)
from vgpu_driver.model.provider_plan import ProviderPlan
from vgpu_driver.model.type_providers import providers_of

# (device, type, its provider's name, its parent provider's or None)
Chosen = tuple[Device, TypeConfig, str, str | None]


def plan_providers(
    nodename: str,
    config: DeviceConfig,
    inventory: HostInventory,
    *,
    held: Mapping[str, Mapping[str, int]],
    allocated: Mapping[str, Mapping[str, int]] | None = None,
    existing: Mapping[str, Iterable[str]] | None = None,
    unschedulable: Iterable[str] = (),
    owner_trait: str = "OWNER_NOVA",
    foreign: Mapping[str, Mapping[str, int]] | None = None,
    existing_traits: Mapping[str, Iterable[str]] | None = None,
    outside: Mapping[str, Mapping[str, int]] | None = None,
) -> list[ProviderPlan]:
    """The providers to report, in name order.

    ``held``: device name -> type id -> devices of that type guests use.
    ``allocated``: provider name -> resource class -> units allocated in
    Placement (when the caller knows them). ``existing``: provider name ->
    resource classes of the device providers the tree has now (those
    dropped from the host are kept while in use). ``unschedulable``:
    device names whose device is failing. ``foreign``: device name ->
    type id -> free devices another manager made there (an mdev made
    with mdevctl, a VF an operator typed): never handed out, so reserved.
    ``existing_traits``: provider name -> its traits now (which type a
    card's provider serves, when the enabled order changes).
    ``outside``: device name -> type id -> its devices guests outside
    Nova use (no allocation in Placement: reserved).
    """
    allocated = allocated or {}
    existing = existing or {}
    held_here = by_device(inventory, held)
    devices = devices_of(inventory, config)
    plans: dict[str, ProviderPlan] = {}
    chosen = _choose(
        nodename,
        config,
        devices,
        held_here,
        existing,
        existing_traits,
        owner_trait,
        plans,
    )
    now = PlanPass(
        nodename=nodename,
        owner_trait=owner_trait,
        held=held_here,
        allocated=allocated,
        existing=existing,
        failing=set(unschedulable),
        down={
            inventory.device_of(name): why
            for name, why in sorted(health.unhealthy(inventory).items())
        },
        foreign=by_device(inventory, foreign or {}),
        outside=by_device(inventory, outside or {}),
        budget=_budgets(config, chosen, held_here, allocated),
        types_on=tally(device.name for device, _t, _n, _p in chosen),
        versions=dict(inventory.driver_versions),
    )
    for device, type_cfg, name, parent in sorted(chosen, key=lambda c: c[2]):
        plan = plan_one(now, device, type_cfg, name, parent)
        if plan is not None:
            plans[name] = plan

    # providers whose device is gone from the host (or no longer serves a
    # type) but that still have devices in use
    kept_while_in_use(
        plans,
        existing,
        nodename,
        held_here,
        allocated,
        {d.name for d in devices},
        owner_trait,
    )
    _hold_parents(plans, chosen, owner_trait)
    return sorted(plans.values(), key=lambda p: p.name)


def _choose(
    nodename: str,
    config: DeviceConfig,
    devices: list[Device],
    held: Mapping[str, Counter[str]],
    existing: Mapping[str, Iterable[str]],
    existing_traits: Mapping[str, Iterable[str]] | None,
    owner_trait: str,
    plans: dict[str, ProviderPlan],
) -> list[Chosen]:
    """The providers each device gets, a type each; a device whose
    guests still use devices of a type it no longer serves gets a plan
    in ``plans`` that keeps them and takes nothing new, and no other."""
    chosen: list[Chosen] = []
    for device in devices:
        if device.several:
            serves = config.types_for_device(device.keys, device.supported)
        else:
            only = config.type_for_parent(device.keys, device.supported)
            serves = [only] if only is not None else []
        type_cfg = serves[0] if serves else None
        in_use = {t: n for t, n in held.get(device.name, {}).items() if n}
        served = {t.type_id for t in serves}
        other = {
            t: n
            for t, n in in_use.items()
            if t not in served
            # a type with a provider of its own is kept there (below)
            and naming.type_provider_name(nodename, device.name, t)
            not in existing
        }
        if other:
            # Guests still use devices of a type this parent no longer
            # serves: keep what they use, take nothing new until empty.
            old_type = max(other, key=lambda t: other[t])
            plans[naming.provider_name(nodename, device.name)] = reserved_plan(
                nodename,
                device.name,
                old_type,
                sum(other.values()),
                _class_of(config, old_type, existing, nodename, device.name),
                owner_trait,
                (
                    f"its type changed to {type_cfg.type_id}"
                    if type_cfg
                    else "it serves no enabled type any more"
                )
                + f" while guests use {sum(other.values())} {old_type} "
                "device(s)",
            )
            continue
        chosen.extend(
            (device, cfg, name, parent)
            for cfg, name, parent in providers_of(
                nodename, device.name, serves, existing, existing_traits
            )
        )
    return chosen


def _budgets(
    config: DeviceConfig,
    chosen: list[Chosen],
    held: Mapping[str, Counter[str]],
    allocated: Mapping[str, Mapping[str, int]],
) -> dict[str, int]:
    """Type id -> the units its ``max_instances`` still grants host-wide:
    the cap less what is in use on every provider of the type."""
    caps = {
        t.type_id: t.max_instances for t in config.types if t.max_instances
    }
    used: Counter[str] = Counter()
    for device, type_cfg, name, _parent in chosen:
        used[type_cfg.type_id] += used_units(
            device, type_cfg, held, allocated, name
        )
    return {
        type_id: max(0, cap - used[type_id]) for type_id, cap in caps.items()
    }


def _hold_parents(
    plans: dict[str, ProviderPlan],
    chosen: Iterable[tuple[Device, TypeConfig, str, str | None]],
    owner_trait: str,
) -> None:
    """A card's provider stays while the providers of its other types
    are under it, with nothing of its own when its first type has no
    room (the card is full of the others) or is served no longer."""
    first = {name: cfg for _d, cfg, name, _p in chosen}
    for plan in list(plans.values()):
        if plan.parent is None or plan.parent in plans:
            continue
        cfg = first.get(plan.parent)
        plans[plan.parent] = ProviderPlan(
            name=plan.parent,
            device=plan.device,
            type_id=cfg.type_id if cfg else "",
            resource_class=cfg.resource_class if cfg else plan.resource_class,
            total=0,
            reserved=0,
            traits=frozenset({owner_trait}),
        )


def _class_of(
    config: DeviceConfig,
    type_id: str,
    existing: Mapping[str, Iterable[str]],
    nodename: str,
    device_name: str,
) -> str:
    """The class of a provider kept for devices of ``type_id`` in use: the
    one it has (their allocations are in it: Placement would refuse it
    taken away), else the type's, else VGPU."""
    classes = list(
        existing.get(naming.provider_name(nodename, device_name), ())
    )
    if classes:
        return classes[0]
    type_cfg = config.get(type_id)
    return type_cfg.resource_class if type_cfg is not None else str(orc.VGPU)


__all__ = ["ProviderPlan", "plan_providers", "type_traits"]
