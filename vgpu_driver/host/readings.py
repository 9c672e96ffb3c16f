"""What one reading of the libvirt adapter hands the next.

:class:`Readings` owns the last :class:`~vgpu_driver.model.device.
HostInventory` with its generation, the parents' objects it was made
from, and the drivers whose modules and versions it read. Given what a
discovery read this time, it answers with the reading, made the
cheapest way that gives what reading the whole host would give:

* nothing changed: the very same reading (the same generation);
* the guests alone changed: the last reading with those guests put in
  place (``HostInventory.with_guests``);
* the node devices changed (an mdev made or removed), alone or with
  the guests the host said changed (a spawn whose bind made its mdev, a
  delete that removed it): the last reading with those devices (and
  guests) (:func:`~vgpu_driver.model.device_changes.
  node_devices_changed`), the kernel's modules as last read (an mdev is
  no module event);
* otherwise the whole reading, sorted (the modules read again).

It calls no libvirt; its caller (:class:`~vgpu_driver.host.libvirt_host.
LibvirtHost`) reads the devices and guests and hands them over.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import NamedTuple

from vgpu_driver.host.sysfs import SysfsTree
from vgpu_driver.model.device import (
    Guest,
    HostInventory,
    Mdev,
    Parent,
    PhysicalFunction,
    PlainSriovGpu,
    sort_inventory,
)
from vgpu_driver.model.device_changes import node_devices_changed
from vgpu_driver.model.guest_order import resort_guests, sort_guests
from vgpu_driver.model.nvml import NvmlReading

GuestDiff = tuple[tuple[str, Guest | None, Guest | None], ...]


class Devices(NamedTuple):
    """The devices a discovery read."""

    parents: list[Parent]
    mdevs: Collection[Mdev]  # a view (see MdevCache.values)
    pfs: list[PhysicalFunction]
    plain: list[PlainSriovGpu]
    nvml: NvmlReading | None


class KnownGuests(NamedTuple):
    """The guests a discovery knows."""

    known: bool  # read (guests_known)
    everyone: Iterable[Guest]
    diff: GuestDiff | None  # those changed since the last reading


class Readings:
    def __init__(self, sysfs: SysfsTree) -> None:
        self.sysfs = sysfs
        self.last: HostInventory | None = None
        self._generation = 0
        self._parent_ids: list[int] = []  # the parents' objects, last read
        self._drivers: set[str | None] | None = None  # whose modules read

    def same_devices(self, found: Devices, dirty: bool) -> bool:
        """The devices are those of the last reading (``dirty``: an mdev
        came, went or changed since)."""
        last = self.last
        return (
            last is not None
            and not dirty
            and [id(p) for p in found.parents] == self._parent_ids
            and tuple(sorted(found.pfs, key=lambda p: p.name)) == last.pfs
            and found.nvml == last.nvml
            and tuple(found.plain) == last.plain_gpus
        )

    def take(
        self,
        found: Devices,
        same_devices: bool,
        changed: tuple[Collection[Mdev], Collection[Mdev]],
        guests: KnownGuests,
    ) -> HostInventory:
        """The reading of ``found`` and ``guests`` (``changed``: the mdevs
        added and gone since the last reading; ``same_devices``: as
        :meth:`same_devices` said)."""
        self._parent_ids = [id(p) for p in found.parents]
        last = self.last
        if same_devices and last is not None:
            return self._guests_alone(last, guests)
        drivers = {p.driver for p in found.parents}
        drivers |= {p.driver for p in found.pfs}
        again = drivers == self._drivers
        self._drivers = drivers
        if again and last is not None and guests.known == last.guests_known:
            made = self._devices_alone(last, found, changed, guests)
            if made is not None:
                assert made.device_changes is not None
                if made.device_changes[1]:
                    return self._new(made)
                # no node device changed after all: the guests alone, if
                # any (none: the same reading, the same generation)
                return self._guests_alone(last, guests)
        reading = sort_inventory(
            found.parents,
            found.mdevs,
            found.pfs,
            guests.everyone,
            guests.known,
            self.sysfs.driver_versions(drivers),
            self.sysfs.modules(),
            found.nvml,
            found.plain,
        )
        if last is not None and reading == last:
            return last  # read again, the same: the same generation
        return self._new(reading.with_generation(self._generation + 1))

    def _devices_alone(
        self,
        last: HostInventory,
        found: Devices,
        changed: tuple[Collection[Mdev], Collection[Mdev]],
        guests: KnownGuests,
    ) -> HostInventory | None:
        """``last`` with the node devices changed (and the guests the
        host said changed, when they did: a spawn whose bind made its
        mdev, a delete that removed it), both said from ``last``'s
        generation; None when anything else changed."""
        base, told = last, None
        if guests.diff:
            now = resort_guests(last.guests, guests.diff)
            if now is None:
                return None  # a change that does not match: sort all
            told = (last.generation, guests.diff)
            base = last.with_guests(now, True, last.generation, told, True)
        elif guests.diff is None:
            return None  # every guest read again: the whole reading
        return node_devices_changed(
            base,
            (
                found.parents,
                changed,
                found.pfs,
                found.nvml,
                found.plain,
                last.driver_versions,
                last.modules,
            ),
            self._generation + 1,
            told,
        )

    def _guests_alone(
        self, last: HostInventory, guests: KnownGuests
    ) -> HostInventory:
        """The devices as last read (and sorted), the guests now."""
        diff = guests.diff
        now = (
            resort_guests(last.guests, diff)
            if diff is not None and guests.known and last.guests_known
            else None
        )
        matched = now is not None  # the last reading's, with ``diff``
        if now is None:
            now = sort_guests(guests.everyone)
        # made from the last one's: the same iff each change is none (a
        # guest defined again as it was; not compared guest by guest)
        same = (
            all(then == new for _uuid, then, new in diff)
            if matched and diff is not None
            else now == last.guests
        )
        if same and guests.known == last.guests_known:
            return last  # read again, the same
        return self._new(
            last.with_guests(
                now,
                guests.known,
                self._generation + 1,
                (last.generation, diff) if diff is not None else None,
                matched,
            )
        )

    def _new(self, reading: HostInventory) -> HostInventory:
        """``reading``, made with the next generation, is the last."""
        self._generation += 1
        self.last = reading
        return reading
