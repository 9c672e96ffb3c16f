"""A device a guest let go of is handed back as a release is: decided and
recorded under the records' lock, the host changed outside it."""

from __future__ import annotations

import json

import pytest

from tests import records_helpers
from tests.helpers import Node
from tests.races import dies_after_recording, vf_release_in_flight, vf_types_of
from vgpu_driver.model.device import Guest
from vgpu_driver.records.carriers import CARRIERS
from vgpu_driver.service import guests, release

PF = "pci_0000_41_00_0"  # l40-sriov


REMOVING = "[devices]\nremove_unused_mdevs = true\n"
M10 = "pci_0000_86_00_0"  # m10: one free nvidia-36 mdev


def _mdev_release_cut_short(make_conf, state, monkeypatch):
    """The m10 host, unused mdevs removed: i1 bound to the free mdev, i2
    to one made for it, and i2's release recorded but the process dead
    before it changed the host. Returns the node and i2's mdev."""
    n = Node(make_conf, state, extra=REMOVING)
    n.driver.allocate_mdevs("i1", n.alloc((M10, 1)))
    [made] = n.driver.allocate_mdevs("i2", n.alloc((M10, 1)))
    assert made.created
    with dies_after_recording(n.driver, monkeypatch):
        n.driver.release_mdevs("i2")
    claims = records_helpers.claims_on_disk(state)
    assert claims[made.id]["purpose"] == "release"
    return n, made


def test_a_vf_a_guest_let_go_of_is_cleared_outside_the_lock(
    make_conf, tmp_path
):
    state = tmp_path / "state"
    n = Node(make_conf, state, "l40-sriov")
    [vf] = n.driver.allocate_mdevs("i1", n.alloc((PF, 1)))
    n.host.note_guest(Guest("i1", "instance-1", (), (vf.id,)))
    n.driver.guest_defined("i1")
    seen = []
    set_vf_type = n.host.set_vf_type

    def watched(address, number):
        seen.append((address, number, records_helpers.lock_is_free(state)))
        set_vf_type(address, number)

    n.host.set_vf_type = watched
    n.host.forget_guest("i1")
    assert n.driver.guest_undefined("i1") == [vf.id]
    assert seen == [(vf.id, 0, True)]
    # the record says so too: the type is not restored after a reboot
    assert vf.id not in json.loads((state / "vf-types.json").read_text())
    assert n.driver.binder.claims() == {}
    vfs = {v.address: v for v in n.host.discover().pfs[0].vfs}
    assert vfs[vf.id].current_type == 0


def test_a_vf_the_host_refuses_to_clear_stays_ours_and_typed(
    make_conf, tmp_path
):
    """The clear of a released VF fails (NVIDIA's driver refuses): the
    claim goes, but the VF stays recorded as made by this library (it is
    still typed: ours to clear later, never another manager's) and the
    binder's view keeps it typed, so it is reused as it is; a second
    release that clears it drops it from the record."""
    from vgpu_driver.exception import VgpuDriverError

    state = tmp_path / "state"
    n = Node(make_conf, state, "l40-sriov")
    for k in range(8):  # the free typed VFs are taken first
        [vf] = n.driver.allocate_mdevs(f"i{k}", n.alloc((PF, 1)))
        if vf.created:
            break
    assert vf.created
    set_vf_type = n.host.set_vf_type

    def refused(address, number):
        raise VgpuDriverError(f"refused to clear {address}")

    n.host.set_vf_type = refused
    n.driver.release_mdevs(f"i{k}")
    assert vf.id not in n.driver.binder.claims()
    assert vf.id in records_helpers.made_on_disk(state)
    n.host.set_vf_type = set_vf_type
    [again] = n.driver.allocate_mdevs("again", n.alloc((PF, 1)))
    assert (again.id, again.created) == (vf.id, False)  # typed: reused
    n.driver.release_mdevs("again")
    assert vf.id not in records_helpers.made_on_disk(state)


def test_an_mdev_kept_at_release_stays_ours_and_is_reused(make_conf, tmp_path):
    """An mdev this library made, released with unused ones kept (the
    default): it stays recorded as made (never taken for another
    manager's free mdev, reserved and left alone) and the next bind
    reuses it."""
    state = tmp_path / "state"
    n = Node(make_conf, state)  # m10: 86 has one free nvidia-36 mdev
    parent = "pci_0000_86_00_0"
    n.driver.allocate_mdevs("i1", n.alloc((parent, 1)))
    [made] = n.driver.allocate_mdevs("i2", n.alloc((parent, 1)))
    assert made.created
    n.driver.release_mdevs("i2")
    assert made.id in records_helpers.made_on_disk(state)
    assert made.id in {m.uuid for m in n.host.discover().mdevs}
    [again] = n.driver.allocate_mdevs("i3", n.alloc((parent, 1)))
    assert (again.id, again.created) == (made.id, False)


