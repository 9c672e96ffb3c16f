"""The provider tree a host reports, provider by provider."""

from __future__ import annotations

import textwrap

import pytest

from tests import helpers
from tests.helpers import new_tree
from vgpu_driver.cmd.inventory import ROOT_NAMESPACE, tree_report
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.model.provider_tree import ProviderTree
from vgpu_driver.sim.simulated import SimulatedHost


@pytest.fixture
def driver_for(make_conf, tmp_path):
    def factory(name, config=None, host=None):
        description = helpers.load(name)
        conf = make_conf(textwrap.dedent(config or description.config))
        conf.set_override("state_path", str(tmp_path / "state"), "devices")
        return VgpuDriver(conf, host or SimulatedHost(description))

    return factory


def providers(driver, tree=None, nodename="node1", allocations=None):
    tree = tree or new_tree(nodename)
    driver.update_provider_tree(tree, nodename, allocations=allocations)
    report = tree_report(tree, nodename)
    return {
        p["name"].removeprefix(f"{nodename}_"): p
        for p in report["providers"][1:]
    }


def summary(found):
    """device -> (resource class, total, reserved)"""
    out = {}
    for device, provider in found.items():
        [(rc, inv)] = provider["inventories"].items()
        out[device] = (rc, inv["total"], inv["reserved"])
        assert inv["max_unit"] == inv["total"]
        assert (inv["min_unit"], inv["step_size"]) == (1, 1)
        assert inv["allocation_ratio"] == 1.0
    return out


def test_m10_two_types_with_legacy_group_names(driver_for):
    found = providers(driver_for("m10"))
    assert summary(found) == {
        "pci_0000_84_00_0": ("VGPU", 4, 0),  # 1 mdev + 3 available
        "pci_0000_85_00_0": ("VGPU", 4, 0),
        "pci_0000_86_00_0": ("VGPU", 16, 0),  # 2 mdevs + 14 available
    }  # 87 is listed under no type and there is no default type
    assert "CUSTOM_NVIDIA_35" in found["pci_0000_84_00_0"]["traits"]
    assert "CUSTOM_NVIDIA_36" in found["pci_0000_86_00_0"]["traits"]
    assert "CUSTOM_NVIDIA_35" not in found["pci_0000_86_00_0"]["traits"]
    for provider in found.values():
        assert "OWNER_NOVA" in provider["traits"]
        assert provider["parent"] == "node1"


def test_generic_mlx5_class(driver_for):
    found = providers(driver_for("mlx5"))
    assert summary(found) == {"pci_0000_3b_00_0": ("CUSTOM_MLX5", 64, 0)}
    assert "CUSTOM_MLX5_CORE_LOCAL" in found["pci_0000_3b_00_0"]["traits"]


def test_legacy_enabled_vgpu_types_is_the_default_type(driver_for):
    assert summary(providers(driver_for("m60"))) == {
        "pci_0000_85_00_0": ("VGPU", 16, 0),
        "pci_0000_86_00_0": ("VGPU", 16, 0),
    }


def test_grid_k1_default_type_and_catalogue_traits(driver_for):
    found = providers(driver_for("grid-k1"))
    assert summary(found) == {
        "pci_0000_05_00_0": ("VGPU", 2, 0),  # K160Q default: 1 + 1
        "pci_0000_06_00_0": ("VGPU", 8, 0),  # K120Q listed: 1 + 7
        "pci_0000_07_00_0": ("VGPU", 8, 0),
        "pci_0000_08_00_0": ("VGPU", 2, 0),
    }
    k160q = set(found["pci_0000_05_00_0"]["traits"])
    assert {
        "HW_GPU_MAX_DISPLAY_HEADS_4",
        "HW_GPU_RESOLUTION_W2560H1600",
        "HW_GPU_RESOLUTION_W1920H1200",
        "CUSTOM_NVIDIA_163",
    } <= k160q
    assert "HW_GPU_RESOLUTION_W3840H2160" not in k160q
    k120q = set(found["pci_0000_06_00_0"]["traits"])
    assert "HW_GPU_RESOLUTION_W1920H1200" in k120q
    assert "HW_GPU_RESOLUTION_W2560H1440" not in k120q
    assert "HW_GPU_MAX_DISPLAY_HEADS_4" not in k120q


def test_gvtg_without_type_name_uses_the_catalogue(driver_for):
    found = providers(driver_for("gvtg"))
    assert summary(found) == {"pci_0000_00_02_0": ("VGPU", 7, 0)}
    traits = set(found["pci_0000_00_02_0"]["traits"])
    assert {
        "HW_GPU_MAX_DISPLAY_HEADS_1",
        "HW_GPU_RESOLUTION_W1920H1080",
        "CUSTOM_I915_GVTG_V5_4",
    } <= traits
    assert "HW_GPU_RESOLUTION_W1920H1200" not in traits


