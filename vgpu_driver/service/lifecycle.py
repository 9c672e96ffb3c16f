"""Devices through an instance's life, beyond a plain bind: allocations
on the compute node's own provider, a guest's devices recreated, a live
migration's destination claim, a free mdev made ahead of need."""

from __future__ import annotations

import uuid as uuidlib
from collections import Counter
from collections.abc import Mapping
from typing import Any

from vgpu_driver.exception import (
    DeviceCapacityExhausted,
    MigrationTypeMismatch,
)
from vgpu_driver.model import binding, usage
from vgpu_driver.model.binding import BoundDevice
from vgpu_driver.model.claims import MIGRATION
from vgpu_driver.model.device import HostInventory
from vgpu_driver.service import repairs
from vgpu_driver.service.binder import DeviceBinder
from vgpu_driver.service.refresh import Refresher

Wanted = list[tuple[str, str, int]]  # (device, type id, units)


def wanted(
    refresher: Refresher, allocations: Mapping[str, Any]
) -> tuple[Wanted, bool]:
    """(device, type, units) for the allocations, and whether some parents
    were picked by room. Units on a compute node's own provider (the
    layout before a reshape, e.g. an instance spawned while an upgrade is
    half done) go to parents whose configured type is of that class, free
    mdevs first."""
    binder = refresher.binder
    classes = refresher.settings.managed_classes()
    roots = refresher.roots
    ours = {rp: a for rp, a in allocations.items() if rp not in roots}
    found = binding.wanted_from_allocations(
        ours, classes, binder.ledger.targets
    )
    on_root: Counter[str] = Counter()
    for rp_uuid in set(allocations) & roots:
        resources = allocations[rp_uuid].get("resources", {})
        for rc, amount in resources.items():
            if rc in classes:
                on_root[rc] += int(amount)
    if on_root:
        config = refresher.settings.config
        configured = usage.configured_types(config, refresher.discover())
        for rc, amount in sorted(on_root.items()):
            candidates = {
                parent: type_id
                for parent, type_id in configured.items()
                if (cfg := config.get(type_id)) is not None
                and cfg.resource_class == rc
            }
            found.extend(_spread(binder, rc, amount, candidates))
    return found, bool(on_root)


def _spread(
    binder: DeviceBinder,
    resource_class: str,
    units: int,
    candidates: Mapping[str, str],
) -> Wanted:
    """(parent, type, 1) for ``units`` not tied to a device
    (``candidates``: parent -> its configured type): parents with a free
    mdev first, then the one with the most room."""
    ledger = binder.ledger
    with ledger.locked():
        view = ledger.view
        room = view.room(candidates, view.busy(ledger.claims))
    return binding.spread(resource_class, units, candidates, room)


def recover_guest(refresher: Refresher, instance: str) -> list[BoundDevice]:
    """The guest's own devices, recreated (same uuid, same parent) or
    started if they went away or are only defined."""
    inventory = refresher.discover()
    guest = next((g for g in inventory.guests if g.uuid == instance), None)
    if guest is None:
        return []
    refresher.binder.recover(
        HostInventory(
            inventory.parents, inventory.mdevs, inventory.pfs, (guest,)
        ),
        refresher.seen.snapshot(),
    )
    inventory = refresher.discover()
    present = {m.uuid: m for m in inventory.mdevs}
    return [
        BoundDevice("mdev", u, present[u].parent, present[u].type_id)
        for u in guest.mdevs
        if u in present
    ]


def claim_for_live_migration(
    refresher: Refresher,
    instance: str,
    source_mdevs: Mapping[str, str],
    allocations: Mapping[str, Any],
) -> dict[str, str]:
    """Claim destination devices of the same types as the source's mdevs
    (``{source uuid: type id}``); returns ``{source uuid: destination
    uuid}``."""
    binder = refresher.binder
    found, any_parent = wanted(refresher, allocations)
    offered = {type_id for _, type_id, _ in found}
    for source, type_id in sorted(source_mdevs.items()):
        if type_id not in offered:
            raise MigrationTypeMismatch(
                instance=instance,
                source=source,
                type_id=type_id,
                offered=", ".join(sorted(offered)) or "no device",
            )
    bound = binder.bind(instance, found, MIGRATION, any_parent=any_parent)
    pool: dict[str, list[str]] = {d.type_id: [] for d in bound}
    for device in bound:
        pool[device.type_id].append(device.id)
    mapping = {}
    for source, type_id in sorted(source_mdevs.items()):
        if not pool.get(type_id):
            binder.release(instance)
            raise DeviceCapacityExhausted(
                count=1, type_id=type_id, parent="the destination"
            )
        mapping[source] = pool[type_id].pop(0)
    return mapping


def create_free_mdev(
    refresher: Refresher, parent: str | None, uuid: str | None
) -> str | None:
    """One unclaimed mdev of the configured type, on ``parent`` or on the
    first parent with room. Returns its uuid, or None when there is no
    room."""
    inventory = refresher.discover()
    configured = usage.configured_types(refresher.settings.config, inventory)
    for name, type_id in sorted(configured.items()):
        found = inventory.parent(name)
        if found is None or (parent is not None and name != parent):
            continue
        mdev_type = found.type(type_id)
        if mdev_type is None or mdev_type.available < 1:
            continue
        chosen = uuid or str(uuidlib.uuid4())
        # recorded as this library's before the host is touched
        ledger = refresher.binder.ledger
        repairs.record_made(ledger, chosen)
        try:
            mdev = refresher.host.create_mdev(found, type_id, chosen)
        except Exception:
            repairs.record_made(ledger, chosen, made=False)
            raise
        refresher.discover()
        return mdev.uuid
    return None
