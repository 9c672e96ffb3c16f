"""Decide and record first, act on the host after: a write that fails (a
full ``state_path``) leaves the host as it was, an operation cut short is
finished later, and reporting never stops for a record it cannot write.
"""

from __future__ import annotations

import json
import uuid

import pytest

from tests.helpers import Node
from tests.modelled_libvirt import modelled_host
from tests.races import dies_after_recording
from tests.records_helpers import claims_on_disk, seen_on_disk
from vgpu_driver.model.device import Guest
from vgpu_driver.records.store import StateStoreError
from vgpu_driver.sim import guest_xml
from vgpu_driver.sim.mdev_devices import mdev_xml
from vgpu_driver.sim.specs import GuestSpec

PF = "pci_0000_41_00_0"  # l40-sriov


def _vf_type(n: Node, address: str) -> int:
    return {
        vf.address: vf.current_type
        for pf in n.host.discover().pfs
        for vf in pf.vfs
    }[address]


@pytest.fixture
def full_disk(monkeypatch):
    """``full_disk(node)``: from now on every save to its state_path
    (a record replaced, the claims' or the mdevs seen's journal appended
    to) fails as a full disk does; ``full_disk(node, False)`` frees it."""

    def fill(n: Node, full: bool = True) -> None:
        store = n.driver.state
        claims_file = n.driver.binder.ledger.record._file
        seen_journal = n.driver.binder.ledger.seen.file.journal
        if not full:
            monkeypatch.delattr(store, "save")
            monkeypatch.delattr(claims_file, "write")
            monkeypatch.delattr(seen_journal, "append")
            return

        def refused(key):
            raise StateStoreError(
                action="write",
                path=str(store.path(key)),
                reason="[Errno 28] No space left on device",
            )

        monkeypatch.setattr(store, "save", lambda key, value: refused(key))
        monkeypatch.setattr(
            claims_file,
            "write",
            lambda epoch, claims, made, whole=False: refused("claims"),
        )
        monkeypatch.setattr(
            seen_journal,
            "append",
            lambda base, record: refused("mdev-parents"),
        )

    return fill


def test_a_release_on_a_full_disk_leaves_the_vf_and_its_claim(
    make_conf, tmp_path, full_disk
):
    n = Node(make_conf, tmp_path / "state", "l40-sriov")
    [vf] = n.driver.allocate_mdevs("i1", n.alloc((PF, 1)))
    [fresh] = n.driver.allocate_mdevs("i2", n.alloc((PF, 1)))
    assert fresh.created
    typed = _vf_type(n, fresh.id)
    full_disk(n)
    with pytest.raises(StateStoreError, match="No space"):
        n.driver.release_mdevs("i2")
    # nothing half done: the VF keeps its type, its claim and its record
    assert _vf_type(n, fresh.id) == typed
    assert n.driver.binder.claims()[fresh.id]["instance"] == "i2"
    assert n.driver.binder.vf_types[fresh.id] == typed
    full_disk(n, False)
    assert n.driver.release_mdevs("i2") == [fresh.id]
    assert _vf_type(n, fresh.id) == 0
    assert fresh.id not in n.driver.binder.claims()
    assert fresh.id not in n.driver.binder.vf_types
    assert vf.id in n.driver.binder.claims()  # the other bind's


def test_a_release_cut_short_is_finished_at_the_next_start(
    make_conf, tmp_path, monkeypatch
):
    """The process dies after recording the release and before the host
    changed: the VF stays out of every bind until the next start (or the
    next release of the instance) finishes it."""
    state = tmp_path / "state"
    n = Node(make_conf, state, "l40-sriov")
    n.driver.allocate_mdevs("i0", n.alloc((PF, 1)))  # the typed free VF
    [fresh] = n.driver.allocate_mdevs("i1", n.alloc((PF, 1)))
    assert fresh.created
    # the process dies after the decision is recorded
    with dies_after_recording(n.driver, monkeypatch):
        n.driver.release_mdevs("i1")
    record = claims_on_disk(state)
    assert record[fresh.id]["purpose"] == "release"
    assert _vf_type(n, fresh.id) != 0  # the host was not touched
    # another process binds meanwhile: never that VF
    other = Node(make_conf, state, "l40-sriov", host=n.host)
    taken = {
        d.id
        for i in range(3)
        for d in other.driver.allocate_mdevs(f"o{i}", other.alloc((PF, 1)))
    }
    assert fresh.id not in taken
    restarted = Node(make_conf, state, "l40-sriov", host=n.host)
    done = restarted.driver.init_host()
    assert done["released"] == [fresh.id]
    assert _vf_type(n, fresh.id) == 0
    assert fresh.id not in restarted.driver.binder.claims()


