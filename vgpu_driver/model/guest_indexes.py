"""Which guest uses which device, carried from a reading to the next one
made from it when guests alone changed (``HostInventory.with_guests``).

A reading indexes its guests' devices (``mdev_users``, ``pci_users``)
and the mdevs guests use that the host does not have
(``absent_in_use``), and the guests outside Nova using devices
(``unmarked_guests``), each built once, when first asked: a loop over
every guest, or every mdev. A refresh after a guest's event (or a spawn
that made its mdev) asks them of a reading that differs from the last
by a few guests: here they are made from the last reading's by those
guests alone. An index is carried only where each device is one
guest's (two guests may name one mdev, one of them stopped: which of
them the index names follows the order of every guest, so it is built
whole again); what is carried is then each device's one guest by
construction.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    from vgpu_driver.model.device import Guest, Mdev

# index -> the guest's field it indexes
USERS = {"_mdev_users": "mdevs", "_pci_users": "pci_devices"}
# an index's companion: True when each device is one guest's
SINGLE = {name: f"{name}_single" for name in USERS}
_BY_UUID = operator.attrgetter("uuid")

Changes = Iterable[tuple[str, "Guest | None", "Guest | None"]]


def users_after(
    users: Mapping[str, str], changes: Changes, field: str
) -> dict[str, str] | None:
    """``users`` (device -> the uuid of the one guest that has it) once
    the guests ``changes`` names are as they are now (those gone first,
    then those defined); None where a device would be two guests'."""
    found = dict(users)
    changes = list(changes)
    for uuid, before, _now in changes:
        for device in getattr(before, field) if before is not None else ():
            if found.get(device) != uuid:
                return None  # not as indexed: build it whole
            del found[device]
    for uuid, _before, now in changes:
        for device in getattr(now, field) if now is not None else ():
            if device in found:
                return None  # two guests': build it whole
            found[device] = uuid
    return found


def _single(
    had: Mapping[str, Any], name: str, guests: Sequence[Guest]
) -> bool:
    """Is each device of index ``name`` (built) one guest's?"""
    known = had.get(SINGLE[name])
    if known is not None:
        return bool(known)
    devices = map(operator.attrgetter(USERS[name]), guests)
    return len(had[name]) == sum(map(len, devices))


def carried(
    had: Mapping[str, Any],
    guests: Sequence[Guest],
    mdevs: Sequence[Mdev],
    changes: Changes,
) -> dict[str, Any]:
    """The indexes a reading of ``guests`` and ``mdevs`` had built
    (``had``: its ``__dict__``), made for the reading whose guests
    ``changes`` changed; an index not built, or not carried, is left
    out (built whole when first asked)."""
    changes = list(changes)
    found: dict[str, Any] = {}
    for name, field in USERS.items():
        if name not in had or not _single(had, name, guests):
            continue
        after = users_after(had[name], changes, field)
        if after is not None:
            found[name] = after
            found[SINGLE[name]] = True
    if "_unmarked" in had:
        unmarked = _unmarked_after(had["_unmarked"], changes)
        if unmarked is not None:
            found["_unmarked"] = unmarked
    if "_absent_users" in had and "_mdev_users" in found:
        found["_absent_users"] = _absent_after(
            had["_absent_users"], found["_mdev_users"], mdevs, changes
        )
    return found


def unmarked(guest: Guest | None) -> TypeGuard[Guest]:
    """Does ``guest`` use devices with no Nova metadata in its domain?"""
    return (
        guest is not None
        and not guest.nova
        and bool(guest.mdevs or guest.pci_devices)
    )


def _unmarked_after(
    had: Sequence[Guest], changes: Changes
) -> tuple[Guest, ...] | None:
    """The :func:`unmarked` guests ``had`` (sorted by uuid) once
    ``changes`` are made, each put in place by bisection; None when a
    change does not match what ``had`` holds (build it whole)."""
    found = list(had)
    for uuid, before, now in changes:
        at = bisect.bisect_left(found, uuid, key=_BY_UUID)
        here = at < len(found) and found[at].uuid == uuid
        if here != unmarked(before) or (here and found[at] != before):
            return None
        if here:
            del found[at]
        if unmarked(now):
            found.insert(at, now)
    return tuple(found)


def _absent_after(
    absent: frozenset[str],
    users: Mapping[str, str],
    mdevs: Sequence[Mdev],
    changes: Changes,
) -> frozenset[str]:
    """The mdevs guests use that ``mdevs`` (sorted by uuid) lacks, once
    ``changes`` are made (``users``: the mdev index after them)."""
    touched: set[str] = set()
    for _uuid, before, now in changes:
        for guest in (before, now):
            if guest is not None:
                touched.update(guest.mdevs)
    found = set(absent - touched)
    for uuid in touched:
        if uuid in users and not _present(mdevs, uuid):
            found.add(uuid)
    return frozenset(found)


def _present(mdevs: Sequence[Mdev], uuid: str) -> bool:
    at = bisect.bisect_left(mdevs, uuid, key=_BY_UUID)
    return at < len(mdevs) and mdevs[at].uuid == uuid
