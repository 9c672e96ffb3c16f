"""What the provider tree keeps through changes of the host, of the
configuration and of the tree itself: Nova's own tree and providers,
devices unplugged, types changed in use, operators' traits, other
children of the root, and providers no longer enabled."""

from __future__ import annotations

import pytest

from tests import helpers
from tests.helpers import new_tree, providers, summary
from vgpu_driver.cmd.inventory import ROOT_NAMESPACE
from vgpu_driver.model.provider_tree import ProviderTree
from vgpu_driver.sim.simulated import SimulatedHost

# m10's 84 switched from nvidia-35 to nvidia-36 (``nvidia_35``: more of
# nvidia-35's section, still on 85)
SWITCHED_84 = """
    [devices]
    enabled_mdev_types = nvidia-35,nvidia-36
    [mdev_nvidia-35]
    device_addresses = 0000:85:00.0
    {nvidia_35}
    [mdev_nvidia-36]
    device_addresses = 0000:84:00.0,0000:86:00.0
"""


def test_nova_provider_tree_gets_the_same_result(driver_for):
    provider_tree = pytest.importorskip("nova.compute.provider_tree")
    import uuid

    nova_tree = provider_tree.ProviderTree()
    nova_tree.new_root("node1", str(uuid.uuid5(ROOT_NAMESPACE, "node1")))
    for name in ("demo", "m10", "l40-sriov", "mtty"):
        ours = providers(driver_for(name))
        nova_tree = provider_tree.ProviderTree()
        nova_tree.new_root("node1", str(uuid.uuid5(ROOT_NAMESPACE, "node1")))
        theirs = providers(driver_for(name), tree=nova_tree)
        assert theirs == ours and ours


def test_providers_of_an_existing_nova_deployment_are_kept(driver_for):
    tree = new_tree()
    existing = tree.new_child("node1_pci_0000_84_00_0", "node1")
    tree.update_inventory(
        existing,
        {
            "VGPU": {
                "total": 4,
                "reserved": 0,
                "min_unit": 1,
                "max_unit": 4,
                "step_size": 1,
                "allocation_ratio": 1.0,
            }
        },
    )
    driver = driver_for("m10")
    providers(driver, tree)
    assert tree.data("node1_pci_0000_84_00_0").uuid == existing


def test_unplugged_device_without_use_is_removed_with_use_is_reserved(
    driver_for,
):
    host = SimulatedHost(helpers.load("m10"))
    driver = driver_for("m10", host=host)
    tree = new_tree()
    providers(driver, tree)
    host.unplug("pci_0000_85_00_0")  # nothing in use there
    host.unplug("pci_0000_84_00_0")  # a guest uses its mdev
    found = summary(providers(driver, tree))
    assert "pci_0000_85_00_0" not in found
    assert found["pci_0000_84_00_0"] == ("VGPU", 1, 1)
    assert found["pci_0000_86_00_0"] == ("VGPU", 16, 0)


def test_unplugged_device_with_placement_allocations_is_reserved(driver_for):
    host = SimulatedHost(helpers.load("m10"))
    driver = driver_for("m10", host=host)
    tree = new_tree()
    providers(driver, tree)
    rp = tree.data("node1_pci_0000_85_00_0").uuid
    host.unplug("pci_0000_85_00_0")
    allocations = {
        "consumer-1": {"allocations": {rp: {"resources": {"VGPU": 2}}}}
    }
    found = summary(providers(driver, tree, allocations=allocations))
    assert found["pci_0000_85_00_0"] == ("VGPU", 2, 2)
    found = summary(providers(driver, tree, allocations={}))
    assert "pci_0000_85_00_0" not in found


def test_type_change_keeps_provider_reserved_until_empty(
    driver_for, make_conf
):
    description = helpers.load("m10")
    host = SimulatedHost(description)
    tree = new_tree()
    providers(driver_for("m10", host=host), tree)
    driver = driver_for("m10", SWITCHED_84.format(nvidia_35=""), host)
    found = providers(driver, tree)
    assert summary(found)["pci_0000_84_00_0"] == ("VGPU", 1, 1)
    assert "CUSTOM_NVIDIA_35" in found["pci_0000_84_00_0"]["traits"]
    # the guest goes, its mdev is removed: the parent switches
    guest = next(
        g for g in host.discover().guests if g.name == "instance-00000021"
    )
    host.forget_guest(guest.uuid)
    for mdev in host.discover().mdevs_of("pci_0000_84_00_0"):
        host.remove_mdev(mdev)
    found = providers(driver, tree)
    assert summary(found)["pci_0000_84_00_0"] == ("VGPU", 16, 0)
    assert "CUSTOM_NVIDIA_36" in found["pci_0000_84_00_0"]["traits"]
    assert "CUSTOM_NVIDIA_35" not in found["pci_0000_84_00_0"]["traits"]


