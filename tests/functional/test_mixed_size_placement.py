"""A card in mixed-size mode in a real Placement: a provider per type it
serves, siblings under the compute node, each with its class and
trait; a flavor's trait picks the type."""

from __future__ import annotations

import pytest

from tests import helpers
from tests.helpers import PlacementNode, placement_view
from tests.unit.test_mixed_size import CARD, CONFIG, SECOND
from vgpu_driver.sim.simulated import SimulatedHost

pytestmark = pytest.mark.functional


def test_a_provider_per_type_and_a_trait_picks_it(
    placement_url, tmp_path, client
):
    host = SimulatedHost(helpers.load("rtx6000-nvml"))
    for pf in host._state.pfs:
        pf.vf_types.clear()
        pf.mixed_size = True
    host._state.guests.clear()
    node = PlacementNode(
        placement_url, tmp_path, "rtx6000-nvml", config=CONFIG, host=host
    )
    node.sync()
    view = placement_view(client, node.nodename)
    root = view[node.nodename][2]
    assert view[CARD][0] == {"VGPU": (24, 0)}
    assert view[SECOND][0] == {"CUSTOM_DC_48Q": (2, 0)}
    assert view[CARD][3] == view[SECOND][3] == root
    found = client.request(
        "GET",
        "/allocation_candidates?resources=VGPU:1&required=CUSTOM_NVIDIA_1521",
    ).body["allocation_requests"]
    assert {rp for a in found for rp in a["allocations"]} == {view[CARD][2]}
