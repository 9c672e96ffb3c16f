"""Traits and providers a real Placement holds besides the inventories:
the host driver's and NVML's traits reach it for flavors to require, a
standard trait it lacks is a clear error, and the providers Nova made
(under its own uuid, or by name meanwhile) are adopted."""

from __future__ import annotations

import uuid

import pytest

from tests.placement_helpers import PlacementNode as Node
from tests.placement_helpers import placement_view, summary

pytestmark = pytest.mark.functional


def test_the_host_driver_trait_is_in_placement_for_flavors_to_require(
    placement_url, tmp_path, client
):
    """The vGPU manager's version reaches the real Placement as a trait
    on each device provider, and a request requiring it finds them."""
    node = Node(placement_url, tmp_path, host_name="m10")
    node.sync()
    view = placement_view(client, node.nodename)
    trait = "CUSTOM_VGPU_HOST_NVIDIA_570_124_03"
    children = {k: v for k, v in view.items() if v[3] is not None}
    assert children and all(trait in v[1] for v in children.values())
    root = next(v[2] for v in view.values() if v[3] is None)
    found = client.request(
        "GET",
        f"/resource_providers?in_tree={root}&required={trait}"
        "&resources=VGPU:1",
    ).body["resource_providers"]
    # the placement is shared by the tests: only this node's tree counts
    assert found
    assert {p["uuid"] for p in found} <= {v[2] for v in children.values()}


def test_nvml_figures_and_migration_trait_reach_placement(
    placement_url, tmp_path, client
):
    """A host whose NVML answers: the MIG-backed total NVML proves (7 on
    the H100 NVL's seven 1g.12gb instances, 2 in use) and, on the RTX
    PRO 6000 whose NVML reports migration, the migration and host-driver
    traits, in the real Placement."""
    mig = Node(placement_url, tmp_path, host_name="h100nvl-mig")
    mig.sync()
    [(inventory, traits, _uuid, _parent)] = [
        v for v in placement_view(client, mig.nodename).values() if v[3]
    ]
    assert inventory == {"VGPU": (7, 0)}
    assert "CUSTOM_VGPU_HOST_NVIDIA_550_127_06" in traits
    assert "CUSTOM_VGPU_LIVE_MIGRATION" not in traits
    rtx = Node(placement_url, tmp_path, host_name="rtx6000-nvml")
    rtx.sync()
    [(inventory, traits, _uuid, _parent)] = [
        v for v in placement_view(client, rtx.nodename).values() if v[3]
    ]
    assert inventory == {"VGPU": (24, 0)}
    assert {
        "CUSTOM_VGPU_LIVE_MIGRATION",
        "CUSTOM_VGPU_HOST_NVIDIA_580_105_06",
    } <= traits


def test_a_root_nova_made_under_its_own_uuid_is_adopted(
    placement_url, tmp_path, client
):
    """nova-compute made the compute node's provider first, under the
    compute node's own uuid (not the one this library would pick): the
    first sync adopts it by name and builds the device providers under
    it, no second root."""
    node = Node(placement_url, tmp_path, host_name="m10")
    nova_uuid = str(uuid.uuid4())
    client.request(
        "POST",
        "/resource_providers",
        body={"name": node.nodename, "uuid": nova_uuid},
    )
    node.sync()
    found = client.request(
        "GET", f"/resource_providers?name={node.nodename}"
    ).body["resource_providers"]
    assert [p["uuid"] for p in found] == [nova_uuid]
    view = placement_view(client, node.nodename)
    assert view[node.nodename][2] == nova_uuid
    assert view["pci_0000_86_00_0"][3] == nova_uuid
    assert summary(view)["pci_0000_86_00_0"] == {"VGPU": (16, 0)}


def test_a_device_provider_nova_made_meanwhile_is_adopted_by_name(
    placement_url, tmp_path, client
):
    """Between this library's reading of the tree and its create, Nova
    made a pGPU's provider under the same name and a uuid of its own:
    Placement refuses the create (409, the name is taken) and the
    library adopts Nova's provider by its name, setting its inventory;
    the next sync has nothing to do."""
    node = Node(placement_url, tmp_path, host_name="m10")
    name = f"{node.nodename}_pci_0000_86_00_0"
    nova_uuid = str(uuid.uuid4())
    real_request = node.syncer.client.request

    def racing(method, url, **kwargs):
        body = kwargs.get("body") or {}
        if (method, url, body.get("name")) == (
            "POST",
            "/resource_providers",
            name,
        ):
            client.request(
                "POST",
                "/resource_providers",
                body={
                    "name": name,
                    "uuid": nova_uuid,
                    "parent_provider_uuid": body["parent_provider_uuid"],
                },
            )
        return real_request(method, url, **kwargs)

    node.syncer.client.request = racing
    node.sync()
    found = client.request("GET", f"/resource_providers?name={name}").body
    assert [p["uuid"] for p in found["resource_providers"]] == [nova_uuid]
    view = placement_view(client, node.nodename)
    assert view["pci_0000_86_00_0"][2] == nova_uuid
    assert summary(view)["pci_0000_86_00_0"] == {"VGPU": (16, 0)}
    assert node.sync().requests == 0


def test_a_standard_trait_this_placement_lacks_is_a_clear_error(
    placement_url, tmp_path, client
):
    """A standard trait newer than the Placement service's os-traits
    (the library's os-traits is ahead): Placement answers "No such
    trait". Custom names are made again once (Placement may have been
    restarted empty); a standard one cannot be made, so the write fails
    at once naming it, not after a run of retries told as conflicts."""
    from vgpu_driver.exception import PlacementError
    from vgpu_driver.placement.client import PlacementNameUnknown
    from vgpu_driver.placement.remote import SyncReport

    node = Node(placement_url, tmp_path, host_name="m10")
    node.sync()
    view = placement_view(client, node.nodename)
    rp = view["pci_0000_86_00_0"][2]
    sent = []
    real_request = node.syncer.client.request

    def counting(method, url, **kwargs):
        sent.append((method, url))
        return real_request(method, url, **kwargs)

    node.syncer.client.request = counting
    with pytest.raises(PlacementError) as failed:
        node.syncer.writer.set_traits(
            rp, "pci_0000_86_00_0", {"HW_GPU_NOT_YET_A_TRAIT"}, SyncReport()
        )
    assert isinstance(failed.value, PlacementNameUnknown)
    assert "HW_GPU_NOT_YET_A_TRAIT" in str(failed.value)
    puts = [u for m, u in sent if m == "PUT" and u.endswith("/traits")]
    assert len(puts) == 2  # sent, then once more after forgetting names
