"""Helpers shared by tests: hosts built from descriptions."""

from __future__ import annotations

from pathlib import Path

from vgpu_driver.host import description as hostdesc
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.host.simulated import SimulatedHost

DATA = Path(__file__).parent / "data"
ALL_HOSTS = [*hostdesc.shipped_names(), str(DATA / "s390.json")]


def load(name: str) -> hostdesc.HostDescription:
    return hostdesc.load(name)


def libvirt_host(
    description: hostdesc.HostDescription, directory: Path
) -> LibvirtHost:
    uri, sysfs_root = hostdesc.materialize(description, directory)
    return LibvirtHost(uri, sysfs_root)


def simulated_host(name: str) -> SimulatedHost:
    return SimulatedHost(hostdesc.load(name))
