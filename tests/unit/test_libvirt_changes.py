"""One LibvirtHost followed through changes of the host: libvirt's test
driver with the mdev operations it lacks modelled
(:mod:`vgpu_driver.sim.mdev_libvirt`), every call recorded."""

from __future__ import annotations

import uuid as uuidlib

import libvirt
import pytest

from tests import helpers
from tests.helpers import Node
from tests.modelled_libvirt import logged_connection, modelled_host
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.sim.mdev_devices import mdev_xml
from vgpu_driver.sim.mdev_libvirt import INACTIVE


def test_the_libvirt_7_3_create_defines_and_autostarts(tmp_path):
    host, conn = modelled_host(tmp_path)
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
    host, conn = modelled_host(tmp_path)
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
    host, conn = modelled_host(tmp_path)
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
    host, conn = modelled_host(tmp_path)
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
    host, conn = modelled_host(tmp_path, persistent=False)
    mdev = host.discover().mdevs[0]
    conn.log.clear()
    host.remove_mdev(mdev)
    assert conn.calls("destroy") == [mdev.name] and not conn.calls("undefine")


def test_init_host_starts_a_defined_only_mdev_a_guest_needs(
    make_conf, tmp_path
):
    host, conn = modelled_host(tmp_path)
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
    host, conn = modelled_host(tmp_path)
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
    conns = [logged_connection(uri, description)]
    host = LibvirtHost(sysfs_root=sysfs, connect=lambda: conns[-1])
    host.discover()
    assert _steady_listings(host, conns[-1]) == 0
    conns.append(logged_connection(uri, description))
    read_before = len(conns[0].log)
    assert _steady_listings(host, conns[-1]) == 1
    assert len(conns[0].log) == read_before  # the old one is left alone


def test_without_mdev_bus_the_parents_are_listed_at_every_refresh(tmp_path):
    """No ``class/mdev_bus`` (no sysfs, as in Nova's functional tests):
    nothing tells whether the parents changed."""
    host, conn = modelled_host(tmp_path)
    for entry in (tmp_path / "sys/class/mdev_bus").iterdir():
        entry.unlink()
    (tmp_path / "sys/class/mdev_bus").rmdir()
    host.discover()
    assert _steady_listings(host, conn) == 1
    assert _steady_listings(host, conn) == 1


def test_mdevs_are_listed_again_when_a_parent_changes_or_after_the_interval(
    tmp_path, monkeypatch
):
    host, conn = modelled_host(tmp_path)
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
    host, conn = modelled_host(tmp_path)
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
    host, conn = modelled_host(tmp_path)
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


def test_a_parent_whose_sysfs_directory_cannot_be_read_is_listed_again(
    tmp_path, monkeypatch
):
    """Another manager made an mdev (the parent's rooms moved); the
    parent's sysfs directory, which says which mdev it was, cannot be
    listed (a hardened host, sysfs not mounted in the container): the
    mdevs are listed again through libvirt, and the new one is seen."""
    from vgpu_driver.host import mdev_dirs

    host, conn = modelled_host(tmp_path)
    parent = host.discover().parent("pci_0000_87_00_0")
    real_scandir = mdev_dirs.os.scandir

    def unreadable(path):
        if "87:00.0" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(mdev_dirs.os, "scandir", unreadable)
    made = str(uuidlib.uuid4())
    conn.nodeDeviceCreateXML(mdev_xml(parent.name, "nvidia-35", made), 0)
    listed = host.calls["listAllDevices"]
    assert made in {m.uuid for m in host.discover().mdevs}
    assert host.calls["listAllDevices"] > listed  # listed again
