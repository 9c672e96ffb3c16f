"""Shared set-up of the benchmarks."""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Sequence
from pathlib import Path

from oslo_config import cfg

from vgpu_driver import conf as vconf
from vgpu_driver.host import description as hostdesc


def dense(
    parents: int, mdevs: int, guests: int, types: int = 1
) -> hostdesc.HostDescription:
    """``dense_raw``'s host; with ``types`` > 1 each pGPU also lists that
    many types in all, as a GRID card does (the others have no room once
    one type is in use)."""
    raw = hostdesc.dense_raw(parents, mdevs, guests)
    for parent in raw["parents"]:
        for k in range(1, types):
            framebuffer = (512, 1024, 2048, 4096, 8192)[k % 5]
            parent["types"].append(
                {
                    "id": f"nvidia-{200 + k}",
                    "name": f"GRID M10-{framebuffer // 1024}Q",
                    "capacity": 0,
                    "description": "num_heads=4, frl_config=60, "
                    f"framebuffer={framebuffer}M, max_resolution=5120x2880, "
                    f"max_instance={8192 // framebuffer}",
                }
            )
    return hostdesc.parse(json.dumps(raw), "bench")


def conf_for(text: str, directory: Path, name: str = "vgpu") -> cfg.ConfigOpts:
    """A ConfigOpts from INI text, with its state kept in ``directory``."""
    path = directory / f"{name}.conf"
    path.write_text(text)
    conf = cfg.ConfigOpts()
    vconf.register_opts(conf)
    conf(["--config-file", str(path)], default_config_files=[])
    conf.set_override(
        "state_path", str(directory / f"{name}-state"), "devices"
    )
    return conf


def machine() -> str:
    """One line naming what the figures were taken on."""
    import libvirt

    version = libvirt.getVersion()
    return (
        f"machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"libvirt {version // 1_000_000}.{version // 1000 % 1000}"
    )


def spread(samples: Sequence[float]) -> str:
    """``min/median/max`` of samples in milliseconds."""
    return (
        f"{min(samples):.2f}/{statistics.median(samples):.2f}/"
        f"{max(samples):.2f}"
    )
