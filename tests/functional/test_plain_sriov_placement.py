"""An AMD MxGPU's VFs, given as they are, in a real Placement: one
provider of the GPU in the configured class, with the type's trait."""

from __future__ import annotations

import pytest

from tests.helpers import MXGPU_CONFIG
from tests.placement_helpers import PlacementNode, allocate, placement_view
from vgpu_driver.exception import PlacementError

pytestmark = pytest.mark.functional


def test_the_gpu_s_vfs_are_one_custom_provider(
    placement_url, tmp_path, client
):
    node = PlacementNode(
        placement_url, tmp_path, "amd-mxgpu", config=MXGPU_CONFIG
    )
    node.sync()
    view = placement_view(client, node.nodename)
    inventory, traits, rp, _parent = view["pci_0000_61_00_0"]
    assert inventory == {"CUSTOM_MXGPU": (16, 0)}
    assert "CUSTOM_VF_1002_692F" in traits
    # Placement hands out no more than the VFs
    for i in range(16):
        allocate(
            client, f"00000000-0000-0000-0000-{i:012d}", rp, "CUSTOM_MXGPU"
        )
    with pytest.raises(PlacementError, match="409"):
        allocate(
            client, "00000000-0000-0000-0000-999999999999", rp, "CUSTOM_MXGPU"
        )