def test_reporting_goes_on_while_state_path_is_full(
    make_conf, tmp_path, full_disk
):
    n = Node(make_conf, tmp_path / "state")
    before = n.update()
    full_disk(n)
    # a change that wants records written: a new free mdev, new traits
    n.driver.create_free_mdev("pci_0000_85_00_0")
    n.conf.set_override("owner_trait", "CUSTOM_FULL_DISK", "devices")
    after = n.update()
    assert set(after) == set(before)
    assert "CUSTOM_FULL_DISK" in n.tree.data("node1_pci_0000_85_00_0").traits
    full_disk(n, False)
    n.update()
    traits = json.loads(
        (tmp_path / "state" / "provider-traits.json").read_text()
    )
    assert "CUSTOM_FULL_DISK" in traits["node1_pci_0000_85_00_0"]


def test_restore_never_overwrites_a_vf_that_now_carries_another_type(
    make_conf, tmp_path
):
    """Someone (an operator, another manager) typed the VF since the
    library recorded it: restore leaves it, and restores the others."""
    n = Node(make_conf, tmp_path / "state", "l40-sriov")
    n.driver.allocate_mdevs("i0", n.alloc((PF, 1)))
    [mine] = n.driver.allocate_mdevs("i1", n.alloc((PF, 1)))
    [other] = n.driver.allocate_mdevs("i2", n.alloc((PF, 1)))
    assert n.driver.binder.vf_types[mine.id] == 1150
    # the record says L40S-8Q, the card carries L40S-4Q set by someone else
    ledger = n.driver.binder.ledger
    with ledger.locked():
        ledger.vf_types[mine.id] = 1152
        ledger.save()
    n.host.set_vf_type(other.id, 0)  # this one only forgot (a reboot)
    failed: list[str] = []
    restored = n.driver.restore_vf_types(failed)
    assert _vf_type(n, mine.id) == 1150
    assert restored == [other.id] and _vf_type(n, other.id) == 1150
    assert failed == []  # left alone, not tried and refused


def test_a_guest_gone_records_the_removal_of_its_mdev_before_removing_it(
    make_conf, tmp_path, monkeypatch
):
    """With remove_unused_mdevs, the mdev a deleted guest had is removed
    by the guest's going alone (no release call): the release claim is
    on disk when the host is changed, so a process dying meanwhile
    leaves it out of every bind and the next start finishes it."""
    state = tmp_path / "state"
    n = Node(make_conf, state, extra="[devices]\nremove_unused_mdevs = true\n")
    [mine] = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_85_00_0", 1)))
    n.host.note_guest(Guest("i1", "instance-1", (mine.id,)))
    assert n.driver.guest_defined("i1") == [mine.id]
    assert claims_on_disk(state) == {}
    on_disk = []
    remove_mdev = n.host.remove_mdev

    def removing(mdev):
        on_disk.append(claims_on_disk(state).get(mdev.uuid))
        remove_mdev(mdev)

    monkeypatch.setattr(n.host, "remove_mdev", removing)
    n.host.forget_guest("i1")
    assert n.driver.guest_undefined("i1") == [mine.id]
    [claim] = on_disk
    assert claim is not None and claim["purpose"] == "release"
    assert mine.id not in {m.uuid for m in n.host.discover().mdevs}
    assert claims_on_disk(state) == {}


def test_a_guest_gone_on_a_full_disk_leaves_its_vf_typed_and_free(
    make_conf, tmp_path, full_disk
):
    """The guest of a typed VF is deleted while the disk is full: the
    release cannot be recorded, so the VF's type is not cleared; the
    view has it free as it is (typed), and the next bind of its type
    takes it as it is instead of typing it again."""
    state = tmp_path / "state"
    n = Node(make_conf, state, "l40-sriov")
    n.driver.allocate_mdevs("i0", n.alloc((PF, 1)))  # the typed free VF
    [vf] = n.driver.allocate_mdevs("i1", n.alloc((PF, 1)))
    assert vf.created
    typed = _vf_type(n, vf.id)
    n.host.note_guest(Guest("i1", "instance-1", (), (vf.id,)))
    n.driver.guest_defined("i1")
    n.host.forget_guest("i1")
    full_disk(n)
    assert n.driver.guest_undefined("i1") == [vf.id]
    assert _vf_type(n, vf.id) == typed
    full_disk(n, False)
    [again] = n.driver.allocate_mdevs("i2", n.alloc((PF, 1)))
    assert (again.id, again.created) == (vf.id, False)


