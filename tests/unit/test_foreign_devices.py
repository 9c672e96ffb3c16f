"""Never touch what is not ours: mdevs and VF types another manager made
(an operator's mdevctl, Cyborg, another VF manager) are never handed out,
removed or retyped, and count as used capacity; the library records what
it made, and at its first start on a host takes the devices of the
enabled types as its own (#20)."""

from __future__ import annotations

import json
import uuid

from tests import records_helpers
from tests.helpers import M10_FREE_ON_86, Node
from vgpu_driver.model.device import Guest

P85 = "pci_0000_85_00_0"  # m10: nvidia-35, no mdev
PF = "pci_0000_41_00_0"  # l40-sriov
SWITCHED = """
[devices]
enabled_mdev_types = nvidia-35,nvidia-36
[mdev_nvidia-35]
device_addresses = 0000:84:00.0
[mdev_nvidia-36]
device_addresses = 0000:86:00.0,0000:85:00.0
"""


def _foreign_mdev(n, parent=P85, type_id="nvidia-35"):
    """An mdev made behind the library's back (mdevctl, Cyborg)."""
    inventory = n.host.discover()
    mdev = n.host.create_mdev(
        inventory.parent(parent), type_id, str(uuid.uuid4())
    )
    return mdev


def test_the_first_start_adopts_the_devices_already_there(make_conf, tmp_path):
    """Even of a type enabled only later: Nova reuses an mdev an operator
    or its own vGPU code made before (Nova's reshape test relies on it)."""
    state = tmp_path / "state"
    n = Node(make_conf, state, config="[devices]\nenabled_mdev_types =\n")
    made = records_helpers.made_on_disk(state)
    assert made == {m.uuid for m in n.host.discover().mdevs}
    enabled = Node(make_conf, state, host=n.host)
    assert M10_FREE_ON_86 in enabled.driver.free_mdevs()


def test_an_mdev_made_by_another_manager_is_never_handed_out(
    make_conf, tmp_path
):
    n = Node(make_conf, tmp_path / "state")
    theirs = _foreign_mdev(n)
    plan = n.update()[P85]
    assert plan.reserved == 1  # counted as used: Placement offers 3 of 4
    assert theirs.uuid not in n.driver.free_mdevs()
    devices = [
        d
        for i in range(3)
        for d in n.driver.allocate_mdevs(f"i{i}", n.alloc((P85, 1)))
    ]
    assert theirs.uuid not in {d.id for d in devices}
    assert all(d.created for d in devices)


def test_an_mdev_of_another_manager_is_never_removed(make_conf, tmp_path):
    """Not by a type switch, not by remove_unused when a guest of ours
    that used it goes, not by audit --fix."""
    state = tmp_path / "state"
    n = Node(make_conf, state, extra="[devices]\nremove_unused_mdevs = true\n")
    theirs = _foreign_mdev(n)
    n.update()
    # a guest of ours had it (an operator attached it) and is deleted
    n.host.note_guest(Guest("g1", "instance-1", (theirs.uuid,)))
    n.driver.guest_defined("g1")
    n.host.forget_guest("g1")
    n.driver.guest_undefined("g1")
    n.driver.release_mdevs("g1")
    assert theirs.uuid in {m.uuid for m in n.host.discover().mdevs}
    # 85 switched to nvidia-36: the old type's free mdevs go, not theirs
    switched = Node(
        make_conf,
        state,
        config=SWITCHED,
        host=n.host,
    )
    switched.update()
    assert theirs.uuid in {m.uuid for m in n.host.discover().mdevs}
    assert n.driver.binder.remove_free_mdevs([theirs.uuid]) == []


def test_ours_are_still_removed_when_unused(make_conf, tmp_path):
    n = Node(
        make_conf,
        tmp_path / "state",
        extra="[devices]\nremove_unused_mdevs = true\n",
    )
    [mine] = n.driver.allocate_mdevs("i1", n.alloc((P85, 1)))
    assert mine.created
    n.driver.release_mdevs("i1")
    assert mine.id not in {m.uuid for m in n.host.discover().mdevs}


def test_a_vf_another_manager_typed_is_never_used_nor_cleared(
    make_conf, tmp_path
):
    n = Node(make_conf, tmp_path / "state", "l40-sriov")
    pf = n.host.discover().pf(PF)
    free = [vf for vf in pf.vfs if not vf.current_type]
    theirs = free[0].address
    n.host.set_vf_type(theirs, 1150)  # an operator, by hand
    n.update()
    got = {
        d.id
        for i in range(3)
        for d in n.driver.allocate_mdevs(f"i{i}", n.alloc((PF, 1)))
    }
    assert theirs not in got
    # a guest of ours had it and goes: its type stays
    n.host.note_guest(Guest("g1", "instance-1", (), (theirs,)))
    n.driver.guest_defined("g1")
    n.host.forget_guest("g1")
    n.driver.guest_undefined("g1")
    n.driver.release_mdevs("g1")
    vfs = {vf.address: vf for vf in n.host.discover().pf(PF).vfs}
    assert vfs[theirs].current_type == 1150