def test_a_release_cut_short_finished_where_unused_mdevs_are_kept(
    make_conf, tmp_path, monkeypatch
):
    """An mdev's release recorded with unused mdevs removed, and cut
    short (the process died before the host changed). The next start
    keeps unused mdevs (the operator turned the removal off): it drops
    the release claim and leaves the mdev, the library's own and free
    for the next bind, as a release under that setting would."""
    state = tmp_path / "state"
    n, made = _mdev_release_cut_short(make_conf, state, monkeypatch)
    keeping = Node(make_conf, state, host=n.host)
    keeping.driver.init_host(["i1"])  # i1's bind claim stays
    assert made.id not in records_helpers.claims_on_disk(state)
    assert made.id in {m.uuid for m in n.host.discover().mdevs}
    assert made.id in records_helpers.made_on_disk(state)
    [again] = keeping.driver.allocate_mdevs("i3", keeping.alloc((M10, 1)))
    assert (again.id, again.created) == (made.id, False)


def test_a_release_cut_short_of_an_mdev_gone_since_ends_its_claim(
    make_conf, tmp_path, monkeypatch
):
    """The same release cut short, the mdev then removed by someone else
    (an operator's mdevctl): the next start has nothing to remove, ends
    the release claim and no longer counts the mdev as made."""
    state = tmp_path / "state"
    n, made = _mdev_release_cut_short(make_conf, state, monkeypatch)
    n.host.remove_mdev(n.mdevs()[made.id])  # behind the library's back
    again = Node(make_conf, state, host=n.host, extra=REMOVING)
    again.driver.init_host([])
    assert made.id not in records_helpers.claims_on_disk(state)
    assert made.id not in records_helpers.made_on_disk(state)


def _carrier_file_removed(node, state):
    """An operator cleaned ``state_path`` of the carrier files: the
    release ``node`` carries looks cut short to every other process."""
    (state / CARRIERS / node.driver.binder.ledger.carrier.token).unlink()


def test_a_release_in_flight_is_left_to_its_carrier(
    make_conf, tmp_path, monkeypatch
):
    """A release recorded and not yet carried out on the host (the
    releasing thread is slow) while another process starts: its
    recovery sees the release's carrier alive and leaves it, and its
    binds take another VF. The first thread then finishes it."""
    state = tmp_path / "state"
    n, vf, finish = vf_release_in_flight(make_conf, state, monkeypatch)
    other = Node(make_conf, state, "l40-sriov", host=n.host)
    assert other.driver.init_host([])["released"] == []
    [again] = other.driver.allocate_mdevs("i2", other.alloc((PF, 1)))
    assert again.id != vf.id
    assert records_helpers.claims_on_disk(state)[vf.id]["purpose"] == "release"
    finish()
    typed = vf_types_of(n)
    assert typed[vf.id] == 0
    assert vf.id not in records_helpers.claims_on_disk(state)
    assert vf.id not in records_helpers.made_on_disk(state)
    assert n.driver.binder.ledger.carrier.carrying == set()


def test_a_second_release_of_an_instance_leaves_the_one_in_flight(
    make_conf, tmp_path, monkeypatch
):
    """An instance released twice at once (two threads of the service):
    the second finds the first's release in flight and leaves it, so
    the host is changed once, by the first."""
    state = tmp_path / "state"
    n, vf, finish = vf_release_in_flight(make_conf, state, monkeypatch)
    assert n.driver.release_mdevs("i1") == []
    typed = vf_types_of(n)
    assert typed[vf.id] != 0
    assert records_helpers.claims_on_disk(state)[vf.id]["purpose"] == "release"
    finish()
    typed = vf_types_of(n)
    assert typed[vf.id] == 0
    assert vf.id not in records_helpers.claims_on_disk(state)


def test_a_release_cut_short_is_finished_by_one_recovery_alone(
    make_conf, tmp_path, monkeypatch
):
    """An mdev's release cut short (its process died), and two
    recoveries at once (a start and ``restore``). The first takes it
    over, recorded before it removes the mdev; the second, meanwhile,
    finds its new carrier alive and leaves it: one removal, no parent
    marked failing by a second that finds the mdev gone."""
    state = tmp_path / "state"
    n, made = _mdev_release_cut_short(make_conf, state, monkeypatch)
    first = Node(make_conf, state, host=n.host, extra=REMOVING)
    second = Node(make_conf, state, host=n.host, extra=REMOVING)
    remove = n.host.remove_mdev
    removals, seen_by_second = [], []

    def removing(mdev):
        removals.append(mdev.uuid)
        claim = records_helpers.claims_on_disk(state)[made.id]
        assert claim["by"] == first.driver.binder.ledger.carrier.token
        seen_by_second.append(second.driver.init_host(["i1"])["released"])
        remove(mdev)

    n.host.remove_mdev = removing
    assert first.driver.init_host(["i1"])["released"] == [made.id]
    assert removals == [made.id]
    assert seen_by_second == [[]]
    assert made.id not in n.mdevs()
    assert made.id not in records_helpers.claims_on_disk(state)
    assert made.id not in records_helpers.made_on_disk(state)
    assert not list(second.driver.binder.ledger.failed)


