"""The binder's view against a host that undid what a bind did before
the next reading: an mdev a bind made, removed by another manager (or
by a release told it failed) while the host then reads as it did
before the bind; the same for a VF a bind typed or a release cleared
(the L40S SR-IOV host). Run on the simulated host and on the libvirt adapter
(libvirt's test driver, the mdev calls modelled): both say "the same
reading" of a host as it was, as a compute host's does."""

from __future__ import annotations

import pytest

from tests.helpers import M10_FREE_ON_86, Node
from tests.modelled_libvirt import modelled_host
from tests.races import vf_types_of
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


L40 = "pci_0000_41_00_0"  # l40-sriov: VFs typed for nvidia-1150 (L40S-4Q)


@pytest.fixture(params=["simulated", "libvirt"])
def vf_node(request, make_conf, tmp_path):
    """A driver on the L40S SR-IOV host, on the simulated host or on the
    libvirt adapter (its VF types in the sysfs tree it reads), its one
    VF typed already bound: the next bind types a VF."""
    state = tmp_path / "state"
    if request.param == "simulated":
        n = Node(make_conf, state, name="l40-sriov")
    else:
        host, _ = modelled_host(tmp_path, name="l40-sriov")
        n = Node(make_conf, state, name="l40-sriov", host=host)
    n.driver.allocate_mdevs("i0", n.alloc((L40, 1)))
    return n


def _done_but_timed_out(n, monkeypatch, meanwhile=lambda: None):
    """The host's VF type writes are done, ``meanwhile`` runs, then they
    report a timeout."""
    set_vf_type = n.host.set_vf_type

    def timed_out(address, type_id):
        set_vf_type(address, type_id)
        meanwhile()
        raise DeviceOperationFailed(
            action="set vGPU type", device=address, reason="timed out"
        )

    monkeypatch.setattr(n.host, "set_vf_type", timed_out)


def test_a_vf_whose_clearing_was_told_failed_but_done_is_typed_again(
    vf_node, monkeypatch
):
    """A bind types a free VF; at the release the host clears it but
    reports a failure (a timeout), so the view keeps it typed and free,
    and the host then reads as it did before the bind. The reading sets
    that card as the host has it: the next bind on the VF types it again
    rather than hand a guest a VF that carries no vGPU."""
    n = vf_node
    [device] = n.driver.allocate_mdevs("i1", n.alloc((L40, 1)))
    assert device.kind == "vf" and device.created
    _done_but_timed_out(n, monkeypatch)
    n.driver.release_mdevs("i1")
    monkeypatch.undo()
    assert vf_types_of(n)[device.id] == 0
    n.update()
    [again] = n.driver.allocate_mdevs("i2", n.alloc((L40, 1)))
    assert again.id == device.id
    assert vf_types_of(n)[device.id] == 1150


def _view_types(n):
    return dict(n.driver.binder.ledger.view.pfs[L40].vfs)


def test_a_vf_typed_by_a_bind_and_cleared_behind_it_is_read_so(vf_node):
    """A bind types a VF; another manager clears it before the next
    reading (the host then reads as before the bind): the view has it as
    the host does, not as the bind left it."""
    n = vf_node
    [device] = n.driver.allocate_mdevs("i1", n.alloc((L40, 1)))
    assert device.created and _view_types(n)[device.id] == 1150
    n.host.set_vf_type(device.id, 0)  # as another manager writes sysfs
    n.update()
    assert _view_types(n) == vf_types_of(n)


def test_a_vf_typed_by_a_failed_bind_told_not_typed_is_read_so(
    vf_node, monkeypatch
):
    """The host types a VF but reports a failure, after the periodic
    task read it typed, and the bind is undone (its VF given back
    untyped in the view; the host then reads as that task read it): the
    next reading has the VF typed, as the host does."""
    n = vf_node
    _done_but_timed_out(n, monkeypatch, n.update)  # the periodic task
    with pytest.raises(DeviceOperationFailed):
        n.driver.allocate_mdevs("i1", n.alloc((L40, 1)))
    monkeypatch.undo()
    n.update()
    assert _view_types(n) == vf_types_of(n)


def test_a_vf_clearing_told_done_that_was_not_done_is_read_so(
    vf_node, monkeypatch
):
    """The host says it cleared a released VF's type but kept it, after
    the periodic task read the VF typed (the host then reads as it did):
    the next reading has the VF typed, as the host does, not free to be
    typed again."""
    n = vf_node
    [device] = n.driver.allocate_mdevs("i1", n.alloc((L40, 1)))
    n.update()
    monkeypatch.setattr(n.host, "set_vf_type", lambda address, type_id: None)
    n.driver.release_mdevs("i1")
    monkeypatch.undo()
    assert vf_types_of(n)[device.id] == 1150
    n.update()
    assert _view_types(n) == vf_types_of(n)


def test_a_stale_mdev_whose_removal_was_told_done_is_read_back(
    host_node, monkeypatch
):
    """A type switch removes the old type's free mdev; the host says it
    did but kept it (the host then reads as before): the view has it
    again, free, as the host does, not forgotten while the card holds
    it."""
    n, _ = host_node()
    [device] = n.driver.allocate_mdevs("gone", n.alloc((EMPTY, 1)))
    n.driver.release_mdevs("gone")
    n.update()
    n.conf.set_override("enabled_mdev_types", ["nvidia-36"], "devices")
    n.conf.set_override("device_addresses", ["0000:85:00.0"], "mdev_nvidia-36")
    n.driver.reload_config()
    monkeypatch.setattr(n.host, "remove_mdev", lambda mdev: None)
    n.update()
    monkeypatch.undo()
    assert device.id in n.mdevs()
    n.update()
    view = n.driver.binder.ledger.view
    assert device.id in view.mdevs
    assert view.parents[EMPTY].free == {"nvidia-35": [device.id]}
