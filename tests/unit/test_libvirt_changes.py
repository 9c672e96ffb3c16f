"""One LibvirtHost followed through changes of the host: libvirt's test
driver with the mdev operations it lacks modelled
(:mod:`vgpu_driver.sim.mdev_libvirt`), every call recorded."""

from __future__ import annotations

import uuid as uuidlib
from pathlib import Path

import libvirt
import pytest

from tests import helpers
from tests.helpers import Node
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.exception import DeviceNoRoom, DeviceOperationFailed
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.sim.mdev_libvirt import INACTIVE, MdevConnection, mdev_xml
from vgpu_driver.sim.specs import MdevSpec


def RecordingConnection(uri, description, persistent=True, sysfs=None):
    """The modelled connection, every call logged."""
    return MdevConnection(
        uri, description, persistent=persistent, sysfs=sysfs, log=[]
    )


def _host(tmp_path, name="m10", persistent=True):
    description = helpers.load(name)
    uri, sysfs = helpers.hostdesc.materialize(description, tmp_path)
    conns = []

    def opener(u):
        conns.append(
            RecordingConnection(u, description, persistent, Path(sysfs))
        )
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
    conns = [RecordingConnection(uri, description)]
    host = LibvirtHost(sysfs_root=sysfs, connect=lambda: conns[-1])
    host.discover()
    assert _steady_listings(host, conns[-1]) == 0
    conns.append(RecordingConnection(uri, description))
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
    monkeypatch.setattr(conn.kernel, "rooms", lambda parent: {})
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


def test_the_mdevs_made_and_gone_are_listed_by_name_as_nova_lists_them(
    tmp_path,
):
    # Nova's driver lists node devices by name (listDevices), not as
    # objects: the names are those listAllDevices gives
    host, conn = _host(tmp_path)
    parent = host.discover().parent("pci_0000_87_00_0")
    by_object = libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV
    before = conn.listDevices("mdev", 0)
    made = host.create_mdev(
        parent, "nvidia-35", "0b5f4c1e-9a55-4a0f-8d2b-6f1e2a3b4c5d"
    )
    now = conn.listDevices("mdev", 0)
    assert sorted(now) == sorted([*before, made.name])
    assert sorted(now) == sorted(
        d.name() for d in conn.listAllDevices(by_object)
    )
    # an mdev is listed with the mdevs, not with their parents
    assert made.name not in conn.listDevices("mdev_types", 0)
    assert parent.name in conn.listDevices("mdev_types", 0)
    conn.gone.add(made.name)
    assert sorted(conn.listDevices("mdev", 0)) == sorted(before)
    # any other capability is the test driver's own
    assert conn.listDevices("pci", 0) == conn.real.listDevices("pci", 0)


def test_every_call_the_model_answers_costs_a_call_to_libvirt(tmp_path):
    # over libvirtd each is a round trip: the benchmarks' figures pay it
    host, conn = _host(tmp_path)
    parent = host.discover().parent("pci_0000_87_00_0")
    theirs = host.discover().mdevs[0]
    real: list[str] = []

    class Counted:
        def __init__(self, target):
            self.target = target

        def __getattr__(self, name):
            real.append(name)
            return getattr(self.target, name)

    conn.real = Counted(conn.real)
    uuid = "0b5f4c1e-9a55-4a0f-8d2b-6f1e2a3b4c5d"
    made = conn.nodeDeviceCreateXML(
        mdev_xml(parent.name, "nvidia-35", uuid), 0
    )
    conn.nodeDeviceLookupByName(made.name()).XMLDesc(0)
    conn.gone.add(made.name())
    with pytest.raises(libvirt.libvirtError):
        conn.nodeDeviceLookupByName(made.name())
    assert real == ["getLibVersion"] * 4
    real.clear()
    # a device of the test driver's own is looked up and read there
    found = conn.nodeDeviceLookupByName(theirs.name)
    found.device = Counted(found.device)
    assert theirs.uuid in found.XMLDesc(0)
    assert real == ["nodeDeviceLookupByName", "XMLDesc"]


