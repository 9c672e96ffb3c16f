"""Devices another manager made, those guests outside Nova use, and
which devices are busy (pure).

Another manager (an operator's ``mdevctl``, Cyborg) may make mdevs or
type VFs on the host: they are never handed out, removed or retyped,
and its free ones are reserved on their provider. A guest outside Nova
(a domain without Nova's metadata) has no allocation in Placement: the
devices it uses are reserved on their provider too. :class:`Busy` answers
whether a device is in use or claimed one id at a time, so nothing the
size of the host is built for a bind or a change of one parent.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable

from vgpu_driver.model import naming
from vgpu_driver.model.device import (
    Guest,
    HostInventory,
    Mdev,
    PhysicalFunction,
)


class Busy:
    """Device ids in any of some collections (used, claimed, another's):
    asked one id at a time, so no set of them all is built (a bind on a
    host of thousands asks a few)."""

    __slots__ = ("_parts",)

    def __init__(self, parts: tuple[Container[str], ...]) -> None:
        self._parts = parts

    def __contains__(self, device_id: object) -> bool:
        return any(device_id in part for part in self._parts)


def foreign_devices(
    inventory: HostInventory, ours: Collection[str]
) -> set[str]:
    """The mdevs and typed VFs on the host that this library did not make
    (``ours``: those it did)."""
    found = {m.uuid for m in inventory.mdevs if m.uuid not in ours}
    for pf in inventory.pfs:
        found.update(foreign_vfs(pf, ours))
    return found


def foreign_vfs(pf: PhysicalFunction, ours: Collection[str]) -> set[str]:
    """The typed VFs of card ``pf`` this library did not type."""
    return {
        vf.address
        for vf in pf.vfs
        if vf.current_type and vf.address not in ours
    }


def foreign_free(
    inventory: HostInventory, ours: Collection[str], claimed: Collection[str]
) -> dict[str, dict[str, int]]:
    """Device (parent or PF) name -> type id -> free devices another
    manager made there: not ours, no guest uses them, nobody claims
    them."""
    busy = Busy((inventory.mdev_users(), inventory.pci_users(), claimed))
    return foreign_on(inventory.mdevs, inventory.pfs, ours, busy)


def foreign_on(
    mdevs: Iterable[Mdev],
    pfs: Iterable[PhysicalFunction],
    ours: Collection[str],
    busy: Container[str],
) -> dict[str, dict[str, int]]:
    """Parent or card -> type id -> the mdevs of ``mdevs`` and typed VFs
    of ``pfs`` another manager made that are free: not ours, not
    ``busy`` (used or claimed)."""
    return _tally(
        mdevs, pfs, lambda device: device not in ours and device not in busy
    )


def _tally(
    mdevs: Iterable[Mdev],
    pfs: Iterable[PhysicalFunction],
    chosen: Callable[[str], bool],
) -> dict[str, dict[str, int]]:
    """Parent or PF name -> type id -> the ``chosen`` mdevs of
    ``mdevs`` and typed VFs of ``pfs`` (by uuid or address)."""
    found: dict[str, dict[str, int]] = {}
    for mdev in mdevs:
        if chosen(mdev.uuid):
            counts = found.setdefault(mdev.parent, {})
            counts[mdev.type_id] = counts.get(mdev.type_id, 0) + 1
    for pf in pfs:
        for vf in pf.vfs:
            if vf.current_type and chosen(vf.address):
                counts = found.setdefault(pf.name, {})
                type_id = naming.sriov_type_id(vf.current_type)
                counts[type_id] = counts.get(type_id, 0) + 1
    return found


def outside_users(
    inventory: HostInventory, named: Container[str]
) -> frozenset[str]:
    """The mdevs and PCI devices guests outside Nova use: guests without
    Nova's metadata the caller does not name (``named``) its own."""
    return frozenset(
        device
        for guest in inventory.unmarked_guests()
        if guest.uuid not in named
        for device in (*guest.mdevs, *guest.pci_devices)
    )


def outside_nova(
    inventory: HostInventory,
    named: Container[str],
    alone: HostInventory | None = None,
) -> dict[str, dict[str, int]]:
    """Device (parent or PF) name -> type id -> its devices guests
    outside Nova use (of the mdevs and cards of ``alone`` alone when
    given: see :func:`~vgpu_driver.model.device_changes.parents_alone`)."""
    outside = outside_users(inventory, named)
    if not outside:
        return {}
    if alone is not None:
        return _tally(alone.mdevs, alone.pfs, outside.__contains__)
    found = _tally(inventory.mdevs, inventory.pfs, outside.__contains__)
    for gpu in inventory.plain_gpus:  # AMD, Intel: VFs given as they are
        given = sum(1 for vf in gpu.vfs if vf in outside)
        if given:
            found.setdefault(gpu.name, {})[gpu.type_id] = given
    return found


def outside_of(
    inventory: HostInventory, uuid: str, named: Container[str]
) -> frozenset[str]:
    """The devices guest ``uuid`` uses outside Nova in ``inventory``
    (none when it is not there, carries Nova's metadata or is
    ``named``). Looks at the guests without metadata alone."""
    if uuid in named:
        return frozenset()
    for guest in inventory.unmarked_guests():
        if guest.uuid == uuid:
            return _outside(guest, named)
    return frozenset()


def _outside(guest: Guest | None, named: Container[str]) -> frozenset[str]:
    if guest is None or guest.nova or guest.uuid in named:
        return frozenset()
    return frozenset((*guest.mdevs, *guest.pci_devices))


def outside_changed(
    before: HostInventory,
    now: HostInventory,
    then: Container[str],
    named: Container[str],
) -> bool:
    """Did what guests outside Nova use change from reading ``before``
    (under the names ``then`` of its day) to ``now`` (under ``named``)?
    Told by the guests changed between them where the reading says which
    (a guest's event: no guest else is looked at). A name given or
    forgotten for a guest that did not change is
    :meth:`~vgpu_driver.service.named.NamedInstances.crossed`'s."""
    changes = now.guest_changes
    if changes is not None and changes[0] == before.generation:
        return any(
            _outside(old, then) != _outside(new, named)
            for _uuid, old, new in changes[1]
        )
    return outside_users(before, then) != outside_users(now, named)


def unaccounted(
    type_id: str,
    total: int,
    planned: tuple[int, str | None],
    theirs: int,
    outside: int,
) -> tuple[int, str | None]:
    """A provider's (reserved, reason) once its devices Placement does
    not count are reserved too: ``theirs`` free ones another manager
    made, ``outside`` ones guests outside Nova use. ``planned``: its
    (reserved, reason) before."""
    reserved, reason = planned
    if not (theirs or outside) or reserved >= total:
        return reserved, reason
    reserved = min(total, reserved + theirs + outside)
    if reserved == total and not reason:
        reason = (
            f"its free {type_id} device(s) were made by another manager "
            "(left alone)"
            if theirs
            else f"its {type_id} device(s) are used by guests outside Nova "
            "(Placement holds no allocation for them)"
        )
    return reserved, reason
