"""libvirt's node devices: the mdev parents and the mdevs, listed with
as few calls as a steady host allows.

:class:`NodeDevices` owns its caches: every mdev read so far (an mdev's
XML never changes for a given name, so it is read once), when
everything was last listed, and whether the mdevs changed since the
adapter's last reading (``dirty``). The calls that list devices, and the
parents' device objects held from the last listing, are its
:class:`~vgpu_driver.host.listing.NodeListing`'s; parents' XML is turned
into readings by a :class:`~vgpu_driver.host.parents.ParentReader`.

The relist policy: the parents are listed again only when the kernel's
mdev parents (``/sys/class/mdev_bus``) or the connection changed, or a
parent vanished; the mdevs when a parent's XML changed (its
``availableInstances``), when asked, and at least every
``relist_interval`` seconds.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import DeviceXMLInvalid
from vgpu_driver.host import nodedev_xml
from vgpu_driver.host.connection import Connection
from vgpu_driver.host.listing import Listed, NodeListing
from vgpu_driver.host.parents import ParentReader, implied_parents
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
        self.mdevs: dict[str, Mdev] = {}  # by libvirt name
        self.dirty = True  # the mdevs changed since the last reading
        self.listed_at = 0.0
        self.listing = NodeListing(link)
        self._parent_ids: list[int] = []
        self._mdev_list: list[Mdev] = []
        self._implied: list[Parent] = []
        self.unsupported: set[str] = set()  # flags the driver cannot tell
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
    ) -> tuple[list[Parent], list[Mdev]]:
        """The parents (those only in sysfs and those implied by their
        mdevs included) and the mdevs. ``relist``: list the mdevs again
        whatever the policy says."""
        now = time.monotonic()
        relist = relist or now - self.listed_at >= self.relist_interval
        parents: list[Parent] | None = None
        bus = self.sysfs.mdev_bus_listing()
        if not relist:
            listed = self.listing.parents(conn, bus)
            parents = self._read_parents(listed, wanted)
            # a parent whose XML changed (its availableInstances) may have
            # new or fewer mdevs: list them again (only them)
            relist = [id(p) for p in parents] != self._parent_ids
        if relist:
            parents = self._relist(conn, parents, wanted, bus)
            self.listed_at = now
            self.sysfs.forget_probes()
        assert parents is not None
        self._parent_ids = [id(p) for p in parents]
        parents.extend(self.reader.sysfs_only(parents, bus or []))
        if self.dirty or relist:
            self._mdev_list = self._mdevs_with_known_parents(parents)
            self._implied = implied_parents(parents, self._mdev_list)
        parents.extend(self._implied)
        return parents, self._mdev_list

    # -- changes made through the adapter ------------------------------

    def keep(self, mdev: Mdev) -> None:
        """An mdev made or changed through the adapter."""
        self.mdevs[mdev.name] = mdev
        self.dirty = True

    def drop(self, mdev: Mdev) -> None:
        """An mdev removed through the adapter."""
        self.mdevs.pop(mdev.name, None)
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
                parent = self._read_parent(device, name, wanted)
                if parent is not None:
                    parents.append(parent)
        for name in set(self.mdevs) - listed:
            del self.mdevs[name]
            self.dirty = True
        return parents if parents_read is None else parents_read

    def _read_parents(
        self, devices: Listed, wanted: frozenset[str] | None
    ) -> list[Parent]:
        found = []
        for name, device in devices:
            parent = self._read_parent(device, name, wanted)
            if parent is not None:
                found.append(parent)
        return found

    def _read_parent(
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
        self.mdevs[name] = (
            mdev
            if active
            else dataclasses.replace(mdev, active=False, persistent=True)
        )
        self.dirty = True

    def _mdevs_with_known_parents(self, parents: list[Parent]) -> list[Mdev]:
        """libvirt names a virtual parent's mdevs' parent ``computer``:
        find the real parent in sysfs, once per mdev."""
        names = {p.name for p in parents}
        for key, mdev in list(self.mdevs.items()):
            if mdev.parent in names:
                continue
            real = self.sysfs.mdev_parent_name(mdev.uuid)
            if real in names:
                self.mdevs[key] = dataclasses.replace(mdev, parent=str(real))
                self.dirty = True
        return list(self.mdevs.values())