def _rooms_read(host):
    """parent -> type -> available, as the library reads them (libvirt's
    XML), and as the parent's sysfs files say."""
    reading = host.discover()
    xml = {
        p.name: {t.id: t.available for t in p.types} for p in reading.parents
    }
    files = {}
    for parent in reading.parents:
        base = host.sysfs.root / "class/mdev_bus" / parent.address
        files[parent.name] = {
            t.id: int(
                (base / "mdev_supported_types" / t.id / "available_instances")
                .read_text()
                .strip()
            )
            for t in parent.types
        }
    return xml, files


def test_the_modelled_kernel_counts_rooms_as_a_host_rendered_with_its_mdevs(
    tmp_path,
):
    """mdevs made and removed through the model leave every parent the
    rooms, in libvirt's XML and in sysfs, that a host described with
    those mdevs from the start has: on an NVIDIA pGPU, one type at a
    time (the model once took room from the type made alone)."""
    description = helpers.load("m10")
    host, conn = _host(tmp_path / "model")
    made = []
    for parent, type_id in [
        ("pci_0000_85_00_0", "nvidia-36"),
        ("pci_0000_85_00_0", "nvidia-36"),
        ("pci_0000_87_00_0", "nvidia-35"),
    ]:
        mdev_uuid = str(uuidlib.uuid4())
        made.append(
            conn.nodeDeviceCreateXML(mdev_xml(parent, type_id, mdev_uuid), 0)
        )
    [gone] = [m for m in description.mdevs if m.parent == "pci_0000_84_00_0"]
    conn.gone.add(gone.libvirt_name)
    described = description.copy()
    described.mdevs = [m for m in described.mdevs if m.uuid != gone.uuid] + [
        MdevSpec(
            uuid=m.uuid, parent=m.parent, type=m.type_id, iommu_group=300 + i
        )
        for i, m in enumerate(made)
    ]
    uri, sysfs = helpers.hostdesc.materialize(
        described, tmp_path / "described"
    )
    xml, files = _rooms_read(host)
    expected, _ = _rooms_read(LibvirtHost(uri, sysfs))
    assert xml == files == expected
    assert xml["pci_0000_85_00_0"] == {"nvidia-35": 0, "nvidia-36": 14}
    assert xml["pci_0000_84_00_0"] == {"nvidia-35": 4, "nvidia-36": 16}


def test_a_create_the_parent_has_no_room_for_is_refused_as_the_kernel_does(
    tmp_path,
):
    """Another type on a pGPU running one (NVIDIA's rule), or past the
    type's room: libvirt passes on mdevctl's EDQUOT, which the library
    tells as no room; nothing is left behind."""
    host, conn = _host(tmp_path)
    parent = host.discover().parent("pci_0000_84_00_0")  # runs nvidia-35
    before = host.discover()
    mdev_uuid = "0b5f4c1e-9a55-4a0f-8d2b-6f1e2a3b4c5d"
    with pytest.raises(DeviceNoRoom) as refused:
        host.create_mdev(parent, "nvidia-36", mdev_uuid)
    assert "pci_0000_84_00_0" in str(refused.value)
    assert len(conn.calls("nodeDeviceCreateXML")) == 1
    # libvirt's refusal is the host's answer: not written to sysfs past it
    types = (
        host.sysfs.root / "class/mdev_bus/0000:84:00.0/mdev_supported_types"
    )
    assert (types / "nvidia-36/create").read_text() == ""
    assert not (host.sysfs.root / "bus/mdev/devices" / mdev_uuid).exists()
    assert host.discover() == before
    room = parent.type("nvidia-35").available
    for _ in range(room):
        host.create_mdev(parent, "nvidia-35", str(uuidlib.uuid4()))
    with pytest.raises(DeviceNoRoom):
        host.create_mdev(parent, "nvidia-35", mdev_uuid)


