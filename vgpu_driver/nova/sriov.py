"""NVIDIA SR-IOV vGPUs in Nova's driver: a VF with its vGPU type set is
given to the guest as a PCI host device (``managed='no'``: the VF stays
bound to NVIDIA's driver), detached for suspend like an mdev; live
migration of such an instance is refused at the source. A VF of an AMD
or Intel SR-IOV GPU, given as it is, goes the same way with
``managed='yes'`` (libvirt binds it to vfio-pci)."""

from __future__ import annotations

from typing import Any

from nova import exception as nova_exception
from nova.virt.libvirt import config as vconfig
from nova.virt.libvirt import host as nova_host

from vgpu_driver.model import naming
from vgpu_driver.nova.adapter import is_mdev
from vgpu_driver.nova.base import VgpuBase


class SriovVfs(VgpuBase):
    def _guest_add_mdevs(self, guest: Any, chosen_mdevs: list[str]) -> None:
        """Nova's guest config gets an ``<hostdev type='mdev'>`` per mdev;
        a VF of an SR-IOV vGPU card (named by its PCI address) gets an
        ``<hostdev type='pci' managed='no'>``: the VF stays bound to
        NVIDIA's driver, whose vGPU type the library has set."""
        mdevs = [d for d in chosen_mdevs if is_mdev(d)]
        super()._guest_add_mdevs(guest, mdevs)
        managed = self._vgpu.vf_devices()
        for address in chosen_mdevs:
            if not is_mdev(address):
                guest.add_device(
                    _vf_hostdev(address, managed.get(address, False))
                )

    def _get_mdevs_from_guest_config(self, xml: str) -> list[Any]:
        """At resume, what suspend detached: the mdevs (as Nova's own
        does), and the VFs; the XML parsed once."""
        config = vconfig.LibvirtConfigGuest()
        config.parse_str(xml)
        vfs = self._vgpu.vf_devices()
        return [
            device
            for device in config.devices
            if isinstance(device, vconfig.LibvirtConfigGuestHostdevMDEV)
            or (
                isinstance(device, vconfig.LibvirtConfigGuestHostdevPCI)
                and _address(device) in vfs
            )
        ]

    def _detach_mediated_devices(self, guest: Any) -> None:
        """Before suspend: libvirt cannot save a guest with an assigned
        VF any more than with an mdev, so the VFs go too."""
        super()._detach_mediated_devices(guest)
        vfs = self._vgpu.vf_devices()
        for device in guest.get_all_devices(
            devtype=vconfig.LibvirtConfigGuestHostdevPCI
        ):
            if _address(device) not in vfs:
                continue  # a PCI device of Nova's own
            try:
                guest.detach_device(device, live=True)
            except nova_host.libvirt.libvirtError as exc:
                raise nova_exception.InstanceFaultRollback(
                    nova_exception.InstanceSuspendFailure(
                        reason=f"detaching vGPU VF {_address(device)}: {exc}"
                    )
                ) from exc

    def check_can_live_migrate_source(
        self,
        context: Any,
        instance: Any,
        dest_check_data: Any,
        *a: Any,
        **kw: Any,
    ) -> Any:
        """An SR-IOV vGPU VF is not live-migrated: refused here, before
        anything is reserved on the destination."""
        vfs = self._vgpu.vfs_of(instance.uuid)
        if vfs:
            raise nova_exception.MigrationPreCheckError(
                reason=f"instance {instance.uuid} has the SR-IOV vGPU "
                f"VF(s) {', '.join(vfs)}; live migration of those is not "
                "supported (cold migration and resize are)"
            )
        return super().check_can_live_migrate_source(
            context, instance, dest_check_data, *a, **kw
        )


def _vf_hostdev(address: str, managed: bool) -> Any:
    hostdev = vconfig.LibvirtConfigGuestHostdevPCI()
    (
        hostdev.domain,
        hostdev.bus,
        hostdev.slot,
        hostdev.function,
    ) = naming.split_pci_address(address)
    hostdev.managed = "yes" if managed else "no"
    return hostdev


def _address(hostdev: Any) -> str:
    """A PCI host device's address as the library spells it."""
    return (
        f"{int(hostdev.domain, 16):04x}:{int(hostdev.bus, 16):02x}:"
        f"{int(hostdev.slot, 16):02x}.{int(hostdev.function, 16):x}"
    )
