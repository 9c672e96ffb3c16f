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


def dense(parents: int, mdevs: int, guests: int) -> hostdesc.HostDescription:
    raw = hostdesc.dense_raw(parents, mdevs, guests)
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
