"""The sysfs side of a host, below a root passed in (``/sys`` for real).

It covers what libvirt does not report: type descriptions, drivers, mdev
parents libvirt has no node device for (the mtty sample driver's), and
NVIDIA SR-IOV cards, whose VFs carry their vGPU type in
``<VF>/nvidia/current_vgpu_type`` instead of being mdev parents (read by
:mod:`.nvidia_sriov`). It also
writes what libvirt cannot do: ``create`` and ``remove`` of mdevs on
older libvirt, and a VF's vGPU type.

:class:`SysfsTree` owns what it probed and keeps between refreshes (the
links it resolved, which devices are SR-IOV physical functions and their
VFs); :meth:`SysfsTree.forget_probes` drops them when the devices are
listed again.
"""

from __future__ import annotations

import os
from pathlib import Path

from oslo_log import log as logging

from vgpu_driver.exception import (
    DeviceNoRoom,
    DeviceOperationFailed,
    says_no_room,
)
from vgpu_driver.host import privileged
from vgpu_driver.host import sysfs_files as files
from vgpu_driver.host.nvidia_sriov import NVIDIA_DRIVER, NvidiaSriovScan
from vgpu_driver.host.sysfs_files import parse_creatable
from vgpu_driver.host.vf_types import TYPE_FILE
from vgpu_driver.model import naming
from vgpu_driver.model.device import (
    MdevType,
    Parent,
    PhysicalFunction,
)

LOG = logging.getLogger(__name__)


