"""An instance's devices through its life after the bind: released (the
mdev kept or removed), claimed until its guest is defined with them,
made again or dropped at a restart, kept through live migration,
resize and a type change, VF types restored after a reboot, and guests
defined or undefined behind the library's back."""

from __future__ import annotations

from tests.dense_service import dense_node
from tests.domains import hand_made_domain_xml
from tests.helpers import M10_FREE_ON_86 as FREE_ON_86
from tests.helpers import Node
from tests.records_helpers import claims_on_disk
from vgpu_driver.model.device import Guest
from vgpu_driver.sim import guest_xml


def test_release_keeps_the_mdev_for_reuse_or_removes_it(
    node, make_conf, tmp_path
):
    n = node()
    [device] = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_85_00_0", 1)))
    assert n.driver.release_mdevs("i1") == [device.id]
    assert device.id in n.mdevs()
    [again] = n.driver.allocate_mdevs("i2", n.alloc(("pci_0000_85_00_0", 1)))
    assert again.id == device.id and not again.created
    m = Node(
        make_conf,
        tmp_path / "other",
        "m10",
        extra="[devices]\nremove_unused_mdevs = true\n",
    )
    [device] = m.driver.allocate_mdevs("i1", m.alloc(("pci_0000_85_00_0", 1)))
    m.driver.release_mdevs("i1")
    assert device.id not in m.mdevs()


def test_claim_holds_until_the_guest_is_defined_with_it(node):
    n = node()
    [device] = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_86_00_0", 1)))
    n.driver.discover()
    assert device.id in n.driver.binder.claims()  # no domain yet
    n.host.note_guest(Guest("i1", "instance-1", (device.id,)))
    n.driver.discover()
    assert device.id not in n.driver.binder.claims()
    # and the device stays taken: it is in the domain now
    [other] = n.driver.allocate_mdevs("i2", n.alloc(("pci_0000_86_00_0", 1)))
    assert other.id != device.id


def test_restart_recreates_missing_mdevs_with_same_uuid(
    node, make_conf, tmp_path
):
    n = node()
    [device] = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_85_00_0", 1)))
    n.host.note_guest(Guest("i1", "instance-1", (device.id,)))
    n.driver.discover()
    guests_mdevs = {u for g in n.host.discover().guests for u in g.mdevs}
    n.host.reboot(keep_persistent=False)  # no mdev survives
    assert not set(n.mdevs()) & guests_mdevs
    restarted = Node(make_conf, tmp_path / "state", "m10", host=n.host)
    done = restarted.driver.init_host()
    assert set(done["recreated"]) == guests_mdevs
    after = n.mdevs()
    assert guests_mdevs <= set(after)
    assert after[device.id].parent == "pci_0000_85_00_0"
    assert after[device.id].type_id == "nvidia-35"


def test_restart_reports_the_mdevs_it_cannot_make_again_and_goes_on(
    node, make_conf, tmp_path
):
    """After a reboot that kept no mdev: one whose pGPU is gone too
    (unplugged), and those the restarted service has no record of (its
    state_path lost), cannot be made again: each is reported failed and
    logged; the others are made again."""
    n = node()
    [there] = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_85_00_0", 1)))
    [gone] = n.driver.allocate_mdevs("i2", n.alloc(("pci_0000_86_00_0", 1)))
    n.host.note_guest(Guest("i1", "instance-1", (there.id,)))
    n.host.note_guest(Guest("i2", "instance-2", (gone.id,)))
    n.driver.discover()
    n.host.reboot(keep_persistent=False)
    n.host.unplug("pci_0000_86_00_0")
    restarted = Node(make_conf, tmp_path / "state", "m10", host=n.host)
    done = restarted.driver.init_host()
    assert gone.id in done["failed"] and there.id in done["recreated"]
    assert there.id in n.mdevs() and gone.id not in n.mdevs()
    unplugged = {u for g in n.host.discover().guests for u in g.mdevs} - set(
        n.mdevs()
    )
    assert unplugged == set(done["failed"])  # all on the unplugged pGPU
    # the records lost: no guest's mdev can be placed
    n.host.reboot(keep_persistent=False)
    lost = Node(make_conf, tmp_path / "elsewhere", "m10", host=n.host)
    done = lost.driver.init_host()
    needed = {u for g in n.host.discover().guests for u in g.mdevs}
    assert set(done["failed"]) == needed and done["recreated"] == []