@pytest.mark.parametrize("made", ["before", "while full"])
def test_the_mdevs_seen_not_written_are_written_at_the_next_reading(
    make_conf, tmp_path, full_disk, made
):
    """A guest is given an mdev while the disk is full (one made then, or
    a free one read before, which is on disk only once a guest uses
    it): the record of where the mdevs guests use are (what a restart
    recreates them from) cannot be written. The next reading writes it,
    though the host did not change since."""
    state = tmp_path / "state"
    n = Node(make_conf, state)
    parent = n.host.discover().parent("pci_0000_85_00_0")
    if made == "before":
        mdev = n.host.create_mdev(parent, "nvidia-35", str(uuid.uuid4()))
        n.driver.discover()
    full_disk(n)
    if made == "while full":
        mdev = n.host.create_mdev(parent, "nvidia-35", str(uuid.uuid4()))
    n.host.note_guest(Guest("g1", "instance-1", (mdev.uuid,)))
    n.driver.discover()
    assert mdev.uuid not in _seen_on_disk(state)
    full_disk(n, False)
    n.driver.discover()
    assert _seen_on_disk(state)[mdev.uuid] == (parent.name, "nvidia-35")


def _seen_on_disk(state):
    return seen_on_disk(state)


def _room(n, parent):
    return sum(n.driver.binder.ledger.view.parents[parent].available.values())


def test_a_bind_on_a_full_disk_holds_no_claim_and_loses_no_room(
    make_conf, tmp_path, full_disk
):
    """A bind whose claims cannot be written fails before the host is
    touched and leaves nothing of it behind: no claim reported (nor
    counted by a refresh), the free mdev it chose still free, the room
    for the mdev it would have made still there once the disk is free."""
    state = tmp_path / "state"
    n = Node(make_conf, state)
    parent = "pci_0000_86_00_0"  # one free mdev, room for more
    free, room = n.driver.free_mdevs(parent), _room(n, parent)
    full_disk(n)
    for units in (1, 2):  # the free mdev alone; it and a new one
        with pytest.raises(StateStoreError, match="No space"):
            n.driver.allocate_mdevs(f"i{units}", n.alloc((parent, units)))
        assert n.driver.binder.claims() == {}
        assert n.driver.free_mdevs(parent) == free
        assert _room(n, parent) == room
    assert n.update()[parent].reserved == 0
    full_disk(n, False)
    devices = n.driver.allocate_mdevs("i3", n.alloc((parent, room + 1)))
    assert len(devices) == room + 1
    assert set(free) <= {d.id for d in devices}


def test_a_hold_of_spawns_in_flight_on_a_full_disk_leaves_them_free(
    make_conf, tmp_path, full_disk
):
    n = Node(make_conf, tmp_path / "state")
    parent = "pci_0000_86_00_0"
    free = n.driver.free_mdevs(parent)
    full_disk(n)
    with pytest.raises(StateStoreError, match="No space"):
        n.driver.hold_in_flight({"i1": {parent: 1}})
    assert n.driver.binder.claims() == {}
    assert n.driver.free_mdevs(parent) == free


def test_traits_a_full_disk_kept_off_disk_are_written_at_the_confirm(
    make_conf, tmp_path, full_disk
):
    """The caller confirms the tree reached Placement after a pass whose
    save of a trait added failed: the confirm writes it, so a restart
    knows it as the library's own."""
    n = Node(
        make_conf,
        tmp_path / "state",
        extra="[vgpu_nvidia-35]\ntraits = CUSTOM_ADDED\n",
    )
    traits_file = tmp_path / "state" / "provider-traits.json"
    before = json.loads(traits_file.read_text())
    assert "CUSTOM_ADDED" in before["node1_pci_0000_85_00_0"]
    full_disk(n)
    n.driver.create_free_mdev("pci_0000_85_00_0")
    n.conf.set_override(
        "traits", ["CUSTOM_ADDED", "CUSTOM_MORE"], "mdev_nvidia-35"
    )
    n.driver.reload_config()
    n.update()
    assert "CUSTOM_MORE" in n.tree.data("node1_pci_0000_85_00_0").traits
    full_disk(n, False)
    n.driver.confirm_flushed()
    traits = json.loads(traits_file.read_text())
    assert "CUSTOM_MORE" in traits["node1_pci_0000_85_00_0"]


def test_an_mdev_a_guest_takes_while_full_is_written_at_the_next_reading(
    make_conf, tmp_path, full_disk
):
    """On the libvirt adapter, whose readings follow the parents the
    host names: another manager makes an mdev and a guest outside Nova
    takes it while the record of mdevs seen cannot be written. That
    reading leaves the record to the next one, which writes it, though
    the host did not change since."""
    state = tmp_path / "state"
    host, conn = modelled_host(tmp_path)
    n = Node(make_conf, state, host=host)
    parent = "pci_0000_85_00_0"
    made = "5e0e7c1a-0000-4000-8000-0000000000a1"
    full_disk(n)
    conn.nodeDeviceCreateXML(mdev_xml(parent, "nvidia-35", made), 0)
    guest = GuestSpec(uuid=str(uuid.uuid4()), name="outside", mdevs=[made])
    conn.defineXML(guest_xml.render_guest(guest))
    n.driver.domain_event(guest.uuid, True)
    n.update()
    assert made not in _seen_on_disk(state)
    full_disk(n, False)
    n.update()
    assert _seen_on_disk(state)[made] == (parent, "nvidia-35")
