"""Every GPU on the host, and what this library does with it (pure).

The service only looks at mdev parents and NVIDIA SR-IOV cards; an
operator setting a host up needs to see the rest too (an AMD MxGPU or
Intel SR-IOV GPU, an NVIDIA GPU without its vGPU manager, a card whose
VFs are not enabled), so nothing on the host is silently ignored.
"""

from __future__ import annotations

import dataclasses

from vgpu_driver.model.config import DeviceConfig, TypeConfig
from vgpu_driver.model.device import HostInventory

VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel"}
# PCI classes of GPUs: display controllers (0x03....) and processing
# accelerators (0x1200..), as AMD Instinct boards report themselves
GPU_CLASS_PREFIXES = ("0x03", "0x1200")
# host drivers of GPUs whose SR-IOV VFs are whole PCI devices, given to
# guests as they are: AMD MxGPU / Instinct, Intel SR-IOV
PLAIN_SRIOV_DRIVERS = ("gim", "amdgpu", "i915", "xe")


@dataclasses.dataclass(frozen=True)
class PciGpu:
    """A display controller or accelerator as sysfs shows it."""

    address: str
    vendor_id: str | None = None
    product_id: str | None = None
    pci_class: str | None = None
    driver: str | None = None
    total_vfs: int | None = None  # sriov_totalvfs (None: no SR-IOV)
    num_vfs: int | None = None  # sriov_numvfs
    physfn: str | None = None  # its PF's address, for a VF

    @property
    def vendor(self) -> str:
        return VENDORS.get(
            (self.vendor_id or "").lower(), self.vendor_id or "?"
        )


@dataclasses.dataclass(frozen=True)
class GpuRole:
    gpu: PciGpu
    role: str  # what the library does with it, in a few words
    note: str  # why, and what to do
    vfs: int = 0  # its VFs (listed under it, not one by one)
    offered: bool = False  # an enabled type is offered from it


def is_gpu_class(pci_class: str | None) -> bool:
    return (pci_class or "").lower().startswith(GPU_CLASS_PREFIXES)


def roles(
    gpus: list[PciGpu], inventory: HostInventory, config: DeviceConfig
) -> list[GpuRole]:
    """One row per GPU that is not a VF (VFs are counted on their PF)."""
    vfs_of: dict[str, int] = {}
    for gpu in gpus:
        if gpu.physfn:
            vfs_of[gpu.physfn] = vfs_of.get(gpu.physfn, 0) + 1
    parents = {p.address: p for p in inventory.parents if p.address}
    parents_on_gpu: dict[str, int] = {}
    for parent in inventory.parents:
        if parent.physical_function:
            key = parent.physical_function
            parents_on_gpu[key] = parents_on_gpu.get(key, 0) + 1
    pfs = {pf.address: pf for pf in inventory.pfs}
    plain = {g.address: g for g in inventory.plain_gpus}
    found = []
    for gpu in gpus:
        if gpu.physfn:
            continue
        vfs = vfs_of.get(gpu.address, 0)
        if gpu.address in parents:
            parent = parents[gpu.address]
            type_cfg = config.type_for_parent(parent.keys, parent.type_ids)
            found.append(_served("mdev parent", gpu, type_cfg, vfs))
        elif gpu.address in parents_on_gpu:
            vf_parent = next(
                p
                for p in inventory.parents
                if p.physical_function == gpu.address
            )
            type_cfg = config.type_for_parent(
                vf_parent.keys, vf_parent.type_ids
            )
            found.append(
                _served(
                    f"GPU whose {parents_on_gpu[gpu.address]} VFs are mdev "
                    "parents (one provider)",
                    gpu,
                    type_cfg,
                    vfs,
                )
            )
        elif gpu.address in pfs:
            pf = pfs[gpu.address]
            types = tuple(t.type_id for t in pf.known_types())
            serves = config.types_for_device(pf.keys, types)
            type_cfg = serves[0] if serves else None
            if not pf.vfs:
                found.append(
                    GpuRole(
                        gpu,
                        "NVIDIA SR-IOV vGPU GPU, VFs not enabled",
                        "enable them: /usr/lib/nvidia/sriov-manage -e "
                        f"{gpu.address}",
                        vfs,
                    )
                )
            else:
                role = _served("NVIDIA SR-IOV vGPU GPU", gpu, type_cfg, vfs)
                if len(serves) > 1:  # mixed-size mode: a provider each
                    role = dataclasses.replace(
                        role,
                        note="offers "
                        + ", ".join(t.type_id for t in serves)
                        + " (a provider each: mixed-size mode)",
                    )
                found.append(role)
        elif gpu.address in plain:
            card = plain[gpu.address]
            type_cfg = config.type_for_parent(card.keys, (card.type_id,))
            role = _served(
                f"{gpu.vendor} SR-IOV GPU, VFs given as they are",
                gpu,
                type_cfg,
                vfs,
            )
            if type_cfg is None:
                role = dataclasses.replace(
                    role,
                    note=f"enable its VFs' type: [devices] enabled_mdev_types"
                    f" = {card.type_id} (or give them to guests with Nova's "
                    "PCI passthrough, not both)",
                )
            found.append(role)
        else:
            found.append(_unused(gpu, vfs))
    return found


def _served(
    what: str, gpu: PciGpu, type_cfg: TypeConfig | None, vfs: int
) -> GpuRole:
    if type_cfg is None:
        return GpuRole(
            gpu,
            what,
            "no enabled type is offered from it: add one of its types to "
            "[devices] enabled_mdev_types (see 'discover')",
            vfs,
        )
    return GpuRole(gpu, what, f"offers {type_cfg.type_id}", vfs, offered=True)


def _unused(gpu: PciGpu, vfs: int) -> GpuRole:
    if gpu.total_vfs:
        enabled = gpu.num_vfs or 0
        return GpuRole(
            gpu,
            f"{gpu.vendor} SR-IOV GPU ({enabled} of {gpu.total_vfs} VFs "
            "enabled)",
            "its VFs are whole PCI devices"
            + (
                ""
                if enabled
                else ": enable VFs with its vendor's tool, then enable "
                "their type (see the hardware guide)"
            ),
            vfs,
        )
    if gpu.vendor == "NVIDIA":
        return GpuRole(
            gpu,
            "NVIDIA GPU, no vGPU",
            f"driver {gpu.driver or 'none'} offers no mdev type and no "
            "SR-IOV vGPU: install NVIDIA's vGPU manager (host driver) for "
            "vGPUs, or pass it through whole with Nova's [pci] options",
            vfs,
        )
    return GpuRole(
        gpu,
        f"{gpu.vendor} GPU, no mediated devices",
        f"driver {gpu.driver or 'none'} offers no mdev type and it has no "
        "SR-IOV: nothing for this library to offer",
        vfs,
    )
