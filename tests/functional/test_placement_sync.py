"""Keeping a real Placement in sync with the host."""

from __future__ import annotations

import logging
import uuid

import pytest

from tests.functional.fault_proxy import FaultProxy
from tests.helpers import load
from tests.placement_helpers import PlacementNode as Node
from tests.placement_helpers import (
    add_trait,
    allocate,
    placement_view,
    put_inventory,
    summary,
    sync_all_at_once,
)
from vgpu_driver.exception import PlacementUnavailable

pytestmark = pytest.mark.functional


def test_first_sync_creates_the_tree(placement_url, tmp_path, client):
    node = Node(placement_url, tmp_path)
    report = node.sync()
    assert report.created[0] == node.nodename
    view = placement_view(client, node.nodename)
    assert summary(view) == {
        node.nodename: {},
        "pci_0000_3b_00_0": {"CUSTOM_MLX5": (64, 0)},
        "pci_0000_41_00_0": {"VGPU": (12, 0)},
        "pci_0000_84_00_0": {"VGPU": (16, 0)},
        "pci_0000_85_00_0": {"VGPU": (16, 0)},
        "pci_0000_86_00_0": {"VGPU": (16, 0)},
        "pci_0000_87_00_0": {"VGPU": (16, 0)},
    }
    root_uuid = view[node.nodename][2]
    for name, (_inv, traits, _uuid, parent) in view.items():
        if name != node.nodename:
            assert parent == root_uuid
            assert "OWNER_NOVA" in traits
    assert {"CUSTOM_GOLD", "CUSTOM_NVIDIA_35"} <= view["pci_0000_84_00_0"][1]


def test_no_op_sync_sends_no_request(placement_url, tmp_path):
    node = Node(placement_url, tmp_path)
    node.sync()
    before = node.syncer.client.request_count
    report = node.sync()
    assert report.requests == 0
    assert node.syncer.client.request_count == before
    assert not report.changed


def test_refresh_interval_rereads_and_keeps_operator_traits(
    placement_url, tmp_path, client
):
    node = Node(placement_url, tmp_path)
    node.sync()
    view = placement_view(client, node.nodename)
    rp = view["pci_0000_84_00_0"][2]
    add_trait(client, rp, "CUSTOM_RACK_7")
    # what Nova's own periodic puts on the node's root, and a trait there
    root = view[node.nodename][2]
    vcpu = {"VCPU": {"total": 8, "max_unit": 8}}
    put_inventory(client, root, vcpu)
    add_trait(client, root, "COMPUTE_NODE")
    node.syncer.refresh_interval = 0  # re-read Placement this time
    report = node.sync()
    assert report.requests > 0 and not report.changed
    view = placement_view(client, node.nodename)
    assert "CUSTOM_RACK_7" in view["pci_0000_84_00_0"][1]
    assert view[node.nodename][0]["VCPU"][0] == 8
    assert "COMPUTE_NODE" in view[node.nodename][1]


def test_generation_conflict_is_retried_and_merges_traits(
    placement_url, tmp_path, client
):
    node = Node(placement_url, tmp_path)
    node.sync()
    rp = placement_view(client, node.nodename)["pci_0000_84_00_0"][2]
    # an operator writes between our syncs: our cached generation is stale
    add_trait(client, rp, "CUSTOM_OPERATOR")
    # and our config drops CUSTOM_GOLD: we must write, and conflict
    node.configure(
        node.description.config.replace("traits = CUSTOM_GOLD\n", "")
    )
    node.sync()
    traits = placement_view(client, node.nodename)["pci_0000_84_00_0"][1]
    assert "CUSTOM_OPERATOR" in traits
    assert "CUSTOM_GOLD" not in traits
    assert "CUSTOM_NVIDIA_35" in traits


