"""The audit's rules on plain readings."""

from __future__ import annotations

from vgpu_driver.model.audit import audit
from vgpu_driver.model.device import (
    Guest,
    HostInventory,
    Mdev,
    PhysicalFunction,
    VirtualFunction,
)

INVENTORY = HostInventory(
    mdevs=(
        Mdev("m-used", "t1", "p1", "mdev_used"),
        Mdev("m-free", "t1", "p1", "mdev_free"),
        Mdev("m-old", "t0", "p2", "mdev_old"),
    ),
    pfs=(
        PhysicalFunction(
            "pf",
            "0000:41:00.0",
            # .4 is the guest's; .5 is typed and free (a bind's to reuse)
            vfs=(
                VirtualFunction("0000:41:00.4", 7),
                VirtualFunction("0000:41:00.5", 7),
            ),
        ),
    ),
    guests=(Guest("g1", "vm1", ("m-used",), ("0000:41:00.4",)),),
)
PARENT_OF = {"m-used": "p1", "m-free": "p1", "0000:41:00.4": "pf"}


def run(**changes):
    return {(f.kind, f.subject) for f in findings(**changes)}


def findings(**changes):
    kwargs = dict(
        claims={},
        vf_types={"0000:41:00.4": 7},
        configured={"p1": "t1", "p2": "t1"},
        device_of={"rp1": "p1", "rpf": "pf"},
        parent_of=PARENT_OF,
        allocations={"g1": {"rp1": 1, "rpf": 1}},
    )
    kwargs.update(changes)
    return audit(INVENTORY, **kwargs)


def test_a_consistent_host_has_only_its_stale_mdev():
    assert run() == {("orphaned_free_mdev", "m-old")}


def test_each_mismatch_is_found():
    found = run(
        allocations={"g1": {"rp1": 1}, "ghost": {"rp1": 2}},
        claims={
            "m-free": {"instance": "gone", "purpose": "spawn"},
        },
        vf_types={},
    )
    assert found == {
        ("orphaned_free_mdev", "m-old"),
        ("allocation_without_guest", "ghost"),
        ("guest_device_without_allocation", "g1"),
        ("claim_of_gone_instance", "m-free"),
        ("vf_type_unrecorded", "0000:41:00.4"),
    }


def test_fix_repairs_the_records_and_orphans_and_reports_allocations():
    """What ``audit --fix`` may repair: the library's records and its own
    orphaned free mdevs; Placement's allocations are only reported (the
    operator heals them with Nova's tools)."""
    found = findings(
        allocations={"g1": {"rp1": 1}, "ghost": {"rp1": 2}},
        claims={"m-free": {"instance": "gone", "purpose": "spawn"}},
        vf_types={},
    )
    assert {f.kind: f.fixable for f in found} == {
        "orphaned_free_mdev": True,
        "claim_of_gone_instance": True,
        "vf_type_unrecorded": True,
        "allocation_without_guest": False,
        "guest_device_without_allocation": False,
    }


def test_a_spawn_in_flight_is_no_mismatch():
    """Allocation and claim, no guest yet: a bind not finished."""
    found = run(
        allocations={"g1": {"rp1": 1, "rpf": 1}, "new": {"rp1": 1}},
        claims={"m-free": {"instance": "new", "purpose": "spawn"}},
    )
    assert found == {("orphaned_free_mdev", "m-old")}


def test_without_placement_only_host_checks_run():
    found = run(
        allocations=None,
        claims={"m-free": {"instance": "gone", "purpose": "spawn"}},
    )
    assert found == {("orphaned_free_mdev", "m-old")}


def test_a_free_typed_vf_is_no_finding():
    """A typed VF no guest uses is a bind's to reuse: its type is not
    recorded (it is cleared at release), and nothing is to fix."""
    assert ("vf_type_unrecorded", "0000:41:00.5") not in run(vf_types={})
    assert ("vf_type_unrecorded", "0000:41:00.4") in run(vf_types={})


def test_a_claimed_mdev_of_a_type_its_parent_no_longer_serves_is_kept():
    """A bind in flight (or a hard reboot's hold) claimed it: removing it
    would take a device from under its instance."""
    claim = {"instance": "g2", "purpose": "spawn"}
    found = run(claims={"m-old": claim}, allocations=None)
    assert ("orphaned_free_mdev", "m-old") not in found


def test_a_guest_outside_nova_is_named_not_sent_to_heal_allocations():
    """No Nova metadata: no allocation to heal (heal_allocations knows
    Nova's instances only); the audit says its devices are reserved."""
    import dataclasses

    [guest] = INVENTORY.guests
    outside = dataclasses.replace(
        INVENTORY, guests=(dataclasses.replace(guest, nova=False),)
    )
    found = audit(
        outside,
        claims={},
        vf_types={"0000:41:00.4": 7},
        configured={"p1": "t1", "p2": "t1"},
        device_of={"rp1": "p1", "rpf": "pf"},
        parent_of=PARENT_OF,
        allocations={},
    )
    assert {(f.kind, f.subject) for f in found} == {
        ("orphaned_free_mdev", "m-old"),
        ("guest_outside_nova", "g1"),
    }
    [finding] = [f for f in found if f.kind == "guest_outside_nova"]
    assert "2 device(s)" in finding.detail and not finding.fixable


def test_a_nova_guest_placement_holds_nothing_for_is_named_per_device():
    """Placement answered and holds nothing for a Nova guest that uses an
    mdev and a VF: each device it uses is a finding (the allocation is
    for the operator to heal), not skipped as a guest outside Nova is."""
    found = findings(allocations={})
    kinds = [(f.kind, f.subject) for f in found]
    assert kinds.count(("guest_device_without_allocation", "g1")) == 2
    details = " ".join(
        f.detail for f in found if f.kind == "guest_device_without_allocation"
    )
    assert "p1" in details and "pf" in details


def test_a_finding_as_a_dict_carries_every_field():
    """What ``audit --json`` prints of each finding."""
    [finding] = findings()
    assert finding.as_dict() == {
        "kind": "orphaned_free_mdev",
        "subject": "m-old",
        "detail": finding.detail,
        "fixable": True,
    }
