"""The figures of one provider of a plan (pure): its total, what is
reserved of it and why, and its traits, from the device it stands for
and what the plan is made against (:class:`PlanPass`). Used by
:func:`~vgpu_driver.model.inventory.plan_providers`, which says the
rules.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping

from vgpu_driver.model import capacity, naming, trait
from vgpu_driver.model.config import TypeConfig
from vgpu_driver.model.foreign import unaccounted
from vgpu_driver.model.kept import class_changed, reserved_plan
from vgpu_driver.model.plan_devices import Device
from vgpu_driver.model.provider_plan import ProviderPlan


def type_traits(type_cfg: TypeConfig, caps: trait.Capabilities) -> set[str]:
    return {
        naming.type_trait(type_cfg.type_id),
        *type_cfg.traits,
        *trait.capability_traits(caps),
    }


@dataclasses.dataclass
class PlanPass:
    """What each provider of one plan is planned against (``budget`` is
    spent as the providers are planned, in name order)."""

    nodename: str
    owner_trait: str
    held: Mapping[str, Counter[str]]  # device -> type id -> in use
    allocated: Mapping[str, Mapping[str, int]]
    existing: Mapping[str, Iterable[str]]
    failing: set[str]
    down: dict[str, str]  # device -> why it is unhealthy
    foreign: Mapping[str, Counter[str]]
    outside: Mapping[str, Counter[str]]
    budget: dict[str, int]  # type id -> what max_instances still grants
    types_on: Counter[str]  # device -> the types it has a provider for
    versions: dict[str, str]  # host driver -> its version
    # (type id, capabilities) -> its traits, made once a pass
    traits: dict[tuple[str, trait.Capabilities], frozenset[str]] = (
        dataclasses.field(default_factory=dict)
    )


def plan_one(
    now: PlanPass,
    device: Device,
    type_cfg: TypeConfig,
    name: str,
    parent: str | None,
) -> ProviderPlan | None:
    """The plan of one provider (None: it has nothing to offer)."""
    type_id = type_cfg.type_id
    used = used_units(device, type_cfg, now.held, now.allocated, name)
    moved = class_changed(
        type_cfg.resource_class,
        now.existing.get(name, ()),
        now.held.get(device.name, Counter())[type_id],
        now.allocated.get(name, {}),
    )
    if moved is not None:  # kept in its class until released
        return reserved_plan(
            now.nodename,
            device.name,
            type_id,
            moved[1],
            moved[0],
            now.owner_trait,
            f"its resource class changed to {type_cfg.resource_class} "
            f"while guests use {moved[1]} {type_id} device(s)",
            name,
            parent,
        )
    total, reason, limit = _total(now, device, type_cfg, used)
    reserved, reason = _reserved(now, device, type_cfg, total, used, reason)
    if total == 0:
        return None
    return ProviderPlan(
        name=name,
        device=device.name,
        type_id=type_id,
        resource_class=type_cfg.resource_class,
        total=total,
        reserved=reserved,
        traits=_traits(now, device, type_cfg),
        reason=reason,
        limit=limit,
        parent=parent,
    )


def _total(
    now: PlanPass, device: Device, type_cfg: TypeConfig, used: int
) -> tuple[int, str | None, str | None]:
    """(total, why it is capped, why it is less than the host lists): what
    exists of the type on the device and the room for more, within what
    its GPU holds (VF parents) and what ``max_instances`` still grants;
    never less than what is in use."""
    type_id = type_cfg.type_id
    total = _holds(device, type_id)
    reason = None
    limit = device.limits.get(type_id)
    most = device.capabilities(type_id).max_instance
    if not device.gpu and most is not None and total > most:
        # the mdevs were listed and the room read as another process
        # made or removed one: the two disagree, the card does not
        limit = (
            f"the host listed {device.existing[type_id]} and room for "
            f"{device.available.get(type_id, 0)} more, above the "
            f"{most} the type's description says its GPU holds (read "
            "while they changed): it offers what the GPU holds"
        )
        total = most
    if device.gpu:
        # its VFs hold one vGPU each, the GPU what the type says, less
        # the vGPUs of other types of its size (the driver lets them
        # share the GPU, and offers the type beside them)
        occupied = max(device.existing[type_id], used)
        others = sum(device.existing.values()) - device.existing[type_id]
        free_here = max(0, total - occupied)
        room, why = capacity.gpu_room(
            device.gpu,
            type_id,
            occupied + others,
            device.capabilities(type_id).max_instance,
        )
        total = occupied + min(free_here, room)
        limit = limit or why
    if type_id in now.budget:
        free_here = max(0, total - used)
        granted = min(free_here, now.budget[type_id])
        now.budget[type_id] -= granted
        if granted < free_here:
            reason = f"[{type_cfg.group}] max_instances is reached"
        total = used + granted
    return max(total, used), reason, limit


def _holds(device: Device, type_id: str) -> int:
    """What exists of the type on the device and the room for more: the
    mdevs defined and not running take none of the room until they
    start, so they count once (in the room)."""
    room = device.available.get(type_id, 0)
    return device.existing[type_id] - device.stopped.get(type_id, 0) + room


def _reserved(
    now: PlanPass,
    device: Device,
    type_cfg: TypeConfig,
    total: int,
    used: int,
    reason: str | None,
) -> tuple[int, str | None]:
    """(reserved, why): all of it on a failing or unhealthy device, or
    capped with nothing free; another manager's free devices and those
    guests outside Nova use; what a ``card_share`` keeps from the type."""
    type_id = type_cfg.type_id
    reserved = 0
    if device.name in now.failing or device.name in now.down:
        reason = now.down.get(device.name, "its device is failing")
        reserved = total
    elif reason and total == used:
        reserved = total
    else:
        reason = None
    reserved, reason = unaccounted(
        type_id,
        total,
        (reserved, reason),
        now.foreign.get(device.name, Counter())[type_id],
        now.outside.get(device.name, Counter())[type_id],
    )
    if type_cfg.card_share and now.types_on[device.name] > 1:
        free_here = max(0, total - used)
        share = device.share(type_id, type_cfg.card_share, used)
        reserved = max(reserved, free_here - min(free_here, share))
    return reserved, reason


def _traits(
    now: PlanPass, device: Device, type_cfg: TypeConfig
) -> frozenset[str]:
    """The owner trait, the type's and its capabilities' traits (made
    once a pass per type and capabilities), the host driver's version
    and the migration capability."""
    caps = device.capabilities(type_cfg.type_id)
    key = (type_cfg.type_id, caps)
    traits = now.traits.get(key)
    if traits is None:
        traits = now.traits[key] = frozenset(
            {now.owner_trait, *type_traits(type_cfg, caps)}
        )
    version = now.versions.get(device.driver or "")
    if version:
        traits = traits | {
            naming.host_driver_trait(device.driver or "", version)
        }
    if device.migration:
        traits = traits | {naming.MIGRATION_TRAIT}
    return traits


def used_units(
    device: Device,
    type_cfg: TypeConfig,
    held: Mapping[str, Mapping[str, int]],
    allocated: Mapping[str, Mapping[str, int]],
    rp_name: str,
) -> int:
    """Units of the type in use on provider ``rp_name``: what guests use
    on its device or what Placement has allocated there, whichever is
    more. What guests use counts no more than the device has of the type
    and has room for (on a plain pGPU, no more than its type's
    ``max_instance`` either): a reading torn by a change cannot raise
    its total past the card. (A guest deleted since, its mdev gone,
    counted beside the mdev the next spawn made in its room; the claim of
    a bind typing a VF the full card will refuse.)"""
    type_id = type_cfg.type_id
    by_guests = held.get(device.name, {}).get(type_id, 0)
    if not device.gpu:
        has = _holds(device, type_id)
        most = device.capabilities(type_id).max_instance
        by_guests = min(by_guests, has if most is None else min(has, most))
    by_placement = allocated.get(rp_name, {}).get(type_cfg.resource_class, 0)
    return max(by_guests, by_placement)
