"""One LibvirtHost followed through changes of the host.

libvirt's test driver serves the node devices, but it cannot create,
define, start or undefine mdevs, and refuses the INACTIVE listing flag.
:class:`RecordingConnection` wraps the real connection: every call is
recorded, and only those operations are modelled, the way libvirt >= 7.3
answers them on a real host (a created mdev is listed; a defined-only one
is listed with the INACTIVE flag; a removed one is looked up in vain).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import libvirt

from tests import helpers
from tests.helpers import Node
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.model import naming

INACTIVE = libvirt.VIR_CONNECT_LIST_NODE_DEVICES_INACTIVE


def _no_device(name: str) -> libvirt.libvirtError:
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


class ModelledMdev:
    """An mdev libvirt >= 7.3 made (the test driver cannot)."""

    def __init__(self, conn, name, xml, persistent):
        self.conn, self._name, self.xml = conn, name, xml
        self.persistent, self.autostarted = persistent, False

    def name(self):
        return self._name

    def XMLDesc(self, flags=0):
        self.conn.record("XMLDesc", self._name)
        return self.xml

    def isActive(self):
        self.conn.record("isActive", self._name)
        return int(
            self._name not in self.conn.inactive
            and self._name not in self.conn.gone
        )

    def isPersistent(self):
        self.conn.record("isPersistent", self._name)
        return int(self.persistent)

    def autostart(self):
        return int(self.autostarted)

    def setAutostart(self, flag):
        self.conn.record("setAutostart", self._name)
        self.autostarted = bool(flag)

    def create(self, flags=0):
        self.conn.record("create", self._name)
        self.conn.inactive.discard(self._name)

    def destroy(self):
        self.conn.record("destroy", self._name)
        if self.persistent:
            self.conn.inactive.add(self._name)
        else:
            self.conn.gone.add(self._name)

    def undefine(self, flags=0):
        self.conn.record("undefine", self._name)
        self.persistent = False
        if self._name in self.conn.inactive:
            self.conn.gone.add(self._name)


class ExistingMdev(ModelledMdev):
    """A test-driver mdev, with the flags the test driver cannot answer."""

    def __init__(self, conn, device, persistent):
        super().__init__(conn, device.name(), device.XMLDesc(0), persistent)


class ModelledParent:
    """A test-driver parent whose ``availableInstances`` follow the mdevs
    made, stopped or gone, as the kernel's do (the test driver's are
    fixed)."""

    def __init__(self, conn, device):
        self.conn, self.device = conn, device

    def name(self):
        return self.device.name()

    def XMLDesc(self, flags=0):
        self.conn.record("XMLDesc", self.name())
        if self.name() in self.conn.gone:
            raise _no_device(self.name())
        xml = self.device.XMLDesc(flags)
        return re.sub(
            r"<type id='([^']+)'>(.*?)<availableInstances>(\d+)<",
            lambda m: (
                f"<type id='{m.group(1)}'>{m.group(2)}<availableInstances>"
                f"{int(m.group(3)) + self.conn.freed(self.name(), m.group(1))}<"
            ),
            xml,
            flags=re.S,
        )

    def __getattr__(self, name):
        return getattr(self.device, name)


class KernelSet(set):
    """Names whose membership the kernel follows (``on_change``)."""

    def __init__(self, on_change):
        super().__init__()
        self.on_change = on_change

    def add(self, name):
        super().add(name)
        self.on_change(name)

    def discard(self, name):
        super().discard(name)
        self.on_change(name)


class RecordingConnection:
    def __init__(self, uri: str, persistent: bool = True, sysfs=None):
        self.real = libvirt.open(uri)
        self.log: list[tuple[str, str]] = []
        self.gone = KernelSet(self.kernel)  # vanished from the host
        self.inactive = KernelSet(self.kernel)  # defined, not started
        self.made: dict[str, ModelledMdev] = {}
        self.persistent = persistent
        self.sysfs = sysfs  # the host's sysfs, which the kernel keeps

    def kernel(self, name):
        """As the kernel does: a running mdev is a directory named by its
        uuid under its parent's, in sysfs; a stopped or gone one is not."""
        mdev = self.made.get(name)
        if self.sysfs is None or mdev is None:
            return
        parent = re.search(r"<parent>(.*?)</parent>", mdev.xml).group(1)
        uuid = re.search(r"<uuid>(.*?)</uuid>", mdev.xml).group(1)
        address = naming.canonical_pci_address(parent)
        path = self.sysfs / "class/mdev_bus" / address / uuid
        if name in self.gone or name in self.inactive:
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.mkdir(exist_ok=True)

    def record(self, call, subject=""):
        self.log.append((call, subject))

    def calls(self, name):
        return [s for c, s in self.log if c == name]

    def getLibVersion(self):
        return 9_000_000

    def freed(self, parent, type_id):
        """Room given back (+) or taken (-) on a parent for a type."""
        delta = 0
        for name, mdev in self.made.items():
            if f"<parent>{parent}</parent>" not in mdev.xml:
                continue
            if f"<type id='{type_id}'/>" not in mdev.xml:
                continue
            running = name not in self.gone and name not in self.inactive
            if isinstance(mdev, ExistingMdev) and not running:
                delta += 1
            elif not isinstance(mdev, ExistingMdev) and running:
                delta -= 1
        return delta

    def _device(self, device):
        name = device.name()
        if not name.startswith("mdev_"):
            return ModelledParent(self, device)
        if name not in self.made:
            self.made[name] = ExistingMdev(self, device, self.persistent)
        return self.made.get(name, device)

    def listAllDevices(self, flags):
        self.record("listAllDevices", str(flags))
        if flags & INACTIVE:
            return [self.made[n] for n in sorted(self.inactive - self.gone)]
        found = [self._device(d) for d in self.real.listAllDevices(flags)]
        found += [
            d
            for n, d in self.made.items()
            if n not in {x.name() for x in found}
        ]
        return [d for d in found if d.name() not in self.gone]

    def nodeDeviceLookupByName(self, name):
        self.record("nodeDeviceLookupByName", name)
        if name in self.gone or (
            name not in self.made and not name.startswith("mdev_")
        ):
            raise _no_device(name)
        if name in self.made:
            return self.made[name]
        return self._device(self.real.nodeDeviceLookupByName(name))

    def nodeDeviceCreateXML(self, xml, flags):
        self.record("nodeDeviceCreateXML")
        uuid = xml.split("<uuid>")[1].split("</uuid>")[0]
        parent = xml.split("<parent>")[1].split("</parent>")[0]
        type_id = xml.split("type id='")[1].split("'")[0]
        name = (
            "mdev_"
            + uuid.replace("-", "_")
            + "_"
            + parent.removeprefix("pci_")
        )
        self.made[name] = ModelledMdev(
            self,
            name,
            f"<device><name>{name}</name><parent>{parent}</parent>"
            f"<capability type='mdev'><type id='{type_id}'/>"
            f"<uuid>{uuid}</uuid><iommuGroup number='300'/></capability>"
            "</device>",
            persistent=False,
        )
        self.kernel(name)
        return self.made[name]

    def nodeDeviceDefineXML(self, xml, flags):
        self.record("nodeDeviceDefineXML")
        uuid = xml.split("<uuid>")[1].split("</uuid>")[0]
        [device] = [
            d for n, d in self.made.items() if uuid.replace("-", "_") in n
        ]
        device.persistent = True
        return device

    def __getattr__(self, name):
        return getattr(self.real, name)


