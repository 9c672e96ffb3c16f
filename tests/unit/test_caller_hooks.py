"""What an embedding compute service (Nova through vgpu_driver.nova)
relies on, without Nova: its libvirt binding and connection, its own mdev
creation, pre-reshape allocations, and guests undefined and redefined."""

from __future__ import annotations

import types
import uuid
from collections import Counter

import libvirt

from tests import helpers
from tests.helpers import M10_FREE_ON_86 as FREE_ON_86
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.host.parents import implied_parents
from vgpu_driver.model.device import Guest, Mdev

IN_USE_ON_84 = "9d742dd5-dc9f-593d-b4e4-1e85926a8dc9"  # guest ...5a7cfa5


def _without_mdev_types_flag() -> types.ModuleType:
    """libvirt-python as a binding that lacks the mdev_types listing flag
    (as Nova's test double does)."""
    shim = types.ModuleType("shim")
    shim.__dict__.update(
        {
            k: v
            for k, v in vars(libvirt).items()
            if k != "VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES"
        }
    )
    return shim


def test_listing_by_names_reads_what_one_listing_reads(tmp_path):
    uri, sysfs = helpers.hostdesc.materialize(helpers.load("m10"), tmp_path)
    connection = libvirt.open(uri)
    fast = LibvirtHost(sysfs_root=sysfs, connection=connection)
    by_names = LibvirtHost(
        sysfs_root=sysfs, connection=connection, api=_without_mdev_types_flag()
    )
    assert by_names.discover() == fast.discover()
    assert by_names.calls["listDevices"] == 2
    assert (
        "listAllDevices" not in fast.calls or fast.calls["listAllDevices"] <= 2
    )
    # a second reading keeps the parents looked up, and knows the mdevs:
    # one XML per parent
    before = dict(by_names.calls)
    by_names.discover()
    assert by_names.calls - Counter(before) == Counter(XMLDesc=4)
    connection.close()


def test_the_binding_is_taken_from_the_caller_s_connection(tmp_path):
    uri, sysfs = helpers.hostdesc.materialize(helpers.load("m10"), tmp_path)
    connection = libvirt.open(uri)
    connections = []

    def connect():
        connections.append(connection)
        return connection

    host = LibvirtHost(sysfs_root=sysfs, connect=connect)
    assert host.api.module is libvirt
    assert len(host.discover().parents) == 4
    host.close()  # not ours: left open
    assert connection.isAlive() == 1
    assert connections  # asked each time, never kept
    connection.close()


def test_mdevs_are_created_the_caller_s_way(tmp_path):
    uri, sysfs = helpers.hostdesc.materialize(helpers.load("m10"), tmp_path)
    made = []
    host = LibvirtHost(uri, sysfs, creator=lambda *args: made.append(args))
    parent = host.discover().parent("pci_0000_87_00_0")
    mdev = host.create_mdev(
        parent, "nvidia-35", "0b5f4c1e-9a55-4a0f-8d2b-6f1e2a3b4c5d"
    )
    assert made == [
        (
            "pci_0000_87_00_0",
            "nvidia-35",
            "0b5f4c1e-9a55-4a0f-8d2b-6f1e2a3b4c5d",
        )
    ]
    assert mdev.name == "mdev_0b5f4c1e_9a55_4a0f_8d2b_6f1e2a3b4c5d"


def test_a_parent_known_only_from_its_mdevs_keeps_them():
    mdev = Mdev("u1", "nvidia-11", "pci_0000_81_02_0", "mdev_u1")
    [parent] = implied_parents([], [mdev])
    assert parent.address == "0000:81:02.0"
    assert [(t.id, t.available) for t in parent.types] == [("nvidia-11", 0)]
    assert implied_parents([parent], [mdev]) == []


def test_units_on_the_compute_node_s_own_provider_are_bound(node):
    n = node()
    root = n.tree.data("node1").uuid
    # a pre-reshape allocation: VGPU on the compute node itself
    [device] = n.driver.allocate_mdevs(
        "i1", {root: {"resources": {"VGPU": 1}}}
    )
    assert device.id == FREE_ON_86  # a free mdev first
    [second] = n.driver.allocate_mdevs(
        "i2", {root: {"resources": {"VGPU": 1}}}
    )
    assert second.created  # then room, on a parent with a configured type
    assert second.parent in {
        "pci_0000_84_00_0",
        "pci_0000_85_00_0",
        "pci_0000_86_00_0",
    }