def test_restart_drops_claims_of_instances_that_are_gone(
    node, make_conf, tmp_path
):
    n = node()
    n.driver.allocate_mdevs("kept", n.alloc(("pci_0000_85_00_0", 1)))
    n.driver.allocate_mdevs("gone", n.alloc(("pci_0000_85_00_0", 1)))
    # an incoming live migration: its instance is still the source's
    n.driver.claim_for_live_migration(
        "incoming", {"src-a": "nvidia-35"}, n.alloc(("pci_0000_85_00_0", 1))
    )
    restarted = Node(make_conf, tmp_path / "state", "m10", host=n.host)
    done = restarted.driver.init_host(instances=["kept"])
    assert len(done["dropped_claims"]) == 1
    owners = {c["instance"] for c in restarted.driver.binder.claims().values()}
    assert owners == {"kept", "incoming"}
    # and on disk: the next start, or another process, reads the same
    on_disk = claims_on_disk(tmp_path / "state")
    assert {c["instance"] for c in on_disk.values()} == {"kept", "incoming"}


def test_vf_types_are_restored_after_a_reboot(node, make_conf, tmp_path):
    n = node("l40-sriov")
    [device] = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_41_00_0", 2)))[
        :1
    ]
    n.host.reboot()
    assert all(vf.current_type == 0 for vf in n.host.discover().pfs[0].vfs)
    restarted = Node(make_conf, tmp_path / "state", "l40-sriov", host=n.host)
    restored = restarted.driver.restore_vf_types()
    assert device.id in restored
    vfs = {vf.address: vf for vf in n.host.discover().pfs[0].vfs}
    assert vfs[device.id].current_type == 1150


def test_live_migration_claim_survives_a_restart(node, make_conf, tmp_path):
    n = node()
    source = {"src-a": "nvidia-35", "src-b": "nvidia-35"}
    mapping = n.driver.claim_for_live_migration(
        "mig", source, n.alloc(("pci_0000_85_00_0", 2))
    )
    assert set(mapping) == {"src-a", "src-b"}
    assert len(set(mapping.values())) == 2
    restarted = Node(make_conf, tmp_path / "state", "m10", host=n.host)
    claims = restarted.driver.binder.claims()
    assert set(mapping.values()) <= set(claims)
    assert {claims[d]["purpose"] for d in mapping.values()} == {"migration"}
    # the claimed devices are not handed to anyone else meanwhile
    others = restarted.driver.allocate_mdevs(
        "other", restarted.alloc(("pci_0000_85_00_0", 2))
    )
    assert not {d.id for d in others} & set(mapping.values())
    released = restarted.driver.rollback_live_migration_at_destination("mig")
    assert set(released) == set(mapping.values())
    assert not set(mapping.values()) & set(restarted.driver.binder.claims())


def test_live_migration_success_ends_the_claim(node):
    n = node()
    mapping = n.driver.claim_for_live_migration(
        "mig", {"src": "nvidia-36"}, n.alloc(("pci_0000_86_00_0", 1))
    )
    n.driver.live_migration_succeeded("mig")
    n.host.note_guest(Guest("mig", "instance-m", tuple(mapping.values())))
    n.driver.discover()
    assert n.driver.binder.claims() == {}


