"""NVIDIA SR-IOV cards as sysfs shows them: the physical GPUs bound to
NVIDIA's driver, their VFs and the vGPU type each VF has (Ampere and
newer on kernels 6.8 and later, where VFs are not mdev parents).

:class:`NvidiaSriovScan` owns what it probed and keeps between scans:
which devices are not PFs, each PF's VFs, each PF as last read and the
vGPU types its VFs ever listed.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from vgpu_driver.host import sysfs_files as files
from vgpu_driver.host.sysfs_files import parse_creatable
from vgpu_driver.host.vf_types import VfTypes
from vgpu_driver.model import naming
from vgpu_driver.model.device import (
    PhysicalFunction,
    SriovType,
    VirtualFunction,
    remember_types,
)

# the PCI driver of NVIDIA's vGPU manager: it drives the PFs whose VFs
# NVIDIA's sriov-manage enables
NVIDIA_DRIVER = "nvidia"


class NvidiaSriovScan:
    def __init__(
        self, root: str, driver_of: Callable[[str], str | None]
    ) -> None:
        self.root = root
        self.driver_of = driver_of  # a device's driver, by its directory
        # devices bound to NVIDIA's driver that are not SR-IOV PFs
        self._not_pf: set[str] = set()
        # PF address -> (its VF count, the VFs NVIDIA's driver types)
        self._virtfns: dict[str, tuple[int, list[str]]] = {}
        # PF address -> the PF as last read: read again when its VFs'
        # current types change (a VF's creatable types depend on them)
        self._pfs: dict[str, PhysicalFunction] = {}
        # PF address -> every vGPU type its VFs listed (see remember_types)
        self._types_seen: dict[str, dict[int, SriovType]] = {}
        # each VF's type, read again only where it may have changed, and
        # PF address -> the types (as VfTypes gave them) it was read from
        self.vf_types = VfTypes()
        self._read_from: dict[str, dict[str, int]] = {}

    def forget_probes(self) -> None:
        """Probe the devices of NVIDIA's driver again at the next scan
        (SR-IOV may have been set up since)."""
        self._not_pf.clear()
        self._virtfns.clear()
        self._pfs.clear()
        self._read_from.clear()
        self.vf_types.forget()

    def functions(self) -> list[PhysicalFunction]:
        """NVIDIA SR-IOV physical GPUs and their VFs.

        They are found from the devices bound to NVIDIA's driver
        (``bus/pci/drivers/nvidia``), never from the host's whole PCI
        listing: a server lists hundreds of PCI devices, and probing them
        cost about 5 µs each on a first scan, 0.3 µs on every later one. A
        PF is a device there with ``sriov_numvfs``; its VFs are its
        ``virtfn<N>`` links that have an ``nvidia`` directory. A host
        without NVIDIA's driver costs one failed listing.

        At every scan each PF's ``sriov_numvfs`` is read (VFs enabled or
        disabled are seen at once), and a VF's ``current_vgpu_type`` only
        where it may have changed (see :mod:`.vf_types`: a write to it
        told by the kernel, by anyone, another process or an operator,
        is seen at once). The rest is read again only when it may have
        changed: the creatable types of its free VFs and its PF's
        attributes when a VF of that PF changed type, a PF's ``virtfn``
        links when its number of VFs changed. Whether a device bound to
        the driver is a PF, and a VF has the directory, is probed once;
        :meth:`forget_probes` probes again (and reads every VF's type).
        """
        devices = f"{self.root}/bus/pci/devices"
        driver = f"{self.root}/bus/pci/drivers/{NVIDIA_DRIVER}"
        try:
            bound = os.listdir(driver)
        except OSError:
            bound = []
        current_of: dict[str, dict[str, int]] = {}
        self.vf_types.begin(driver, bound)
        for entry in bound:
            if entry in self._not_pf:
                continue
            count = files.read_int(f"{devices}/{entry}/sriov_numvfs")
            if count is None:  # a VF, a GPU without SR-IOV, or `bind`
                self._not_pf.add(entry)
                continue
            if count == 0:
                # SR-IOV not enabled yet (sriov-manage -e): reported with
                # no VF, so the operator is told what to do
                current_of.setdefault(entry, {})
                continue
            vfs = self._vfs_of(devices, entry, count)
            currents = self.vf_types.of(devices, entry, vfs)
            if currents:
                current_of[entry] = currents
        pfs = []
        for address, currents in sorted(current_of.items()):
            known = self._pfs.get(address)
            # the same types as the PF was read from: nothing to compare
            if known is None or currents is not self._read_from.get(address):
                state = sorted(currents.items())
                if known is None or state != [
                    (vf.address, vf.current_type) for vf in known.vfs
                ]:
                    known = self._pfs[address] = self._read_pf(
                        devices, address, state
                    )
                self._read_from[address] = currents
            pfs.append(known)
        for gone in set(self._pfs) - set(current_of):
            del self._pfs[gone]
            self._read_from.pop(gone, None)
        return pfs

    def _vfs_of(self, devices: str, pf: str, count: int) -> list[str]:
        """The addresses of a PF's VFs that NVIDIA's driver gives a vGPU
        type (an ``nvidia`` directory): read from its ``virtfn`` links
        again only when its VF count changed. (The VFs of an A100 on an
        older kernel are mdev parents instead, with no such directory.)"""
        known = self._virtfns.get(pf)
        if known is not None and known[0] == count:
            return known[1]
        vfs = []
        complete = True
        for index in range(count):
            try:
                link = os.readlink(f"{devices}/{pf}/virtfn{index}")
            except OSError:
                complete = False  # VFs being enabled or disabled
                continue
            vf = os.path.basename(link)
            if os.path.isdir(f"{devices}/{vf}/nvidia"):
                vfs.append(vf)
        if complete:  # else read again at the next scan
            self._virtfns[pf] = (count, vfs)
        return vfs

    def _read_pf(
        self, devices: str, address: str, currents: list[tuple[str, int]]
    ) -> PhysicalFunction:
        """A PF and its VFs, given each VF's current type (in order). A
        VF that has a type holds its one vGPU: what it lists as creatable
        (nothing, on NVIDIA's driver) is not read."""
        vfs = tuple(
            VirtualFunction(
                vf,
                current,
                parse_creatable(
                    files.read(f"{devices}/{vf}/nvidia/creatable_vgpu_types")
                    or ""
                )
                if not current
                else (),
            )
            for vf, current in currents
        )
        pf_dir = f"{devices}/{address}"
        numa = files.read_int(f"{pf_dir}/numa_node")
        pf = PhysicalFunction(
            name=naming.libvirt_pci_name(address),
            address=address,
            vendor_id=files.read(f"{pf_dir}/vendor"),
            product_id=files.read(f"{pf_dir}/device"),
            driver=self.driver_of(pf_dir),
            numa_node=None if numa is None or numa < 0 else numa,
            vfs=vfs,
        )
        return remember_types(pf, self._types_seen)


__all__ = ["NVIDIA_DRIVER", "NvidiaSriovScan"]
