"""``vgpu-driver restore`` (and a start's recovery) beside the compute
service and beside each other: what it read is its plan, and each act
is checked again under the records' lock (compare-and-act) before the
host is touched: a VF typed again, an mdev made again or started."""

from __future__ import annotations

from tests.helpers import Node
from tests.races import beside, card_full, vf_types_of
from vgpu_driver.model.device import Guest

L40_PF = "pci_0000_41_00_0"  # l40-sriov


def _typed_then_lost(make_conf, state, count: int):
    """The l40-sriov host, ``count`` instances each bound to a VF this
    library typed, then every type lost (the driver reloaded): the
    records still give them. Returns the node and instance -> VF."""
    n = Node(make_conf, state, "l40-sriov")
    made = {}
    k = 0
    while len(made) < count:
        [vf] = n.driver.allocate_mdevs(f"i{k}", n.alloc((L40_PF, 1)))
        if vf.created:
            made[f"i{k}"] = vf.id
        k += 1
    for address in made.values():
        n.host.set_vf_type(address, 0)  # behind the library's back
    return n, made


def _bind_typing(n, set_vf_type):
    """Instances bound until one is given a VF this library types, with
    ``set_vf_type`` as the host's for each bind (the ones before reuse a
    typed VF). Returns that VF and the number of its instance."""
    k = 0
    while True:
        n.host.set_vf_type = set_vf_type
        [vf] = n.driver.allocate_mdevs(f"i{k}", n.alloc((L40_PF, 1)))
        if vf.created:
            return vf, k
        k += 1


def test_restore_leaves_a_vf_released_since_it_read_the_records(
    make_conf, tmp_path, monkeypatch
):
    """``restore`` read two VFs' recorded types, and once it typed the
    first the service releases the second's instance (the release drops
    its recorded type and clears it). Restore then leaves the second:
    typed again, it would be a typed VF no record names (another
    manager's to the service, reserved and never reused)."""
    from vgpu_driver.service import recovery

    n, made = _typed_then_lost(make_conf, tmp_path, 2)
    first, second = sorted(made.values())
    owner = next(i for i, a in made.items() if a == second)
    restorer = beside(n, make_conf)
    inventory = restorer.discover(rescan_guests=True)
    restore, raced = recovery._restore, []

    def released_after_the_first(ledger, address, number):
        if raced:
            return restore(ledger, address, number)
        done = restore(ledger, address, number)
        raced.append(n.driver.release_mdevs(owner))
        return done

    monkeypatch.setattr(recovery, "_restore", released_after_the_first)
    assert restorer.binder.restore_vf_types(inventory) == [first]
    assert raced == [[second]]  # the race happened
    types = vf_types_of(n)
    assert types[first] != 0
    assert types[second] == 0
    assert second not in n.driver.binder.vf_types


def test_a_bind_takes_the_vf_restore_typed_for_it_meanwhile(
    make_conf, tmp_path
):
    """A bind recorded a VF's type and, before it types the VF,
    ``restore`` (reading that record) types it: the bind finds the VF
    typed as it wants and goes on, where a refusal would undo it."""
    n = Node(make_conf, tmp_path, "l40-sriov")
    restorer = beside(n, make_conf)
    set_vf_type = n.host.set_vf_type
    raced = []

    def restored_first(address, number):
        n.host.set_vf_type = set_vf_type  # once
        inventory = restorer.discover(rescan_guests=True)
        raced.extend(restorer.binder.restore_vf_types(inventory))
        set_vf_type(address, number)

    vf, k = _bind_typing(n, restored_first)
    assert raced == [vf.id]
    assert vf_types_of(n)[vf.id] != 0
    assert n.driver.binder.claims()[vf.id]["instance"] == f"i{k}"


def test_two_restores_at_once_type_each_vf_once(make_conf, tmp_path):
    """Two ``restore`` runs read the host before either typed a VF (the
    boot unit and an operator's): the second finds the VF typed when it
    comes to it and leaves it, reporting no failure."""
    n, made = _typed_then_lost(make_conf, tmp_path, 1)
    [address] = made.values()
    first, second = beside(n, make_conf), beside(n, make_conf)
    read_first = first.discover(rescan_guests=True)
    read_second = second.discover(rescan_guests=True)
    assert first.binder.restore_vf_types(read_first) == [address]
    failed = []
    assert second.binder.restore_vf_types(read_second, failed) == []
    assert failed == []
    assert vf_types_of(n)[address] != 0


def test_restore_leaves_the_mdev_of_a_guest_deleted_since_it_read(
    make_conf, tmp_path
):
    """After a reboot that kept no mdev, ``restore`` read a guest that
    needs its mdev made again; before it comes to it the service deletes
    that instance. The mdev is not made again (an mdev no guest needs,
    which unused mdevs removed would never have kept); the other guests'
    are."""
    n = Node(make_conf, tmp_path / "state")
    [device] = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_85_00_0", 1)))
    n.host.note_guest(Guest("i1", "instance-1", (device.id,)))
    n.driver.discover()
    n.host.reboot(keep_persistent=False)  # no mdev survives
    restorer = beside(n, make_conf)
    inventory = restorer.discover(rescan_guests=True)
    others = {u for g in inventory.guests for u in g.mdevs} - {device.id}
    assert others  # the host's own guests need theirs made again too
    n.host.forget_guest("i1")  # the service deletes the instance
    n.driver.guest_undefined("i1")
    n.driver.release_mdevs("i1")
    done = restorer.binder.recover(inventory, restorer.seen_mdevs())
    assert set(done["recreated"]) == others
    assert done["failed"] == []
    assert device.id not in n.mdevs()
    assert others <= set(n.mdevs())


