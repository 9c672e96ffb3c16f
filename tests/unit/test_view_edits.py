"""The binder's view against a host that undid what a bind did before
the next reading: an mdev a bind made, removed by another manager (or
by a release told it failed) while the host then reads as it did
before the bind. Run on the simulated host and on the libvirt adapter
(libvirt's test driver, the mdev calls modelled): both say "the same
reading" of a host as it was, as a compute host's does."""

from __future__ import annotations

import pytest

from tests.helpers import M10_FREE_ON_86, Node
from tests.modelled_libvirt import modelled_host
from vgpu_driver.exception import DeviceOperationFailed
from vgpu_driver.model import usage

EMPTY = "pci_0000_85_00_0"  # m10: no mdev, room for 16 nvidia-35
WITH_FREE = "pci_0000_86_00_0"  # m10: one free nvidia-36, room for more


@pytest.fixture(params=["simulated", "libvirt"])
def host_node(request, make_conf, tmp_path):
    """A driver on m10 and a way for another manager to remove an mdev
    behind it (``mdevctl stop``, a sysfs write)."""

    def make(extra=""):
        state = tmp_path / "state"
        if request.param == "simulated":
            n = Node(make_conf, state, extra=extra)
            return n, n.host.remove_mdev
        host, conn = modelled_host(tmp_path)
        n = Node(make_conf, state, host=host, extra=extra)
        return n, lambda mdev: conn.gone.add(mdev.name)

    return make


def _room(n, parent):
    """The view's room for parent's configured type, and the host's."""
    reading = n.host.discover()
    type_id = usage.configured_types(n.driver.settings.config, reading)[parent]
    view = n.driver.binder.ledger.view.parents[parent]
    return view.available[type_id], reading.parent(parent).type(type_id)


def test_an_mdev_made_then_removed_behind_the_service_is_not_kept(host_node):
    """A bind makes an mdev, the spawn fails and Nova releases it (kept,
    free), another manager removes it before the next reading: the host
    reads as before the bind, and the view still drops it, with its
    room back: never handed out, never counted."""
    n, remove_behind = host_node()
    [device] = n.driver.allocate_mdevs("i1", n.alloc((EMPTY, 1)))
    assert device.created
    n.driver.release_mdevs("i1")
    assert device.id in n.driver.free_mdevs(EMPTY)
    remove_behind(n.mdevs()[device.id])
    n.update()
    assert device.id not in n.driver.free_mdevs(EMPTY)
    assert device.id not in n.driver.binder.ledger.view.mdevs
    view_room, host_type = _room(n, EMPTY)
    assert view_room == host_type.available == 16


def test_a_free_mdev_found_gone_by_a_bind_gives_its_room_back(host_node):
    """The free mdev of a parent is removed behind the service; before
    any reading, binds take the parent's whole room: the first finds
    the free one gone (one lookup) and makes one in its room instead,
    and every unit the host has is bound."""
    n, remove_behind = host_node()
    _, host_type = _room(n, WITH_FREE)
    units = host_type.available + 1  # the free mdev and the room left
    remove_behind(n.mdevs()[M10_FREE_ON_86])
    devices = [
        n.driver.allocate_mdevs(f"i{i}", n.alloc((WITH_FREE, 1)))[0]
        for i in range(units)
    ]
    assert M10_FREE_ON_86 not in {d.id for d in devices}
    assert all(d.created for d in devices)
    assert len(set(n.mdevs()) & {d.id for d in devices}) == units


def test_a_removal_told_failed_that_was_done_is_counted_once(
    host_node, monkeypatch
):
    """With remove_unused_mdevs, a released mdev's removal is told
    failed (a timeout) though the kernel did let it go, and the
    periodic task read the host in between (as it was before the bind):
    the view has the room the host says, the mdev neither free nor
    counted twice."""
    n, _ = host_node("[devices]\nremove_unused_mdevs = true\n")
    [device] = n.driver.allocate_mdevs("i1", n.alloc((EMPTY, 1)))
    assert device.created
    remove_mdev = n.host.remove_mdev

    def gone_but_timed_out(mdev):
        remove_mdev(mdev)
        n.update()  # the periodic task, beside the release
        raise DeviceOperationFailed(
            action="remove mdev", device=mdev.uuid, reason="timed out"
        )

    monkeypatch.setattr(n.host, "remove_mdev", gone_but_timed_out)
    n.driver.release_mdevs("i1")
    monkeypatch.undo()
    assert device.id not in n.mdevs()
    assert device.id not in n.driver.free_mdevs(EMPTY)
    view_room, host_type = _room(n, EMPTY)
    assert view_room == host_type.available == 16
    assert n.driver.binder.claims() == {}


def test_a_bind_while_the_host_is_read_is_left_to_the_next_reading(
    host_node, monkeypatch
):
    """The case above, but a bind makes an mdev on that parent while the
    host is being read (after the reading, before it is taken in): the
    reading, older than that mdev, does not set the parent's room (it
    would give the room of that mdev again); the next reading does."""
    n, remove_behind = host_node()
    [first] = n.driver.allocate_mdevs("i1", n.alloc((EMPTY, 1)))
    n.driver.release_mdevs("i1")
    remove_behind(n.mdevs()[first.id])
    discover = n.host.discover
    binds = []

    def bind_meanwhile(*args, **kwargs):
        reading = discover(*args, **kwargs)
        if not binds:
            binds.extend(n.driver.allocate_mdevs("i2", n.alloc((EMPTY, 1))))
        return reading

    monkeypatch.setattr(n.host, "discover", bind_meanwhile)
    n.update()
    monkeypatch.undo()
    [second] = binds
    assert second.created and second.id in n.mdevs()
    view_room, host_type = _room(n, EMPTY)
    assert view_room == host_type.available == 15
    n.update()
    assert first.id not in n.driver.binder.ledger.view.mdevs
    assert second.id in n.driver.binder.ledger.view.mdevs
    view_room, host_type = _room(n, EMPTY)
    assert view_room == host_type.available == 15


def test_a_removal_told_done_that_was_not_done_gives_no_room(
    host_node, monkeypatch
):
    """The other way round: the host says it removed a released mdev but
    kept it (the host then reads as at the last refresh). The next
    reading gives it back to the view with the room it takes: none
    promised that the card does not have. (No longer recorded as the
    library's own, it is kept as another manager's: never handed out.)"""
    n, _ = host_node("[devices]\nremove_unused_mdevs = true\n")
    [device] = n.driver.allocate_mdevs("i1", n.alloc((EMPTY, 1)))
    n.update()  # the mdev made is read
    monkeypatch.setattr(n.host, "remove_mdev", lambda mdev: None)
    n.driver.release_mdevs("i1")
    monkeypatch.undo()
    assert device.id in n.mdevs()
    n.update()
    assert device.id in n.driver.binder.ledger.view.mdevs
    assert device.id not in n.driver.free_mdevs(EMPTY)
    view_room, host_type = _room(n, EMPTY)
    assert view_room == host_type.available == 15