class SysfsTree:
    def __init__(self, root: str | os.PathLike[str] = "/sys") -> None:
        self.root = Path(root)
        # a device link's target does not change while the device exists
        self._resolved: dict[Path, Path] = {}
        self.nvidia_sriov = NvidiaSriovScan(str(self.root), self.driver)

    def real_path(self, path: Path) -> Path:
        """``path`` with its links resolved (cached)."""
        target = self._resolved.get(path)
        if target is None:
            target = self._resolved[path] = path.resolve()
        return target

    # -- paths ---------------------------------------------------------

    def resolve(self, libvirt_path: str | None, address: str | None) -> Path:
        """The directory of a device below the root."""
        if libvirt_path and libvirt_path.startswith("/sys/"):
            return self.root / libvirt_path.removeprefix("/sys/")
        if address:
            return self.root / "bus/pci/devices" / address
        return self.root / "nonexistent"

    # -- reading -------------------------------------------------------

    # (joined as strings: a first discovery reads these for every parent)

    def driver(self, device: str | os.PathLike[str]) -> str | None:
        try:
            return os.path.basename(os.readlink(f"{device}/driver"))
        except OSError:
            return None

    def type_description(self, device: Path, type_id: str) -> str | None:
        return files.read(
            f"{device}/mdev_supported_types/{type_id}/description"
        )

    def forget_probes(self) -> None:
        """Probe the devices of NVIDIA's driver again at the next scan
        (SR-IOV may have been set up since)."""
        self.nvidia_sriov.forget_probes()

    def mdev_bus_listing(self) -> list[str] | None:
        """The names registered in ``class/mdev_bus``, sorted; None when
        there is no such directory (no mdev support, or no sysfs)."""
        try:
            return sorted(os.listdir(f"{self.root}/class/mdev_bus"))
        except OSError:
            return None

    def mdev_bus_parents(self, entries: list[str]) -> dict[Path, str]:
        """The registered mdev parents ``entries`` names (from
        :meth:`mdev_bus_listing`): real path -> sysfs name."""
        bus = self.root / "class/mdev_bus"
        return {self.real_path(bus / e): e for e in entries}

    def read_parent(self, device: Path, name: str) -> Parent | None:
        """A parent libvirt does not describe, read from sysfs alone."""
        types_dir = device / "mdev_supported_types"
        try:
            type_ids = sorted(os.listdir(types_dir))
        except OSError:
            return None
        types = []
        for type_id in type_ids:
            tdir = types_dir / type_id
            available = files.read_int(tdir / "available_instances")
            api = files.read(tdir / "device_api")
            if available is None or api is None:
                LOG.warning(
                    "Skipping type %s of %s: sysfs lacks "
                    "available_instances or device_api",
                    type_id,
                    name,
                )
                continue
            types.append(
                MdevType(
                    id=type_id,
                    name=files.read(tdir / "name"),
                    device_api=api,
                    available=available,
                    description=files.read(tdir / "description"),
                )
            )
        return Parent(
            name=name,
            address=None,
            driver=self.driver(device),
            types=tuple(types),
        )

    def mdev_parent_name(self, uuid: str) -> str | None:
        """The sysfs name of an mdev's parent device."""
        link = self.root / "bus/mdev/devices" / uuid
        try:
            return link.resolve(strict=True).parent.name
        except OSError:
            return None

    def sriov_functions(self) -> list[PhysicalFunction]:
        """NVIDIA SR-IOV physical GPUs and their VFs (see
        :class:`~vgpu_driver.host.nvidia_sriov.NvidiaSriovScan`)."""
        return self.nvidia_sriov.functions()

    def modules(self) -> list[str] | None:
        """The kernel modules loaded (``module/``), None if unreadable."""
        try:
            return os.listdir(f"{self.root}/module")
        except OSError:
            return None

    def driver_versions(
        self, drivers: set[str | None]
    ) -> list[tuple[str, str]]:
        """(driver, version) from ``module/<driver>/version`` for each of
        ``drivers`` that reports one (NVIDIA's vGPU manager does)."""
        found = []
        for driver in sorted(d for d in drivers if d):
            version = files.read(f"{self.root}/module/{driver}/version")
            if version:
                found.append((driver, version))
        return found

    # -- writing -------------------------------------------------------

    def _write(self, path: Path, value: str, action: str, device: str) -> None:
        """Write one sysfs attribute: through the privileged helper when
        this is the real /sys and the process is not root."""
        try:
            if str(self.root) == privileged.SYSFS and os.geteuid() != 0:
                privileged.write_sysfs(
                    os.path.relpath(path, privileged.SYSFS), value
                )
            else:
                with open(path, "w") as handle:
                    handle.write(value)
        except ValueError as exc:  # refused by the privileged side
            raise DeviceOperationFailed(
                action=action, device=device, reason=str(exc)
            ) from exc
        except OSError as exc:
            error = (
                DeviceNoRoom if says_no_room(exc) else DeviceOperationFailed
            )
            raise error(
                action=action, device=device, reason=exc.strerror or str(exc)
            ) from exc

    def create_mdev(self, parent_dir: Path, type_id: str, uuid: str) -> None:
        create = parent_dir / "mdev_supported_types" / type_id / "create"
        self._write(create, uuid, f"create mdev {uuid}", parent_dir.name)

    def remove_mdev(self, uuid: str) -> None:
        remove = self.root / "bus/mdev/devices" / uuid / "remove"
        self._write(remove, "1", "remove mdev", uuid)

    def set_vf_type(self, vf_address: str, type_id: int) -> None:
        if naming.normalize_pci_address(vf_address) is None:
            raise DeviceOperationFailed(
                action="set vGPU type",
                device=vf_address,
                reason="not a PCI address",
            )
        nvidia = self.root / "bus/pci/devices" / vf_address / "nvidia"
        listing = (
            files.read(nvidia / "creatable_vgpu_types") if type_id else None
        )
        if listing is not None and type_id not in {
            t.id for t in parse_creatable(listing)
        }:
            # what the VF takes now (in mixed-size mode the card may be
            # full for this size since the last reading): nothing written
            raise DeviceNoRoom(
                action=f"set vGPU type {type_id}",
                device=vf_address,
                reason="the VF does not list the type as creatable now "
                "(the card holds no more of it)",
            )
        self._write(
            nvidia / "current_vgpu_type",
            str(type_id),
            f"set vGPU type {type_id}",
            vf_address,
        )

    def vf_type(self, vf_address: str) -> int | None:
        if naming.normalize_pci_address(vf_address) is None:
            return None  # nothing outside bus/pci/devices is read
        return files.read_int(
            self.root / "bus/pci/devices" / vf_address / TYPE_FILE
        )


__all__ = ["NVIDIA_DRIVER", "SysfsTree", "parse_creatable"]
