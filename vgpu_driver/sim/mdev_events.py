"""The node-device events libvirt sends for the mdevs
:class:`~vgpu_driver.sim.mdev_libvirt.MdevConnection` models.

libvirt's udev monitor sees the kernel add or remove an mdev and sends
a lifecycle event naming it: ``VIR_NODE_DEVICE_EVENT_CREATED`` when it
appears (made, or a defined one started), ``DELETED`` when it goes
(removed, or stopped). The test driver sends those for the devices it
makes itself (a vHBA) but cannot make an mdev: :class:`ModelledEvents`
passes the registrations on to it (its own events still come) and
sends the mdevs' events to the same callbacks. They are sent on the
caller's thread as the change is made, where libvirt sends them on its
event loop's thread soon after: a callback that only notes the name (as
the library's do) cannot tell.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import libvirt

LIFECYCLE = libvirt.VIR_NODE_DEVICE_EVENT_ID_LIFECYCLE
CREATED = libvirt.VIR_NODE_DEVICE_EVENT_CREATED
DELETED = libvirt.VIR_NODE_DEVICE_EVENT_DELETED


class NamedDevice:
    """The device an event gives: its name is all it is asked."""

    def __init__(self, name: str) -> None:
        self._name = name

    def name(self) -> str:
        return self._name


class ModelledEvents:
    def __init__(self, real: Any) -> None:
        self.real = real  # the test driver's connection
        self._lifecycle: dict[int, tuple[Callable[..., None], Any]] = {}
        self.sent: list[tuple[str, int]] = []  # (device, event), in order

    def register(
        self, dev: Any, event: int, callback: Callable[..., None], opaque: Any
    ) -> int:
        number = int(
            self.real.nodeDeviceEventRegisterAny(dev, event, callback, opaque)
        )
        if event == LIFECYCLE and dev is None:
            self._lifecycle[number] = (callback, opaque)
        return number

    def deregister(self, number: int) -> None:
        self.real.nodeDeviceEventDeregisterAny(number)
        self._lifecycle.pop(number, None)

    def send(self, conn: Any, name: str, running: bool) -> None:
        """The event for mdev ``name`` now ``running`` or not."""
        event = CREATED if running else DELETED
        self.sent.append((name, event))
        for callback, opaque in list(self._lifecycle.values()):
            callback(conn, NamedDevice(name), event, 0, opaque)