def test_an_undefined_guest_frees_its_devices_unless_held(node):
    n = node()
    guest = "9cfe7035-3a5d-5acd-a42e-254b7382cfa5"
    n.driver.discover()
    assert n.driver.binder.hold(guest) == [IN_USE_ON_84]
    n.host.forget_guest(guest)
    assert n.driver.guest_undefined(guest) == []  # held: not free
    assert IN_USE_ON_84 not in n.driver.free_mdevs()
    # defined again with it: the hold ends, the device stays taken
    n.host.note_guest(Guest(guest, "instance-00000021", (IN_USE_ON_84,)))
    assert n.driver.guest_defined(guest) == [IN_USE_ON_84]
    assert IN_USE_ON_84 not in n.driver.free_mdevs()
    # undefined for good: free again
    n.host.forget_guest(guest)
    assert n.driver.guest_undefined(guest) == [IN_USE_ON_84]
    assert IN_USE_ON_84 in n.driver.free_mdevs()


def test_a_kernel_out_of_room_is_exhaustion_not_a_failing_parent(
    make_conf, tmp_path
):
    """The kernel refuses a create with EDQUOT ("Disk quota exceeded",
    the mdev core's answer when a type has no instance left) although
    the view had room (someone made an mdev behind our back): the bind
    is exhaustion (reschedule) and the parent stays schedulable."""
    import errno
    import os

    import pytest

    from vgpu_driver.exception import DeviceCapacityExhausted

    def full(*args):
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    uri, sysfs = helpers.hostdesc.materialize(helpers.load("m10"), tmp_path)
    host = LibvirtHost(uri, sysfs, creator=full)
    n = helpers.Node(make_conf, tmp_path / "state", host=host)
    parent = "pci_0000_85_00_0"
    with pytest.raises(DeviceCapacityExhausted, match=parent):
        n.driver.allocate_mdevs("i1", n.alloc((parent, 1)))
    assert n.driver.binder.claims() == {}
    assert parent not in n.driver.binder.unschedulable
    assert n.update()[parent].reserved == 0


def test_a_parent_found_full_midway_is_the_one_named(node, monkeypatch):
    """Two devices made, on 84 then 85; the kernel says 85 is full (its
    room taken behind our back): the bind is exhaustion of one device on
    85, not on 84 whose device was made (and is unmade again)."""
    import pytest

    from vgpu_driver.exception import DeviceCapacityExhausted, DeviceNoRoom

    n = node()
    real = n.host.create_mdev

    def create(parent, type_id, uuid):
        if getattr(parent, "name", parent) == "pci_0000_85_00_0":
            raise DeviceNoRoom(
                action="create mdev", device=uuid, reason="EDQUOT"
            )
        return real(parent, type_id, uuid)

    monkeypatch.setattr(n.host, "create_mdev", create)
    before = set(n.mdevs())
    with pytest.raises(DeviceCapacityExhausted) as refused:
        n.driver.allocate_mdevs(
            "i1", n.alloc(("pci_0000_84_00_0", 1), ("pci_0000_85_00_0", 1))
        )
    assert str(refused.value).startswith(
        "No room for 1 more nvidia-35 device(s) on pci_0000_85_00_0;"
    )
    assert set(n.mdevs()) == before
    assert "pci_0000_85_00_0" not in n.driver.binder.unschedulable


def test_a_creator_failing_without_a_message_is_named_by_its_error(tmp_path):
    """A privileged helper raising a bare exception: the error says what
    it raised, not an empty reason."""
    import pytest

    from vgpu_driver.exception import DeviceOperationFailed

    class HelperCrashed(Exception):
        pass

    def crashed(*args):
        raise HelperCrashed()

    uri, sysfs = helpers.hostdesc.materialize(helpers.load("m10"), tmp_path)
    host = LibvirtHost(uri, sysfs, creator=crashed)
    parent = next(p for p in host.discover().parents if p.types[0].available)
    with pytest.raises(DeviceOperationFailed, match="HelperCrashed"):
        host.create_mdev(parent, parent.types[0].id, str(uuid.uuid4()))
