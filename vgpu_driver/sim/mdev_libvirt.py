"""libvirt's test driver, with the mdev operations it lacks modelled.

The test driver serves a host's node devices, but it cannot create,
define, start or undefine an mdev, and refuses the INACTIVE listing
flag. :class:`MdevConnection` wraps a real test-driver connection and
answers only those operations, as libvirt >= 7.3 and the kernel answer
them on a real host:

* a created mdev is listed (by ``listAllDevices`` and by name with
  ``listDevices``), looked up, and a directory named by its uuid
  appears under its parent's in sysfs; its parent's
  ``availableInstances`` (in its XML and in sysfs) are what the host
  description's rules leave (:mod:`.mdev_kernel`);
* a create (or start) the parent has no room for is refused, as
  libvirt passes on the kernel's EDQUOT through mdevctl;
* a defined-only (stopped) one is listed with the INACTIVE flag alone,
  and its directory is gone;
* a removed one is looked up in vain; a start, stop or undefine its
  state does not allow is refused (libvirt's node-device driver).

A created mdev's XML has the shape :mod:`.render` gives a host's own
mdevs, as libvirt's node-device format documents it (``formatnode``:
the ``mdev`` capability's ``type``, ``uuid`` and ``iommuGroup``; named
``mdev_<uuid>_<parent address>`` since libvirt 7.3), and its sysfs
directory is where the kernel's mediated-device documentation puts it
(``vfio-mediated-device.rst``: under its parent, named by its uuid).
Every other call goes to the test driver; a call the model answers
itself makes one round trip to it as well (``getLibVersion``), which is
what the call costs the caller over libvirtd. Each call is logged when
``log`` is a list (the tests count them). Tests and ``benchmarks.churn``
use it to follow another manager's mdevs through the real adapter.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import libvirt

from vgpu_driver.sim.mdev_devices import (
    ExistingMdev,
    ModelledMdev,
    ModelledParent,
    failed_start,
    field,
    no_device,
    no_flags,
)
from vgpu_driver.sim.mdev_events import ModelledEvents
from vgpu_driver.sim.mdev_kernel import KernelSet, MdevKernel
from vgpu_driver.sim.specs import HostDescription

INACTIVE = libvirt.VIR_CONNECT_LIST_NODE_DEVICES_INACTIVE
_VALIDATE = getattr(libvirt, "VIR_NODE_DEVICE_DEFINE_XML_VALIDATE", 1)
# the capabilities whose devices the model changes, as listAllDevices
# flags
_CAP_FLAGS = {
    "mdev": libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV,
    "mdev_types": libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES,
}
_TYPE_ROOM = re.compile(
    r"<type id='([^']+)'>(.*?)<availableInstances>(\d+)<", re.S
)


class MdevConnection:
    """A test-driver connection whose mdevs can be made, stopped and
    removed (see the module's doc). ``sysfs``: the host's fake sysfs
    root, kept as the kernel keeps it."""

    def __init__(
        self,
        uri: str,
        description: HostDescription,
        *,
        persistent: bool = True,
        sysfs: Path | None = None,
        log: list[tuple[str, str]] | None = None,
    ) -> None:
        self.real = libvirt.open(uri)
        self.log = log
        self.gone = KernelSet(self._changed)  # vanished from the host
        self.inactive = KernelSet(self._changed)  # defined, not started
        self.made: dict[str, ModelledMdev] = {}
        self.kernel = MdevKernel(description, sysfs)
        self._described = {m.libvirt_name: m for m in description.mdevs}
        # parent name -> (the test driver's XML, the rooms, the XML given)
        self._parent_xml: dict[str, tuple[str, dict[str, int], str]] = {}
        # a bound device's driver, named in its XML as libvirt names it
        # (the test driver gives none back)
        self._drivers = {p.name: p.driver for p in description.parents}
        self.persistent = persistent
        self.events = ModelledEvents(self.real)

    def running(self, name: str) -> bool:
        return name not in self.gone and name not in self.inactive

    def _changed(self, name: str) -> None:
        """An mdev made, stopped, started or gone: the kernel follows it
        (its parent's room, its sysfs directory)."""
        mdev = self.made.get(name)
        spec = self._described.get(name)
        if mdev is not None:
            where = (mdev.uuid, mdev.parent, mdev.type_id)
        elif spec is not None:  # one of the host's, never listed yet
            where = (spec.uuid, spec.parent, spec.type)
        else:
            return
        self.kernel.follow(*where, on=self.running(name))
        self.events.send(self, name, self.running(name))
        if name in self.gone and type(mdev) is ModelledMdev:
            # one it made, gone: libvirt forgets it (the test driver never
            # had it, so a lookup fails as it should)
            del self.made[name]

    def with_rooms(self, parent: str, xml: str) -> str:
        """A parent's test-driver XML with the rooms the kernel has
        now."""
        rooms = self.kernel.rooms(parent)
        last = self._parent_xml.get(parent)
        if last is not None and last[1] is rooms and last[0] == xml:
            return last[2]
        given = _TYPE_ROOM.sub(
            lambda m: (
                f"<type id='{m.group(1)}'>{m.group(2)}<availableInstances>"
                f"{rooms.get(m.group(1), m.group(3))}<"
            ),
            xml,
        )
        driver = self._drivers.get(parent)
        if driver and "<driver>" not in given:
            named = f"</parent>\n    <driver><name>{driver}</name></driver>"
            given = given.replace("</parent>", named, 1)
        self._parent_xml[parent] = (xml, rooms, given)
        return given

    def record(self, call: str, subject: str = "") -> None:
        if self.log is not None:
            self.log.append((call, subject))

    def answer(self, call: str, subject: str = "") -> None:
        """A call the model answers itself, at libvirt's price: one round
        trip to the test driver (over libvirtd every call is one; the
        figures of ``benchmarks.churn`` would leave it out otherwise)."""
        self.record(call, subject)
        self.real.getLibVersion()

    def calls(self, name: str) -> list[str]:
        return [s for c, s in self.log or () if c == name]

    def getLibVersion(self) -> int:
        return 9_000_000

    def _keep(self, mdev: ModelledMdev) -> ModelledMdev:
        self.made[mdev.name()] = mdev  # (made again: the new one stands)
        return mdev

    def _device(self, device: Any) -> Any:
        name = device.name()
        if not name.startswith("mdev_"):
            return ModelledParent(self, device)
        found = self.made.get(name)
        if found is None:
            found = self._keep(ExistingMdev(self, device, self.persistent))
        return found

    def listAllDevices(self, flags: int) -> list[Any]:
        if flags & INACTIVE:
            self.answer("listAllDevices", str(flags))
            return [self.made[n] for n in sorted(self.inactive - self.gone)]
        self.record("listAllDevices", str(flags))
        return self._listed(flags)

    def _listed(self, flags: int) -> list[Any]:
        """The test driver's devices for ``flags`` (not INACTIVE), with
        the mdevs made when mdevs are asked for, without those gone."""
        found = [self._device(d) for d in self.real.listAllDevices(flags)]
        caps = flags & ~(
            INACTIVE | libvirt.VIR_CONNECT_LIST_NODE_DEVICES_ACTIVE
        )
        if not caps or caps & libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV:
            listed = {x.name() for x in found}
            found += [d for n, d in self.made.items() if n not in listed]
        return [d for d in found if d.name() not in self.gone]

    def listDevices(self, cap: str, flags: int = 0) -> list[str]:
        """The names ``listAllDevices`` gives for capability ``cap`` (the
        older call Nova's driver makes, by name: libvirt lists the same
        devices either way)."""
        self.record("listDevices", cap)
        flag = _CAP_FLAGS.get(cap)
        if flag is None:  # no mdev and no parent: the test driver's own
            return list(self.real.listDevices(cap, flags))
        return [d.name() for d in self._listed(flag)]

    def nodeDeviceLookupByName(self, name: str) -> Any:
        if name in self.gone:
            self.answer("nodeDeviceLookupByName", name)
            raise no_device(name)
        mdev = self.made.get(name)
        if mdev is not None and not isinstance(mdev, ExistingMdev):
            self.answer("nodeDeviceLookupByName", name)
            return mdev  # the test driver never had it
        self.record("nodeDeviceLookupByName", name)
        return self._device(self.real.nodeDeviceLookupByName(name))

    def nodeDeviceCreateXML(self, xml: str, flags: int) -> ModelledMdev:
        self.answer("nodeDeviceCreateXML")
        uuid = field(xml, "<uuid>", "</uuid>")
        parent = field(xml, "<parent>", "</parent>")
        type_id = field(xml, "type id='", "'")
        name = f"mdev_{uuid.replace('-', '_')}_{parent.removeprefix('pci_')}"
        if self.running(name) and name in self.made:
            raise failed_start(f"{uuid} is already active")
        self.refuse_without_room(parent, type_id)
        mdev = self._keep(
            ModelledMdev(
                self,
                name,
                f"<device><name>{name}</name><parent>{parent}</parent>"
                f"<capability type='mdev'><type id='{type_id}'/>"
                f"<uuid>{uuid}</uuid><iommuGroup number='300'/>"
                "</capability></device>",
                persistent=False,
            )
        )
        self.gone.discard(name)  # made again under its uuid
        self._changed(name)
        return mdev

    def refuse_without_room(self, parent: str, type_id: str) -> None:
        """As the kernel refuses an mdev its parent has no room for (the
        type's ``available_instances`` is 0: EDQUOT, which mdevctl and
        libvirt pass on), or a type the parent does not list."""
        rooms = self.kernel.rooms(parent)
        if type_id not in rooms:
            raise failed_start(f"{parent} has no mdev type {type_id}")
        if rooms[type_id] < 1:
            raise failed_start("Disk quota exceeded (os error 122)")

    def nodeDeviceDefineXML(self, xml: str, flags: int) -> ModelledMdev:
        self.answer("nodeDeviceDefineXML")
        no_flags(flags & ~_VALIDATE, "nodeDeviceDefineXML")
        uuid = field(xml, "<uuid>", "</uuid>")
        [device] = [d for d in self.made.values() if d.uuid == uuid]
        device.persistent = True
        return device

    def nodeDeviceEventRegisterAny(
        self, dev: Any, event: int, callback: Any, opaque: Any
    ) -> int:
        return self.events.register(dev, event, callback, opaque)

    def nodeDeviceEventDeregisterAny(self, number: int) -> None:
        self.events.deregister(number)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)
