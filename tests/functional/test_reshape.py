"""Upgrades: old layouts moved to per-pGPU providers by one reshaper."""

from __future__ import annotations

import uuid

import pytest

from tests import helpers
from tests.placement_helpers import PlacementNode as Node
from tests.placement_helpers import placement_view, put_allocations
from vgpu_driver.exception import ReshapeFailed
from vgpu_driver.placement.sync import root_uuid_for

pytestmark = pytest.mark.functional

FULL = {"reserved": 0, "min_unit": 1, "step_size": 1, "allocation_ratio": 1.0}


def make_provider(client, name, parent=None, uuid_=None, inventory=None):
    body = {"name": name, "uuid": uuid_ or str(uuid.uuid4())}
    if parent:
        body["parent_provider_uuid"] = parent
    created = client.request("POST", "/resource_providers", body=body).body
    if inventory:
        client.request(
            "PUT",
            f"/resource_providers/{created['uuid']}/inventories",
            body={
                "resource_provider_generation": created["generation"],
                "inventories": {
                    rc: {**FULL, "total": n, "max_unit": n}
                    for rc, n in inventory.items()
                },
            },
        )
    return created["uuid"]


def put_allocation(client, consumer, allocations):
    put_allocations(client, consumer, allocations, "p1", "u1")


def get_allocation(client, consumer):
    body = client.request("GET", f"/allocations/{consumer}").body
    return {rp: a["resources"] for rp, a in body["allocations"].items()}


@pytest.mark.parametrize("adapter", ["simulated", "libvirt"])
def test_vgpu_on_the_root_moves_to_per_pgpu_children(
    placement_url, tmp_path, client, adapter
):
    """Over libvirt's adapter no guest is read until a pass needs them
    (no ``init_host`` here, as in ``vgpu-driver sync``): the reshape
    does, to find which pGPU each consumer's device is on."""
    host = None
    if adapter == "libvirt":
        host = helpers.libvirt_host(helpers.load("m10"), tmp_path / "host")
    node = Node(placement_url, tmp_path, host_name="m10", host=host)
    root = make_provider(
        client,
        node.nodename,
        uuid_=root_uuid_for(node.nodename),
        inventory={"VCPU": 16, "VGPU": 24},
    )
    # the guests as the description has them (not read through the
    # node's adapter, which would then know them before its first pass)
    described = helpers.simulated_host("m10").discover().guests
    guests = {g.name: g.uuid for g in described}
    on_84, on_86 = guests["instance-00000021"], guests["instance-00000022"]
    for consumer in (on_84, on_86):  # the same guests on the other host
        client.request("DELETE", f"/allocations/{consumer}", ok=(204, 404))
    put_allocation(client, on_84, {root: {"VCPU": 2, "VGPU": 1}})
    put_allocation(client, on_86, {root: {"VGPU": 1}})
    report = node.sync()
    # the pass says what its reshape did: the children made, the root
    # changed (the flush after the reshape finds both as wanted)
    assert report.created == [
        f"{node.nodename}_pci_0000_{bus}_00_0" for bus in (84, 85, 86)
    ]
    assert node.nodename in report.updated
    view = placement_view(client, node.nodename)
    assert view[node.nodename][0] == {"VCPU": (16, 0)}  # VGPU left the root
    rp84, rp86 = view["pci_0000_84_00_0"][2], view["pci_0000_86_00_0"][2]
    assert get_allocation(client, on_84) == {
        root: {"VCPU": 2},
        rp84: {"VGPU": 1},
    }
    assert get_allocation(client, on_86) == {rp86: {"VGPU": 1}}
    usages = client.request("GET", f"/resource_providers/{rp84}/usages").body
    assert usages["usages"] == {"VGPU": 1}
    # and the next sync is an ordinary one
    assert node.sync().requests == 0


@pytest.mark.parametrize(
    ("host", "vfs", "gpu", "total"),
    [
        # vendor-VFIO SR-IOV (L40): Nova named a VF's provider by address
        (
            "l40-sriov",
            ("0000:41:00.4", "0000:41:00.5", "0000:41:00.6"),
            "pci_0000_41_00_0",
            12,
        ),
        # VFs as mdev parents (A2 before kernel 6.8): by the VF's name
        (
            "a2-vf-parents",
            ("pci_0000_08_00_4", "pci_0000_08_00_5"),
            "pci_0000_08_00_0",
            4,
        ),
    ],
)
def test_per_vf_providers_move_to_one_provider_per_physical_gpu(
    placement_url, tmp_path, client, host, vfs, gpu, total
):
    """The guest (on the first VF listed) has its unit moved to the GPU's
    provider, and the VFs' providers are gone."""
    node = Node(placement_url, tmp_path, host_name=host)
    root = make_provider(
        client,
        node.nodename,
        uuid_=root_uuid_for(node.nodename),
        inventory={"VCPU": 8},
    )
    vf_rps = [
        make_provider(
            client,
            f"{node.nodename}_{vf}",
            parent=root,
            inventory={"VGPU": 1},
        )
        for vf in vfs
    ]
    [guest] = node.host.discover().guests
    put_allocation(client, guest.uuid, {vf_rps[0]: {"VGPU": 1}})
    node.sync()
    view = placement_view(client, node.nodename)
    assert set(view) == {node.nodename, gpu}  # VF rps gone
    assert view[gpu][0] == {"VGPU": (total, 0)}
    assert get_allocation(client, guest.uuid) == {view[gpu][2]: {"VGPU": 1}}
    assert node.sync().requests == 0


def test_unmatched_consumer_fails_clearly_and_changes_nothing(
    placement_url, tmp_path, client
):
    node = Node(placement_url, tmp_path, host_name="m10")
    root = make_provider(
        client,
        node.nodename,
        uuid_=root_uuid_for(node.nodename),
        inventory={"VGPU": 24},
    )
    ghost = str(uuid.uuid4())  # no guest of this uuid on the host
    put_allocation(client, ghost, {root: {"VGPU": 1}})
    before = placement_view(client, node.nodename)
    with pytest.raises(ReshapeFailed) as caught:
        node.sync()
    assert ghost in str(caught.value)
    assert placement_view(client, node.nodename) == before
    assert get_allocation(client, ghost) == {root: {"VGPU": 1}}


def test_update_provider_tree_without_allocations_asks_for_reshape(
    placement_url, tmp_path, client
):
    from vgpu_driver.exception import ReshapeNeeded

    node = Node(placement_url, tmp_path, host_name="m10")
    make_provider(
        client,
        node.nodename,
        uuid_=root_uuid_for(node.nodename),
        inventory={"VGPU": 24},
    )
    tree = node.syncer.read_tree()
    with pytest.raises(ReshapeNeeded):
        node.driver.update_provider_tree(tree, node.nodename)
