"""Reshape planning (pure): a consumer's units must match its guest's
devices exactly, neither more nor fewer."""

from __future__ import annotations

import pytest

from tests.helpers import load, new_tree
from vgpu_driver.conf import loader
from vgpu_driver.exception import ReshapeFailed
from vgpu_driver.model import reshape
from vgpu_driver.sim.simulated import SimulatedHost

GUEST = "9cfe7035-3a5d-5acd-a42e-254b7382cfa5"  # m10: one mdev, on 84


def _plan(make_conf, units, bandwidth=0):
    """``bandwidth``: the guest also holds that much of a bandwidth
    provider under the compute node (Neutron's, no device class)."""
    description = load("m10")
    conf = make_conf(description.config)
    config = loader.load_device_config(conf)
    inventory = SimulatedHost(description).discover()
    tree = new_tree()
    tree.update_inventory("node1", {"VGPU": {"total": 8, "max_unit": 8}})
    root = tree.data("node1").uuid
    allocations = {
        GUEST: {"allocations": {root: {"resources": {"VGPU": units}}}}
    }
    if bandwidth:
        nic = tree.new_child("node1:Open vSwitch agent:br-ex", "node1")
        resources = {"NET_BW_EGR_KILOBIT_PER_SEC": bandwidth}
        allocations[GUEST]["allocations"][nic] = {"resources": resources}
    seen = {m.uuid: (m.parent, m.type_id) for m in inventory.mdevs}
    return reshape.plan_moves(
        tree, ["node1"], allocations, inventory, {"VGPU"}, seen, config
    )


def test_units_matching_the_guest_s_devices_move_to_its_parent(make_conf):
    moves = _plan(make_conf, 1)
    assert dict(moves[GUEST]["pci_0000_84_00_0"]) == {"VGPU": 1}


@pytest.mark.parametrize("units", [2, 3])
def test_more_units_than_devices_are_refused(make_conf, units):
    with pytest.raises(ReshapeFailed, match=f"holds {units} VGPU"):
        _plan(make_conf, units)


def test_units_of_other_classes_on_other_providers_do_not_stop_a_reshape(
    make_conf,
):
    """The guest's port holds bandwidth on Neutron's provider beside its
    VGPU on the compute node's: only the VGPU units move."""
    moves = _plan(make_conf, 1, bandwidth=1000)
    assert dict(moves[GUEST]) == {"pci_0000_84_00_0": {"VGPU": 1}}
