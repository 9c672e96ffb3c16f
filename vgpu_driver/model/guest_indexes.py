"""Which guest uses which device, carried from a reading to the readings
made from it when guests alone changed (``HostInventory.with_guests``)
or node devices alone (``device_changes.with_devices``).

A reading indexes its guests' devices (``mdev_users``, ``pci_users``)
and the mdevs guests use that the host does not have
(``absent_in_use``), and the guests outside Nova using devices
(``unmarked_guests``), each built when first asked: a loop over every
guest, or every mdev. A reading made from another by a few guests'
changes, or by mdevs made or removed, keeps a :class:`Link` to it;
asked for an index, it makes it from the nearest reading up its links
that built it, by what changed since. Nothing is made until asked: a
guest's event that plans nothing costs what the change costs, not what
the host holds. A chain keeps at most :data:`LINKS` readings alive
(past it, the index is built whole); a reading made from one that has
every index links to that one alone.

An index is carried only where each device is one guest's (two guests
may name one mdev, one of them stopped: which of them the index names
follows the order of every guest, so it is built whole again); what is
carried is then each device's one guest by construction.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import (
    Collection,
    Iterable,
    Mapping,
    MutableMapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, NamedTuple, TypeGuard, cast

if TYPE_CHECKING:
    from vgpu_driver.model.device import Guest, HostInventory, Mdev

# index -> the guest's field it indexes
USERS = {"_mdev_users": "mdevs", "_pci_users": "pci_devices"}
# an index's companion: True when each device is one guest's
SINGLE = {name: f"{name}_single" for name in USERS}
CARRY = "_carry"  # a reading's Link, in its __dict__
LINKS = 16  # the most readings a chain of links keeps alive
_BY_UUID = operator.attrgetter("uuid")

Change = tuple[str, "Guest | None", "Guest | None"]
Changes = Iterable[Change]


class Link(NamedTuple):
    """What a reading was made from: the reading ``before`` it, the
    guests changed since and the uuids of the mdevs made or removed
    since (one or the other)."""

    before: HostInventory
    changes: tuple[Change, ...]
    mdevs: frozenset[str]
    depth: int  # readings up the chain, this one's before included


# every index a link carries
INDEXES = frozenset({*USERS, "_unmarked", "_absent_users"})


def link(
    before: HostInventory,
    changes: Iterable[Change] = (),
    mdevs: Iterable[str] = (),
) -> Link | None:
    """The link of a reading made from ``before`` by the guests'
    ``changes``, or by the mdevs (uuids) made or removed; None past
    :data:`LINKS` (its indexes are then built whole)."""
    had = before.__dict__
    if had.keys() >= INDEXES:
        had.pop(CARRY, None)  # (a cache: nothing up its links is needed)
        depth = 1
    else:
        prior = had.get(CARRY)
        depth = prior.depth + 1 if prior is not None else 1
    if depth > LINKS:
        return None
    return Link(before, tuple(changes), frozenset(mdevs), depth)


def users_of(reading: HostInventory, name: str) -> dict[str, str]:
    """The index ``name`` of :data:`USERS` of ``reading``: device -> the
    uuid of the guest that has it."""
    found = carry(reading, name)
    if found is not None:
        return cast(dict[str, str], found)
    has = operator.attrgetter(USERS[name])
    return {d: guest.uuid for guest in reading.guests for d in has(guest)}


def unmarked_of(reading: HostInventory) -> tuple[Guest, ...]:
    """The guests of ``reading`` outside Nova using devices."""
    found = carry(reading, "_unmarked")
    if found is not None:
        return tuple(found)
    return tuple(filter(unmarked, reading.guests))


def absent_of(reading: HostInventory) -> frozenset[str]:
    """The mdevs guests of ``reading`` use that it does not have."""
    found = carry(reading, "_absent_users")
    if found is not None:
        return frozenset(found)
    # in C: a Python loop per mdev costs a dense host
    users = reading.mdev_users().keys()
    return frozenset(users - set(map(_BY_UUID, reading.mdevs)))


def carry(reading: HostInventory, name: str) -> Any | None:
    """The index ``name`` of ``reading``, made from the nearest reading
    up its links that has it built, by what changed since; None: build
    it whole."""
    steps: list[Link] = []
    here = reading
    while (step := here.__dict__.get(CARRY)) is not None:
        steps.append(step)
        if name in step.before.__dict__:
            steps.reverse()
            return _replay(reading, name, step.before, steps)
        here = step.before
    return None


def _replay(
    reading: HostInventory,
    name: str,
    before: HostInventory,
    steps: list[Link],
) -> Any | None:
    """``before``'s index ``name`` with ``steps`` made, in order."""
    had = before.__dict__
    if name in USERS:
        if not _single(before, name):
            return None
        # copy(), not dict(): a dict some device left has holes, which
        # dict() fills in one by one (95 µs for 4096 against 20)
        found = cast(dict[str, str], had[name]).copy()
        for step in steps:
            if not _apply(found, step.changes, USERS[name]):
                return None
        reading.__dict__[SINGLE[name]] = True
        return found
    if name == "_unmarked":
        unmarked_now: tuple[Guest, ...] | None = had[name]
        for step in steps:
            if unmarked_now is None:
                return None
            unmarked_now = _unmarked_after(unmarked_now, step.changes)
        return unmarked_now
    # an mdev in use is absent or not as before but for those the steps
    # touched: the guests' changed, and the mdevs made or removed
    touched = set().union(*(step.mdevs for step in steps))
    for step in steps:
        for _uuid, *pair in step.changes:
            for guest in pair:
                if guest is not None:
                    touched.update(guest.mdevs)
    return _absent_after(
        had[name], reading.mdev_users(), reading.mdevs, touched
    )


