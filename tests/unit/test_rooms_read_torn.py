"""A parent's total is its mdevs and its room (each type's
``availableInstances``), which must add up to what it holds where no
type description gives ``max_instance`` to cap it at (Intel GVT-g,
mlx5, mtty, a GRID K1). Two ways they did not:

* the room and the mdevs are two reads, its XML and its sysfs
  directory; another process that makes an mdev between the two
  (``sync --periodic`` beside the compute service's binds) counts it
  in both. The adapter reads the room again after the directory, until
  the directory says the same around it;
* an mdev defined and not running takes no room until it starts: the
  room counts it already, and so did the mdevs."""

from __future__ import annotations

import dataclasses
import uuid

from tests import helpers
from tests.capacity_helpers import enabled
from tests.modelled_libvirt import modelled_host
from vgpu_driver.model.device import Mdev
from vgpu_driver.model.inventory import plan_providers
from vgpu_driver.sim.mdev_devices import mdev_xml

GVTG = "i915-GVTg_V5_4"


def _holds(reading, parent_name, type_id):
    """The type's mdevs on the parent and its room: what it holds."""
    parent = reading.parent(parent_name)
    room = parent.type(type_id).available
    return room + sum(
        1 for m in reading.mdevs_of(parent_name) if m.type_id == type_id
    )


def _make(conn, parent_name):
    xml = mdev_xml(parent_name, GVTG, str(uuid.uuid4()))
    return conn.nodeDeviceCreateXML(xml, 0)


def _making_while_listed(host, conn, parent_name, times):
    """The parent's directory read with another mdev made just before,
    ``times`` times (another process's binds)."""
    dirs = host.devices.dirs
    follow = dirs.follow
    left = [times]

    def made_first(name, *args):
        if name == parent_name and left[0]:
            left[0] -= 1
            _make(conn, parent_name)
        return follow(name, *args)

    dirs.follow = made_first
    return left


def test_a_room_read_before_an_mdev_made_is_read_again(tmp_path):
    host, conn = modelled_host(tmp_path, "gvtg")
    before = host.discover(rescan_guests=True)
    [parent] = before.parents
    holds = _holds(before, parent.name, GVTG)
    _make(conn, parent.name)  # the reading follows the parent
    _making_while_listed(host, conn, parent.name, 1)
    torn = host.discover()
    assert _holds(torn, parent.name, GVTG) == holds
    assert (
        len(torn.mdevs_of(parent.name))
        == len(before.mdevs_of(parent.name)) + 2
    )


def test_the_room_read_again_until_the_directory_holds_still(tmp_path):
    """Another mdev made before each look at the directory around the
    room's read: after three reads, the parent offers no room (its mdevs
    alone) until the next reading, which reads it again."""
    host, conn = modelled_host(tmp_path, "gvtg")
    before = host.discover(rescan_guests=True)
    [parent] = before.parents
    holds = _holds(before, parent.name, GVTG)
    _make(conn, parent.name)
    dirs = host.devices.dirs
    unchanged = dirs.unchanged
    left = [3]

    def made_first(name, path):
        if left[0]:
            left[0] -= 1
            _make(conn, parent.name)
        return unchanged(name, path)

    dirs.unchanged = made_first
    busy = host.discover()
    assert left == [0]
    assert busy.parent(parent.name).type(GVTG).available == 0
    assert _holds(busy, parent.name, GVTG) < holds
    settled = host.discover()
    assert _holds(settled, parent.name, GVTG) == holds
    assert settled.parent(parent.name).type(GVTG).available > 0


def test_an_mdev_defined_and_not_running_counts_once():
    """One GVT-g mdev defined and stopped (its guest off): the kernel's
    room still has its place, so the total is what the GPU holds, not
    one more; its guest's unit is in use within it."""
    inventory = helpers.simulated_host("gvtg").discover()
    [parent] = inventory.parents
    holds = _holds(inventory, parent.name, GVTG)
    mdev_uuid = str(uuid.uuid4())
    stopped = Mdev(
        uuid=mdev_uuid,
        name="mdev_" + mdev_uuid.replace("-", "_"),
        parent=parent.name,
        type_id=GVTG,
        active=False,
    )
    reading = dataclasses.replace(
        inventory,
        mdevs=tuple(sorted((*inventory.mdevs, stopped), key=lambda m: m.uuid)),
    )
    held = {parent.name: {GVTG: 2}}
    [plan] = [
        p
        for p in plan_providers("cn", enabled(GVTG), reading, held=held)
        if p.type_id == GVTG
    ]
    assert plan.total == holds


def test_where_no_directory_can_be_read_the_room_stands(tmp_path, monkeypatch):
    """A host whose parents' sysfs directories cannot be read (Nova's
    fake libvirt in its functional tests has none): nothing tells the
    room from a torn one, so the full listing's stands, as it did; it
    is not taken away (Nova's own vGPU suite spawned nothing when it
    was)."""
    from vgpu_driver.host import mdev_dirs

    host, _conn = modelled_host(tmp_path, "gvtg")
    read = host.discover(rescan_guests=True)
    [parent] = read.parents
    room = parent.type(GVTG).available
    assert room > 0
    monkeypatch.setattr(mdev_dirs, "_running", lambda _path, _before: None)
    again = host.discover(rescan_guests=True)
    assert again.parent(parent.name).type(GVTG).available == room
