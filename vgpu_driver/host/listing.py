"""The calls that list libvirt's node devices.

:class:`NodeListing` owns what one listing hands the next: the parents'
device objects as last listed (``held``: with the connection they come
from and the kernel's mdev parent registrations they account for), and
whether the connection can list inactive mdevs; and it looks up the
mdevs a parent's sysfs directory says came or went. It reads no XML:
its caller, :class:`~vgpu_driver.host.nodedevs.NodeDevices`, does.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any, NamedTuple

from oslo_log import log as logging

from vgpu_driver.host.connection import Connection
from vgpu_driver.model import naming

LOG = logging.getLogger(__name__)

Listed = list[tuple[str, Any]]  # (node device name, device object)


class Held(NamedTuple):
    """The parents as last listed, kept while they still hold."""

    conn: Any  # the connection they come from
    bus: list[str]  # the kernel's mdev parent registrations they cover
    devices: Listed


class NodeListing:
    def __init__(self, link: Connection) -> None:
        self.link = link
        self.held: Held | None = None
        self._inactive_supported = True

    def parents(self, conn: Any, bus: list[str] | None) -> Listed:
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
            devices = self.lookup_names(conn, names, ())
        self.hold(conn, bus, devices)
        return devices

    def hold(self, conn: Any, bus: list[str] | None, devices: Listed) -> None:
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

    def devices(
        self, conn: Any, known: Container[str], *, mdevs_only: bool = False
    ) -> Listed:
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
        return self.lookup_names(conn, names, known)

    def lookup_names(
        self, conn: Any, names: list[str], known: Container[str]
    ) -> Listed:
        api = self.link.api
        devices: Listed = []
        for name in names:
            if name in known:
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

    def running_mdev(self, conn: Any, uuid: str, path: Any) -> Any:
        """(name, device) of a running mdev libvirt knows, named as
        libvirt >= 7.3 names it (after its parent too) or as before."""
        short = "mdev_" + uuid.replace("-", "_")
        suffix = "_" + path.name.replace(":", "_").replace(".", "_")
        for name in (short + suffix, short):
            found = self.lookup_names(conn, [name], ())
            if found:
                return found[0]
        return None

    def state_of(self, conn: Any, name: str) -> str | None:
        """What libvirt says of an mdev sysfs no longer runs: "gone",
        "defined" (stopped, still defined), "running" (libvirt has not
        seen it stop yet); None: it cannot tell."""
        found = self.lookup_names(conn, [name], ())
        if not found:
            return "gone"
        is_active = getattr(found[0][1], "isActive", None)
        if is_active is None:
            return None
        return (
            "running" if self.link.call("isActive", is_active) else "defined"
        )

    def inactive_mdev_names(self, conn: Any) -> set[str]:
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
        exception clears it: seen as a refusal with no code; rare since
        :meth:`~vgpu_driver.host.connection.Connection.call` holds the
        collector off)."""
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
