"""The README's main job, end to end with the embedded Placement."""

from __future__ import annotations

import pytest

from vgpu_driver.cmd import main as cli

pytestmark = pytest.mark.functional


def test_demo_syncs_and_asks_placement_for_candidates(capsys):
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "Second sync: 0 created, 0 updated, 0 removed; 0 request(s)" in out
    rows = {
        line.split("  ")[0]: line
        for line in out.split("=== Allocation candidates ===")[1].splitlines()
        if line
    }
    nvidia_35 = rows["one vGPU of type nvidia-35"]
    assert "pci_0000_84_00_0" in nvidia_35 and "pci_0000_85_00_0" in nvidia_35
    assert "pci_0000_86_00_0" not in nvidia_35
    assert " 4 " in rows["one vGPU able to drive 2560x1600"]
    assert "pci_0000_3b_00_0" in rows["one generic mlx5 mdev"]
    assert "+" in rows["two vGPUs from two different pGPUs"]
    # then a pretend instance gets its devices and gives them back
    assert "<hostdev mode='subsystem'" in out
    assert "allocation deleted" in out and "Claims left: 0" in out


def test_demo_json_is_one_document(capsys):
    import json

    from vgpu_driver.cmd import main as cli

    assert cli.main(["demo", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)  # one document, no banner
    assert set(document) == {
        "host",
        "configuration",
        "discovery",
        "placement",
        "bind",
    }
    first, second = document["placement"]["syncs"]
    assert first["created"] and second["requests"] == 0
    assert document["bind"]["devices"] and document["bind"]["claims_left"] == 0