def test_a_type_changed_in_use_keeps_the_class_it_was_allocated_in(
    driver_for,
):
    """84 switched to nvidia-36 while a guest uses its nvidia-35 mdev,
    and nvidia-35 (still on 85) given CUSTOM_OLD at once: 84 stays in
    VGPU, the class that guest's allocation is in (Placement would
    refuse it taken away), all reserved; 85, nothing in use, moves."""
    host = SimulatedHost(helpers.load("m10"))
    tree = new_tree()
    providers(driver_for("m10", host=host), tree)
    switched = SWITCHED_84.format(nvidia_35="mdev_class = CUSTOM_OLD")
    found = summary(providers(driver_for("m10", switched, host), tree))
    assert found["pci_0000_84_00_0"] == ("VGPU", 1, 1)
    assert found["pci_0000_85_00_0"] == ("CUSTOM_OLD", 16, 0)


def test_operator_traits_are_kept_managed_ones_follow_config(driver_for):
    tree = new_tree()
    providers(driver_for("demo"), tree)
    name = "node1_pci_0000_84_00_0"
    tree.add_traits(name, "CUSTOM_OPERATOR_TAG", "COMPUTE_STATUS_DISABLED")
    assert "CUSTOM_GOLD" in tree.data(name).traits
    without_gold = helpers.load("demo").config.replace(
        "traits = CUSTOM_GOLD\n", ""
    )
    found = providers(driver_for("demo", without_gold), tree)
    traits = set(found["pci_0000_84_00_0"]["traits"])
    assert {"CUSTOM_OPERATOR_TAG", "COMPUTE_STATUS_DISABLED"} <= traits
    assert "CUSTOM_GOLD" not in traits


def test_a_type_trait_follows_the_type_on_a_gpu_whose_vfs_are_parents(
    driver_for,
):
    """An A2 (each VF an mdev parent, one provider for the GPU), nothing
    in use: the operator moves it to another type and the provider's
    type trait follows; a type trait of a type its VFs list is the
    library's to manage even with no record of setting it, an
    operator's trait is left alone."""
    from vgpu_driver.model import naming

    gpu = "pci_0000_08_00_0"
    host = SimulatedHost(helpers.load("a2-vf-parents"))
    host._state.guests.clear()  # nothing in use: the type may change
    host._state.mdevs.clear()
    tree = new_tree()
    before = providers(driver_for("a2-vf-parents", host=host), tree)
    assert naming.type_trait("nvidia-746") in before[gpu]["traits"]
    config = helpers.load("a2-vf-parents").config.replace("746", "747")
    after = providers(driver_for("a2-vf-parents", config, host), tree)
    traits = set(after[gpu]["traits"])
    assert naming.type_trait("nvidia-747") in traits
    assert naming.type_trait("nvidia-746") not in traits
    # a type trait the library has no record of setting (left by an
    # earlier deployment), of a type the GPU's VFs list: removed too
    tree.add_traits(f"node1_{gpu}", naming.type_trait("nvidia-742"))
    tree.add_traits(f"node1_{gpu}", "CUSTOM_OPERATOR_TAG")
    again = providers(driver_for("a2-vf-parents", config, host), tree)
    traits = set(again[gpu]["traits"])
    assert naming.type_trait("nvidia-742") not in traits
    assert "CUSTOM_OPERATOR_TAG" in traits


def test_other_children_of_the_root_are_left_alone(driver_for):
    tree = new_tree()
    other = tree.new_child("node1_0000:81:00.0", "node1")
    tree.update_inventory(
        other,
        {
            "CUSTOM_PCI_DEAD_BEEF": {
                "total": 1,
                "reserved": 0,
                "min_unit": 1,
                "max_unit": 1,
                "step_size": 1,
                "allocation_ratio": 1.0,
            }
        },
    )
    providers(driver_for("m10"), tree)
    assert tree.exists("node1_0000:81:00.0")


def test_owner_trait_is_configurable(driver_for):
    config = (
        helpers.load("mlx5").config + "[devices]\nowner_trait = CUSTOM_ME\n"
    )
    config = config.replace(
        "[devices]\nenabled", "[devices]\nowner_trait = CUSTOM_ME\nenabled", 1
    )
    config = config.rsplit("[devices]\nowner_trait = CUSTOM_ME\n", 1)[0]
    found = providers(driver_for("mlx5", config))
    traits = found["pci_0000_3b_00_0"]["traits"]
    assert "CUSTOM_ME" in traits and "OWNER_NOVA" not in traits


def test_root_must_exist(driver_for):
    with pytest.raises(ValueError, match="node1"):
        driver_for("m10").update_provider_tree(ProviderTree(), "node1")


def test_a_provider_nova_made_for_a_device_no_longer_enabled_goes(
    driver_for,
):
    """A provider Nova's own vGPU code made (no trait of ours, only the
    VGPU class this configuration manages) for a pGPU no longer enabled,
    with nothing in use: removed, not left offering what nobody binds."""
    config = """
[devices]
enabled_mdev_types = nvidia-35,nvidia-36
[mdev_nvidia-35]
device_addresses = 0000:84:00.0
[mdev_nvidia-36]
device_addresses = 0000:86:00.0
"""
    tree = new_tree()
    nova_made = tree.new_child("node1_pci_0000_85_00_0", "node1")
    inventory = {"total": 4, "reserved": 0, "min_unit": 1, "max_unit": 4}
    inventory.update(step_size=1, allocation_ratio=1.0)
    tree.update_inventory(nova_made, {"VGPU": inventory})
    found = providers(driver_for("m10", config), tree)
    assert "pci_0000_85_00_0" not in found
    assert not tree.exists("node1_pci_0000_85_00_0")
