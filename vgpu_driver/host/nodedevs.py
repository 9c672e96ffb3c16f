"""libvirt's node devices: the mdev parents and the mdevs, listed with
as few calls as a steady host allows.

:class:`NodeDevices` owns the listing and its caches: the parents'
device objects as last listed (``held``: with the connection they come
from and the kernel's mdev parent registrations they account for), every
mdev read so far (an mdev's XML never changes for a given name, so it is
read once), when everything was last listed, and whether the mdevs
changed since the adapter's last reading (``dirty``). Parents' XML is
turned into readings by a :class:`~vgpu_driver.host.parents.
ParentReader`.

The relist policy: the parents are listed again only when the kernel's
mdev parents (``/sys/class/mdev_bus``) or the connection changed, or a
parent vanished; the mdevs when a parent's XML changed (its
``availableInstances``), when asked, and at least every
``relist_interval`` seconds.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, NamedTuple

from oslo_log import log as logging

from vgpu_driver.exception import DeviceXMLInvalid
from vgpu_driver.host import nodedev_xml
from vgpu_driver.host.connection import Connection
from vgpu_driver.host.parents import ParentReader, implied_parents
from vgpu_driver.host.sysfs import SysfsTree
from vgpu_driver.model import naming
from vgpu_driver.model.device import Mdev, Parent

LOG = logging.getLogger(__name__)

Listed = list[tuple[str, Any]]  # (node device name, device object)


class Held(NamedTuple):
    """The parents as last listed, kept while they still hold."""

    conn: Any  # the connection they come from
    bus: list[str]  # the kernel's mdev parent registrations they cover
    devices: Listed


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
        self.held: Held | None = None
        self._parent_ids: list[int] = []
        self._mdev_list: list[Mdev] = []
        self._implied: list[Parent] = []
        self._inactive_supported = True
        self.unsupported: set[str] = set()  # flags the driver cannot tell
        link.on_lost.append(self.forget_listing)

    def forget_listing(self) -> None:
        """List every device again at the next reading."""
        self.held = None
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
            parents = self._read_parents(self._list_parents(conn, bus), wanted)
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
        devices = self._list_devices(conn, mdevs_only=parents_read is not None)
        if parents_read is None:
            self._hold(
                conn, bus, [d for d in devices if not d[0].startswith("mdev_")]
            )
        inactive = self._inactive_mdev_names(conn)
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
            self.held = None  # it vanished: list the parents again
            return None
        return self.reader.read(name, text, wanted)

    def _list_parents(self, conn: Any, bus: list[str] | None) -> Listed:
        """(name, device) of the parents only: those of the last listing
        while they still account for the kernel's mdev parents (``bus``)
        on the same connection; else one call (or, by names, one listing
        and a lookup per parent)."""
        held = self.held
        if held is not None and held.conn is conn and held.bus == bus:
            return held.devices
        api = self.link.api
        if api.list_parents is not None:
            listed = self.link.call(
                "listAllDevices", conn.listAllDevices, api.list_parents
            )
            devices = [(device.name(), device) for device in listed]
        else:
            names = self.link.call(
                "listDevices", conn.listDevices, "mdev_types", 0
            )
            devices = self._lookup_names(conn, names)
        self._hold(conn, bus, devices)
        return devices

    def _hold(self, conn: Any, bus: list[str] | None, devices: Listed) -> None:
        """Keep the parents listed for the next refreshes, if every PCI
        device the kernel registers as an mdev parent is among them. A
        device registered but not (yet) in libvirt's listing, and a host
        without ``class/mdev_bus`` (no sysfs to tell), are listed again
        at every refresh."""
        self.held = None
        if bus is None:
            return
        names = {name for name, _ in devices}
        accounted = all(
            naming.libvirt_pci_name(entry) in names
            for entry in bus
            if naming.normalize_pci_address(entry) is not None
        )
        if accounted:
            self.held = Held(conn, bus, devices)

    def _list_devices(self, conn: Any, *, mdevs_only: bool = False) -> Listed:
        """(name, device) of parents (unless ``mdevs_only``) and mdevs:
        one call; or, with a binding that has no ``mdev_types`` listing
        flag, name listings and one lookup per parent and per mdev not
        seen before (an mdev already read needs none: its XML never
        changes)."""
        api = self.link.api
        if api.list_parents_and_mdevs is not None:
            listed = self.link.call(
                "listAllDevices",
                conn.listAllDevices,
                api.list_mdevs if mdevs_only else api.list_parents_and_mdevs,
            )
            return [(device.name(), device) for device in listed]
        names = (
            []
            if mdevs_only
            else [
                *self.link.call(
                    "listDevices", conn.listDevices, "mdev_types", 0
                )
            ]
        )
        names += self.link.call("listDevices", conn.listDevices, "mdev", 0)
        return self._lookup_names(conn, names)

    def _lookup_names(self, conn: Any, names: list[str]) -> Listed:
        api = self.link.api
        devices: Listed = []
        for name in names:
            if name in self.mdevs:
                devices.append((name, None))
                continue
            try:
                device = self.link.call(
                    "nodeDeviceLookupByName",
                    conn.nodeDeviceLookupByName,
                    name,
                )
            except api.error as exc:
                if api.code(exc) != api.no_node_device:
                    raise
                LOG.debug("Node device %s vanished while listed", name)
                continue
            devices.append((name, device))
        return devices

    def _inactive_mdev_names(self, conn: Any) -> set[str]:
        if not self._inactive_supported:
            return set()
        api = self.link.api
        try:
            found = self._list_inactive(conn)
        except api.error as exc:
            if api.code(exc) not in api.unsupported:
                raise
            LOG.debug(
                "libvirt at %s cannot list inactive mdevs; all are active",
                self.link.uri,
            )
            self._inactive_supported = False
            return set()
        return {d.name() for d in found}

    def _list_inactive(self, conn: Any) -> Any:
        """The inactive mdevs; asked twice when the refusal came without
        its reason (libvirt's last error is per thread, and a libvirt
        object freed by the garbage collector between the call and the
        exception clears it: seen as a refusal with no code)."""
        api = self.link.api

        def listed() -> Any:
            return self.link.call(
                "listAllDevices", conn.listAllDevices, api.list_inactive_mdevs
            )

        try:
            return listed()
        except api.error as exc:
            if api.code(exc) is not None:
                raise
        return listed()

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
