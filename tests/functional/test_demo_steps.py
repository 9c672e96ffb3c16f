"""The README's main job runs on its embedded default."""

from __future__ import annotations

import pytest

from vgpu_driver.cmd import main as cli

pytestmark = pytest.mark.functional


def test_demo_runs_on_the_embedded_host(capsys):
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "Simulated host: demo" in out
    assert "CUSTOM_MLX5" in out  # the effective configuration
    assert "GRID M10-0B" in out  # discovery through libvirt's test driver
    assert "Allocation candidates" in out