def users_after(
    users: Mapping[str, str], changes: Changes, field: str
) -> dict[str, str] | None:
    """``users`` (device -> the uuid of the one guest that has it) once
    the guests ``changes`` names are as they are now (those gone first,
    then those defined); None where a device would be two guests'."""
    found = dict(users)
    return found if _apply(found, list(changes), field) else None


def _apply(
    found: MutableMapping[str, str], changes: Sequence[Change], field: str
) -> bool:
    """:func:`users_after`, made in ``found``; False (``found`` half
    made) where a device would be two guests'."""
    for uuid, before, _now in changes:
        for device in getattr(before, field) if before is not None else ():
            if found.get(device) != uuid:
                return False  # not as indexed: build it whole
            del found[device]
    for uuid, _before, now in changes:
        for device in getattr(now, field) if now is not None else ():
            if device in found:
                return False  # two guests': build it whole
            found[device] = uuid
    return True


def _single(reading: HostInventory, name: str) -> bool:
    """Is each device of index ``name`` (built) one guest's? (Asked of a
    reading once.)"""
    had = reading.__dict__
    known = had.get(SINGLE[name])
    if known is None:
        devices = map(operator.attrgetter(USERS[name]), reading.guests)
        known = had[SINGLE[name]] = len(had[name]) == sum(map(len, devices))
    return bool(known)


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
    touched: Collection[str],
) -> frozenset[str]:
    """The mdevs guests use that ``mdevs`` (sorted by uuid) lacks, where
    ``absent`` were before and only those ``touched`` may have changed
    (``users``: the mdev index now)."""
    found = set(absent.difference(touched))
    for uuid in touched:
        if uuid in users and not _present(mdevs, uuid):
            found.add(uuid)
    return frozenset(found)


def _present(mdevs: Sequence[Mdev], uuid: str) -> bool:
    at = bisect.bisect_left(mdevs, uuid, key=_BY_UUID)
    return at < len(mdevs) and mdevs[at].uuid == uuid