def test_a_defined_mdev_its_parent_has_no_room_to_start_is_no_room(tmp_path):
    """Started where another type now runs: the kernel's EDQUOT is told
    as no room (the parent is full, not failing), as for a create."""
    host, conn = _host(tmp_path)
    parent = host.discover().parent("pci_0000_87_00_0")
    mine = host.create_mdev(parent, "nvidia-35", str(uuidlib.uuid4()))
    conn.nodeDeviceLookupByName(mine.name).destroy()  # defined, stopped
    host.create_mdev(parent, "nvidia-36", str(uuidlib.uuid4()))
    [stopped] = [m for m in host.discover().mdevs if m.uuid == mine.uuid]
    assert not stopped.active
    with pytest.raises(DeviceNoRoom):
        host.start_mdev(stopped)


def test_a_create_mdevctl_refuses_for_another_reason_is_not_retried_in_sysfs(
    tmp_path,
):
    """libvirt's "Unable to start mediated device" is mdevctl's (so the
    kernel's) answer whatever the reason, here a uuid already active:
    the create fails with libvirt's words, as a failure and not as no
    room, and nothing is written to sysfs behind libvirt's back (which a
    driver that cannot create mdevs at all, the test driver, needs)."""
    host, conn = _host(tmp_path)
    parent = host.discover().parent("pci_0000_87_00_0")
    mine = host.create_mdev(parent, "nvidia-35", str(uuidlib.uuid4()))
    create = (
        host.sysfs.root
        / "class/mdev_bus/0000:87:00.0/mdev_supported_types/nvidia-35/create"
    )
    before = create.read_text()
    with pytest.raises(DeviceOperationFailed) as failed:
        host.create_mdev(parent, "nvidia-35", mine.uuid)
    assert not isinstance(failed.value, DeviceNoRoom)
    assert "already active" in str(failed.value)
    assert len(conn.calls("nodeDeviceCreateXML")) == 2
    assert create.read_text() == before


@pytest.mark.parametrize(
    ("version", "through_libvirt"),
    [(7_003_000, True), (7_002_000, False), (6_000_000, False)],
)
def test_libvirt_from_7_3_makes_mdevs_older_ones_leave_it_to_sysfs(
    tmp_path, version, through_libvirt
):
    """libvirt 7.3.0 is the first to create mdevs (nodeDeviceCreateXML
    through mdevctl); on an older one (Ubuntu 20.04's 6.0) the mdev is
    written to the parent's ``create`` in sysfs."""
    description = helpers.load("m10")
    uri, sysfs = helpers.hostdesc.materialize(description, tmp_path)
    conn = RecordingConnection(uri, description, True, Path(sysfs))
    conn.getLibVersion = lambda: version
    host = LibvirtHost(uri, sysfs, opener=lambda _uri: conn)
    parent = host.discover().parent("pci_0000_87_00_0")
    uuid = str(uuidlib.uuid4())
    create = (
        host.sysfs.root
        / "class/mdev_bus/0000:87:00.0/mdev_supported_types/nvidia-35/create"
    )
    host.create_mdev(parent, "nvidia-35", uuid)
    assert bool(conn.calls("nodeDeviceCreateXML")) == through_libvirt
    assert (create.read_text() == uuid) != through_libvirt


@pytest.mark.parametrize("modelled", [True, False])
def test_an_mdev_on_a_parent_libvirt_does_not_list_is_made_in_sysfs(
    tmp_path, modelled
):
    """mtty's parent (devstack loads it) is registered in the kernel's
    ``class/mdev_bus`` but is no node device of libvirt's: libvirt cannot
    make an mdev on it whatever its version (modelled: libvirt 9.0, never
    asked), and the mdev is written to that parent's own ``create`` (its
    directory found from the registration, as it has no PCI address)."""
    description = helpers.load("mtty")
    uri, sysfs = helpers.hostdesc.materialize(description, tmp_path)
    if modelled:
        conn = RecordingConnection(uri, description, True, Path(sysfs))
        host = LibvirtHost(uri, sysfs, opener=lambda _uri: conn)
    else:  # libvirt's test driver: it makes no mdev at all
        host = LibvirtHost(uri, sysfs)
    [parent] = host.discover().parents
    assert (parent.name, parent.address) == ("mtty", None)
    uuid = str(uuidlib.uuid4())
    mdev = host.create_mdev(parent, "mtty-2", uuid)
    assert (mdev.uuid, mdev.parent) == (uuid, "mtty")
    create = Path(sysfs) / "class/mdev_bus/mtty/mdev_supported_types"
    assert (create / "mtty-2/create").read_text() == uuid
    if modelled:
        assert not conn.calls("nodeDeviceCreateXML")