def _host(tmp_path, name="m10", persistent=True):
    description = helpers.load(name)
    uri, sysfs = helpers.hostdesc.materialize(description, tmp_path)
    conns = []

    def opener(u):
        conns.append(RecordingConnection(u, persistent, Path(sysfs)))
        return conns[0]

    host = LibvirtHost(uri, sysfs, opener=opener)
    host.discover()
    return host, conns[0]


def test_the_libvirt_7_3_create_defines_and_autostarts(tmp_path):
    host, conn = _host(tmp_path)
    parent = host.discover().parent("pci_0000_87_00_0")
    uuid = "0b5f4c1e-9a55-4a0f-8d2b-6f1e2a3b4c5d"
    conn.log.clear()
    mdev = host.create_mdev(parent, "nvidia-35", uuid)
    assert [c for c, _ in conn.log] == [
        "nodeDeviceCreateXML",
        "nodeDeviceDefineXML",
        "setAutostart",
    ]
    assert (mdev.persistent, mdev.autostart) == (True, True)
    found = {m.uuid: m for m in host.discover().mdevs}
    assert found[uuid].parent == parent.name and found[uuid].active


def test_an_mdev_that_vanishes_is_dropped_and_not_reused(make_conf, tmp_path):
    host, conn = _host(tmp_path)
    free = "386818c0-9f18-5b12-8c04-386dbef1b1ab"
    [mdev] = [m for m in host.discover().mdevs if m.uuid == free]
    conn.gone.add(mdev.name)
    assert free not in {m.uuid for m in host.discover().mdevs}
    assert not host.mdev_exists(mdev)
    node = Node(make_conf, tmp_path / "state", host=host)
    [device] = node.driver.allocate_mdevs(
        "i1", node.alloc(("pci_0000_86_00_0", 1))
    )
    assert device.id != free and device.created


