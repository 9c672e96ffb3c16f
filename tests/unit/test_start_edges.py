"""A start, a restore and a delete at their edges: a VF that refuses its
type back, an instance whose pGPU is gone, a start with nothing to do."""

from __future__ import annotations

from tests.helpers import Node
from vgpu_driver.exception import DeviceOperationFailed
from vgpu_driver.model.device import Guest


def test_a_quiet_start_says_nothing_was_done_in_empty_lists(node):
    """A start with nothing to finish, recreate, start or drop reports
    each as an empty list: what callers log and print as it is."""
    done = node().driver.init_host([])
    assert {k: v for k, v in done.items() if k != "records_moved_aside"} == {
        "released": [],
        "recreated": [],
        "started": [],
        "vf_types": [],
        "dropped_claims": [],
        "failed": [],
    }


def test_a_vf_that_refuses_its_type_back_leaves_the_others_restored(
    node, make_conf, tmp_path, monkeypatch
):
    """``restore`` without a list to note failures in: a VF that refuses
    its recorded type is logged, and the others are still restored."""
    n = node("l40-sriov")
    first, second = n.driver.allocate_mdevs(
        "i1", n.alloc(("pci_0000_41_00_0", 2))
    )
    n.host.reboot()
    restarted = Node(make_conf, tmp_path / "state", "l40-sriov", host=n.host)
    set_vf_type = n.host.set_vf_type

    def refuse_first(address, number):
        if address == first.id:
            raise DeviceOperationFailed(
                action="set vGPU type", device=address, reason="EBUSY"
            )
        set_vf_type(address, number)

    monkeypatch.setattr(n.host, "set_vf_type", refuse_first)
    restored = restarted.driver.restore_vf_types()
    assert second.id in restored and first.id not in restored


def test_an_instance_whose_mdev_is_gone_with_its_pgpu_is_deleted(node):
    """An instance whose mdev could not be made again (its pGPU was
    unplugged) is deleted: there is nothing of it to hand back, and the
    delete does not fail for it."""
    n = node()
    [gone] = n.driver.allocate_mdevs("i2", n.alloc(("pci_0000_86_00_0", 1)))
    n.host.note_guest(Guest("i2", "instance-2", (gone.id,)))
    n.driver.discover()
    n.host.reboot(keep_persistent=False)
    n.host.unplug("pci_0000_86_00_0")
    n.update()
    assert n.driver.release_mdevs("i2") == []
    assert n.driver.binder.claims() == {}


def test_a_guest_gone_whose_mdev_went_with_its_pgpu_frees_nothing(node):
    """The same instance's guest undefined (Nova's delete, or behind its
    back): nothing of it is on the host to hand back, and following the
    guest's going does not fail for it."""
    n = _pgpu_gone(node())
    n.host.forget_guest("i2")
    assert n.driver.guest_undefined("i2") == []
    assert "i2" not in n.driver.instance_devices()


def test_a_vf_type_the_audit_records_is_restored_by_the_next_process(
    node, make_conf, tmp_path
):
    """``audit --fix`` records the type of a VF it found typed and not
    recorded (the records were lost): it is on disk, so after a reboot
    the next process restores it."""
    n = node("l40-sriov")
    address = "0000:41:00.7"
    assert address not in n.driver.binder.vf_types
    n.host.set_vf_type(address, 1150)  # typed by another hand
    assert n.driver.binder.record_vf_types({address: 1150}) == [address]
    n.host.reboot()
    restarted = Node(make_conf, tmp_path / "state", "l40-sriov", host=n.host)
    assert address in restarted.driver.restore_vf_types()


def test_a_hard_reboot_of_an_instance_whose_pgpu_is_gone_holds_nothing(node):
    """A hard reboot of that instance: its mdev cannot be made again (its
    parent is gone), nothing is held for it, and the reboot goes on (the
    guest then fails to start, as it would anyway)."""
    n = _pgpu_gone(node())
    assert n.driver.hold_devices("i2") == []
    assert n.driver.binder.claims() == {}


def _pgpu_gone(n: Node) -> Node:
    """``n`` with instance i2's guest using an mdev whose pGPU was then
    unplugged (the mdev gone with it), read since."""
    [gone] = n.driver.allocate_mdevs("i2", n.alloc(("pci_0000_86_00_0", 1)))
    n.host.note_guest(Guest("i2", "instance-2", (gone.id,)))
    n.driver.discover()
    n.host.unplug("pci_0000_86_00_0")
    n.update()
    return n
