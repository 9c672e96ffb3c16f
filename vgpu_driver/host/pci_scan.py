"""Every GPU on the host, read from sysfs: for ``discover`` and
``doctor`` only (the service reads no more than it needs; this lists the
host's whole PCI bus, a few hundred small files)."""

from __future__ import annotations

import os

from vgpu_driver.model.gpus import PciGpu, is_gpu_class


def read_value(path: str) -> str | None:
    """A sysfs file's stripped text (None: absent or empty)."""
    try:
        with open(path) as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def read_int(path: str) -> int | None:
    text = read_value(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _link_name(path: str) -> str | None:
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def scan_gpus(root: str) -> list[PciGpu]:
    """Display controllers and accelerators under ``root``/bus/pci."""
    devices = os.path.join(root, "bus/pci/devices")
    try:
        names = sorted(os.listdir(devices))
    except OSError:
        return []
    found = []
    for name in names:
        base = os.path.join(devices, name)
        pci_class = read_value(os.path.join(base, "class"))
        if not is_gpu_class(pci_class):
            continue
        found.append(
            PciGpu(
                address=name,
                vendor_id=read_value(os.path.join(base, "vendor")),
                product_id=read_value(os.path.join(base, "device")),
                pci_class=pci_class,
                driver=_link_name(os.path.join(base, "driver")),
                total_vfs=read_int(os.path.join(base, "sriov_totalvfs")),
                num_vfs=read_int(os.path.join(base, "sriov_numvfs")),
                physfn=_link_name(os.path.join(base, "physfn")),
            )
        )
    return found
