"""GPUs whose SR-IOV VFs are given to guests as they are, read from
sysfs: AMD MxGPU / Instinct (``gim``, ``amdgpu``) and Intel SR-IOV GPUs
(``i915``, ``xe``).

Found from the devices bound to those drivers, never from the whole PCI
bus. A driver that is not loaded is looked for again once a minute (a
host without any costs four failed listings a minute). A PF is a
display controller or processing accelerator there with ``sriov_numvfs``
above 0; its VFs are its ``virtfn<N>`` links, read again only when that
number changes. Each scan reads one ``sriov_numvfs`` per such PF. A
device of a driver found to be no GPU PF is probed again when bound to
another driver, and every five minutes (SR-IOV set up since).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from vgpu_driver.host.pci_scan import read_int, read_value
from vgpu_driver.model import naming
from vgpu_driver.model.device import PlainSriovGpu
from vgpu_driver.model.gpus import PLAIN_SRIOV_DRIVERS, is_gpu_class

ABSENT_RETRY = 60.0  # seconds before a driver not loaded is looked for
PROBE_AGAIN = 300.0  # seconds before a device found no PF is probed again


class PlainSriovScan:
    def __init__(
        self, root: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.root = root
        self._clock = clock
        # (driver, address) probed: no GPU PF; since when
        self._not_pf: set[tuple[str, str]] = set()
        self._probed_at = clock()
        self._known: dict[str, tuple[int, PlainSriovGpu]] = {}
        self._absent: dict[str, float] = {}  # driver -> when last missed

    def gpus(self) -> list[PlainSriovGpu]:
        """The GPUs with VFs enabled, each with its VFs."""
        devices = f"{self.root}/bus/pci/devices"
        found = []
        now = self._clock()
        if now - self._probed_at >= PROBE_AGAIN:
            self._not_pf.clear()
            self._probed_at = now
        for driver in PLAIN_SRIOV_DRIVERS:
            missed = self._absent.get(driver)
            if missed is not None and now - missed < ABSENT_RETRY:
                continue
            try:
                bound = os.listdir(f"{self.root}/bus/pci/drivers/{driver}")
            except OSError:
                self._absent[driver] = now
                continue
            self._absent.pop(driver, None)
            for entry in sorted(bound):
                if (driver, entry) in self._not_pf or (
                    not naming.normalize_pci_address(entry)
                ):
                    continue  # bind, unbind, module ...: not a device
                count = read_int(f"{devices}/{entry}/sriov_numvfs")
                if count is None or not is_gpu_class(
                    read_value(f"{devices}/{entry}/class")
                ):
                    self._not_pf.add((driver, entry))
                    continue
                if count == 0:
                    continue  # VFs not enabled (yet): nothing to offer
                known = self._known.get(entry)
                if known is None or known[0] != count:
                    gpu = self._read(devices, entry, driver, count)
                    if len(gpu.vfs) < count:  # VFs coming or going
                        found.append(gpu)
                        continue
                    known = self._known[entry] = (count, gpu)
                found.append(known[1])
        return sorted(found, key=lambda gpu: gpu.name)

    def _read(
        self, devices: str, address: str, driver: str, count: int
    ) -> PlainSriovGpu:
        pf_dir = f"{devices}/{address}"
        vfs = []
        for index in range(count):
            try:
                vfs.append(
                    os.path.basename(os.readlink(f"{pf_dir}/virtfn{index}"))
                )
            except OSError:
                continue
        numa = read_int(f"{pf_dir}/numa_node")
        return PlainSriovGpu(
            name=naming.libvirt_pci_name(address),
            address=address,
            vendor_id=read_value(f"{pf_dir}/vendor"),
            product_id=read_value(f"{pf_dir}/device"),
            vf_product_id=read_value(f"{devices}/{vfs[0]}/device")
            if vfs
            else None,
            driver=driver,
            numa_node=None if numa is None or numa < 0 else numa,
            vfs=tuple(vfs),
        )
