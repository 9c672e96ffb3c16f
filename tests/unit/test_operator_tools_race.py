"""The operator's own tools run beside the compute service: what
``audit --fix`` repairs it repairs only if what it read still holds
(compare-and-act under the records' lock).

Each test reads as the audit reads, lets the service change the host in
between, then fixes: the order a loop of ``audit --fix`` beside binds
and releases hits sooner or later."""

from __future__ import annotations

from tests.helpers import Node, new_tree
from tests.races import (
    audit_read,
    beside,
    vf_release_in_flight,
    vf_types_of,
)
from vgpu_driver.cmd.audit import fix
from vgpu_driver.model.device import Guest

PARENT = "pci_0000_86_00_0"  # m10: nvidia-36
FREE_ON_86 = "386818c0-9f18-5b12-8c04-386dbef1b1ab"
# the auditor's configuration gives 86 another type: FREE_ON_86 is then
# an orphan to it (a second configuration, or one just changed)
OTHER_TYPE = """
[devices]
enabled_mdev_types = nvidia-35
[mdev_nvidia-35]
device_addresses = 0000:84:00.0,0000:85:00.0,0000:86:00.0
"""


def test_a_claim_given_to_another_instance_since_the_audit_is_kept(
    make_conf, tmp_path
):
    n = Node(make_conf, tmp_path / "state")
    [d] = n.driver.allocate_mdevs("gone", n.alloc((PARENT, 1)))
    assert d.id == FREE_ON_86  # the free mdev is reused
    auditor = beside(n, make_conf)
    inventory, claims, findings = audit_read(auditor)
    assert ("claim_of_gone_instance", FREE_ON_86) in {
        (f.kind, f.subject) for f in findings
    }
    # the service: the stale instance is deleted, a new one gets its mdev
    n.driver.release_mdevs("gone")
    [again] = n.driver.allocate_mdevs("new", n.alloc((PARENT, 1)))
    assert again.id == FREE_ON_86
    assert fix(auditor, inventory, findings, claims) == []
    assert n.driver.binder.claims()[FREE_ON_86]["instance"] == "new"


def test_a_claim_whose_instance_has_a_guest_since_the_audit_is_kept(
    make_conf, tmp_path
):
    n = Node(make_conf, tmp_path / "state")
    n.driver.allocate_mdevs("late", n.alloc((PARENT, 1)))
    auditor = beside(n, make_conf)
    inventory, claims, findings = audit_read(auditor)
    # the instance's guest appears (defined without that device yet)
    n.host.note_guest(Guest("late", "instance-late", ()))
    assert fix(auditor, inventory, findings, claims) == []
    assert FREE_ON_86 in n.driver.binder.claims()


def test_a_stale_claim_still_as_read_is_dropped(make_conf, tmp_path):
    n = Node(make_conf, tmp_path / "state")
    n.driver.allocate_mdevs("gone", n.alloc((PARENT, 1)))
    auditor = beside(n, make_conf)
    inventory, claims, findings = audit_read(auditor)
    assert fix(auditor, inventory, findings, claims) == [
        f"dropped the claim on {FREE_ON_86}"
    ]
    assert n.driver.binder.claims() == {}


def test_an_orphan_claimed_by_the_service_since_the_audit_stays(
    make_conf, tmp_path
):
    n = Node(make_conf, tmp_path / "state")
    auditor = beside(n, make_conf, OTHER_TYPE)
    inventory, claims, findings = audit_read(auditor)
    assert ("orphaned_free_mdev", FREE_ON_86) in {
        (f.kind, f.subject) for f in findings
    }
    [d] = n.driver.allocate_mdevs("i1", n.alloc((PARENT, 1)))
    assert d.id == FREE_ON_86
    assert fix(auditor, inventory, findings, claims) == []
    assert FREE_ON_86 in n.mdevs()


def test_an_orphan_a_guest_took_since_the_audit_stays(make_conf, tmp_path):
    n = Node(make_conf, tmp_path / "state")
    auditor = beside(n, make_conf, OTHER_TYPE)
    inventory, claims, findings = audit_read(auditor)
    n.host.note_guest(Guest("by-hand", "instance-by-hand", (FREE_ON_86,)))
    assert fix(auditor, inventory, findings, claims) == []
    assert FREE_ON_86 in n.mdevs()


