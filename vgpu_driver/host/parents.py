"""mdev parents as read from libvirt's XML, completed from sysfs.

:class:`ParentReader` owns what is read once per parent and kept: its
sysfs path and driver, the descriptions of its types, its last XML with
the reading made of it (a parent whose XML did not change is the very
same :class:`~vgpu_driver.model.device.Parent` object), and the parents
the kernel registers but libvirt has no device for. It never calls
libvirt: the caller hands it the XML.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from oslo_log import log as logging

from vgpu_driver.exception import DeviceXMLInvalid
from vgpu_driver.host import nodedev_xml
from vgpu_driver.host.sysfs import SysfsTree
from vgpu_driver.model import naming
from vgpu_driver.model.copies import replaced
from vgpu_driver.model.device import Mdev, MdevType, Parent

LOG = logging.getLogger(__name__)


class _Extras(NamedTuple):
    """What sysfs adds to a parent, read once: its path, and its driver
    (read only when libvirt's XML names none; libvirt's, when it does,
    is read from each XML: a driver unbound leaves the XML)."""

    path: Path
    driver: str | None


class _Parsed(NamedTuple):
    """A parent's last XML and the reading made of it."""

    text: str
    wanted: frozenset[str] | None  # the types described
    parent: Parent
    # the text cut at its rooms (see :func:`_rooms`): cut once a text
    rooms: tuple[list[str], list[int]] | None


_ROOM_OPEN, _ROOM_CLOSE = "<availableInstances>", "</availableInstances>"


def _rooms(text: str) -> tuple[list[str], list[int]] | None:
    """``text`` cut at each type's ``availableInstances``: the text
    around the numbers, and the numbers (None: one is not a plain
    decimal, which the parsers alone judge)."""
    pieces = text.split(_ROOM_OPEN)
    frame, rooms = [pieces[0]], []
    for piece in pieces[1:]:
        digits, closed, rest = piece.partition(_ROOM_CLOSE)
        if not (
            closed
            and digits.isascii()
            and digits.isdigit()
            and (digits == "0" or digits[0] != "0")
        ):
            return None
        frame.append(rest)
        rooms.append(int(digits))
    return frame, rooms


def _rooms_moved(
    cached: _Parsed, now: tuple[list[str], list[int]] | None
) -> Parent | None:
    """The parent ``cached`` read, with the rooms of a text cut as
    ``now``, when only its types' ``availableInstances`` changed (an mdev
    made or removed: the rest of the XML, read and completed from sysfs,
    is the same); None otherwise (read it whole)."""
    before = cached.rooms
    if now is None or before is None or now[0] != before[0]:
        return None
    types = cached.parent.types
    if [t.available for t in types] != before[1]:
        return None  # the numbers are not the types' in order
    return replaced(
        cached.parent,
        types=tuple(
            t if t.available == n else replaced(t, available=n)
            for t, n in zip(types, now[1], strict=True)
        ),
    )