def test_a_defined_only_mdev_is_listed_inactive_then_started(tmp_path):
    host, conn = _host(tmp_path)
    mdev = host.discover().mdevs[0]
    conn.inactive.add(mdev.name)
    [seen] = [m for m in host.discover().mdevs if m.uuid == mdev.uuid]
    assert not seen.active
    conn.log.clear()
    host.start_mdev(seen)
    assert conn.calls("create") == [mdev.name]
    [seen] = [m for m in host.discover().mdevs if m.uuid == mdev.uuid]
    assert seen.active


def test_removing_a_persistent_mdev_destroys_and_undefines_it(tmp_path):
    host, conn = _host(tmp_path)
    mdev = host.discover().mdevs[0]
    # discovery asked nothing per mdev; removal asks once
    assert conn.calls("isPersistent") == []
    conn.log.clear()
    host.remove_mdev(mdev)
    assert conn.calls("isPersistent") == [mdev.name]
    assert conn.calls("destroy") == [mdev.name]
    assert conn.calls("undefine") == [mdev.name]
    assert mdev.uuid not in {m.uuid for m in host.discover().mdevs}


def test_a_transient_mdev_is_only_destroyed(tmp_path):
    host, conn = _host(tmp_path, persistent=False)
    mdev = host.discover().mdevs[0]
    conn.log.clear()
    host.remove_mdev(mdev)
    assert conn.calls("destroy") == [mdev.name] and not conn.calls("undefine")


def test_init_host_starts_a_defined_only_mdev_a_guest_needs(
    make_conf, tmp_path
):
    host, conn = _host(tmp_path)
    inventory = host.discover()
    used = inventory.guests[0].mdevs[0]
    [mdev] = [m for m in inventory.mdevs if m.uuid == used]
    conn.inactive.add(mdev.name)
    conf = make_conf(helpers.load("m10").config)
    conf.set_override("state_path", str(tmp_path / "state"), "devices")
    done = VgpuDriver(conf, host).init_host()
    assert done["started"] == [used]
    assert conn.calls("create") == [mdev.name]


def test_a_steady_refresh_on_the_test_driver_is_one_xml_per_parent(tmp_path):
    """The parents listed are kept while the kernel's mdev parents
    (``class/mdev_bus``) stay the same: a steady refresh is one XML per
    parent and no listing, for which libvirtd walks every node device of
    the host. (The test driver refuses the INACTIVE flag: asked once.)"""
    description = helpers.load("m10")
    host = helpers.libvirt_host(description, tmp_path)
    first = host.discover()
    host.discover()
    host.calls.clear()
    assert host.discover() is first
    assert dict(host.calls) == {"XMLDesc": len(first.parents)}


def _steady_listings(host, conn):
    before = len(conn.calls("listAllDevices"))
    host.discover()
    return len(conn.calls("listAllDevices")) - before