def test_changed_host_type_switch_removal_and_lowered_cap(
    placement_url, tmp_path, client, caplog
):
    node = Node(placement_url, tmp_path, host_name="m10")
    node.sync()
    caplog.set_level(logging.INFO, "vgpu_driver.placement")
    node.configure(
        """
        [devices]
        enabled_mdev_types = nvidia-35,nvidia-36
        [mdev_nvidia-35]
        device_addresses = 0000:84:00.0
        [mdev_nvidia-36]
        device_addresses = 0000:85:00.0,0000:86:00.0
        max_instances = 20
        """
    )
    node.host.unplug("pci_0000_86_00_0")  # one guest still uses a device
    report = node.sync()
    view = summary(placement_view(client, node.nodename))
    assert view == {
        node.nodename: {},
        "pci_0000_84_00_0": {"VGPU": (16, 0)},
        "pci_0000_85_00_0": {"VGPU": (16, 0)},  # switched to nvidia-36
        "pci_0000_86_00_0": {"VGPU": (1, 1)},  # gone, in use: reserved
    }
    # the change log says what is reserved, and where nothing is
    assert "inventory: VGPU 16 -> VGPU 1 (1 reserved)" in caplog.text
    assert "VGPU 16 (0 reserved)" not in caplog.text
    # each once, whatever of it changed (its traits, its inventory)
    assert sorted(report.updated) == [
        f"{node.nodename}_pci_0000_{bus}_00_0" for bus in (84, 85, 86)
    ]
    # the cap goes down: 85 shares what is left after the 1 in use
    node.configure(
        """
        [devices]
        enabled_mdev_types = nvidia-35,nvidia-36
        [mdev_nvidia-35]
        device_addresses = 0000:84:00.0
        [mdev_nvidia-36]
        device_addresses = 0000:85:00.0
        max_instances = 5
        """
    )
    node.sync()
    view = summary(placement_view(client, node.nodename))
    assert view["pci_0000_85_00_0"] == {"VGPU": (5, 0)}


def test_removed_pgpu_without_allocations_goes_with_allocations_stays(
    placement_url, tmp_path, client
):
    node = Node(placement_url, tmp_path, host_name="m10")
    node.sync()
    view = placement_view(client, node.nodename)
    allocate(client, str(uuid.uuid4()), view["pci_0000_85_00_0"][2])
    node.host.unplug("pci_0000_85_00_0")  # allocated in Placement only
    node.configure(node.description.config)
    node.sync()
    report = node.sync()
    assert "pci_0000_85_00_0" in summary(placement_view(client, node.nodename))
    assert report.kept_in_use == [f"{node.nodename}_pci_0000_85_00_0"]
    # 84's device goes with nothing allocated and its guest deleted
    guest = next(
        g for g in node.host.discover().guests if g.name == "instance-00000021"
    )
    node.host.forget_guest(guest.uuid)
    node.host.unplug("pci_0000_84_00_0")
    node.sync()
    assert "pci_0000_84_00_0" not in summary(
        placement_view(client, node.nodename)
    )


# m10's own file, nvidia-36 in a class of its own
M10_SMALL = (
    load("m10").config + "[vgpu_nvidia-36]\nmdev_class = CUSTOM_SMALL\n"
)


def test_a_class_changed_or_dropped_in_use_stays_until_the_guest_goes(
    placement_url, tmp_path, client
):
    """nvidia-36 in CUSTOM_SMALL, a guest (instance-00000022) on 86 with
    its allocation. The service restarted with the class changed, then
    with the type dropped: Placement keeps 86 in CUSTOM_SMALL, all
    reserved (it would refuse the class taken away, 409 inventory in
    use). Once the guest and its allocation are gone, the provider
    goes: no type nobody binds is left offered."""
    node = Node(placement_url, tmp_path, host_name="m10", config=M10_SMALL)
    node.sync()
    rp = placement_view(client, node.nodename)["pci_0000_86_00_0"][2]
    guest = next(
        g for g in node.host.discover().guests if g.name == "instance-00000022"
    )
    allocate(client, guest.uuid, rp, rc="CUSTOM_SMALL")
    node.configure(M10_SMALL.replace("CUSTOM_SMALL", "CUSTOM_BIG"))
    node.sync()
    view = placement_view(client, node.nodename)
    assert view["pci_0000_86_00_0"][0] == {"CUSTOM_SMALL": (1, 1)}
    dropped = M10_SMALL.replace(",nvidia-36", "")
    node.configure(dropped)
    node.sync()
    view = placement_view(client, node.nodename)
    assert view["pci_0000_86_00_0"][0] == {"CUSTOM_SMALL": (1, 1)}
    node.host.forget_guest(guest.uuid)
    client.request("DELETE", f"/allocations/{guest.uuid}", ok=(204,))
    node.configure(dropped)
    node.sync()
    assert "pci_0000_86_00_0" not in placement_view(client, node.nodename)


