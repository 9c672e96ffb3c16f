"""Which providers under the compute node are this library's
(``reshape.device_providers``, asked at every whole-host pass: what it
returns is updated, and removed when nothing stands for it). Never
another service's: Neutron's agents and bandwidth providers, another
driver's devices, a provider named like ours under someone else's."""

from __future__ import annotations

from tests.helpers import new_tree
from vgpu_driver.model import reshape

CONF_TRAIT = "CUSTOM_VGPU_CONF_0123456789AB"
INV = {"total": 4, "max_unit": 4}


def _ours():
    tree = new_tree()
    card = "node1_pci_0000_84_00_0"
    tree.new_child(card, "node1")
    tree.update_inventory(card, {"VGPU": INV})
    other_type = f"{card}__nvidia-36"
    tree.new_child(other_type, card)
    tree.update_inventory(other_type, {"CUSTOM_NVIDIA_36": INV})
    tree.update_traits(other_type, [CONF_TRAIT])
    # one level deeper than any of ours
    tree.new_child(f"{other_type}_x", other_type)
    tree.update_inventory(f"{other_type}_x", {"VGPU": INV})
    # a type dropped from the configuration: its class is configured no
    # longer, but a configuration of ours wrote it
    dropped = "node1_pci_0000_85_00_0"
    tree.new_child(dropped, "node1")
    tree.update_inventory(dropped, {"CUSTOM_OLD": INV})
    tree.update_traits(dropped, [CONF_TRAIT])
    # Neutron's agent and its bridge's bandwidth
    agent = "node1:Open vSwitch agent"
    tree.new_child(agent, "node1")
    tree.new_child(f"{agent}:br-ex", agent)
    tree.update_inventory(
        f"{agent}:br-ex", {"NET_BW_EGR_KILOBIT_PER_SEC": INV}
    )
    # named like ours, under Neutron's agent
    tree.new_child("node1_pci_0000_99_00_0", agent)
    tree.update_inventory("node1_pci_0000_99_00_0", {"VGPU": INV})
    # another driver's device, named like ours, no trait of ours
    tree.new_child("node1_pci_0000_3b_00_0", "node1")
    tree.update_inventory("node1_pci_0000_3b_00_0", {"CUSTOM_FPGA": INV})
    # a provider with nothing named otherwise: not a device of ours
    tree.new_child("node1-empty", "node1")
    root = tree.data("node1").uuid
    under = reshape.providers_under(tree, root)
    return set(reshape.device_providers(under, root, "node1", {"VGPU"}))


def test_the_library_s_providers_are_found_and_no_one_else_s():
    assert _ours() == {
        "node1_pci_0000_84_00_0",
        "node1_pci_0000_84_00_0__nvidia-36",
        "node1_pci_0000_85_00_0",
    }