def test_type_change_with_guests_in_place(node, make_conf, tmp_path):
    n = node()
    assert FREE_ON_86 in n.mdevs()
    switched = """
        [devices]
        enabled_mdev_types = nvidia-35
    """
    m = Node(
        make_conf, tmp_path / "state", "m10", config=switched, host=n.host
    )
    plans = m.update()
    # 86: one nvidia-36 in use (kept, reserved), its free one removed
    assert (
        plans["pci_0000_86_00_0"].total,
        plans["pci_0000_86_00_0"].reserved,
    ) == (1, 1)
    assert FREE_ON_86 not in m.mdevs()
    guest = next(
        g for g in n.host.discover().guests if g.name == "instance-00000022"
    )
    assert set(guest.mdevs) <= set(m.mdevs())  # the guest keeps working
    m.driver.release_mdevs(guest.uuid)
    provider = m.rp("pci_0000_86_00_0")
    # the freed nvidia-36 is removed and the parent switches in one pass,
    # on the same provider
    plans = m.update()
    assert plans["pci_0000_86_00_0"].type_id == "nvidia-35"
    assert plans["pci_0000_86_00_0"].reserved == 0
    assert m.rp("pci_0000_86_00_0") == provider


def test_a_parent_whose_free_mdevs_held_all_its_room_switches_in_one_pass(
    node,
):
    """Free mdevs of the old type are all a parent has (one type at a
    time on an NVIDIA pGPU: the new type has no room while they run):
    removed before the pass plans, its provider offers the new type at
    once and is never dropped (Placement would see it deleted and made
    again under another uuid)."""
    n = node()
    bound = n.driver.allocate_mdevs(
        "soon-gone", n.alloc(("pci_0000_85_00_0", 1))
    )
    n.driver.release_mdevs("soon-gone")
    n.update()
    provider = n.rp("pci_0000_85_00_0")
    n.conf.set_override("enabled_mdev_types", ["nvidia-36"], "devices")
    n.conf.set_override("device_addresses", ["0000:85:00.0"], "mdev_nvidia-36")
    n.driver.reload_config()
    plan = n.update()["pci_0000_85_00_0"]
    assert (plan.type_id, plan.total, plan.reserved) == ("nvidia-36", 16, 0)
    assert n.rp("pci_0000_85_00_0") == provider
    assert {d.id for d in bound}.isdisjoint(n.mdevs())


def test_resize_binds_on_destination_and_revert_reuses_source(node):
    source, destination = node(), node()
    guest = next(
        g
        for g in source.host.discover().guests
        if g.name == "instance-00000021"
    )
    new = destination.driver.finish_migration(
        guest.uuid, destination.alloc(("pci_0000_85_00_0", 1))
    )
    assert len(new) == 1
    # revert: the source's devices, even if one went away meanwhile
    [gone] = [source.mdevs()[u] for u in guest.mdevs]
    source.host.remove_mdev(gone)
    devices = source.driver.finish_revert_migration(guest.uuid)
    assert [d.id for d in devices] == list(guest.mdevs)
    destination.driver.release_mdevs(guest.uuid)
    assert destination.driver.binder.claims() == {}


def test_restore_command_reapplies_recorded_vf_types(capsys):
    from vgpu_driver.cmd import main as cli

    assert cli.main(["--host-description", "l40-sriov", "restore"]) == 0
    out = capsys.readouterr().out
    # the guest's VF carries L40S-4Q: recorded; nothing was lost to restore
    assert "1 VF type(s) recorded, 0 re-applied" in out


def test_restart_starts_defined_mdevs_guests_need(node, make_conf, tmp_path):
    n = node()
    [device] = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_85_00_0", 1)))
    n.host.note_guest(Guest("i1", "instance-1", (device.id,)))
    n.host.reboot(autostart=False)  # persistent, but only defined now
    assert n.mdevs()[device.id].active is False
    restarted = Node(make_conf, tmp_path / "state", "m10", host=n.host)
    done = restarted.driver.init_host()
    assert device.id in done["started"]
    assert n.mdevs()[device.id].active is True


