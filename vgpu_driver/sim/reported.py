"""What discovery of a host description must report: the reading a
:class:`~.simulated.SimulatedHost` hands out, and that
:class:`~vgpu_driver.host.libvirt_host.LibvirtHost` must make of the same
description served by libvirt's test driver and a fake sysfs tree (the
contract tests hold the two equal)."""

from __future__ import annotations

from vgpu_driver.host.sysfs import NVIDIA_DRIVER
from vgpu_driver.model import naming
from vgpu_driver.model.device import (
    Guest,
    HostInventory,
    Mdev,
    MdevType,
    Parent,
    PhysicalFunction,
    PlainSriovGpu,
    SriovType,
    VirtualFunction,
    sort_inventory,
)
from vgpu_driver.model.gpus import PLAIN_SRIOV_DRIVERS, is_gpu_class
from vgpu_driver.sim.specs import GuestSpec, HostDescription, PfSpec


def inventory_of(description: HostDescription) -> HostInventory:
    """What discovery of this description must report."""
    parents = []
    for spec in description.parents:
        pci = spec.kind == "pci"
        parents.append(
            Parent(
                name=spec.name,
                address=spec.address,
                vendor_id=spec.vendor_id if pci else None,
                vendor=spec.vendor if pci and spec.vendor_id else None,
                product_id=spec.product_id if pci else None,
                product=spec.product if pci and spec.product_id else None,
                driver=spec.driver,
                numa_node=spec.numa_node if pci else None,
                physical_function=spec.physical_function,
                types=tuple(
                    MdevType(
                        id=t.id,
                        name=t.name,
                        device_api=t.device_api,
                        available=description.available(spec, t.id),
                        description=t.description,
                    )
                    for t in spec.types
                ),
            )
        )
    mdevs = [
        Mdev(
            uuid=m.uuid,
            type_id=m.type,
            parent=m.parent,
            name=m.libvirt_name,
            iommu_group=m.iommu_group,
            active=m.active,
        )
        for m in description.mdevs
    ]
    guests = [guest_of(g) for g in description.guests]
    # a card's VFs carry vGPUs only under NVIDIA's driver
    pfs = [_pf_of(pf) for pf in description.pfs if pf.driver == NVIDIA_DRIVER]
    drivers = {p.driver for p in parents} | {pf.driver for pf in pfs}
    versions = [v for v in description.driver_versions() if v[0] in drivers]
    plain = [
        PlainSriovGpu(
            name=naming.libvirt_pci_name(g.address),
            address=g.address,
            vendor_id=g.vendor_id,
            product_id=g.product_id,
            vf_product_id=g.vf_product_id or g.product_id,
            driver=g.driver,
            vfs=tuple(g.vf_addresses),
        )
        for g in description.other_gpus
        if g.driver in PLAIN_SRIOV_DRIVERS
        and is_gpu_class(g.pci_class)
        and g.vf_addresses
    ]
    return sort_inventory(
        parents,
        mdevs,
        pfs,
        guests,
        True,
        versions,
        description.loaded_modules(),
        None,
        plain,
    )


def _pf_of(pf: PfSpec) -> PhysicalFunction:
    creatable = pf.creatable_by_vf(pf.vf_addresses)
    return PhysicalFunction(
        name=pf.name,
        address=pf.address,
        vendor_id=pf.vendor_id,
        product_id=pf.product_id,
        driver=pf.driver,
        numa_node=pf.numa_node,
        vfs=tuple(
            VirtualFunction(
                address=vf,
                current_type=pf.vf_types.get(vf, 0),
                creatable=tuple(
                    SriovType(t.id, t.name) for t in creatable[vf]
                ),
            )
            for vf in sorted(pf.vf_addresses)
        ),
    )


def guest_of(spec: GuestSpec) -> Guest:
    return Guest(
        spec.uuid, spec.name, tuple(spec.mdevs), tuple(spec.pci), spec.nova
    )