def test_nvidia_description_gives_heads_and_resolutions(driver_for):
    found = providers(driver_for("dense"))
    traits = set(found["pci_0000_10_00_0"]["traits"])
    # num_heads=4, max_resolution=5120x2880
    assert "HW_GPU_MAX_DISPLAY_HEADS_4" in traits
    assert "HW_GPU_MAX_DISPLAY_HEADS_6" not in traits
    assert "HW_GPU_RESOLUTION_W3840H2160" in traits
    assert "HW_GPU_RESOLUTION_W7680H4320" not in traits


def test_virtual_parent_with_custom_class(driver_for):
    found = providers(driver_for("mtty"))
    assert summary(found) == {"mtty": ("CUSTOM_SERIAL", 12, 0)}


def test_sriov_card_is_one_provider_per_physical_gpu(driver_for):
    found = providers(driver_for("l40-sriov"))
    # 2 VFs carry L40-4Q; 12 fit on the 48 GiB board; 32 VFs
    assert summary(found) == {"pci_0000_41_00_0": ("VGPU", 12, 0)}
    assert "CUSTOM_NVIDIA_1157" in found["pci_0000_41_00_0"]["traits"]


def test_sriov_type_not_configured_gets_no_provider(driver_for):
    config = "[devices]\nenabled_mdev_types = nvidia-35\n"
    # one VF's vGPU is still in use by a guest: kept, reserved
    assert summary(providers(driver_for("l40-sriov", config))) == {
        "pci_0000_41_00_0": ("VGPU", 1, 1)
    }
    host = SimulatedHost(helpers.load("l40-sriov"))
    host.forget_guest(host.discover().guests[0].uuid)
    assert providers(driver_for("l40-sriov", config, host)) == {}


def test_max_instances_caps_parents_in_order_and_type_change_reserves(
    driver_for,
):
    config = """
        [devices]
        enabled_mdev_types = nvidia-36
        [mdev_nvidia-36]
        max_instances = 20
    """
    found = summary(providers(driver_for("m10", config)))
    assert found == {
        # 84 holds a guest's nvidia-35 device: it keeps it, takes nothing
        "pci_0000_84_00_0": ("VGPU", 1, 1),
        "pci_0000_85_00_0": ("VGPU", 16, 0),  # first in order: 16 of 19
        "pci_0000_86_00_0": ("VGPU", 4, 0),  # 1 in use + the last 3
    }  # 87: nothing left of the cap


def test_lowered_cap_below_use_keeps_in_use_reserved(driver_for):
    config = """
        [devices]
        enabled_mdev_types = nvidia-36
        [mdev_nvidia-36]
        device_addresses = 0000:86:00.0,0000:87:00.0
        max_instances = 1
    """
    host = SimulatedHost(helpers.load("m10"))
    parent = host.discover().parent("pci_0000_86_00_0")
    host.create_mdev(
        parent, "nvidia-36", "11111111-0000-0000-0000-000000000001"
    )
    from vgpu_driver.model.device import Guest

    host.note_guest(
        Guest("g2", "extra", ("11111111-0000-0000-0000-000000000001",))
    )
    found = summary(providers(driver_for("m10", config, host)))
    assert found == {
        # two devices in use on 86 against a cap of 1: kept, reserved
        "pci_0000_86_00_0": ("VGPU", 2, 2),
        # 84 serves no enabled type but a guest uses its nvidia-35 mdev
        "pci_0000_84_00_0": ("VGPU", 1, 1),
    }


def test_a_parent_full_of_devices_in_use_is_offered_no_more_under_a_cap(
    driver_for,
):
    """84 holds its 4 nvidia-35, all in use; the cap of 10 is not
    reached: 84 offers its 4 (none free), never one more than it holds;
    85 its own 4 (6 of the cap are left)."""
    from vgpu_driver.model.device import Guest

    host = SimulatedHost(helpers.load("m10"))
    parent = host.discover().parent("pci_0000_84_00_0")
    for n in range(3):
        mdev = f"11111111-0000-0000-0000-00000000000{n}"
        host.create_mdev(parent, "nvidia-35", mdev)
        host.note_guest(Guest(f"g{n}", f"extra-{n}", (mdev,)))
    config = helpers.load("m10").config + (
        "[vgpu_nvidia-35]\nmax_instances = 10\n"
    )
    found = summary(providers(driver_for("m10", config, host)))
    assert found["pci_0000_84_00_0"] == ("VGPU", 4, 0)
    assert found["pci_0000_85_00_0"] == ("VGPU", 4, 0)


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
    assert found["pci_0000_85_00_0"] == ("CUSTOM_OLD", 4, 0)


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

    gpu = "pci_0000_3b_00_0"
    host = SimulatedHost(helpers.load("a2-vf-parents"))
    host._state.guests.clear()  # nothing in use: the type may change
    host._state.mdevs.clear()
    tree = new_tree()
    before = providers(driver_for("a2-vf-parents", host=host), tree)
    assert naming.type_trait("nvidia-744") in before[gpu]["traits"]
    config = helpers.load("a2-vf-parents").config.replace("744", "745")
    after = providers(driver_for("a2-vf-parents", config, host), tree)
    traits = set(after[gpu]["traits"])
    assert naming.type_trait("nvidia-745") in traits
    assert naming.type_trait("nvidia-744") not in traits
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
