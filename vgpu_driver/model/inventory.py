"""The device providers a host should report: pure rules.

For each mdev parent (and each NVIDIA SR-IOV physical GPU) that serves an
enabled type, one child provider of the compute node, named as Nova names
it: ``<nodename>_<libvirt device name>``.

* total = devices of the type that exist on the parent + its
  ``availableInstances`` (SR-IOV: VFs that have the type + VFs that could
  take it); ``max_unit`` = total; never a total of 0.
* ``max_instances`` caps a type host-wide: devices in use count first,
  then parents in name order share what is left of the cap.
* A provider that still has devices in use but nothing to offer (its
  device vanished, its type was changed, it is over a lowered cap, it is
  failing) is kept with ``reserved = total`` so nothing in use is orphaned
  and nothing new lands on it; a provider with nothing to offer and
  nothing in use is dropped.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

import os_resource_classes as orc

from vgpu_driver.model import capacity, health, naming, nvml, trait
from vgpu_driver.model.config import DeviceConfig, TypeConfig
from vgpu_driver.model.device import (
    HostInventory,
    Parent,
    PhysicalFunction,
)


@dataclasses.dataclass(frozen=True)
class ProviderPlan:
    name: str  # resource provider name
    device: str  # libvirt name of the parent or physical function
    type_id: str
    resource_class: str
    total: int
    reserved: int
    traits: frozenset[str]
    reason: str | None = None  # why it is reserved
    limit: str | None = None  # why its total is less than the host lists

    def inventory(self) -> dict[str, dict[str, int | float]]:
        return {
            self.resource_class: {
                "total": self.total,
                "reserved": self.reserved,
                "min_unit": 1,
                "max_unit": self.total,
                "step_size": 1,
                "allocation_ratio": 1.0,
            }
        }


@dataclasses.dataclass(frozen=True)
class _Device:
    """One parent or physical function, reduced to what the plan needs."""

    name: str
    keys: tuple[str, ...]
    supported: tuple[str, ...]
    existing: Counter[str]  # type id -> devices of it that exist
    available: Mapping[str, int]  # type id -> room for more
    # type id -> what it offers, asked for the type a plan reports only
    # (a GRID pGPU lists about 18 types)
    capabilities: Callable[[str], trait.Capabilities]
    # type id -> why it offers less than the host lists (capacity.Room)
    limits: Mapping[str, str] = dataclasses.field(default_factory=dict)
    gpu: str | None = None  # a VF parent's GPU (whose room its VFs share)
    driver: str | None = None  # its host driver (for the version trait)
    migration: bool | None = None  # NVML: its vGPUs can live-migrate


def _from_parent(parent: Parent, existing: Counter[str]) -> _Device:
    def caps(type_id: str) -> trait.Capabilities:
        found = parent.type(type_id)
        return trait.capabilities_of(found) if found else trait.NOTHING_KNOWN

    return _Device(
        name=parent.name,
        keys=parent.keys,
        supported=parent.type_ids,
        existing=existing,
        available={t.id: t.available for t in parent.types},
        capabilities=caps,
        gpu=parent.physical_function,
        driver=parent.driver,
    )


def _from_pf(
    pf: PhysicalFunction, vouched: frozenset[str], gpu: nvml.NvmlGpu | None
) -> _Device:
    existing = Counter(
        naming.sriov_type_id(vf.current_type)
        for vf in pf.vfs
        if vf.current_type
    )
    available, limits = capacity.sriov_room(pf, vouched, gpu)
    names = {t.type_id: t.name for t in pf.known_types()}
    supported = tuple(dict.fromkeys([*names, *existing]))
    return _Device(
        name=pf.name,
        keys=pf.keys,
        supported=supported,
        existing=existing,
        available=available,
        capabilities=lambda type_id: trait.CATALOGUE.get(
            names.get(type_id, ""), trait.NOTHING_KNOWN
        ),
        limits=limits,
        driver=pf.driver,
        migration=gpu.migration if gpu is not None else None,
    )


def type_traits(type_cfg: TypeConfig, caps: trait.Capabilities) -> set[str]:
    return {
        naming.type_trait(type_cfg.type_id),
        *type_cfg.traits,
        *trait.capability_traits(caps),
    }


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
    """
    allocated = allocated or {}
    existing = existing or {}
    failing = set(unschedulable)
    down = health.unhealthy(inventory)
    by_parent: dict[str, Counter[str]] = {}
    for mdev in inventory.mdevs:
        counts = by_parent.get(mdev.parent)
        if counts is None:
            counts = by_parent[mdev.parent] = Counter()
        counts[mdev.type_id] += 1
    devices = [
        _from_parent(p, by_parent.get(p.name, Counter()))
        for p in inventory.parents
    ]
    vouched = frozenset(t.type_id for t in config.types if t.max_instances)
    said = inventory.nvml
    devices += [
        _from_pf(pf, vouched, said.gpu(pf.address) if said else None)
        for pf in inventory.pfs
    ]

    chosen: list[tuple[_Device, TypeConfig]] = []
    plans: dict[str, ProviderPlan] = {}
    for device in devices:
        type_cfg = config.type_for_parent(device.keys, device.supported)
        in_use = {t: n for t, n in held.get(device.name, {}).items() if n}
        other = {
            t: n
            for t, n in in_use.items()
            if not type_cfg or t != type_cfg.type_id
        }
        if other:
            # Guests still use devices of a type this parent no longer
            # serves: keep what they use, take nothing new until empty.
            old_type = max(other, key=lambda t: other[t])
            plans[device.name] = _reserved_plan(
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
        if type_cfg is not None:
            chosen.append((device, type_cfg))

    budgets = {
        t.type_id: t.max_instances for t in config.types if t.max_instances
    }
    versions = dict(inventory.driver_versions)
    used_total: Counter[str] = Counter()
    for device, type_cfg in chosen:
        used_total[type_cfg.type_id] += _used(
            device, type_cfg, held, allocated, nodename
        )
    free_budget = {
        type_id: max(0, cap - used_total[type_id])
        for type_id, cap in budgets.items()
    }
    gpu_free = capacity.gpu_room(
        [
            (
                d.gpu,
                t.type_id,
                max(
                    d.existing[t.type_id],
                    _used(d, t, held, allocated, nodename),
                ),
                d.available.get(t.type_id, 0),
                d.capabilities(t.type_id).max_instance,
            )
            for d, t in chosen
            if d.gpu
        ]
    )
    type_traits_of: dict[tuple[str, trait.Capabilities], frozenset[str]] = {}
    for device, type_cfg in sorted(chosen, key=lambda c: c[0].name):
        type_id = type_cfg.type_id
        total = device.existing[type_id] + device.available.get(type_id, 0)
        used = _used(device, type_cfg, held, allocated, nodename)
        reason = None
        limit = device.limits.get(type_id)
        if device.gpu:
            # the VFs of one GPU share what the GPU holds, in name order
            occupied = max(device.existing[type_id], used)
            free_here = max(0, total - occupied)
            room, why = gpu_free.get((device.gpu, type_id), (0, None))
            granted = min(free_here, room)
            gpu_free[(device.gpu, type_id)] = (room - granted, why)
            total = occupied + granted
            limit = limit or why
        if type_id in free_budget:
            free_here = max(0, total - used)
            granted = min(free_here, free_budget[type_id])
            free_budget[type_id] -= granted
            if granted < free_here:
                reason = f"[{type_cfg.group}] max_instances is reached"
            total = used + granted
        total = max(total, used)
        reserved = 0
        if device.name in failing or device.name in down:
            reason = down.get(device.name, "its device is failing")
            reserved = total
        elif reason and total == used:
            reserved = total
        else:
            reason = None
        outside = (foreign or {}).get(device.name, {}).get(type_id, 0)
        if outside and reserved < total:
            reserved = min(total, reserved + outside)
            if reserved == total and not reason:
                reason = (
                    f"its free {type_id} device(s) were made by another "
                    "manager (left alone)"
                )
        if total == 0:
            continue
        caps = device.capabilities(type_id)
        key = (type_id, caps)
        traits = type_traits_of.get(key)
        if traits is None:  # once per type and figures in a pass
            traits = type_traits_of[key] = frozenset(
                {owner_trait, *type_traits(type_cfg, caps)}
            )
        version = versions.get(device.driver or "")
        if version:
            traits = traits | {
                naming.host_driver_trait(device.driver or "", version)
            }
        if device.migration:
            traits = traits | {naming.MIGRATION_TRAIT}
        plans[device.name] = ProviderPlan(
            name=naming.provider_name(nodename, device.name),
            device=device.name,
            type_id=type_id,
            resource_class=type_cfg.resource_class,
            total=total,
            reserved=reserved,
            traits=traits,
            reason=reason,
            limit=limit,
        )

    # Providers whose device is gone from the host (or no longer serves a
    # type) but that still have devices in use.
    planned_names = {p.name for p in plans.values()}
    present = {d.name for d in devices}
    for rp_name, classes in existing.items():
        if rp_name in planned_names:
            continue
        device_name = rp_name.removeprefix(f"{nodename}_")
        in_use_held = sum(held.get(device_name, {}).values())
        in_use_alloc = sum(allocated.get(rp_name, {}).values())
        count = max(in_use_held, in_use_alloc)
        if not count:
            continue
        classes = list(classes) or [str(orc.VGPU)]
        types = held.get(device_name, {})
        old_type = max(types, key=lambda t: types[t]) if types else ""
        why = (
            "its device is no longer on the host"
            if device_name not in present
            else "its device no longer serves an enabled type"
        )
        plans[device_name] = _reserved_plan(
            nodename,
            device_name,
            old_type,
            count,
            classes[0],
            owner_trait,
            f"{why} but {count} device(s) are still in use",
        )
    return sorted(plans.values(), key=lambda p: p.name)


def _used(
    device: _Device,
    type_cfg: TypeConfig,
    held: Mapping[str, Mapping[str, int]],
    allocated: Mapping[str, Mapping[str, int]],
    nodename: str,
) -> int:
    by_guests = held.get(device.name, {}).get(type_cfg.type_id, 0)
    rp_name = naming.provider_name(nodename, device.name)
    by_placement = allocated.get(rp_name, {}).get(type_cfg.resource_class, 0)
    return max(by_guests, by_placement)


def _class_of(
    config: DeviceConfig,
    type_id: str,
    existing: Mapping[str, Iterable[str]],
    nodename: str,
    device_name: str,
) -> str:
    type_cfg = config.get(type_id)
    if type_cfg is not None:
        return type_cfg.resource_class
    classes = list(
        existing.get(naming.provider_name(nodename, device_name), ())
    )
    return classes[0] if classes else str(orc.VGPU)


def _reserved_plan(
    nodename: str,
    device_name: str,
    type_id: str,
    count: int,
    resource_class: str,
    owner_trait: str,
    reason: str,
) -> ProviderPlan:
    traits = {owner_trait}
    if type_id:
        traits.add(naming.type_trait(type_id))
    return ProviderPlan(
        name=naming.provider_name(nodename, device_name),
        device=device_name,
        type_id=type_id,
        resource_class=resource_class,
        total=count,
        reserved=count,
        traits=frozenset(traits),
        reason=reason,
    )