def test_discover_and_audit_show_another_manager_s_devices(tmp_path, capsys):
    """The records say the m10's free nvidia-36 mdev is not the
    library's (another manager made it after the first start): discover
    says who made each mdev, audit lists it as left alone (no fixable
    finding)."""
    from vgpu_driver.cmd import main as cli

    state = tmp_path / "state"
    conf = tmp_path / "nova.conf"
    conf.write_text(
        f"[devices]\nenabled_mdev_types = nvidia-35\nstate_path = {state}\n"
    )
    args = ["--config-file", str(conf), "--host-description", "m10"]
    # the first start takes stock (its free nvidia-36 mdev, of a type 86
    # no longer serves, is a fixable finding then)
    assert cli.main([*args, "audit"]) == 1
    made = records_helpers.made_on_disk(state)
    made.discard(M10_FREE_ON_86)
    records_helpers.record_made(state, made)
    capsys.readouterr()
    assert cli.main([*args, "audit", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)  # another's: no finding
    assert M10_FREE_ON_86 in report["foreign"]
    assert M10_FREE_ON_86 not in {f["subject"] for f in report["findings"]}
    assert cli.main([*args, "discover", "--format", "json"]) == 0
    made_by = {
        m["uuid"]: m["made_by"]
        for m in json.loads(capsys.readouterr().out)["mdevs"]
    }
    assert made_by[M10_FREE_ON_86] == "another manager"
    assert "vgpu-driver" in made_by.values()


def test_the_devices_made_are_known_as_made_at_once(node):
    """What the library made is asked at every guest's change (kept
    frozen between): a device it makes is in it at once, one it removes
    gone from it."""
    n = node("m10", extra="[devices]\nremove_unused_mdevs = true\n")
    plan = next(p for p in n.update().values() if p.total > p.reserved)
    before = n.driver.binder.owned()
    [device] = n.driver.allocate_mdevs(
        "i1", n.alloc((plan.device, 1), rc=plan.resource_class)
    )
    assert device.created and n.driver.binder.owned() == before | {device.id}
    n.driver.release_mdevs("i1")
    assert n.driver.binder.owned() == before


def _made(state):
    return records_helpers.made_on_disk(state)


def test_the_mdevs_the_library_removes_leave_its_record(make_conf, tmp_path):
    """A free mdev of the library's removed (audit --fix, a type switch)
    is no longer listed as made: the record would grow with every mdev
    ever removed."""
    state = tmp_path / "state"
    n = Node(make_conf, state)
    mine = [
        d.id
        for i in range(2)
        for d in n.driver.allocate_mdevs(f"i{i}", n.alloc((P85, 1)))
    ]
    for i in range(2):
        n.driver.release_mdevs(f"i{i}")  # kept free for reuse
    assert set(mine) <= _made(state)
    assert n.driver.binder.remove_free_mdevs(mine[:1]) == mine[:1]
    assert mine[0] not in _made(state) and mine[1] in _made(state)
    # 85 switched to nvidia-36: its free nvidia-35 mdev goes
    Node(make_conf, state, config=SWITCHED, host=n.host)
    assert mine[1] not in {m.uuid for m in n.host.discover().mdevs}
    assert mine[1] not in _made(state)
    assert M10_FREE_ON_86 in _made(state)


NOT_ON_85 = """
[devices]
enabled_mdev_types = nvidia-35,nvidia-36
[mdev_nvidia-35]
device_addresses = 0000:84:00.0
[mdev_nvidia-36]
device_addresses = 0000:86:00.0
"""


def test_audit_fix_removes_a_free_mdev_of_ours_no_type_is_served_by(
    make_conf, tmp_path
):
    """85 no longer configured: the free mdev the library made there is
    an orphan (no refresh removes it: its parent serves no type), which
    ``audit --fix`` removes; another manager's there is left."""
    from vgpu_driver.cmd import audit as audit_cmd
    from vgpu_driver.model.audit import audit

    state = tmp_path / "state"
    n = Node(make_conf, state)
    [mine] = n.driver.allocate_mdevs("i1", n.alloc((P85, 1)))
    n.driver.release_mdevs("i1")
    theirs = _foreign_mdev(n)
    m = Node(make_conf, state, config=NOT_ON_85, host=n.host)
    inventory = m.driver.discover(rescan_guests=True)
    claims = m.driver.binder.claims()
    findings = audit(
        inventory,
        claims=claims,
        vf_types=m.driver.binder.vf_types,
        configured=m.driver.configured_types(inventory),
        device_of={},
        parent_of=audit_cmd.device_ids_on(m.driver, inventory),
        allocations=None,
        ours=m.driver.binder.owned(),
    )
    orphans = {f.subject for f in findings if f.kind == "orphaned_free_mdev"}
    assert orphans == {mine.id}
    fixed = audit_cmd.fix(m.driver, inventory, findings, claims)
    assert fixed == [f"removed free mdev {mine.id}"]
    left = {x.uuid for x in n.host.discover().mdevs}
    assert mine.id not in left and theirs.uuid in left
