"""SR-IOV GPUs as read from the host (pure): NVIDIA's, whose VFs each
take a vGPU type, and AMD's and Intel's, whose VFs are given as they
are. Re-exported by :mod:`vgpu_driver.model.device`."""

from __future__ import annotations

import dataclasses

from vgpu_driver.model import naming


@dataclasses.dataclass(frozen=True)
class SriovType:
    """A vGPU type an NVIDIA SR-IOV virtual function can be set to."""

    id: int
    name: str

    @property
    def type_id(self) -> str:
        """The name this library configures it by: ``nvidia-<id>``."""
        return naming.sriov_type_id(self.id)


@dataclasses.dataclass(frozen=True)
class VirtualFunction:
    address: str
    current_type: int  # 0: none
    creatable: tuple[SriovType, ...] = ()


@dataclasses.dataclass(frozen=True)
class PhysicalFunction:
    """An NVIDIA SR-IOV physical GPU whose VFs carry one vGPU each."""

    name: str  # libvirt-style name, pci_0000_41_00_0
    address: str
    vendor_id: str | None = None
    product_id: str | None = None
    driver: str | None = None
    numa_node: int | None = None
    vfs: tuple[VirtualFunction, ...] = ()
    # types the card listed in earlier readings: a placed vGPU's type may
    # be listed by no VF any more, and its size still counts. What the
    # reader remembers, not what the host shows: not compared (it grows
    # only when the listings, which are compared, change)
    seen_types: tuple[SriovType, ...] = dataclasses.field(
        default=(), compare=False
    )

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.address, self.name)

    def known_types(self) -> tuple[SriovType, ...]:
        """Types the card lists, in order of first appearance."""
        seen: dict[int, SriovType] = {t.id: t for t in self.seen_types}
        for vf in self.vfs:
            for sriov_type in vf.creatable:
                seen.setdefault(sriov_type.id, sriov_type)
        return tuple(seen.values())


def remember_types(
    pf: PhysicalFunction, memory: dict[str, dict[int, SriovType]]
) -> PhysicalFunction:
    """``pf`` with the types its card listed before (``memory``, kept by
    the host adapter per PF address, is updated): once every VF that
    could take a type has one, no VF lists it, yet its size counts."""
    seen = memory.setdefault(pf.address, {})
    for vf in pf.vfs:
        for sriov_type in vf.creatable:
            seen[sriov_type.id] = sriov_type
    return dataclasses.replace(pf, seen_types=tuple(seen.values()))


@dataclasses.dataclass(frozen=True)
class PlainSriovGpu:
    """A GPU whose SR-IOV VFs are whole PCI devices, each given to a guest
    as it is (AMD MxGPU / Instinct under ``gim``, Intel SR-IOV under
    ``i915``/``xe``): no mdev, no vGPU type to set."""

    name: str  # libvirt-style name, pci_0000_61_00_0
    address: str
    vendor_id: str | None = None
    product_id: str | None = None
    vf_product_id: str | None = None  # its VFs' PCI device id
    driver: str | None = None
    numa_node: int | None = None
    vfs: tuple[str, ...] = ()  # VF addresses, in order

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.address, self.name)

    @property
    def type_id(self) -> str:
        """Its VFs' "type": ``vf-<vendor>-<VF device id>``."""
        return naming.plain_vf_type_id(
            self.vendor_id, self.vf_product_id or self.product_id
        )