def test_an_mdev_libvirt_makes_but_cannot_define_is_told_transient(tmp_path):
    """libvirt made the mdev and refused to define it (mdevctl could not
    write its definition): the mdev is used as it is, said not to be
    persistent (recreated at the next start after a reboot), and the
    operator is warned."""
    from vgpu_driver.sim.mdev_libvirt import _error

    host, conn = _host(tmp_path)

    def refuse(xml, flags):
        raise _error(libvirt.VIR_ERR_OPERATION_FAILED, "mdevctl define failed")

    conn.nodeDeviceDefineXML = refuse
    parent = host.discover().parent("pci_0000_87_00_0")
    mdev = host.create_mdev(parent, "nvidia-35", str(uuidlib.uuid4()))
    assert (mdev.persistent, mdev.autostart) == (False, False)
    assert mdev.uuid in {m.uuid for m in host.discover().mdevs}


class _RefusingDestroy:
    """libvirt's connection, whose node devices' ``destroy`` fails with
    ``code`` (libvirt's words for an mdev it cannot stop)."""

    def __init__(self, real, code):
        self.real, self.code = real, code

    def __getattr__(self, name):
        return getattr(self.real, name)

    def nodeDeviceLookupByName(self, name):
        from vgpu_driver.sim.mdev_libvirt import _error

        device, code = self.real.nodeDeviceLookupByName(name), self.code

        class Device:
            def __getattr__(self, attr):
                return getattr(device, attr)

            def destroy(self):
                raise _error(code, f"Unable to stop mediated device {name}")

        return Device()


@pytest.mark.parametrize(
    ("code", "via_sysfs"),
    [
        # a driver that cannot remove mdevs: the kernel's remove is used
        (libvirt.VIR_ERR_NO_SUPPORT, True),
        # libvirt (mdevctl) tried and failed: the host's answer, kept
        (libvirt.VIR_ERR_INTERNAL_ERROR, False),
        (libvirt.VIR_ERR_OPERATION_FAILED, False),
    ],
)
def test_an_mdev_libvirt_cannot_remove_goes_to_sysfs_only_if_unsupported(
    tmp_path, code, via_sysfs
):
    description = helpers.load("m10")
    uri, sysfs = helpers.hostdesc.materialize(description, tmp_path)
    host = LibvirtHost(
        uri, sysfs, opener=lambda u: _RefusingDestroy(libvirt.open(u), code)
    )
    inventory = host.discover()
    [free] = [
        m for m in inventory.mdevs if m.uuid not in inventory.mdev_users()
    ]
    remove = Path(sysfs) / "bus/mdev/devices" / free.uuid / "remove"
    if via_sysfs:
        host.remove_mdev(free)
        assert remove.read_text() == "1"
    else:
        with pytest.raises(DeviceOperationFailed, match="Unable to stop"):
            host.remove_mdev(free)
        assert remove.read_text() == ""
        assert free.uuid in {m.uuid for m in host.discover().mdevs}


def test_a_parent_whose_sysfs_directory_cannot_be_read_is_listed_again(
    tmp_path, monkeypatch
):
    """Another manager made an mdev (the parent's rooms moved); the
    parent's sysfs directory, which says which mdev it was, cannot be
    listed (a hardened host, sysfs not mounted in the container): the
    mdevs are listed again through libvirt, and the new one is seen."""
    from vgpu_driver.host import nodedevs

    host, conn = _host(tmp_path)
    parent = host.discover().parent("pci_0000_87_00_0")
    real_scandir = nodedevs.os.scandir

    def unreadable(path):
        if "87:00.0" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(nodedevs.os, "scandir", unreadable)
    made = str(uuidlib.uuid4())
    conn.nodeDeviceCreateXML(mdev_xml(parent.name, "nvidia-35", made), 0)
    listed = host.calls["listAllDevices"]
    assert made in {m.uuid for m in host.discover().mdevs}
    assert host.calls["listAllDevices"] > listed  # listed again
