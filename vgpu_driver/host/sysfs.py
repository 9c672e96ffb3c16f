"""The sysfs side of a host, below a root passed in (``/sys`` for real).

It covers what libvirt does not report: type descriptions, drivers, mdev
parents libvirt has no node device for (the mtty sample driver's), and
NVIDIA SR-IOV cards, whose VFs carry their vGPU type in
``<VF>/nvidia/current_vgpu_type`` instead of being mdev parents. It also
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
from vgpu_driver.model import naming
from vgpu_driver.model.device import (
    MdevType,
    Parent,
    PhysicalFunction,
    SriovType,
    VirtualFunction,
    remember_types,
)

LOG = logging.getLogger(__name__)


# the PCI driver of NVIDIA's vGPU manager: it drives the PFs whose VFs
# NVIDIA's sriov-manage enables
NVIDIA_DRIVER = "nvidia"

_CHUNK = 4096  # a sysfs attribute is at most a page (more is read on)


def _read(path: str | os.PathLike[str]) -> str | None:
    """A sysfs attribute's value, stripped (None if unreadable). Raw
    file descriptor reads, about half of ``open()``'s cost: a refresh
    reads one per SR-IOV VF, a first discovery one per parent."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = [os.read(fd, _CHUNK)]
        while len(chunks[-1]) == _CHUNK:  # no second read for most
            chunks.append(os.read(fd, _CHUNK))
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
        # devices bound to NVIDIA's driver that are not SR-IOV PFs
        self._not_pf: set[str] = set()
        # PF address -> (its VF count, the VFs NVIDIA's driver types)
        self._virtfns: dict[str, tuple[int, list[str]]] = {}
        # PF address -> the PF as last read: read again when its VFs'
        # current types change (a VF's creatable types depend on them)
        self._pfs: dict[str, PhysicalFunction] = {}
        # PF address -> every vGPU type its VFs listed (see remember_types)
        self._types_seen: dict[str, dict[int, SriovType]] = {}

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
        return _read(f"{device}/mdev_supported_types/{type_id}/description")

    def forget_probes(self) -> None:
        """Probe the devices of NVIDIA's driver again at the next scan
        (SR-IOV may have been set up since)."""
        self._not_pf.clear()
        self._virtfns.clear()
        self._pfs.clear()

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
        """NVIDIA SR-IOV physical GPUs and their VFs.

        They are found from the devices bound to NVIDIA's driver
        (``bus/pci/drivers/nvidia``), never from the host's whole PCI
        listing: a server lists hundreds of PCI devices, and probing them
        cost about 5 µs each on a first scan, 0.3 µs on every later one. A
        PF is a device there with ``sriov_numvfs``; its VFs are its
        ``virtfn<N>`` links that have an ``nvidia`` directory. A host
        without NVIDIA's driver costs one failed listing.

        At every scan each PF's ``sriov_numvfs`` and each VF's
        ``current_vgpu_type`` are read, one file each: a type set by
        anyone, another process or an operator, and VFs enabled or
        disabled, are seen at once. The rest is read again only when it
        may have changed: the creatable types of its free VFs and its
        PF's attributes when a VF of that PF changed type, a PF's
        ``virtfn`` links when its number of VFs changed. Whether a device
        bound to the driver is a PF, and a VF has the directory, is
        probed once; :meth:`forget_probes` probes again."""
        devices = f"{self.root}/bus/pci/devices"
        try:
            bound = os.listdir(f"{self.root}/bus/pci/drivers/{NVIDIA_DRIVER}")
        except OSError:
            bound = []
        current_of: dict[str, dict[str, int]] = {}
        for entry in bound:
            if entry in self._not_pf:
                continue
            count = _read_int(f"{devices}/{entry}/sriov_numvfs")
            if count is None:  # a VF, a GPU without SR-IOV, or `bind`
                self._not_pf.add(entry)
                continue
            if count == 0:
                # SR-IOV not enabled yet (sriov-manage -e): reported with
                # no VF, so the operator is told what to do
                current_of.setdefault(entry, {})
                continue
            for vf in self._vfs_of(devices, entry, count):
                current = _read_int(f"{devices}/{vf}/nvidia/current_vgpu_type")
                if current is not None:
                    current_of.setdefault(entry, {})[vf] = current
        pfs = []
        for address, currents in sorted(current_of.items()):
            state = sorted(currents.items())
            known = self._pfs.get(address)
            if known is None or state != [
                (vf.address, vf.current_type) for vf in known.vfs
            ]:
                known = self._pfs[address] = self._read_pf(
                    devices, address, state
                )
            pfs.append(known)
        for gone in set(self._pfs) - set(current_of):
            del self._pfs[gone]
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
                    _read(f"{devices}/{vf}/nvidia/creatable_vgpu_types") or ""
                )
                if not current
                else (),
            )
            for vf, current in currents
        )
        pf_dir = f"{devices}/{address}"
        numa = _read_int(f"{pf_dir}/numa_node")
        pf = PhysicalFunction(
            name=naming.libvirt_pci_name(address),
            address=address,
            vendor_id=_read(f"{pf_dir}/vendor"),
            product_id=_read(f"{pf_dir}/device"),
            driver=self.driver(pf_dir),
            numa_node=None if numa is None or numa < 0 else numa,
            vfs=vfs,
        )
        return remember_types(pf, self._types_seen)

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
            version = _read(f"{self.root}/module/{driver}/version")
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
        listing = _read(nvidia / "creatable_vgpu_types") if type_id else None
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