def test_two_recoveries_at_once_make_each_gone_mdev_once(make_conf, tmp_path):
    """After a reboot that kept no mdev, two recoveries read the host
    before either made anything (a start and ``restore``): the second
    finds each mdev made again when it comes to it and leaves it,
    reporting no failure."""
    n = Node(make_conf, tmp_path / "state")
    first, second = beside(n, make_conf), beside(n, make_conf)
    n.host.reboot(keep_persistent=False)  # no mdev survives
    read_first = first.discover(rescan_guests=True)
    read_second = second.discover(rescan_guests=True)
    needed = {u for g in read_first.guests for u in g.mdevs}
    assert needed
    done = first.binder.recover(read_first, first.seen_mdevs())
    assert set(done["recreated"]) == needed
    again = second.binder.recover(read_second, second.seen_mdevs())
    assert (again["recreated"], again["failed"]) == ([], [])
    assert needed <= set(n.mdevs())


def test_two_recoveries_at_once_start_each_defined_mdev_once(
    make_conf, tmp_path
):
    """After a reboot that left the guests' mdevs only defined, two
    recoveries read the host before either started one: the second
    finds each started when it comes to it and leaves it, reporting no
    failure."""
    n = Node(make_conf, tmp_path / "state")
    for k, parent in enumerate(("pci_0000_85_00_0", "pci_0000_86_00_0")):
        [made] = n.driver.allocate_mdevs(f"i{k}", n.alloc((parent, 1)))
        n.host.note_guest(Guest(f"i{k}", f"instance-{k}", (made.id,)))
    first, second = beside(n, make_conf), beside(n, make_conf)
    n.host.reboot(autostart=False)  # persistent, but only defined now
    read_first = first.discover(rescan_guests=True)
    read_second = second.discover(rescan_guests=True)
    stopped = {m.uuid for m in read_first.mdevs if not m.active}
    needed = {u for g in read_first.guests for u in g.mdevs} & stopped
    assert needed
    done = first.binder.recover(read_first, first.seen_mdevs())
    assert set(done["started"]) == needed
    again = second.binder.recover(read_second, second.seen_mdevs())
    assert (again["started"], again["failed"]) == ([], [])
    assert all(n.mdevs()[u].active for u in needed)


def test_restore_leaves_defined_the_mdev_of_a_guest_deleted_since_it_read(
    make_conf, tmp_path
):
    """After a reboot that left the guests' mdevs only defined,
    ``restore`` read a guest that needs its mdev started; before it comes
    to it the service deletes that instance. That mdev is not started
    (no guest needs it); the other guest's comes back."""
    n = Node(make_conf, tmp_path / "state")
    made = {}
    for k, parent in enumerate(("pci_0000_85_00_0", "pci_0000_86_00_0")):
        [device] = n.driver.allocate_mdevs(f"i{k}", n.alloc((parent, 1)))
        n.host.note_guest(Guest(f"i{k}", f"instance-{k}", (device.id,)))
        made[f"i{k}"] = device.id
    n.driver.discover()
    n.host.reboot(autostart=False)  # persistent, but only defined now
    restorer = beside(n, make_conf)
    inventory = restorer.discover(rescan_guests=True)
    [stopped] = [m for m in inventory.mdevs if m.uuid == made["i0"]]
    assert not stopped.active
    n.host.forget_guest("i0")  # the service deletes the instance
    n.driver.guest_undefined("i0")
    n.driver.release_mdevs("i0")
    done = restorer.binder.recover(inventory, restorer.seen_mdevs())
    assert made["i0"] not in done["started"]
    # (i1's mdev, free before its bind, was not persistent: made again)
    assert made["i1"] in done["started"] + done["recreated"]
    assert done["failed"] == []
    assert n.mdevs()[made["i1"]].active
    assert not n.mdevs()[made["i0"]].active


def test_restore_leaves_a_bind_s_vf_it_cannot_type_to_the_bind(
    make_conf, tmp_path
):
    """A bind recorded a VF's type and, before it types the VF,
    ``restore`` tries to (reading that record) and the card has no room
    left (another VF took it: a card in mixed-size mode). That is the
    bind's failure to report, and undo: restore reports none."""
    n = Node(make_conf, tmp_path, "l40-sriov")
    restorer = beside(n, make_conf)
    set_vf_type, failed = n.host.set_vf_type, []

    def restore_finds_no_room(address, number):
        n.host.set_vf_type = card_full  # (restore's attempt)
        inventory = restorer.discover(rescan_guests=True)
        restorer.binder.restore_vf_types(inventory, failed)
        n.host.set_vf_type = set_vf_type
        set_vf_type(address, number)

    _bind_typing(n, restore_finds_no_room)
    assert n.host.set_vf_type is set_vf_type  # restore came to it
    assert failed == []


def test_restore_reports_a_guest_s_vf_it_cannot_type(make_conf, tmp_path):
    """A guest's VF lost its type (a reboot); ``restore`` cannot give it
    back (no room): that is a failure, reported."""
    n, made = _typed_then_lost(make_conf, tmp_path, 1)
    [(instance, address)] = made.items()
    n.host.note_guest(Guest(instance, "guest", pci_devices=(address,)))
    n.driver.guest_defined(instance)  # (its claim ends)
    assert instance not in {
        c["instance"] for c in n.driver.binder.claims().values()
    }
    restorer = beside(n, make_conf)
    n.host.set_vf_type = card_full
    failed = []
    restorer.binder.restore_vf_types(
        restorer.discover(rescan_guests=True), failed
    )
    assert len(failed) == 1 and failed[0].startswith(f"{address}: ")