def test_the_parents_are_listed_again_when_the_kernel_s_change(tmp_path):
    host, conn = _host(tmp_path)
    host.discover()
    assert _steady_listings(host, conn) == 0
    bus = tmp_path / "sys/class/mdev_bus"
    # a device the kernel now registers, which libvirt does not list
    # (yet): listed again at every refresh until it does
    (bus / "0000:8a:00.0").symlink_to(tmp_path)
    assert _steady_listings(host, conn) == 1
    assert _steady_listings(host, conn) == 1
    (bus / "0000:8a:00.0").unlink()
    assert _steady_listings(host, conn) == 1  # the registrations changed
    assert _steady_listings(host, conn) == 0
    # a parent gone from libvirt: its XML is refused and it is dropped;
    # listed again while the kernel still registers it, then kept
    conn.gone.add("pci_0000_87_00_0")
    assert "pci_0000_87_00_0" not in {p.name for p in host.discover().parents}
    assert _steady_listings(host, conn) == 1
    (bus / "0000:87:00.0").unlink()
    assert _steady_listings(host, conn) == 1
    assert _steady_listings(host, conn) == 0
    assert "pci_0000_87_00_0" not in {p.name for p in host.discover().parents}


def test_the_parents_are_listed_on_a_new_connection(tmp_path):
    """A caller that reconnected (libvirtd restarted) gives a new
    connection: the devices of the old one are not used."""
    description = helpers.load("m10")
    uri, sysfs = helpers.hostdesc.materialize(description, tmp_path)
    conns = [RecordingConnection(uri)]
    host = LibvirtHost(sysfs_root=sysfs, connect=lambda: conns[-1])
    host.discover()
    assert _steady_listings(host, conns[-1]) == 0
    conns.append(RecordingConnection(uri))
    read_before = len(conns[0].log)
    assert _steady_listings(host, conns[-1]) == 1
    assert len(conns[0].log) == read_before  # the old one is left alone


def test_without_mdev_bus_the_parents_are_listed_at_every_refresh(tmp_path):
    """No ``class/mdev_bus`` (no sysfs, as in Nova's functional tests):
    nothing tells whether the parents changed."""
    host, conn = _host(tmp_path)
    for entry in (tmp_path / "sys/class/mdev_bus").iterdir():
        entry.unlink()
    (tmp_path / "sys/class/mdev_bus").rmdir()
    host.discover()
    assert _steady_listings(host, conn) == 1
    assert _steady_listings(host, conn) == 1


def test_mdevs_are_listed_again_when_a_parent_changes_or_after_the_interval(
    tmp_path, monkeypatch
):
    host, conn = _host(tmp_path)
    free = "386818c0-9f18-5b12-8c04-386dbef1b1ab"
    [mdev] = [m for m in host.discover().mdevs if m.uuid == free]
    # gone, and (unlike a kernel) the parent's count does not move
    monkeypatch.setattr(conn, "freed", lambda parent, type_id: 0)
    conn.gone.add(mdev.name)
    steady = host.discover()
    assert free in {m.uuid for m in steady.mdevs}  # parents unchanged
    assert host.discover() is steady  # the same reading, nothing redone
    host.devices.listed_at -= host.relist_interval  # the safety net's interval
    assert free not in {m.uuid for m in host.discover().mdevs}


class ReasonLostOnce:
    """A connection whose INACTIVE listing fails once with its reason
    already cleared, as when the garbage collector frees a libvirt
    object between the C call and the exception (libvirt's last error
    is per thread): the test driver's refusal then has no code."""

    def __init__(self, conn):
        self.conn, self.lost = conn, 1

    def __getattr__(self, name):
        return getattr(self.conn, name)

    def listAllDevices(self, flags=0):
        if flags & INACTIVE and self.lost:
            self.lost -= 1
            libvirt.virResetLastError()
            raise libvirt.libvirtError("virConnectListAllNodeDevices() failed")
        return self.conn.listAllDevices(flags)


def test_a_refusal_whose_reason_was_cleared_is_asked_again(tmp_path):
    """The test driver refuses INACTIVE; a refusal read without its code
    is asked once more and then known for the refusal it is, not taken
    for the host failing (each new service on a shared connection met it
    now and then: seen as 'could not discover: None')."""
    uri, sysfs = helpers.hostdesc.materialize(helpers.load("m10"), tmp_path)
    flaky = ReasonLostOnce(libvirt.open(uri))
    host = LibvirtHost(sysfs_root=sysfs, connection=flaky)
    inventory = host.discover()
    assert inventory.parents and flaky.lost == 0
    assert host.calls["listAllDevices"] >= 3  # asked again
