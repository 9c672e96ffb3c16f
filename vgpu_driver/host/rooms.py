"""A parent's rooms (each type's ``availableInstances``) as they stand
beside its mdevs: which parents' rooms are read again when their mdevs
changed while they were read, and what one still changing offers.

Its XML and its sysfs directory are two reads; another process that
makes or removes an mdev between them (``sync --periodic`` beside the
compute service's binds) makes the mdevs and the room add up to more
than the parent holds. Where the type's description gives
``max_instance`` the plan holds the total to it; elsewhere only reading
the room again, with the directory the same around it, can.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from oslo_log import log as logging

from vgpu_driver.model.device import Parent
from vgpu_driver.model.trait import capabilities_of

if TYPE_CHECKING:
    from vgpu_driver.host.nodedevs import NodeDevices

LOG = logging.getLogger(__name__)

# reads of a parent's room whose mdevs keep changing, before it offers
# none until the next reading
ROOM_READS = 3


def unbounded(parent: Parent, wanted: frozenset[str] | None) -> bool:
    """Does a type of ``parent`` that is read (``wanted``; None: all) say
    nothing of how many the parent holds (no ``max_instance``)?"""
    return any(
        capabilities_of(t).max_instance is None
        for t in parent.types
        if wanted is None or t.id in wanted
    )


def no_room(parent: Parent) -> Parent:
    """``parent`` offering no room for any type: its mdevs alone count."""
    return dataclasses.replace(
        parent,
        types=tuple(dataclasses.replace(t, available=0) for t in parent.types),
    )


def rooms_after_listing(
    devices: NodeDevices,
    conn: Any,
    parents: list[Parent],
    wanted: frozenset[str] | None,
    bus: list[str] | None,
) -> None:
    """After a full listing (the mdevs, then each parent's XML): the
    parents whose rooms no ``max_instance`` bounds followed through
    their directories and read again (:func:`rooms_again`). Where their
    directories cannot be read, the listing stands as it is."""
    names = {p.name for p in parents if unbounded(p, wanted)}
    if names and devices.follow_dirs(conn, names) is not None:
        listed = dict(devices.listing.parents(conn, bus))
        rooms_again(devices, conn, listed, parents, names, wanted)


def rooms_again(
    devices: NodeDevices,
    conn: Any,
    listed: dict[str, Any],
    parents: list[Parent],
    moved: set[str],
    wanted: frozenset[str] | None,
) -> bool:
    """The XML of each parent ``moved`` (its mdevs came or went since
    it was read) read again after its directory, until the directory
    lists the same around that read: its rooms and its mdevs then
    add up to what it holds (read before, an mdev made meanwhile
    counts in both). Only where a type's description gives no
    ``max_instance`` (the plan caps the others at it). One still
    changing after a few reads, or whose directory and libvirt do
    not agree yet (an mdev removed that libvirt still runs counts in
    both too), offers no room until the next reading. False: list
    every mdev again."""
    at = {p.name: i for i, p in enumerate(parents)}
    pending = devices.pending
    for name in sorted(moved & at.keys()):
        if not unbounded(parents[at[name]], wanted):
            continue
        for _ in range(ROOM_READS):
            again = devices.read_parent(listed[name], name, wanted)
            if again is None:
                return False
            parents[at[name]] = again
            if devices.dirs.unchanged(name, devices.reader.path_of(name)):
                break  # (or the directory cannot be read: it stands)
            if devices.follow_dirs(conn, {name}) is None:
                return False
            pending.discard(name)
            pending |= devices.pending
        else:
            LOG.warning(
                "The mdevs of %s changed at each of %d reads of its "
                "room: it offers none until the next reading",
                name,
                ROOM_READS,
            )
            pending.add(name)
        if name in pending:
            parents[at[name]] = no_room(parents[at[name]])
    devices.pending = pending
    return True


__all__ = [
    "ROOM_READS",
    "no_room",
    "rooms_after_listing",
    "rooms_again",
    "unbounded",
]