def test_a_free_mdev_a_tool_removed_is_not_reused_after_a_guest_defined(
    make_conf, tmp_path
):
    """``audit --fix`` (another process) removes a free mdev of ours;
    then Nova defines a spawn's guest: ``guest_defined`` reads the host
    again (the records changed under it), which ends the spawn's claim,
    and says so (it once returned nothing: the reading had ended it
    first); the next bind makes a device, it does not reuse the one
    gone."""
    n = Node(make_conf, tmp_path / "state")
    [d] = n.driver.allocate_mdevs("first", n.alloc((PARENT, 1)))
    assert d.id == FREE_ON_86  # the free mdev is reused
    n.driver.release_mdevs("first")
    # a spawn takes FREE_ON_86 again; another instance's mdev is made
    # and released (a free mdev of ours), and the tool removes it
    [spawned] = n.driver.allocate_mdevs("spawned", n.alloc((PARENT, 1)))
    assert spawned.id == FREE_ON_86
    [made] = n.driver.allocate_mdevs("other", n.alloc((PARENT, 1)))
    n.driver.release_mdevs("other")  # made is a free mdev of ours now
    auditor = beside(n, make_conf)
    assert auditor.binder.remove_free_mdevs([made.id]) == [made.id]
    n.host.note_guest(Guest("spawned", "instance-spawned", (spawned.id,)))
    assert n.driver.guest_defined("spawned") == [spawned.id]
    assert n.driver.guest_defined("spawned") == []  # defined again: none
    [again] = n.driver.allocate_mdevs("next", n.alloc((PARENT, 1)))
    assert again.id != made.id and again.created


def test_a_failed_bind_undoes_only_the_claims_that_are_still_its_own(
    make_conf, tmp_path, monkeypatch
):
    """A bind of two mdevs takes the free one and makes a second; while
    the host makes it, another process lets the instance go (a release,
    or ``audit --fix`` dropping a claim it found stale) and binds the
    free mdev to another instance. The make then fails: the bind's undo
    drops the claims still its own, not the other instance's."""
    from vgpu_driver.exception import DeviceOperationFailed

    n = Node(make_conf, tmp_path / "state")
    other = beside(n, make_conf)  # a second process on the same records
    other.update_provider_tree(new_tree(), "node1")
    given = []

    def meanwhile(parent, type_id, uuid):
        other.release_mdevs("i1")
        given.extend(other.allocate_mdevs("i2", n.alloc((PARENT, 1))))
        raise DeviceOperationFailed(
            action="create mdev", device=uuid, reason="EIO"
        )

    monkeypatch.setattr(n.host, "create_mdev", meanwhile)
    try:
        n.driver.allocate_mdevs("i1", n.alloc((PARENT, 2)))
    except DeviceOperationFailed:
        pass
    else:
        raise AssertionError("the bind did not fail")
    assert [d.id for d in given] == [FREE_ON_86]
    claims = n.driver.binder.claims()
    assert {k: c["instance"] for k, c in claims.items()} == {FREE_ON_86: "i2"}


def test_audit_fix_leaves_a_release_in_flight_to_its_process(
    make_conf, tmp_path, monkeypatch
):
    """A release recorded and being carried out when ``audit --fix``
    finds its claim's instance gone: the claim is not dropped (a bind
    would take the VF while its type is cleared) and the VF is left to
    the releasing thread, which finishes it."""
    n, vf, finish = vf_release_in_flight(make_conf, tmp_path, monkeypatch)
    auditor = beside(n, make_conf)
    inventory, claims, findings = audit_read(auditor)
    assert ("claim_of_gone_instance", vf.id) in {
        (f.kind, f.subject) for f in findings
    }
    assert fix(auditor, inventory, findings, claims) == []
    assert n.driver.binder.claims()[vf.id]["purpose"] == "release"
    assert vf_types_of(n)[vf.id] != 0
    finish()
    assert vf_types_of(n)[vf.id] == 0
    assert n.driver.binder.claims() == {}