def test_a_device_a_guest_let_go_of_is_not_released_twice(
    make_conf, tmp_path, monkeypatch
):
    """A guest undefined lets go of its VF, and before that thread
    clears the type Nova's delete releases the instance in another
    thread: the release finds the VF's release in flight and leaves it
    to that thread."""
    from vgpu_driver.service import hand_back

    state = tmp_path / "state"
    n = Node(make_conf, state, "l40-sriov")
    [vf] = n.driver.allocate_mdevs("i1", n.alloc((PF, 1)))
    n.host.note_guest(Guest("i1", "instance-1", (), (vf.id,)))
    n.driver.guest_defined("i1")
    n.host.forget_guest("i1")
    late = []
    with monkeypatch.context() as patched:  # the first thread is slow
        patched.setattr(hand_back, "finish_release", lambda *a: late.append(a))
        assert n.driver.guest_undefined("i1") == [vf.id]
    assert n.driver.release_mdevs("i1") == []
    typed = vf_types_of(n)
    assert typed[vf.id] != 0
    [step] = late
    hand_back.finish_release(*step)
    typed = vf_types_of(n)
    assert typed[vf.id] == 0
    assert vf.id not in records_helpers.claims_on_disk(state)


def test_a_release_cut_short_in_a_live_process_is_finished_there(
    make_conf, tmp_path
):
    """A guest let go of a VF, recorded, and the operation that recorded
    it failed before the host changed: no thread carries it, though its
    process lives. Its next recovery finishes it."""
    state = tmp_path / "state"
    n = Node(make_conf, state, "l40-sriov")
    [vf] = n.driver.allocate_mdevs("i1", n.alloc((PF, 1)))
    n.host.note_guest(Guest("i1", "instance-1", (), (vf.id,)))
    n.driver.guest_defined("i1")
    ledger = n.driver.binder.ledger
    n.host.forget_guest("i1")
    with pytest.raises(RuntimeError), ledger.locked():
        guests.let_go(ledger, "i1", keep=set())
        raise RuntimeError("failed after recording")
    assert records_helpers.claims_on_disk(state)[vf.id]["purpose"] == "release"
    assert ledger.carrier.carrying == set()
    assert release.finish_interrupted(ledger) == [vf.id]
    typed = vf_types_of(n)
    assert typed[vf.id] == 0
    assert vf.id not in records_helpers.claims_on_disk(state)


def test_a_release_another_finished_and_bound_again_is_left_alone(
    make_conf, tmp_path, monkeypatch
):
    """A release in flight whose carrier no other process can see (its
    file removed), finished meanwhile by another's recovery and the VF
    bound to another instance since. The first then acts only if its
    release claim is still there: the VF keeps the new instance's type,
    and the new claim stays."""
    state = tmp_path / "state"
    n, vf, finish = vf_release_in_flight(make_conf, state, monkeypatch)
    _carrier_file_removed(n, state)
    other = Node(make_conf, state, "l40-sriov", host=n.host)
    assert other.driver.init_host([])["released"] == [vf.id]
    [again] = other.driver.allocate_mdevs("i2", other.alloc((PF, 1)))
    assert again.id == vf.id
    typed = {v.address: v for v in n.host.discover().pfs[0].vfs}
    assert typed[vf.id].current_type != 0
    finish()  # it goes on
    now = vf_types_of(n)
    assert now[vf.id] == typed[vf.id].current_type
    assert records_helpers.claims_on_disk(state)[vf.id]["instance"] == "i2"


def test_a_release_finished_by_another_while_the_host_changes(
    make_conf, tmp_path, monkeypatch
):
    """The same race a step later: the first thread has looked (its
    release claim is there) and is clearing the VF's type when another's
    recovery, blind to its carrier, finishes the release and a bind
    types the VF again for another instance. The first then records
    nothing: the new claim stays, and so does the VF among the devices
    the library made (it was made again)."""
    state = tmp_path / "state"
    n, vf, finish = vf_release_in_flight(make_conf, state, monkeypatch)
    _carrier_file_removed(n, state)
    other = Node(make_conf, state, "l40-sriov", host=n.host)
    clear = n.host.set_vf_type

    def cleared_meanwhile(address, number):
        clear(address, number)
        n.host.set_vf_type = clear  # once
        assert other.driver.init_host([])["released"] == [vf.id]
        [again] = other.driver.allocate_mdevs("i2", other.alloc((PF, 1)))
        assert (again.id, again.created) == (vf.id, True)

    n.host.set_vf_type = cleared_meanwhile
    finish()
    assert n.host.set_vf_type is clear  # the race happened
    assert records_helpers.claims_on_disk(state)[vf.id]["instance"] == "i2"
    assert vf.id in records_helpers.made_on_disk(state)
