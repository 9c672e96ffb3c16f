"""libvirt's test driver, with the mdev operations it lacks modelled.

The test driver serves a host's node devices, but it cannot create,
define, start or undefine an mdev, and refuses the INACTIVE listing
flag. :class:`MdevConnection` wraps a real test-driver connection and
answers only those operations, as libvirt >= 7.3 and the kernel answer
them on a real host:

* a created mdev is listed (by ``listAllDevices`` and by name with
  ``listDevices``), looked up, and a directory named by its uuid
  appears under its parent's in sysfs; its parent's
  ``availableInstances`` of its type drop by one;
* a defined-only (stopped) one is listed with the INACTIVE flag alone,
  and its directory is gone;
* a removed one is looked up in vain.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import libvirt

from vgpu_driver.model import naming

INACTIVE = libvirt.VIR_CONNECT_LIST_NODE_DEVICES_INACTIVE
# the capabilities whose devices the model changes, as listAllDevices
# flags
_CAP_FLAGS = {
    "mdev": libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV,
    "mdev_types": libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES,
}
_TYPE_ROOM = re.compile(
    r"<type id='([^']+)'>(.*?)<availableInstances>(\d+)<", re.S
)


def no_device(name: str) -> libvirt.libvirtError:
    """The error libvirt raises for a node device it does not have."""
    error = libvirt.libvirtError(f"Node device not found: {name}")
    error.err = (
        libvirt.VIR_ERR_NO_NODE_DEVICE,
        0,
        str(error),
        2,
        "",
        "",
        "",
        0,
        0,
    )
    return error


def mdev_xml(parent: str, type_id: str, uuid: str) -> str:
    """The XML ``nodeDeviceCreateXML`` takes for an mdev of ``type_id``
    on ``parent`` (as ``virsh nodedev-create`` is given it)."""
    return (
        f"<device><parent>{parent}</parent><capability type='mdev'>"
        f"<type id='{type_id}'/><uuid>{uuid}</uuid></capability></device>"
    )


def _field(xml: str, start: str, end: str) -> str:
    return xml.split(start, 1)[1].split(end, 1)[0]


class ModelledMdev:
    """An mdev libvirt >= 7.3 made (the test driver cannot)."""

    def __init__(
        self, conn: MdevConnection, name: str, xml: str, persistent: bool
    ) -> None:
        self.conn, self._name, self.xml = conn, name, xml
        self.persistent, self.autostarted = persistent, False
        self.parent = _field(xml, "<parent>", "</parent>")
        self.type_id = _field(xml, "<type id='", "'")
        self.uuid = (
            _field(xml, "<uuid>", "</uuid>")
            if "<uuid>" in xml
            else name.removeprefix("mdev_")[:36].replace("_", "-")
        )

    # the room it holds on its parent (+ given back, - taken)
    def freed(self) -> int:
        return -1 if self.conn.running(self._name) else 0

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
        self.conn.inactive.discard(self._name)

    def destroy(self) -> None:
        self.conn.answer("destroy", self._name)
        if self.persistent:
            self.conn.inactive.add(self._name)
        else:
            self.conn.gone.add(self._name)

    def undefine(self, flags: int = 0) -> None:
        self.conn.answer("undefine", self._name)
        self.persistent = False
        if self._name in self.conn.inactive:
            self.conn.gone.add(self._name)


class ExistingMdev(ModelledMdev):
    """A test-driver mdev, with the flags the test driver cannot answer;
    its room is given back while it is not running."""

    def __init__(
        self, conn: MdevConnection, device: Any, persistent: bool
    ) -> None:
        super().__init__(conn, device.name(), device.XMLDesc(0), persistent)
        self.device = device

    def freed(self) -> int:
        return 0 if self.conn.running(self._name) else 1

    def XMLDesc(self, flags: int = 0) -> str:
        self.conn.record("XMLDesc", self._name)
        return str(self.device.XMLDesc(flags))  # the test driver's


class ModelledParent:
    """A test-driver parent whose ``availableInstances`` follow the mdevs
    made, stopped or gone, as the kernel's do (the test driver's are
    fixed)."""

    def __init__(self, conn: MdevConnection, device: Any) -> None:
        self.conn, self.device = conn, device

    def name(self) -> str:
        return str(self.device.name())

    def XMLDesc(self, flags: int = 0) -> str:
        name = self.name()
        self.conn.record("XMLDesc", name)
        if name in self.conn.gone:
            raise no_device(name)
        xml = str(self.device.XMLDesc(flags))
        freed = self.conn.freed(name)
        if not any(freed.values()):
            return xml
        return _TYPE_ROOM.sub(
            lambda m: (
                f"<type id='{m.group(1)}'>{m.group(2)}<availableInstances>"
                f"{int(m.group(3)) + freed.get(m.group(1), 0)}<"
            ),
            xml,
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.device, name)


class KernelSet(set[str]):
    """Names whose membership the kernel follows (``on_change``)."""

    def __init__(self, on_change: Callable[[str], None]) -> None:
        super().__init__()
        self.on_change = on_change

    def add(self, element: str) -> None:
        super().add(element)
        self.on_change(element)

    def discard(self, element: object) -> None:
        super().discard(element)
        if isinstance(element, str):
            self.on_change(element)


class MdevConnection:
    """A test-driver connection whose mdevs can be made, stopped and
    removed (see the module's doc). ``sysfs``: the host's fake sysfs
    root, kept as the kernel keeps it."""

    def __init__(
        self,
        uri: str,
        persistent: bool = True,
        sysfs: Path | None = None,
        log: list[tuple[str, str]] | None = None,
    ) -> None:
        self.real = libvirt.open(uri)
        self.log = log
        self.gone = KernelSet(self.kernel)  # vanished from the host
        self.inactive = KernelSet(self.kernel)  # defined, not started
        self.made: dict[str, ModelledMdev] = {}
        self._on_parent: dict[str, list[ModelledMdev]] = {}
        self.persistent = persistent
        self.sysfs = sysfs
        self._removed = 0  # mdev directories removed

    def running(self, name: str) -> bool:
        return name not in self.gone and name not in self.inactive

    def kernel(self, name: str) -> None:
        """As the kernel does: a running mdev is a directory named by its
        uuid under its parent's, in sysfs (its ``mdev_type`` a link to
        its type's), and a link to it in ``bus/mdev/devices``; a stopped
        or gone one has neither."""
        mdev = self.made.get(name)
        if mdev is None:
            return
        if self.sysfs is not None:
            self._sysfs(mdev, self.running(name))
        if name in self.gone and not isinstance(mdev, ExistingMdev):
            # one it made, gone: libvirt forgets it (the test driver never
            # had it, so a lookup fails as it should)
            del self.made[name]
            self._on_parent[mdev.parent].remove(mdev)

    def _sysfs(self, mdev: ModelledMdev, running: bool) -> None:
        assert self.sysfs is not None
        # registered by PCI address, or by name (a virtual parent: mtty)
        key = naming.canonical_pci_address(mdev.parent) or mdev.parent
        parent = (self.sysfs / "class/mdev_bus" / key).resolve()
        if not parent.is_dir():
            return  # a parent the kernel does not register
        path = parent / mdev.uuid
        link = self.sysfs / "bus/mdev/devices" / mdev.uuid
        if running:
            path.mkdir(exist_ok=True)
            (path / "remove").touch()
            if not (path / "mdev_type").is_symlink():
                (path / "mdev_type").symlink_to(
                    parent / "mdev_supported_types" / mdev.type_id
                )
            if not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(path)
        elif path.exists():
            link.unlink(missing_ok=True)
            # kernfs numbers a new directory anew (cyclically, never a
            # removed one's number at once); a disk reuses it: the removed
            # directory is kept aside, its inode taken
            self._removed += 1
            aside = self.sysfs / ".removed" / str(self._removed)
            aside.parent.mkdir(exist_ok=True)
            path.rename(aside)

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

    def freed(self, parent: str) -> dict[str, int]:
        """Type id -> room given back (+) or taken (-) on ``parent``."""
        found: dict[str, int] = {}
        for mdev in self._on_parent.get(parent, ()):
            found[mdev.type_id] = found.get(mdev.type_id, 0) + mdev.freed()
        return found

    def _keep(self, mdev: ModelledMdev) -> ModelledMdev:
        old = self.made.get(mdev.name())
        mine = self._on_parent.setdefault(mdev.parent, [])
        if old is not None:  # made again: the new one stands
            self._on_parent[old.parent].remove(old)
        self.made[mdev.name()] = mdev
        mine.append(mdev)
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
        uuid = _field(xml, "<uuid>", "</uuid>")
        parent = _field(xml, "<parent>", "</parent>")
        type_id = _field(xml, "type id='", "'")
        name = f"mdev_{uuid.replace('-', '_')}_{parent.removeprefix('pci_')}"
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
        self.kernel(name)
        return mdev

    def nodeDeviceDefineXML(self, xml: str, flags: int) -> ModelledMdev:
        self.answer("nodeDeviceDefineXML")
        uuid = _field(xml, "<uuid>", "</uuid>")
        [device] = [d for d in self.made.values() if d.uuid == uuid]
        device.persistent = True
        return device

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)