class ParentReader:
    def __init__(self, sysfs: SysfsTree) -> None:
        self.sysfs = sysfs
        self._extras: dict[str, _Extras] = {}  # by parent name
        # (parent name, type id) -> the type's sysfs description
        self._descriptions: dict[tuple[str, str], str | None] = {}
        self._parsed: dict[str, _Parsed] = {}  # by parent name
        self._sysfs_only: list[Parent] = []
        self._sysfs_only_key: tuple[list[int], list[str]] | None = None

    def path_of(self, name: str) -> Path | None:
        """The sysfs path of a parent read before (from libvirt's XML or
        from sysfs alone), if any."""
        extras = self._extras.get(name)
        return extras.path if extras else None

    def last(self, name: str, wanted: frozenset[str] | None) -> Parent | None:
        """The parent ``name`` as last read with ``wanted`` described, if
        it was."""
        cached = self._parsed.get(name)
        return cached.parent if cached and cached.wanted == wanted else None

    def read(
        self, name: str, text: str, wanted: frozenset[str] | None
    ) -> Parent | None:
        """A parent from its XML, its ``wanted`` types described (all
        when None); the same object as last time if ``text`` is."""
        cached = self._parsed.get(name)
        if cached is not None and cached.wanted != wanted:
            cached = None
        if cached is not None and cached.text == text:
            return cached.parent  # availableInstances unchanged: same one
        rooms = _rooms(text)  # (cut once, kept with the reading)
        if cached is not None:
            moved = _rooms_moved(cached, rooms)
            if moved is not None:
                self._parsed[name] = _Parsed(text, wanted, moved, rooms)
                return moved
        try:
            parent, libvirt_path = nodedev_xml.read_parent(text)
        except DeviceXMLInvalid as exc:
            LOG.warning("Skipping mdev parent %s: %s", name, exc)
            return None
        if parent is None:
            return None
        extras = self._extras.get(name)
        if extras is None:
            path = self.sysfs.resolve(libvirt_path, parent.address)
            extras = self._extras[name] = _Extras(path, None)
        if not parent.driver and extras.driver is None:
            # libvirt names the driver of a bound device: sysfs only
            # where it does not
            extras = self._extras[name] = extras._replace(
                driver=self.sysfs.driver(extras.path)
            )
        path, driver = extras
        enriched = self._enrich(parent, path, driver, wanted)
        self._parsed[name] = _Parsed(text, wanted, enriched, rooms)
        return enriched

    def _enrich(
        self,
        parent: Parent,
        path: Path,
        driver: str | None,
        wanted: frozenset[str] | None,
    ) -> Parent:
        """Fill in from sysfs what libvirt's XML left out (read once):
        the driver, and the descriptions of the ``wanted`` types (all when
        None)."""
        types = []
        described = False
        for mdev_type in parent.types:
            if mdev_type.description is None and (
                wanted is None or mdev_type.id in wanted
            ):
                key = (parent.name, mdev_type.id)
                if key in self._descriptions:
                    description = self._descriptions[key]
                else:
                    description = self._descriptions[key] = (
                        self.sysfs.type_description(path, mdev_type.id)
                    )
                if description is not None:
                    mdev_type = dataclasses.replace(
                        mdev_type, description=description
                    )
                    described = True
            types.append(mdev_type)
        adds_driver = not parent.driver and driver is not None
        if not described and not adds_driver:
            return parent  # nothing to add (dataclasses.replace is slow)
        return dataclasses.replace(
            parent, driver=parent.driver or driver, types=tuple(types)
        )

    def libvirt_lacks(self, name: str) -> bool:
        """Is ``name`` a parent read from sysfs alone (libvirt has no node
        device for it, so cannot make an mdev on it)?"""
        return any(p.name == name for p in self._sysfs_only)

    def sysfs_only(
        self, known: list[Parent], entries: list[str]
    ) -> list[Parent]:
        """Parents the kernel registers (``entries``: in
        ``class/mdev_bus``) but libvirt has no device for (read again
        only when the parents or the registrations change)."""
        key = ([id(p) for p in known], entries)
        if key != self._sysfs_only_key:
            self._sysfs_only = self._read_sysfs_only(known, entries)
            self._sysfs_only_key = key
        return list(self._sysfs_only)

    def _read_sysfs_only(
        self, known: list[Parent], entries: list[str]
    ) -> list[Parent]:
        # a registration named as a known parent is that parent; links
        # are resolved only for the others (virtual parents, rare)
        keys = {key for p in known for key in p.keys}
        others = [e for e in entries if e not in keys]
        if not others:
            return []
        known_paths = {
            self.sysfs.real_path(self._extras[p.name].path)
            for p in known
            if p.name in self._extras
        }
        found = []
        for path, name in self.sysfs.mdev_bus_parents(others).items():
            if path in known_paths:
                continue
            parent = self.sysfs.read_parent(path, name)
            if parent is not None:
                # where an mdev is made on it (no address to find it by)
                self._extras[name] = _Extras(path, parent.driver)
                found.append(parent)
        return found


def implied_parents(
    parents: Iterable[Parent], mdevs: Iterable[Mdev]
) -> list[Parent]:
    """Parents known only as the parent of their mdevs: libvirt did not
    list them as mdev-capable (Nova's test double does this, and so may a
    driver that hides a full device's types). They keep their mdevs and
    offer no new ones (``available`` 0), as Nova counts them."""
    known = {p.name for p in parents}
    types: dict[str, set[str]] = {}
    for mdev in mdevs:
        if mdev.parent not in known:
            types.setdefault(mdev.parent, set()).add(mdev.type_id)
    return [
        Parent(
            name=name,
            address=naming.canonical_pci_address(name),
            types=tuple(
                MdevType(id=t, name=None, device_api="vfio-pci", available=0)
                for t in sorted(ids)
            ),
        )
        for name, ids in sorted(types.items())
    ]
