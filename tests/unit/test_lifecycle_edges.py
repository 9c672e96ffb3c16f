"""Edges of an instance's life the common paths do not reach: Nova's
allocations as they really are (the compute node's own resources beside
the vGPU), a revert or hard reboot of an instance with no guest here,
and a live migration the destination's allocations cannot carry."""

from __future__ import annotations

import pytest

from vgpu_driver.exception import (
    DeviceCapacityExhausted,
    MigrationTypeMismatch,
)


def test_the_compute_node_s_own_resources_bind_nothing(node):
    """Nova allocates VCPU, MEMORY_MB and DISK_GB on the compute node's
    own provider beside the vGPU on a pGPU's: only the vGPU is bound
    (the node's own units are the library's only in a class it
    manages, pre-reshape)."""
    n = node()
    allocations = n.alloc(("pci_0000_86_00_0", 1))
    allocations[n.tree.data("node1").uuid] = {
        "resources": {"VCPU": 4, "MEMORY_MB": 4096, "DISK_GB": 20}
    }
    [device] = n.driver.allocate_mdevs("i1", allocations)
    assert (device.parent, device.type_id) == ("pci_0000_86_00_0", "nvidia-36")
    assert set(n.driver.binder.claims()) == {device.id}


@pytest.mark.parametrize("call", ["finish_revert_migration", "hold_devices"])
def test_an_instance_with_no_guest_here_gets_nothing(node, call):
    """A revert, or a hard reboot, of an instance whose guest is not
    defined on this host: no device, nothing made, nothing claimed."""
    n = node()
    before = set(n.mdevs())
    assert getattr(n.driver, call)("not-here") == []
    assert set(n.mdevs()) == before
    assert n.host.operations["create_mdev"] == 0
    assert n.driver.binder.claims() == {}


def test_a_migration_given_fewer_devices_than_the_source_has_is_refused(
    node,
):
    """Two source mdevs of a type, one unit allocated for it here: the
    claim is refused by name and what it bound is let go again."""
    n = node()
    source = {"src-a": "nvidia-36", "src-b": "nvidia-36"}
    with pytest.raises(DeviceCapacityExhausted) as caught:
        n.driver.claim_for_live_migration(
            "mig", source, n.alloc(("pci_0000_86_00_0", 1))
        )
    said = str(caught.value)
    assert "No room for 1 more nvidia-36" in said
    assert "the destination" in said
    assert n.driver.binder.claims() == {}


def test_a_migration_given_no_device_at_all_says_so(node):
    n = node()
    with pytest.raises(MigrationTypeMismatch) as caught:
        n.driver.claim_for_live_migration("mig", {"src-a": "nvidia-36"}, {})
    assert "give no device" in str(caught.value)
    assert n.driver.binder.claims() == {}


def test_one_live_migration_succeeding_leaves_the_others_claims(node):
    """Two live migrations coming in, and a spawn: the first migration's
    success makes its claims spawn claims (ended once its guest has
    them); the other's stay migration claims (kept across a restart,
    though its instance is still the source host's), the spawn's its
    own."""
    n = node()
    first = n.driver.claim_for_live_migration(
        "mig-a", {"src-a": "nvidia-36"}, n.alloc(("pci_0000_86_00_0", 1))
    )
    second = n.driver.claim_for_live_migration(
        "mig-b", {"src-b": "nvidia-36"}, n.alloc(("pci_0000_86_00_0", 1))
    )
    [spawned] = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_85_00_0", 1)))
    n.driver.live_migration_succeeded("mig-a")
    purposes = {
        device_id: (claim["instance"], claim["purpose"])
        for device_id, claim in n.driver.binder.claims().items()
    }
    assert purposes == {
        first["src-a"]: ("mig-a", "spawn"),
        second["src-b"]: ("mig-b", "migration"),
        spawned.id: ("i1", "spawn"),
    }
