"""How the simulated hosts read the real captures they are built from:
a capture that lists nothing is refused by name, and the text around
the listed types (a header, a value with the separator in it) is read
as the tools print it."""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import raw_description
from vgpu_driver.exception import HostDescriptionInvalid
from vgpu_driver.sim import captures
from vgpu_driver.sim import description as hostdesc


def test_a_parent_whose_capture_lists_no_type_is_refused_by_name():
    raw = raw_description("a2-vf-parents")
    raw["parents"][0]["types_from"] = "h100-nvl-mig.txt"  # no such listing
    with pytest.raises(HostDescriptionInvalid, match="lists no type"):
        hostdesc.parse(json.dumps(raw), "a2 with another capture")


def test_vgpu_types_are_read_from_their_own_blocks():
    """Lines before the first type (the GPU's own) belong to no type;
    a value holding the separator is kept whole."""
    text = "\n".join(
        [
            "GPU 00000001:C8:00.0",
            "    Driver Version : 580.65.05",
            "    vGPU Type ID : 0x5f1",
            "        Name : NVIDIA RTX Pro 6000 Blackwell DC-4Q : test",
            "        Max Instances : 24",
            "        FB Memory : 3584 MiB",
            "        GPU Instance Profile ID : N/A",
        ]
    )
    [found] = captures.vgpu_types(text)
    assert found == captures.CapturedType(
        id=0x5F1,
        name="NVIDIA RTX Pro 6000 Blackwell DC-4Q : test",
        max_instances=24,
        framebuffer_mib=3584,
        gi_profile=None,
    )
