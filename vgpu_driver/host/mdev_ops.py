"""Making, starting and removing mdevs, and typing VFs.

:class:`MdevOperations` changes the host through libvirt (>= 7.3 creates,
defines and autostarts mdevs itself), through the caller's own creator
(a compute service's privileged helper), or through sysfs where libvirt
cannot; each change is recorded in the :class:`~vgpu_driver.host.
nodedevs.NodeDevices` cache, so the next reading needs no relisting. A
parent the kernel says is full is :class:`~vgpu_driver.exception.
DeviceNoRoom`; any other refusal :class:`~vgpu_driver.exception.
DeviceOperationFailed`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import (
    DeviceNoRoom,
    DeviceOperationFailed,
    says_no_room,
)
from vgpu_driver.host.connection import Connection
from vgpu_driver.host.nodedevs import NodeDevices
from vgpu_driver.host.parents import ParentReader
from vgpu_driver.host.sysfs import SysfsTree
from vgpu_driver.model.device import Mdev, Parent

LOG = logging.getLogger(__name__)

# libvirt >= 7.3 creates and defines mdevs itself.
MIN_LIBVIRT_MDEV_API = 7_003_000
# Creates an mdev the caller's way: (parent name, type id, uuid).
Creator = Callable[[str, str, str], object]


class MdevOperations:
    def __init__(
        self,
        link: Connection,
        devices: NodeDevices,
        reader: ParentReader,
        sysfs: SysfsTree,
        creator: Creator | None,
    ) -> None:
        self.link = link
        self.devices = devices
        self.reader = reader
        self.sysfs = sysfs
        self.creator = creator

    def create(self, parent: Parent, type_id: str, uuid: str) -> Mdev:
        if self.creator is not None:
            return self._create_with_creator(parent, type_id, uuid)
        conn = self.link.get()
        api = self.link.api
        if (
            self.link.library_version() >= MIN_LIBVIRT_MDEV_API
            and not self.reader.libvirt_lacks(parent.name)
        ):
            try:
                return self._create_with_libvirt(conn, parent, type_id, uuid)
            except api.error as exc:
                if _refused(exc) or (
                    api.code(exc) not in api.create_unsupported
                ):
                    raise _create_error(exc)(
                        action=f"create mdev {uuid} of type {type_id}",
                        device=parent.name,
                        reason=api.message(exc),
                    ) from exc
                LOG.debug(
                    "libvirt cannot create mdevs here (%s); writing to sysfs",
                    api.message(exc),
                )
        path = self.reader.path_of(parent.name)
        if path is None:
            path = self.sysfs.resolve(None, parent.address)
        self.sysfs.create_mdev(path, type_id, uuid)
        return _named_by_libvirt(uuid, type_id, parent)

    def _create_with_creator(
        self, parent: Parent, type_id: str, uuid: str
    ) -> Mdev:
        assert self.creator is not None
        try:
            self.creator(parent.name, type_id, uuid)
        except Exception as exc:
            raise _create_error(exc)(
                action=f"create mdev {uuid} of type {type_id}",
                device=parent.name,
                reason=str(exc) or type(exc).__name__,
            ) from exc
        # read (with its libvirt name) at the next discovery
        self.devices.listed_at = float("-inf")
        return _named_by_libvirt(uuid, type_id, parent)

    def _create_with_libvirt(
        self, conn: Any, parent: Parent, type_id: str, uuid: str
    ) -> Mdev:
        xml = (
            f"<device><parent>{parent.name}</parent>"
            "<capability type='mdev'>"
            f"<type id='{type_id}'/><uuid>{uuid}</uuid>"
            "</capability></device>"
        )
        link = self.link
        device = link.call(
            "nodeDeviceCreateXML", conn.nodeDeviceCreateXML, xml, 0
        )
        persistent = False
        try:
            defined = link.call(
                "nodeDeviceDefineXML", conn.nodeDeviceDefineXML, xml, 0
            )
            link.call("setAutostart", defined.setAutostart, 1)
            persistent = True
        except link.api.error as exc:
            LOG.warning(
                "mdev %s on %s is created but not persistent (%s); it will "
                "be recreated after a host reboot at service start",
                uuid,
                parent.name,
                link.api.message(exc),
            )
        mdev = Mdev(
            uuid=uuid,
            type_id=type_id,
            parent=parent.name,
            name=device.name(),
            persistent=persistent,
            autostart=persistent,
        )
        self.devices.keep(mdev)
        return mdev

    def _lookup(self, mdev: Mdev) -> Any:
        conn = self.link.get()
        return self.link.call(
            "nodeDeviceLookupByName", conn.nodeDeviceLookupByName, mdev.name
        )

    def exists(self, mdev: Mdev) -> bool:
        """One lookup: is this mdev (still) known to libvirt?"""
        api = self.link.api
        try:
            self._lookup(mdev)
        except api.error as exc:
            if api.code(exc) == api.no_node_device:
                return False
            raise
        return True

    def start(self, mdev: Mdev) -> None:
        api = self.link.api
        try:
            self.link.call("create", self._lookup(mdev).create, 0)
        except api.error as exc:
            raise _create_error(exc)(
                action="start mdev",
                device=mdev.uuid,
                reason=api.message(exc),
            ) from exc
        self.devices.keep(dataclasses.replace(mdev, active=True))

    def remove(self, mdev: Mdev) -> None:
        api = self.link.api
        try:
            device = self._lookup(mdev)
            persistent = mdev.persistent
            if persistent is None:
                persistent = self.link.flag(
                    "isPersistent",
                    device.isPersistent,
                    self.devices.unsupported,
                )
            if mdev.active:
                self.link.call("destroy", device.destroy)
            if persistent:
                self.link.call("undefine", device.undefine, 0)
        except api.error as exc:
            if api.code(exc) not in api.remove_via_sysfs:
                raise DeviceOperationFailed(
                    action="remove mdev",
                    device=mdev.uuid,
                    reason=api.message(exc),
                ) from exc
            self.sysfs.remove_mdev(mdev.uuid)
        self.devices.drop(mdev)


# libvirt's words when mdevctl (so the kernel) refused the mdev: the host's
# answer, not a driver that cannot create mdevs (the test driver; no
# mdevctl), where writing to sysfs is the way
_MDEVCTL_FAILED = "unable to start mediated device"


def _refused(exc: BaseException) -> bool:
    return _MDEVCTL_FAILED in str(exc).lower() or says_no_room(exc)


def _create_error(exc: BaseException) -> type[DeviceOperationFailed]:
    """The error a failed create is: the parent is full (the kernel's
    EDQUOT, however libvirt, mdevctl or the caller tell it) or it
    failed."""
    return DeviceNoRoom if says_no_room(exc) else DeviceOperationFailed


def _named_by_libvirt(uuid: str, type_id: str, parent: Parent) -> Mdev:
    """An mdev made outside libvirt, under the name libvirt gives it."""
    return Mdev(
        uuid=uuid,
        type_id=type_id,
        parent=parent.name,
        name="mdev_" + uuid.replace("-", "_"),
    )
