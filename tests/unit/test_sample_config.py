"""The shipped sample configuration is what the generator produces."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sample_config_matches_generator(tmp_path):
    out = tmp_path / "sample.conf"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "oslo_config.generator",
            "--config-file",
            str(ROOT / "etc/oslo-config-generator/vgpu-driver.conf"),
            "--output-file",
            str(out),
        ],
        check=True,
        cwd=ROOT,
    )
    shipped = (ROOT / "etc/vgpu-driver.conf.sample").read_text()
    assert out.read_text() == shipped, (
        "etc/vgpu-driver.conf.sample is stale: regenerate it with "
        "oslo-config-generator --config-file "
        "etc/oslo-config-generator/vgpu-driver.conf"
    )


def test_sample_documents_per_type_groups():
    shipped = (ROOT / "etc/vgpu-driver.conf.sample").read_text()
    assert "[mdev_nvidia-35]" in shipped
    assert "mdev_class = CUSTOM_MLX5" in shipped
