"""The VF types the records keep, as binds, deletes and readings race:
a type is kept only for a VF that has it or that a claim is making.
A type kept for a VF nobody uses, ``restore`` types again (for nobody,
or failing where the card has no room left); a VF handed back from
under a guest has its type cleared under a running VM."""

from __future__ import annotations

import pytest

from tests.helpers import Node
from tests.races import beside, card_full, vf_types_of
from vgpu_driver.exception import DeviceCapacityExhausted
from vgpu_driver.model.device import Guest

L40_PF = "pci_0000_41_00_0"  # l40-sriov


def _deleted(n: Node, instance: str) -> None:
    """The instance deleted as Nova deletes it: its guest undefined,
    told, ``guest_undefined`` and ``release_mdevs``."""
    n.host.forget_guest(instance)
    n.driver.domain_event(instance, False)
    n.driver.guest_undefined(instance)
    n.driver.release_mdevs(instance)


def _a_guest_on_a_vf_typed(make_conf, state):
    """The l40-sriov host, an instance bound to a VF this library typed
    for it, its guest defined and read. Returns the node, the VF and the
    instance."""
    n = Node(make_conf, state, "l40-sriov")
    k = 0
    while True:
        [vf] = n.driver.allocate_mdevs(f"i{k}", n.alloc((L40_PF, 1)))
        if vf.created:
            break
        k += 1
    instance = f"i{k}"
    n.host.note_guest(Guest(instance, "guest", pci_devices=(vf.id,)))
    n.driver.guest_defined(instance)
    n.update()
    return n, vf, instance


def test_a_reading_taken_before_a_delete_records_no_type_for_its_vf(
    make_conf, tmp_path, monkeypatch
):
    """A refresh reads the host (a guest using a VF this library typed)
    just before Nova deletes the instance: the guest undefined, told,
    and its release recorded (the VF's recorded type dropped) but not yet
    carried out when the refresh takes that reading in, whole. It must
    not record the VF's type again from it: once the release clears the
    VF, ``restore`` would type a VF nobody uses (and report a failure
    where the card has no room left for it)."""
    from vgpu_driver.service import hand_back

    n, vf, instance = _a_guest_on_a_vf_typed(make_conf, tmp_path)
    assert n.driver.binder.vf_types[vf.id]
    # (another manager types a free VF: the reading is a new one)
    free = next(v for v, t in vf_types_of(n).items() if not t and v != vf.id)
    n.host.set_vf_type(free, vf_types_of(n)[vf.id])
    n.driver._refresher.reading._taken = None  # (taken whole)
    real, finish, carried = n.host.discover, hand_back.finish_release, []

    def read_then_deleted(**kwargs):
        reading = real(**kwargs)
        monkeypatch.setattr(n.host, "discover", real)
        _deleted(n, instance)  # (recorded, not carried out)
        return reading

    monkeypatch.setattr(
        hand_back, "finish_release", lambda *a: carried.append(a)
    )
    monkeypatch.setattr(n.host, "discover", read_then_deleted)
    n.update()
    assert carried  # the release in flight while the reading was taken in
    monkeypatch.setattr(hand_back, "finish_release", finish)
    for args in carried:
        finish(*args)
    assert vf_types_of(n)[vf.id] == 0
    assert vf.id not in n.driver.binder.vf_types


def test_a_bind_whose_vf_could_not_be_typed_leaves_no_type_recorded(
    make_conf, tmp_path
):
    """A bind records a VF's type before it types it; the card refuses
    (no room: another VF took it). The bind is undone, and with it the
    type it recorded: ``restore`` would type a VF nobody uses."""
    n = Node(make_conf, tmp_path, "l40-sriov")
    set_vf_type, tried = n.host.set_vf_type, []

    def full(address, number):
        tried.append(address)
        card_full(address, number)

    n.host.set_vf_type = full
    with pytest.raises(DeviceCapacityExhausted):
        for k in range(40):  # (the VFs typed already are reused first)
            n.driver.allocate_mdevs(f"i{k}", n.alloc((L40_PF, 1)))
    n.host.set_vf_type = set_vf_type
    [address] = tried
    assert vf_types_of(n)[address] == 0
    assert address not in n.driver.binder.vf_types
    assert address not in beside(n, make_conf).binder.vf_types  # on disk


def test_a_tool_s_reading_taken_before_a_delete_records_no_type_for_its_vf(
    make_conf, tmp_path, monkeypatch
):
    """``restore`` (another process) reads the host while a guest uses a
    VF this library typed; the service then deletes the instance and
    finishes its release (the VF cleared, its recorded type dropped)
    before the tool takes its reading in. The tool must not record the
    VF's type again from its reading: it would type the VF again for
    nobody."""
    n, vf, instance = _a_guest_on_a_vf_typed(make_conf, tmp_path)
    tool = beside(n, make_conf)
    real = n.host.discover

    def read_then_deleted(**kwargs):
        reading = real(**kwargs)
        monkeypatch.setattr(n.host, "discover", real)
        _deleted(n, instance)
        return reading

    monkeypatch.setattr(n.host, "discover", read_then_deleted)
    tool.discover(rescan_guests=True)
    assert vf_types_of(n)[vf.id] == 0
    assert vf.id not in beside(n, make_conf).binder.vf_types  # on disk


def _a_vf_passed_on_while_read(make_conf, state, monkeypatch, names):
    """An instance's VF released and bound to the next instance (its
    guest defined) while a refresh was between reading the host (the
    first instance's guest using the VF) and taking that reading in
    whole. Returns the node, the VF, and the second instance."""
    first, second = names
    n = Node(make_conf, state, "l40-sriov")
    [vf] = n.driver.allocate_mdevs(first, n.alloc((L40_PF, 1)))
    n.host.note_guest(Guest(first, "first", pci_devices=(vf.id,)))
    n.driver.guest_defined(first)
    n.update()
    free = next(v for v, t in vf_types_of(n).items() if not t and v != vf.id)
    n.host.set_vf_type(free, vf_types_of(n)[vf.id])  # (a new reading)
    n.driver._refresher.reading._taken = None  # (taken whole)
    real = n.host.discover

    def read_then_passed_on(**kwargs):
        reading = real(**kwargs)
        monkeypatch.setattr(n.host, "discover", real)
        _deleted(n, first)
        [again] = n.driver.allocate_mdevs(second, n.alloc((L40_PF, 1)))
        assert again.id == vf.id  # (the lowest free VF again)
        n.host.note_guest(Guest(second, "second", pci_devices=(vf.id,)))
        n.driver.domain_event(second, True)
        n.driver.guest_defined(second)
        return reading

    monkeypatch.setattr(n.host, "discover", read_then_passed_on)
    return n, vf, second


def test_a_vf_passed_on_while_a_reading_was_taken_stays_with_its_guest(
    make_conf, tmp_path, monkeypatch
):
    """The older reading has the first instance's guest use the VF; taken
    in, the first guest is let go (gone since) and the second set (defined
    since). Letting the first go must not hand back the VF the second's
    guest now has (its type cleared under a running VM, the VF offered to
    a third). Run for several pairs of instances: the order the two are
    set in must not matter."""
    for k in range(6):
        names = (f"first-{k}", f"second-{k}")
        state = tmp_path / str(k)
        n, vf, second = _a_vf_passed_on_while_read(
            make_conf, state, monkeypatch, names
        )
        n.update()
        assert vf_types_of(n)[vf.id] != 0, k
        assert n.driver.instance_devices()[second]["in_use"] == [vf.id], k
        assert vf.id not in {
            c["id"] for c in n.driver.binder.claims().values()
        }, k
