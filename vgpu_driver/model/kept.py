"""Providers kept while devices are in use, though they would offer
something else or nothing: pure rules of :mod:`.inventory`.

A provider whose device is gone from the host, no longer serves an
enabled type, or whose type was given another resource class, while
guests (or Placement's allocations) still use its devices, is kept with
``reserved = total`` in the class those devices are allocated in: what
is in use is never orphaned, nothing new lands on it, and Placement is
never asked to drop a class it holds allocations of. Once nothing is
in use, the provider is dropped, or offers its new class.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

import os_resource_classes as orc

from vgpu_driver.model import naming
from vgpu_driver.model.provider_plan import ProviderPlan

Counts = Mapping[str, Mapping[str, int]]


def reserved_plan(
    nodename: str,
    device_name: str,
    type_id: str,
    count: int,
    resource_class: str,
    owner_trait: str,
    reason: str,
    name: str | None = None,
    parent: str | None = None,
) -> ProviderPlan:
    """A provider of ``count`` devices in use, all reserved."""
    traits = {owner_trait}
    if type_id:
        traits.add(naming.type_trait(type_id))
    return ProviderPlan(
        name=name or naming.provider_name(nodename, device_name),
        device=device_name,
        type_id=type_id,
        resource_class=resource_class,
        total=count,
        reserved=count,
        traits=frozenset(traits),
        reason=reason,
        parent=parent,
    )


def class_changed(
    resource_class: str,
    existing: Iterable[str],
    held: int,
    allocated: Mapping[str, int],
) -> tuple[str, int] | None:
    """(the class a provider holds, its devices in use) when its type is
    now configured in another ``resource_class`` while ``held`` devices
    of it are in use, or Placement holds ``allocated`` units of the
    class it has (``existing``); None otherwise."""
    existing = list(existing)
    old = [rc for rc in existing if rc != resource_class]
    if not old or resource_class in existing:
        return None
    count = max(held, sum(allocated.get(rc, 0) for rc in old))
    return (old[0], count) if count else None


def kept_while_in_use(
    plans: dict[str, ProviderPlan],
    existing: Mapping[str, Iterable[str]],
    nodename: str,
    held: Counts,
    allocated: Counts,
    present: set[str],
    owner_trait: str,
) -> None:
    """Add to ``plans`` the providers of ``existing`` not planned whose
    device is gone (not ``present``) or serves no enabled type, while
    devices are still in use there."""
    planned_names = {p.name for p in plans.values()}
    planned_types = {(p.device, p.type_id) for p in plans.values()}
    for rp_name, classes in existing.items():
        if rp_name in planned_names:
            continue
        device_name, its_type = naming.provider_device(
            rp_name.removeprefix(f"{nodename}_")
        )
        types = Counter(held.get(device_name) or {})
        if its_type is not None:  # a second type's provider: that type's
            types = Counter({its_type: types[its_type]})
        else:  # not what the device's other providers count
            types = Counter(
                {
                    t: n
                    for t, n in types.items()
                    if (device_name, t) not in planned_types
                    # a type with a provider of its own is counted there
                    and naming.type_provider_name(nodename, device_name, t)
                    not in existing
                }
            )
        in_use_held = sum(types.values())
        in_use_alloc = sum(allocated.get(rp_name, {}).values())
        count = max(in_use_held, in_use_alloc)
        if not count:
            continue
        classes = list(classes) or [str(orc.VGPU)]
        old_type = its_type or (
            max(types, key=lambda t: types[t]) if types else ""
        )
        why = (
            "its device is no longer on the host"
            if device_name not in present
            else "its device no longer serves an enabled type"
        )
        plans[rp_name] = reserved_plan(
            nodename,
            device_name,
            old_type,
            count,
            classes[0],
            owner_trait,
            f"{why} but {count} device(s) are still in use",
            rp_name,
            naming.provider_name(nodename, device_name)
            if its_type is not None
            else None,
        )
