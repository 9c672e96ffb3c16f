"""Reshape planning (pure): a consumer's units must match its guest's
devices exactly, neither more nor fewer."""

from __future__ import annotations

import dataclasses

import pytest

from tests.helpers import load, new_tree
from vgpu_driver.conf import loader
from vgpu_driver.exception import ReshapeFailed
from vgpu_driver.model import reshape
from vgpu_driver.sim.simulated import SimulatedHost

GUEST = "9cfe7035-3a5d-5acd-a42e-254b7382cfa5"  # m10: one mdev, on 84


def _plan(make_conf, units, bandwidth=0, consumer=GUEST, on=None, seen=True):
    """``bandwidth``: the guest also holds that much of a bandwidth
    provider under the compute node (Neutron's, no device class);
    ``consumer``: whose units they are; ``on``: provider name -> its
    resources the consumer holds too (a child of the node, made);
    ``seen``: False, the host's mdevs never seen."""
    description = load("m10")
    conf = make_conf(description.config)
    config = loader.load_device_config(conf)
    inventory = SimulatedHost(description).discover()
    tree = new_tree()
    tree.update_inventory("node1", {"VGPU": {"total": 8, "max_unit": 8}})
    root = tree.data("node1").uuid
    allocations = {
        consumer: {"allocations": {root: {"resources": {"VGPU": units}}}}
    }
    held = allocations[consumer]["allocations"]
    if bandwidth:
        nic = tree.new_child("node1:Open vSwitch agent:br-ex", "node1")
        held[nic] = {"resources": {"NET_BW_EGR_KILOBIT_PER_SEC": bandwidth}}
    for name, resources in (on or {}).items():
        held[tree.new_child(name, "node1")] = {"resources": resources}
    # the guest has a NIC given through too (not a VF of a GPU)
    guests = [
        dataclasses.replace(g, pci_devices=("0000:3b:00.2",))
        for g in inventory.guests
    ]
    inventory = dataclasses.replace(inventory, guests=tuple(guests))
    by_uuid = {m.uuid: (m.parent, m.type_id) for m in inventory.mdevs}
    return reshape.plan_moves(
        tree,
        ["node1"],
        allocations,
        inventory,
        {"VGPU"},
        by_uuid if seen else {},
        config,
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


def test_units_of_a_consumer_with_no_guest_here_are_refused_by_name(
    make_conf,
):
    """Units on the compute node's provider held by a consumer no guest
    of this host is: the error names the node whose reshape stops and
    the consumer to heal."""
    with pytest.raises(ReshapeFailed) as caught:
        _plan(make_conf, 1, consumer="0b0c0d0e-0000-4000-8000-00000000dead")
    said = str(caught.value)
    assert said.startswith("Cannot reshape the providers of node1:")
    assert "0b0c0d0e-0000-4000-8000-00000000dead" in said


def test_a_consumer_holding_no_device_class_is_left_alone(make_conf):
    """A consumer with no guest here (a migration's record) holding
    bandwidth on Neutron's provider and no unit of a device class:
    nothing to move, and no reason to stop the reshape."""
    moves = _plan(
        make_conf,
        0,
        bandwidth=1000,
        consumer="0b0c0d0e-0000-4000-8000-00000000beef",
    )
    assert moves == {}


def test_device_units_already_on_another_provider_stop_the_reshape(
    make_conf,
):
    with pytest.raises(ReshapeFailed, match="not one the reshape moves"):
        _plan(make_conf, 1, on={"node1_pci_0000_85_00_0": {"VGPU": 1}})


def test_a_guest_s_mdev_never_seen_is_no_device_to_move_units_to(
    make_conf,
):
    """The guest names an mdev the host has but the records never saw
    (its parent unknown): refused, naming the count, not a crash."""
    with pytest.raises(ReshapeFailed, match="has 0 such device"):
        _plan(make_conf, 1, seen=False)
