"""A card in mixed-size mode in a real Placement: a provider per type it
serves, the card's and its other types' under it, each with its class
and trait; a flavor's trait picks the type, also when both types are
the same class."""

from __future__ import annotations

import uuid

import pytest

from tests.mixed_size_host import CARD, CONFIG, SECOND, mixed_host
from tests.placement_helpers import PlacementNode, allocate, placement_view
from vgpu_driver.exception import PlacementError

pytestmark = pytest.mark.functional


def mixed_node(url, tmp_path, config):
    return PlacementNode(
        url, tmp_path, "rtx6000-nvml", config=config, host=mixed_host()
    )


def test_a_provider_per_type_and_a_trait_picks_it(
    placement_url, tmp_path, client
):
    node = mixed_node(placement_url, tmp_path, CONFIG)
    node.sync()
    view = placement_view(client, node.nodename)
    root = view[node.nodename][2]
    assert view[CARD][0] == {"VGPU": (24, 0)}
    assert view[SECOND][0] == {"CUSTOM_DC_48Q": (2, 0)}
    assert view[CARD][3] == root
    assert view[SECOND][3] == view[CARD][2]  # under the card's provider
    assert picked(client, "VGPU", "CUSTOM_NVIDIA_1521", root) == {
        view[CARD][2]
    }
    assert picked(client, "CUSTOM_DC_48Q", "CUSTOM_NVIDIA_1540", root) == {
        view[SECOND][2]
    }


def picked(client, resource_class, trait, root):
    """The providers Placement would take a unit from, in one tree."""
    found = client.request(
        "GET",
        f"/allocation_candidates?resources={resource_class}:1"
        f"&required={trait}&in_tree={root}",
    ).body["allocation_requests"]
    return {rp for a in found for rp in a["allocations"]}


def test_a_trait_picks_the_type_when_both_are_vgpu(
    placement_url, tmp_path, client
):
    """Both types in VGPU: the DC-4Q trait picks the card's provider
    alone, not the DC-48Q provider under it, and the DC-48Q trait that
    one alone (a trait is not taken from a provider's parent)."""
    node = mixed_node(
        placement_url, tmp_path, CONFIG.replace("CUSTOM_DC_48Q", "VGPU")
    )
    node.sync()
    view = placement_view(client, node.nodename)
    root = view[node.nodename][2]
    assert view[SECOND][0] == {"VGPU": (2, 0)}
    assert picked(client, "VGPU", "CUSTOM_NVIDIA_1540", root) == {
        view[SECOND][2]
    }
    assert picked(client, "VGPU", "CUSTOM_NVIDIA_1521", root) == {
        view[CARD][2]
    }


def test_a_full_card_keeps_its_provider_over_the_other_type(
    placement_url, tmp_path, client
):
    """Two DC-48Q fill the card: the card's provider stays in Placement
    with no inventory, the DC-48Q provider under it; both released and
    the card served no more, both are deleted in one sync (the child
    first: Placement refuses to delete a provider with children)."""
    node = mixed_node(placement_url, tmp_path, CONFIG)
    node.sync()
    rp = placement_view(client, node.nodename)[SECOND][2]
    for guest in ("i1", "i2"):
        node.driver.allocate_mdevs(
            guest, {rp: {"resources": {"CUSTOM_DC_48Q": 1}}}
        )
    node.sync()
    view = placement_view(client, node.nodename)
    assert view[CARD][0] == {}
    assert view[SECOND][0] == {"CUSTOM_DC_48Q": (2, 0)}
    assert view[SECOND][3] == view[CARD][2]
    for guest in ("i1", "i2"):
        node.driver.release_mdevs(guest)
    node.configure(CONFIG.replace("0001:c8:00.0", "0002:00:00.0"))
    node.sync()
    assert set(placement_view(client, node.nodename)) == {node.nodename}


def test_card_shares_make_placement_refuse_what_would_not_fit(
    placement_url, tmp_path, client
):
    """Shares 50/50: Placement itself hands out 12 DC-4Q and 1 DC-48Q
    from one refresh's figures (which fit together: 48 + 48 GB) and
    refuses the 13th and the 2nd; no bind would be refused."""
    config = CONFIG.replace(
        "0001:c8:00.0\n", "0001:c8:00.0\ncard_share = 50\n"
    )
    node = mixed_node(placement_url, tmp_path, config)
    node.sync()
    view = placement_view(client, node.nodename)
    assert view[CARD][0] == {"VGPU": (24, 12)}
    assert view[SECOND][0] == {"CUSTOM_DC_48Q": (2, 1)}
    wanted = [(CARD, "VGPU")] * 13 + [(SECOND, "CUSTOM_DC_48Q")] * 2
    taken = []
    for name, rc in wanted:
        try:
            allocate(client, str(uuid.uuid4()), view[name][2], rc)
            taken.append(name)
        except PlacementError:
            pass
    assert (taken.count(CARD), taken.count(SECOND)) == (12, 1)


def test_a_card_no_longer_served_goes_with_the_provider_under_it(
    placement_url, tmp_path, client
):
    """The card's types disabled: its provider and the other type's
    provider under it are deleted, the one under it first (Placement
    refuses to delete a provider that has children)."""
    node = mixed_node(placement_url, tmp_path, CONFIG)
    node.sync()
    assert {CARD, SECOND} <= placement_view(client, node.nodename).keys()
    node.configure("[devices]\nenabled_mdev_types =\n")
    report = node.sync()
    names = {f"{node.nodename}_{device}" for device in (CARD, SECOND)}
    assert names <= set(report.removed)
    assert not {CARD, SECOND} & placement_view(client, node.nodename).keys()
