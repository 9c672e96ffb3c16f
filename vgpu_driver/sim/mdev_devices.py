"""The node devices :class:`~.mdev_libvirt.MdevConnection` hands out,
and the errors they raise as libvirt raises them.

* :class:`ModelledMdev`: an mdev made through the connection (the test
  driver cannot make one), whose state (running, defined, gone) the
  connection keeps;
* :class:`ExistingMdev`: one of the host description's own mdevs (the
  test driver's), with the answers the test driver cannot give;
* :class:`ModelledParent`: a test-driver parent whose
  ``availableInstances`` follow the mdevs made, stopped or gone.

Each call is answered or recorded through the connection, so the tests
count it as a round trip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import libvirt

if TYPE_CHECKING:
    from vgpu_driver.sim.mdev_libvirt import MdevConnection


def libvirt_error(code: int, message: str) -> libvirt.libvirtError:
    """A libvirtError as libvirt raises it: ``code``, at error level."""
    error = libvirt.libvirtError(message)
    error.err = (code, 0, message, 2, "", "", "", 0, 0)
    return error


def no_device(name: str) -> libvirt.libvirtError:
    """The error libvirt raises for a node device it does not have."""
    return libvirt_error(
        libvirt.VIR_ERR_NO_NODE_DEVICE, f"Node device not found: {name}"
    )


def _invalid(what: str) -> libvirt.libvirtError:
    text = f"Requested operation is not valid: {what}"
    return libvirt_error(libvirt.VIR_ERR_OPERATION_INVALID, text)


def no_flags(flags: int, function: str) -> None:
    """libvirt's ``virCheckFlags``: a flag the call does not take."""
    if flags:
        text = f"unsupported flags ({flags:#x}) in function {function}"
        raise libvirt_error(libvirt.VIR_ERR_INVALID_ARG, text)


def failed_start(why: str) -> libvirt.libvirtError:
    """The error libvirt raises when mdevctl cannot start an mdev."""
    return libvirt_error(
        libvirt.VIR_ERR_INTERNAL_ERROR,
        f"Unable to start mediated device: {why}",
    )


def mdev_xml(parent: str, type_id: str, uuid: str) -> str:
    """The XML ``nodeDeviceCreateXML`` takes for an mdev of ``type_id``
    on ``parent`` (as ``virsh nodedev-create`` is given it)."""
    return (
        f"<device><parent>{parent}</parent><capability type='mdev'>"
        f"<type id='{type_id}'/><uuid>{uuid}</uuid></capability></device>"
    )


def field(xml: str, start: str, end: str) -> str:
    return xml.split(start, 1)[1].split(end, 1)[0]


class ModelledMdev:
    """An mdev libvirt >= 7.3 made (the test driver cannot)."""

    def __init__(
        self, conn: MdevConnection, name: str, xml: str, persistent: bool
    ) -> None:
        self.conn, self._name, self.xml = conn, name, xml
        self.persistent, self.autostarted = persistent, False
        self.parent = field(xml, "<parent>", "</parent>")
        self.type_id = field(xml, "<type id='", "'")
        self.uuid = (
            field(xml, "<uuid>", "</uuid>")
            if "<uuid>" in xml
            else name.removeprefix("mdev_")[:36].replace("_", "-")
        )

    def name(self) -> str:
        return self._name

    def XMLDesc(self, flags: int = 0) -> str:
        self.conn.answer("XMLDesc", self._name)
        return self.xml

    def isActive(self) -> int:
        self.conn.answer("isActive", self._name)
        return int(self.conn.running(self._name))

    def isPersistent(self) -> int:
        self.conn.answer("isPersistent", self._name)
        return int(self.persistent)

    def autostart(self) -> int:
        return int(self.autostarted)

    def setAutostart(self, flag: int) -> None:
        self.conn.answer("setAutostart", self._name)
        self.autostarted = bool(flag)

    def create(self, flags: int = 0) -> None:
        self.conn.answer("create", self._name)
        no_flags(flags, "nodeDeviceCreate")
        if self.conn.running(self._name):
            raise _invalid("Device is already active")
        self.conn.refuse_without_room(self.parent, self.type_id)
        self.conn.inactive.discard(self._name)

    def destroy(self) -> None:
        self.conn.answer("destroy", self._name)
        if not self.conn.running(self._name):
            raise _invalid(f"Device '{self._name}' is not active")
        if self.persistent:
            self.conn.inactive.add(self._name)
        else:
            self.conn.gone.add(self._name)

    def undefine(self, flags: int = 0) -> None:
        self.conn.answer("undefine", self._name)
        no_flags(flags, "nodeDeviceUndefine")
        if not self.persistent:
            raise _invalid(f"Node device '{self._name}' is not defined")
        self.persistent = False
        if self._name in self.conn.inactive:
            self.conn.gone.add(self._name)


class ExistingMdev(ModelledMdev):
    """A test-driver mdev, with the flags the test driver cannot answer."""

    def __init__(
        self, conn: MdevConnection, device: Any, persistent: bool
    ) -> None:
        super().__init__(conn, device.name(), device.XMLDesc(0), persistent)
        self.device = device

    def XMLDesc(self, flags: int = 0) -> str:
        self.conn.record("XMLDesc", self._name)
        return str(self.device.XMLDesc(flags))  # the test driver's


class ModelledParent:
    """A test-driver parent whose ``availableInstances`` follow the mdevs
    made, stopped or gone, as the kernel's do (the test driver's are
    fixed at what the host description had)."""

    def __init__(self, conn: MdevConnection, device: Any) -> None:
        self.conn, self.device = conn, device

    def name(self) -> str:
        return str(self.device.name())

    def XMLDesc(self, flags: int = 0) -> str:
        name = self.name()
        self.conn.record("XMLDesc", name)
        if name in self.conn.gone:
            raise no_device(name)
        return self.conn.with_rooms(name, str(self.device.XMLDesc(flags)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.device, name)