def test_concurrent_syncers_of_one_host_converge(
    placement_url, tmp_path, client
):
    nodename = f"node-{uuid.uuid4().hex[:8]}"
    nodes = [
        Node(placement_url, tmp_path / str(i), nodename=nodename)
        for i in range(4)
    ]
    assert sync_all_at_once(nodes, rounds=2) == []
    found = client.request("GET", f"/resource_providers?name={nodename}").body
    assert len(found["resource_providers"]) == 1
    view = summary(placement_view(client, nodename))
    assert len(view) == 7
    assert view["pci_0000_86_00_0"] == {"VGPU": (16, 0)}


def test_many_hosts_at_once(placement_url, tmp_path, client):
    nodes = [
        Node(placement_url, tmp_path / str(i), host_name="m10")
        for i in range(8)
    ]
    assert sync_all_at_once(nodes) == []
    for node in nodes:
        assert summary(placement_view(client, node.nodename)) == {
            node.nodename: {},
            "pci_0000_84_00_0": {"VGPU": (16, 0)},
            "pci_0000_85_00_0": {"VGPU": (16, 0)},
            "pci_0000_86_00_0": {"VGPU": (16, 0)},
        }


def test_5xx_is_retried_with_backoff(placement_url, tmp_path, client):
    with FaultProxy(placement_url) as proxy:
        node = Node(proxy.url, tmp_path)
        proxy.fail_next = 2  # fewer than max_attempts (3)
        report = node.sync()
        assert report.created
    assert summary(placement_view(client, node.nodename))["pci_0000_84_00_0"]


def test_placement_down_is_a_clear_error_and_the_next_sync_finishes(
    placement_url, tmp_path, client
):
    with FaultProxy(placement_url) as proxy:
        node = Node(proxy.url, tmp_path)
        node.sync()
        node.configure(
            node.description.config.replace(
                "traits = CUSTOM_GOLD", "traits = CUSTOM_SILVER"
            )
        )
        proxy.fail_next = 100
        with pytest.raises(PlacementUnavailable) as caught:
            node.sync()
        assert proxy.url in str(caught.value)
        assert "3 attempts" in str(caught.value)
        proxy.fail_next = 0
        node.sync()
    traits = placement_view(client, node.nodename)["pci_0000_84_00_0"][1]
    assert "CUSTOM_SILVER" in traits and "CUSTOM_GOLD" not in traits


def test_generations_after_a_batched_write_are_placements(
    placement_url, tmp_path
):
    """The first sync sends its inventories in one POST /reshaper, whose
    answer carries no generations: the view follows Placement's rule (an
    inventory bumps a provider twice). Each provider's next write, sent
    with the generation the view keeps, is taken the first time: no 409
    and no re-read."""
    node = Node(placement_url, tmp_path, host_name="m10")
    node.sync()
    client = node.syncer.client
    posts = client.statuses[204]
    assert posts, "the inventories went in one reshaper request"
    for cap in ("3", "2"):  # each a write of two device providers
        node.configure(
            node.description.config.replace(
                "[vgpu_nvidia-36]", f"[vgpu_nvidia-36]\nmax_instances = {cap}"
            ).replace(
                "[vgpu_nvidia-35]", f"[vgpu_nvidia-35]\nmax_instances = {cap}"
            )
        )
        report = node.sync()
        assert len(report.updated) >= 2
    assert client.statuses[409] == 0
