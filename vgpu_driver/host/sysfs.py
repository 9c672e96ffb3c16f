"""The sysfs side of a host, below a root passed in (``/sys`` for real).

It covers what libvirt does not report: type descriptions, drivers, mdev
parents libvirt has no node device for (the mtty sample driver's), and
NVIDIA SR-IOV cards, whose VFs carry their vGPU type in
``<VF>/nvidia/current_vgpu_type`` instead of being mdev parents. It also
writes what libvirt cannot do: ``create`` and ``remove`` of mdevs on
older libvirt, and a VF's vGPU type.
"""

from __future__ import annotations

import os
from pathlib import Path

from oslo_log import log as logging

from vgpu_driver.exception import DeviceOperationFailed
from vgpu_driver.model import naming
from vgpu_driver.model.device import (
    MdevType,
    Parent,
    PhysicalFunction,
    SriovType,
    VirtualFunction,
)

LOG = logging.getLogger(__name__)


def _read(path: str | os.PathLike[str]) -> str | None:
    """A sysfs attribute's value, stripped (None if unreadable). Raw
    file descriptor reads: a third of ``open()``'s cost, and a first
    discovery reads one per parent at least."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def _read_int(path: str | os.PathLike[str]) -> int | None:
    text = _read(path)
    try:
        return int(text, 0) if text is not None else None
    except ValueError:
        return None


def parse_creatable(text: str) -> tuple[SriovType, ...]:
    """``creatable_vgpu_types``: a header, then ``1155  : NVIDIA L40-1B``."""
    types = []
    for line in text.splitlines():
        head, sep, name = line.partition(":")
        if not sep or not head.strip().isdigit():
            continue  # the header line, or noise
        types.append(SriovType(int(head.strip()), name.strip()))
    return tuple(types)


class SysfsTree:
    def __init__(self, root: str | os.PathLike[str] = "/sys") -> None:
        self.root = Path(root)
        # a device link's target does not change while the device exists
        self._resolved: dict[Path, Path] = {}
        self._not_nvidia: set[str] = set()
        self._nvidia: set[str] = set()

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

    def driver(self, device: Path) -> str | None:
        try:
            return os.path.basename(os.readlink(f"{device}/driver"))
        except OSError:
            return None

    def type_description(self, device: Path, type_id: str) -> str | None:
        return _read(f"{device}/mdev_supported_types/{type_id}/description")

    def forget_probes(self) -> None:
        """Probe every PCI device again at the next scan (a driver may
        have been bound since)."""
        self._not_nvidia.clear()
        self._nvidia.clear()

    def mdev_bus_entries(self) -> list[str]:
        """The names registered in ``class/mdev_bus`` (one listing)."""
        try:
            return sorted(os.listdir(self.root / "class/mdev_bus"))
        except OSError:
            return []

    def mdev_bus_parents(
        self, entries: list[str] | None = None
    ) -> dict[Path, str]:
        """Every registered mdev parent: real path -> sysfs name."""
        bus = self.root / "class/mdev_bus"
        if entries is None:
            entries = self.mdev_bus_entries()
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
            available = _read_int(tdir / "available_instances")
            api = _read(tdir / "device_api")
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
                    name=_read(tdir / "name"),
                    device_api=api,
                    available=available,
                    description=_read(tdir / "description"),
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
        """NVIDIA SR-IOV physical GPUs and their VFs. Whether a PCI device
        has an ``nvidia/`` directory is probed once (one stat) and
        remembered until :meth:`forget_probes` (a VF made later is a new
        entry)."""
        devices = f"{self.root}/bus/pci/devices"
        try:
            entries = sorted(os.listdir(devices))
        except OSError:
            return []
        vfs_of: dict[str, list[VirtualFunction]] = {}
        for entry in entries:
            if entry in self._not_nvidia:
                continue
            nvidia = f"{devices}/{entry}/nvidia"
            if entry not in self._nvidia:
                if not os.path.isdir(nvidia):  # one stat, once, for most
                    self._not_nvidia.add(entry)
                    continue
                self._nvidia.add(entry)
            current = _read_int(f"{nvidia}/current_vgpu_type")
            if current is None:
                continue
            try:
                pf = os.path.basename(os.readlink(f"{devices}/{entry}/physfn"))
            except OSError:
                continue  # not a VF
            creatable = parse_creatable(
                _read(f"{nvidia}/creatable_vgpu_types") or ""
            )
            vfs_of.setdefault(pf, []).append(
                VirtualFunction(entry, current, creatable)
            )
        pfs = []
        for address, vfs in sorted(vfs_of.items()):
            pf_dir = Path(devices, address)
            numa = _read_int(pf_dir / "numa_node")
            pfs.append(
                PhysicalFunction(
                    name="pci_" + address.replace(":", "_").replace(".", "_"),
                    address=address,
                    vendor_id=_read(pf_dir / "vendor"),
                    product_id=_read(pf_dir / "device"),
                    driver=self.driver(pf_dir),
                    numa_node=None if numa is None or numa < 0 else numa,
                    vfs=tuple(vfs),
                )
            )
        return pfs

    # -- writing -------------------------------------------------------

    def _write(self, path: Path, value: str, action: str, device: str) -> None:
        try:
            with open(path, "w") as handle:
                handle.write(value)
        except OSError as exc:
            raise DeviceOperationFailed(
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
        path = (
            self.root
            / "bus/pci/devices"
            / vf_address
            / "nvidia"
            / "current_vgpu_type"
        )
        self._write(path, str(type_id), f"set vGPU type {type_id}", vf_address)