def test_a_guest_defined_behind_the_library_s_back_is_not_bound_again(
    make_conf, tmp_path
):
    """An operator's ``virsh define`` of a guest using free mdevs,
    reported by libvirt's lifecycle event: the next bind does not hand
    those mdevs out, and reads that one domain, not every guest. Its
    undefine frees them again, read in one call."""
    n = dense_node(make_conf, tmp_path, 1, 6, 2)  # one parent, 4 mdevs free
    host = n.host
    [parent] = n.update()
    free = sorted(n.driver.free_mdevs())
    assert len(free) == 4
    *taken, left = free
    outsider = "77777777-0000-0000-0000-000000000001"
    domain = host.connection().defineXML(
        hand_made_domain_xml(outsider, "by-hand", taken)
    )
    n.driver.domain_event(outsider, True)  # as a lifecycle callback does
    host.calls.clear()
    assert n.driver.free_mdevs() == {left}
    # that guest alone: no guest listing, no parent read again
    assert dict(host.calls) == {"lookupByUUIDString": 1, "domain.XMLDesc": 1}
    mine = "77777777-0000-0000-0000-000000000002"
    [device] = n.driver.allocate_mdevs(mine, n.alloc((parent, 1)))
    assert device.id == left
    guest_xml.delete(domain)
    n.driver.domain_event(outsider, False)
    host.calls.clear()
    assert n.driver.free_mdevs() == set(taken)
    # one call finds it gone (a running guest undefined runs on)
    assert dict(host.calls) == {"domain.XMLDesc": 1}
    # the caller's own define, reported by both its hook and the event:
    # read once
    host.connection().defineXML(hand_made_domain_xml(mine, "mine", [left]))
    n.driver.domain_event(mine, True)
    host.calls.clear()
    assert n.driver.guest_defined(mine) == [left]  # its claim ends
    assert n.driver.free_mdevs() == set(taken)
    assert dict(host.calls) == {"lookupByUUIDString": 1, "domain.XMLDesc": 1}


def test_an_undefine_event_older_than_the_caller_s_define_is_ignored(
    make_conf, tmp_path
):
    """Undefined by someone, then defined again by the caller (a hard
    reboot's order), the undefine's event applied last: the guest keeps
    its device, the newer reading wins."""
    n = dense_node(make_conf, tmp_path, 1, 4, 2)
    n.update()
    guest = n.driver.discover().guests[0]
    [device] = guest.mdevs
    assert device not in n.driver.free_mdevs()
    n.driver.domain_event(guest.uuid, False)  # queued, not yet applied
    n.driver.guest_defined(guest.uuid)  # the caller's newer reading
    assert device not in n.driver.free_mdevs()
    # and the host's reading agrees at the next periodic
    assert guest in n.driver.discover().guests
    assert device not in n.driver.free_mdevs()


def test_a_same_host_resize_keeps_the_devices_the_resized_guest_runs_on(
    node,
):
    """Same host: the instance binds the new flavor's device while its
    guest still has the old one; the guest redefined with the new device
    hands the old one back, and nothing the guest runs on is released."""
    n = node()
    guest = next(
        g for g in n.host.discover().guests if g.name == "instance-00000021"
    )
    [old] = guest.mdevs
    [new] = n.driver.finish_migration(
        guest.uuid, n.alloc(("pci_0000_85_00_0", 1))
    )
    assert new.id != old
    assert old not in n.driver.free_mdevs()  # still the guest's until now
    n.host.note_guest(Guest(guest.uuid, guest.name, (new.id,)))
    n.driver.guest_defined(guest.uuid)
    assert n.driver.binder.claims() == {}  # the domain holds the new one
    assert old in n.driver.free_mdevs()  # the old one is free again
    assert new.id not in n.driver.free_mdevs()
    assert n.driver.instance_devices()[guest.uuid] == {
        "in_use": [new.id],
        "claimed": [],
    }


def test_a_confirmed_move_lets_the_source_s_devices_go(node):
    """Once the move is confirmed, the source's guest is gone and its
    devices are let go: the call names them."""
    source = node()
    guest = next(
        g
        for g in source.host.discover().guests
        if g.name == "instance-00000021"
    )
    source.host.forget_guest(guest.uuid)
    released = source.driver.confirm_migration(guest.uuid)
    assert sorted(released) == sorted(guest.mdevs)
