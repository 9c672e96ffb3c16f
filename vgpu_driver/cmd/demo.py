"""``vgpu-driver demo``: the main job on its embedded default."""

from __future__ import annotations

import tempfile
from pathlib import Path

from oslo_config import cfg

from vgpu_driver.cmd import check_config

# The seeds' example: two NVIDIA types on a Tesla M10, one generic mdev.
EXAMPLE_CONF = """\
[DEFAULT]
host = compute1

[devices]
enabled_mdev_types = nvidia-35,nvidia-36,mlx5_core-local

[mdev_nvidia-35]
device_addresses = 0000:84:00.0,0000:85:00.0

[vgpu_nvidia-36]
device_addresses = 0000:86:00.0

[mdev_mlx5_core-local]
device_addresses = 0000:3b:00.0
mdev_class = mlx5
"""


def run(conf: cfg.ConfigOpts) -> int:
    print("== Configuration (embedded example) ==")
    print(EXAMPLE_CONF)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "vgpu-driver.conf"
        path.write_text(EXAMPLE_CONF)
        conf([f"--config-file={path}", "demo"], default_config_files=[])
        return check_config.run(conf)
