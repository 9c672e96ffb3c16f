"""NVIDIA Ampere before kernel 6.8: each VF of a GPU is an mdev parent of
one vGPU, and the GPU is one provider (named after it, as the seeds'
pGPU model has it) whose total is what the GPU holds; a bind picks a VF.
The host is ``a2-vf-parents``: an A2 with 16 VFs, one A2-4Q in use on
VF 0000:08:00.4 (max_instance=4)."""

from __future__ import annotations

import pytest

from vgpu_driver.exception import DeviceCapacityExhausted

GPU = "pci_0000_08_00_0"
IN_USE = "pci_0000_08_00_4"


def test_one_provider_for_the_gpu_none_for_its_vfs(node):
    n = node("a2-vf-parents")
    plans = n.update()
    assert list(plans) == [GPU]
    assert (plans[GPU].total, plans[GPU].reserved) == (4, 0)
    names = {n.tree.data(u).name for u in n.tree.get_provider_uuids("node1")}
    assert names == {"node1", f"node1_{GPU}"}


def test_binds_go_to_free_vfs_and_stop_at_what_the_gpu_holds(node):
    n = node("a2-vf-parents")
    parents = set()
    for i in range(3):
        [device] = n.driver.allocate_mdevs(f"i{i}", n.alloc((GPU, 1)))
        parents.add(n.mdevs()[device.id].parent)
        assert device.parent in parents
    # three new mdevs, each on its own VF, none on the one in use
    assert len(parents) == 3 and IN_USE not in parents
    n.update()
    with pytest.raises(DeviceCapacityExhausted):
        n.driver.allocate_mdevs("i9", n.alloc((GPU, 1)))
    assert len(n.mdevs()) == 4  # nothing made for the refused bind


def test_the_same_bind_again_returns_what_it_claimed(node):
    n = node("a2-vf-parents")
    first = n.driver.allocate_mdevs("i1", n.alloc((GPU, 1)))
    assert n.driver.allocate_mdevs("i1", n.alloc((GPU, 1))) == first


def test_a_free_mdev_on_any_vf_is_reused_before_one_is_made(node):
    """A free mdev on a later VF goes before a new one on an earlier,
    empty VF."""
    n = node("a2-vf-parents")
    [early] = n.driver.allocate_mdevs("i1", n.alloc((GPU, 1)))
    [late] = n.driver.allocate_mdevs("i2", n.alloc((GPU, 1)))
    assert early.parent < late.parent
    n.driver.release_mdevs("i1")
    n.driver.release_mdevs("i2")  # both kept free (remove_unused off)
    n.host.remove_mdev(n.mdevs()[early.id])  # the earlier VF is empty
    n.update()
    [again] = n.driver.allocate_mdevs("i3", n.alloc((GPU, 1)))
    assert (again.id, again.created) == (late.id, False)


def test_a_failing_vf_reserves_its_gpu(node, monkeypatch):
    from vgpu_driver.exception import HostOperationFailed

    n = node("a2-vf-parents")

    def broken(parent, type_id, uuid):
        raise HostOperationFailed(
            uri="sim", action="create mdev", reason="sysfs write failed"
        )

    monkeypatch.setattr(n.host, "create_mdev", broken)
    with pytest.raises(HostOperationFailed):
        n.driver.allocate_mdevs("i1", n.alloc((GPU, 1)))
    plan = n.update()[GPU]
    assert plan.reserved == plan.total and "failing" in plan.reason


def test_a_driver_down_on_its_vfs_reserves_the_gpu(make_conf, tmp_path):
    from tests import helpers
    from vgpu_driver.sim.simulated import SimulatedHost

    description = helpers.load("a2-vf-parents")
    description.modules = ["vfio", "vfio_pci", "nvidia"]
    n = helpers.Node(
        make_conf,
        tmp_path,
        "a2-vf-parents",
        host=SimulatedHost(description),
    )
    plan = n.update()[GPU]
    assert plan.reserved == plan.total == 4
    assert "nvidia_vgpu_vfio" in (plan.reason or "")


def test_audit_counts_a_vf_s_mdev_on_its_gpu_provider(node):
    """The guest's mdev is on a VF, its allocation on the GPU's provider:
    no finding; without the allocation, the finding names the GPU."""
    from vgpu_driver.cmd.audit import device_ids_on
    from vgpu_driver.model.audit import audit

    n = node("a2-vf-parents")
    inventory = n.driver.discover(rescan_guests=True)
    [guest] = inventory.guests

    def findings(units):
        return audit(
            inventory,
            claims={},
            vf_types={},
            configured=n.driver.configured_types(inventory),
            device_of={n.rp(GPU): GPU},
            parent_of=device_ids_on(n.driver, inventory),
            allocations={guest.uuid: {n.rp(GPU): units}},
        )

    assert findings(1) == []
    [finding] = findings(0)
    assert finding.kind == "guest_device_without_allocation"
    assert f"on {GPU}" in finding.detail


def test_the_gpu_s_metrics_count_what_its_vfs_hold(make_conf, tmp_path):
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from tests import helpers

    host = helpers.simulated_host("a2-vf-parents")
    _driver, registry, _tree = helpers.metered(make_conf, tmp_path, host)
    found = {
        (s.name, s.labels["device"]): s.value
        for f in text_string_to_metric_families(
            generate_latest(registry).decode()
        )
        for s in f.samples
        if s.name.startswith("vgpu_driver_provider_")
        and s.name.endswith(("_used", "_free", "_capacity_limited"))
    }
    assert found == {
        ("vgpu_driver_provider_used", GPU): 1,
        ("vgpu_driver_provider_free", GPU): 3,
        # the type's max_instance says what the GPU holds: proven
        ("vgpu_driver_provider_capacity_limited", GPU): 0,
    }


def test_a_vf_address_means_its_gpu_and_check_config_says_so():
    from tests import helpers
    from tests.capacity_helpers import enabled
    from vgpu_driver.model import check
    from vgpu_driver.model.inventory import plan_providers

    inventory = helpers.simulated_host("a2-vf-parents").discover()
    config = enabled("nvidia-746", addresses=("0000:08:00.5",))
    [problem] = check.host_problems(config, inventory)
    assert problem.severity == "warning"
    assert "VF of GPU 0000:08:00.0" in str(problem)
    [plan] = plan_providers("cn", config, inventory, held={})
    assert (plan.device, plan.total) == (GPU, 4)
