"""libvirt's node devices: the mdev parents and the mdevs, listed with
as few calls as a steady host allows.

:class:`NodeDevices` owns its caches: every mdev read so far (read
again only when its sysfs directory says it was made again or started),
when everything was last listed, and whether the mdevs changed
since the adapter's last reading (``dirty``). The calls that list
devices and look them up, and the parents' device objects held from the
last listing, are its :class:`~vgpu_driver.host.listing.NodeListing`'s;
parents' XML is turned into readings by a
:class:`~vgpu_driver.host.parents.ParentReader`.

The relist policy: the parents are listed again only when the kernel's
mdev parents (``/sys/class/mdev_bus``) or the connection changed, or a
parent vanished; the mdevs when a parent's XML changed (its
``availableInstances``), when asked, and at least every
``relist_interval`` seconds. Each parent's XML is read at every
reading, or, with node-device events watched, only where the events
since the last reading name it (:mod:`.nodedev_events`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection
from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import DeviceXMLInvalid
from vgpu_driver.host import nodedev_xml
from vgpu_driver.host.connection import Connection
from vgpu_driver.host.listing import Listed, NodeListing
from vgpu_driver.host.mdev_cache import MdevCache
from vgpu_driver.host.mdev_dirs import MdevDirs
from vgpu_driver.host.nodedev_events import (
    NodeDeviceEvents,
    parents_to_read,
)
from vgpu_driver.host.parents import ParentReader, implied_parents
from vgpu_driver.host.rooms import rooms_after_listing, rooms_again
from vgpu_driver.host.sysfs import SysfsTree
from vgpu_driver.model.device import Mdev, Parent

LOG = logging.getLogger(__name__)


class NodeDevices:
    def __init__(
        self,
        link: Connection,
        sysfs: SysfsTree,
        reader: ParentReader,
        relist_interval: float,
    ) -> None:
        self.link = link
        self.sysfs = sysfs
        self.reader = reader
        self.relist_interval = relist_interval
        self.mdevs = MdevCache()  # by libvirt name, and by parent
        self.dirty = True  # the mdevs changed since the last reading
        self.dirs = MdevDirs()  # what the parents' sysfs directories list
        self.listed_at = 0.0
        self.listing = NodeListing(link)
        self._parent_ids: dict[str, int] = {}  # name -> the object's id
        # parents whose mdevs sysfs and libvirt did not agree on yet
        self.pending: set[str] = set()
        # parents the adapter made or removed an mdev on since the last
        # reading: followed at the next (their room may be back where it
        # was: another manager's mdev made there would go unseen)
        self._ours: set[str] = set()
        self._placed_among: set[str] = set()  # parent names, last placed
        self._implied: list[Parent] = []
        self.unsupported: set[str] = set()  # flags the driver cannot tell
        self.events = NodeDeviceEvents(link)
        link.on_lost.append(self.forget_listing)

    def forget_listing(self) -> None:
        """List every device again at the next reading."""
        self.listing.held = None
        self.listed_at = float("-inf")

    def read(
        self,
        conn: Any,
        *,
        relist: bool,
        wanted: frozenset[str] | None,
        again: bool = False,
    ) -> tuple[list[Parent], Collection[Mdev]]:
        """The parents (those only in sysfs and those implied by their
        mdevs included) and the mdevs. ``relist``: list the mdevs again
        whatever the policy says. ``again``: right after the last
        reading, for what the adapter changed since: the XML of the
        parents it made or removed an mdev on is read, the others are
        as that reading had them (one call per parent changed, not per
        parent)."""
        now = time.monotonic()
        relist = relist or now - self.listed_at >= self.relist_interval
        parents: list[Parent] | None = None
        # the events so far, taken before any XML is read (a relisting
        # reads every parent: they are then spent)
        names = None if again else self.events.take(conn)
        bus = self.sysfs.mdev_bus_listing()
        if not relist:
            listed = self.listing.parents(conn, bus)
            only = (
                self._ours
                if again
                else parents_to_read(
                    names,
                    self.pending | self._ours,
                    listed,
                    self.mdevs,
                    lambda name: self.reader.last(name, wanted),
                )
            )
            parents = self._read_parents(listed, wanted, only)
            # a parent whose XML changed (its availableInstances) may have
            # new or fewer mdevs: its own sysfs directory says which (or,
            # where it cannot, every mdev is listed again)
            ids = {p.name: id(p) for p in parents}
            last = self._parent_ids
            changed = {n for n, i in ids.items() if last.get(n) != i}
            changed |= self.pending | (self._ours & ids.keys())
            relist = ids.keys() != last.keys()
            if changed and not relist:
                followed = self.follow_dirs(conn, changed)
                relist = followed is None or not rooms_again(
                    self, conn, dict(listed), parents, followed, wanted
                )
        if relist:
            parents = self._relist(conn, parents, wanted, bus)
            self.listed_at = now
            self.sysfs.forget_probes()
            rooms_after_listing(self, conn, parents, wanted, bus)
        assert parents is not None
        self._ours = set()
        self._parent_ids = {p.name: id(p) for p in parents}
        parents.extend(self.reader.sysfs_only(parents, bus or []))
        names = {p.name for p in parents}
        # parents listed or gone (a virtual one registered late) may be
        # those of the mdevs libvirt names no parent of: placed again
        if self.dirty or relist or names != self._placed_among:
            self._place_mdevs(names)
            self._implied = implied_parents(
                parents, [self.mdevs.by_name[n] for n in self.mdevs.unplaced]
            )
        parents.extend(self._implied)
        return parents, self.mdevs.values()

    def made_unseen(self, uuids: set[str]) -> bool:
        """Does sysfs have an mdev among ``uuids`` (those guests took up)
        that was not read? Another manager made it where no parent's
        rooms changed (one removed and one of its type made on that
        parent between two readings): every mdev is to be listed
        again."""
        return any(
            not self.mdevs.has_uuid(uuid)
            and self.sysfs.mdev_parent_name(uuid) is not None
            for uuid in uuids
        )

    # -- changes made through the adapter ------------------------------

    def keep(self, mdev: Mdev) -> None:
        """An mdev made or changed through the adapter."""
        self.mdevs.put(mdev.name, mdev)
        self._ours.add(mdev.parent)
        self.dirty = True

    def drop(self, mdev: Mdev) -> None:
        """An mdev removed through the adapter."""
        self.mdevs.pop(mdev.name)
        self._ours.add(mdev.parent)
        self.dirty = True

    # -- listing -------------------------------------------------------

    def _relist(
        self,
        conn: Any,
        parents_read: list[Parent] | None,
        wanted: frozenset[str] | None,
        bus: list[str] | None,
    ) -> list[Parent]:
        """Every mdev listed again (its XML read only when new), and the
        parents unless ``parents_read`` already has them."""
        devices = self.listing.devices(
            conn, self.mdevs, mdevs_only=parents_read is not None
        )
        if parents_read is None:
            self.listing.hold(
                conn, bus, [d for d in devices if not d[0].startswith("mdev_")]
            )
        inactive = self.listing.inactive_mdev_names(conn)
        parents: list[Parent] = []
        listed: set[str] = set()
        for name, device in devices:
            listed.add(name)
            if name.startswith("mdev_"):
                self._read_mdev(device, name, active=name not in inactive)
            else:
                parent = self.read_parent(device, name, wanted)
                if parent is not None:
                    parents.append(parent)
        for name in self.mdevs.names() - listed:
            self.mdevs.pop(name)
            self.dirty = True
        self.pending = set()
        return parents if parents_read is None else parents_read

    def _read_parents(
        self,
        devices: Listed,
        wanted: frozenset[str] | None,
        only: set[str] | None = None,
    ) -> list[Parent]:
        """``only``: the names of those whose XML is read; the others as
        last read (read where they never were)."""
        found = []
        for name, device in devices:
            parent = None
            if only is not None and name not in only:
                parent = self.reader.last(name, wanted)
            if parent is None:
                parent = self.read_parent(device, name, wanted)
            if parent is not None:
                found.append(parent)
        return found

    def read_parent(
        self, device: Any, name: str, wanted: frozenset[str] | None
    ) -> Parent | None:
        text = self._xml(device, name)
        if text is None:
            self.listing.held = None  # it vanished: list the parents again
            return None
        return self.reader.read(name, text, wanted)

    def _xml(self, device: Any, name: str) -> str | None:
        api = self.link.api
        try:
            return str(self.link.call("XMLDesc", device.XMLDesc, 0))
        except api.error as exc:
            if api.code(exc) == api.no_node_device:
                LOG.debug("Node device %s vanished while listed", name)
                return None
            raise

    def _read_mdev(self, device: Any, name: str, active: bool) -> None:
        cached = self.mdevs.get(name)
        if cached is not None:
            if cached.active != active:
                self.keep(dataclasses.replace(cached, active=active))
            return
        text = self._xml(device, name)
        if text is None:
            return
        try:
            mdev = nodedev_xml.parse_mdev(text)
        except DeviceXMLInvalid as exc:
            LOG.warning("Skipping mdev %s: %s", name, exc)
            return
        # persistence is asked only when it matters (removal): no per-mdev
        # round trips at discovery. An inactive mdev is a defined one.
        self.mdevs.put(
            name,
            mdev
            if active
            else dataclasses.replace(mdev, active=False, persistent=True),
        )
        self.dirty = True

    def _place_mdevs(self, names: set[str]) -> None:
        """libvirt names a virtual parent's mdevs' parent ``computer``:
        find the real parent (among ``names``, those listed) in sysfs,
        once per mdev (every mdev again only when the parents listed
        changed)."""
        cache = self.mdevs
        if names != self._placed_among:
            self._placed_among = names
            cache.unplaced = cache.names()
        # a new set: an emptied one keeps its table, walked every reading
        pending, cache.unplaced = cache.unplaced, set()
        for key in pending:
            mdev = cache.by_name[key]
            if mdev.parent not in names:
                real = self.sysfs.mdev_parent_name(mdev.uuid)
                if real not in names:  # implied: its parent is not listed
                    cache.unplaced.add(key)
                    continue
                cache.put(key, dataclasses.replace(mdev, parent=str(real)))
                cache.unplaced.discard(key)
                self.dirty = True

    # -- following a parent's mdevs through sysfs ----------------------

    def follow_dirs(self, conn: Any, names: set[str]) -> set[str] | None:
        """The mdevs of parents ``names`` as their sysfs directories list
        the running ones (:class:`~.mdev_dirs.MdevDirs`): a lookup per
        mdev made, gone, made again or started. Returns the parents whose
        directories changed; None, with the rest left to a full listing,
        where sysfs or libvirt cannot tell."""
        pending: set[str] = set()
        moved: set[str] = set()
        for name in sorted(names):
            path = self.reader.path_of(name)
            known = dict(self.mdevs.of_parent(name))
            stopped = self.mdevs.stopped_on(name)
            seen = self.dirs.follow(name, path, known, stopped)
            if seen is None:
                return None
            if seen.made_again or seen.new or seen.not_running:
                moved.add(name)
            for uuid in seen.made_again:
                self.drop(known.pop(uuid))
            for uuid in seen.new:
                found = self.listing.running_mdev(conn, uuid, path)
                if found is None:
                    pending.add(name)  # libvirt has not seen it yet
                else:
                    self._read_mdev(found[1], found[0], active=True)
            # those left running are active (the stopped ones were read
            # again above); of those not, the stopped ones stay so
            for uuid in seen.not_running:
                mdev = known[uuid]
                state = self.listing.state_of(conn, mdev.name)
                if state is None:
                    return None
                if state == "running":
                    pending.add(name)  # libvirt has not seen it stop yet
                elif state == "defined":
                    self.keep(
                        dataclasses.replace(
                            mdev, active=False, persistent=True
                        )
                    )
                else:
                    self.drop(mdev)
        self.pending = pending
        return moved