def test_audit_fix_finishes_a_release_cut_short(
    make_conf, tmp_path, monkeypatch
):
    """The same release, its process dead: ``audit --fix`` finishes it
    as a start would (the VF's type cleared, the claim gone), where
    dropping the claim would leave the VF typed for a guest gone."""
    n, vf, _ = vf_release_in_flight(make_conf, tmp_path, monkeypatch)
    n.driver.binder.ledger.carrier.let_go()  # its process is gone
    auditor = beside(n, make_conf)
    inventory, claims, findings = audit_read(auditor)
    assert fix(auditor, inventory, findings, claims) == [
        f"finished the release of {vf.id}"
    ]
    assert vf_types_of(n)[vf.id] == 0
    assert auditor.binder.claims() == {}


def test_a_release_claim_is_never_dropped_as_a_gone_instance_s(
    make_conf, tmp_path, monkeypatch
):
    """Asked to drop a release claim as it read it (its instance gone,
    as every release's is), the binder keeps it: a release is finished,
    by its process or a recovery."""
    n, vf, finish = vf_release_in_flight(make_conf, tmp_path, monkeypatch)
    claim = n.driver.binder.claims()[vf.id]
    assert n.driver.binder.drop_claims({vf.id: claim}) == []
    assert n.driver.binder.claims()[vf.id] == claim
    finish()


def _vf_typed_unrecorded(make_conf, state) -> tuple[Node, str]:
    """The l40-sriov host, i1's guest on a VF whose records give another
    type than it carries (set by hand since): ``audit`` finds its type
    unrecorded (a type not recorded at all, any reading records)."""
    n = Node(make_conf, state, "l40-sriov")
    [vf] = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_41_00_0", 1)))
    n.host.note_guest(Guest("i1", "instance-1", pci_devices=(vf.id,)))
    n.driver.guest_defined("i1")
    ledger = n.driver.binder.ledger
    with ledger.locked():
        ledger.vf_types[vf.id] = 1152
        ledger.save()
    return n, vf.id


def test_a_vf_type_found_unrecorded_is_not_recorded_after_its_release(
    make_conf, tmp_path
):
    """``audit --fix`` read a guest's VF typed and not recorded; the
    service then deleted the guest and cleared the VF. Recorded now, the
    type would be set again by ``restore`` at the next boot, for nobody,
    taking that room on the card."""
    n, vf = _vf_typed_unrecorded(make_conf, tmp_path)
    auditor = beside(n, make_conf)
    inventory, claims, findings = audit_read(auditor)
    assert ("vf_type_unrecorded", vf) in {
        (f.kind, f.subject) for f in findings
    }
    n.host.forget_guest("i1")
    n.driver.guest_undefined("i1")
    n.driver.release_mdevs("i1")
    assert vf_types_of(n)[vf] == 0
    assert fix(auditor, inventory, findings, claims) == []
    assert vf not in n.driver.binder.vf_types


def test_a_vf_type_found_unrecorded_is_not_recorded_while_released(
    make_conf, tmp_path, monkeypatch
):
    """The same, the release recorded and not yet carried out (the VF
    still typed): the type is not recorded either, and the release
    clears it."""
    from vgpu_driver.service import hand_back

    n, vf = _vf_typed_unrecorded(make_conf, tmp_path)
    auditor = beside(n, make_conf)
    inventory, claims, findings = audit_read(auditor)
    late = []
    with monkeypatch.context() as patched:  # the releasing thread is slow
        patched.setattr(hand_back, "finish_release", lambda *a: late.append(a))
        n.host.forget_guest("i1")
        n.driver.guest_undefined("i1")
    assert vf_types_of(n)[vf] != 0
    assert fix(auditor, inventory, findings, claims) == []
    assert vf not in n.driver.binder.vf_types
    hand_back.finish_release(*late[0])
    assert vf_types_of(n)[vf] == 0


def test_a_vf_type_found_unrecorded_is_recorded_while_its_guest_has_it(
    make_conf, tmp_path
):
    """Nothing changed since the audit read: the type is recorded, and
    restored after a reboot."""
    n, vf = _vf_typed_unrecorded(make_conf, tmp_path)
    auditor = beside(n, make_conf)
    inventory, claims, findings = audit_read(auditor)
    assert fix(auditor, inventory, findings, claims) == [
        f"recorded the vGPU type of VF {vf}"
    ]
    assert n.driver.binder.vf_types[vf] == 1150
