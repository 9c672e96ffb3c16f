"""An in-process host whose state changes as a kernel's would.

Discovery of a :class:`SimulatedHost` reports exactly what
:class:`~vgpu_driver.host.libvirt_host.LibvirtHost` reports for the same
description served by libvirt's test driver and a fake sysfs tree (the
contract tests prove it). Unlike the test driver it can change: creating
an mdev lowers ``availableInstances`` (and, on a homogeneous parent,
zeroes the other types), setting a VF's vGPU type narrows what its
siblings can take, and :meth:`reboot` forgets what a reboot forgets.

Like libvirt's test driver, it cannot tell whether an mdev is persistent
or autostarted, so it reports ``None`` for both (it tracks persistence
itself, for :meth:`reboot`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection

from vgpu_driver.exception import DeviceNoRoom, DeviceOperationFailed
from vgpu_driver.host.nvml import NvmlReader, nvidia_gpus
from vgpu_driver.model.device import (
    Guest,
    HostInventory,
    Mdev,
    Parent,
    SriovType,
    remember_types,
)
from vgpu_driver.model.device_changes import following
from vgpu_driver.sim.nvml_lib import SimulatedNvml
from vgpu_driver.sim.reported import guest_of, inventory_of
from vgpu_driver.sim.specs import (
    GuestSpec,
    HostDescription,
    MdevSpec,
)


class SimulatedHost:
    def __init__(self, description: HostDescription) -> None:
        # descriptions cost nothing here: every type's is given
        self.described_types: Callable[[], Collection[str]] | None = None
        self._state = description.copy()
        self._lock = threading.RLock()
        self._last: HostInventory | None = None
        self._generation = 0
        self._persistent: set[str] = set()
        self._types_seen: dict[str, dict[int, SriovType]] = {}
        self.operations: Counter[str] = Counter()
        # Fault injection: operation name -> predicate on its argument.
        self.failures: dict[str, Callable[[str], bool]] = {}
        # Seconds each kernel operation takes (to widen race windows).
        self.latency = 0.0
        # NVIDIA's management library, where the host has it
        spec = self._state.nvml
        self.nvml = (
            NvmlReader(SimulatedNvml(spec, lambda: self._state.pfs))
            if spec is not None
            else None
        )

    @property
    def description(self) -> HostDescription:
        """A copy of the current state, to render or compare."""
        with self._lock:
            return self._state.copy()

    def discover(self, **_: bool) -> HostInventory:
        # guests here are always current, and every device is read from
        # memory: nothing to defer, no call to spare (Host.discover)
        with self._lock:
            self.operations["discover"] += 1
            reading = inventory_of(self._state)
            reading = dataclasses.replace(
                reading,
                pfs=tuple(
                    remember_types(pf, self._types_seen) for pf in reading.pfs
                ),
            )
            if self.nvml is not None:
                said = self.nvml.read(
                    nvidia_gpus(reading.parents, reading.pfs)
                )
                reading = dataclasses.replace(reading, nvml=said)
            last = self._last
            if last is not None and reading == last:
                return last  # as libvirt's adapter: same generation
            self._generation += 1
            # node devices alone changed: the parents touched are said
            made = last and following(last, reading, self._generation)
            self._last = made or reading.with_generation(self._generation)
            return self._last

    # -- guests (libvirt domains) --------------------------------------

    def note_guest(self, guest: Guest) -> None:
        with self._lock:
            self.forget_guest(guest.uuid)
            self._state.guests.append(
                GuestSpec(
                    guest.uuid,
                    guest.name,
                    list(guest.mdevs),
                    list(guest.pci_devices),
                    guest.nova,
                )
            )

    def forget_guest(self, uuid: str) -> None:
        with self._lock:
            self._state.guests = [
                g for g in self._state.guests if g.uuid != uuid
            ]

    def domain_event(self, uuid: str, defined: bool) -> None:
        pass  # guests here are always current

    def guests_changed(self) -> bool:
        return False

    def take_guest_changes(self) -> list[tuple[str, Guest | None]]:
        return []

    def known_guest(self, uuid: str) -> Guest | None:
        return self.refresh_guest(uuid)  # (always current: no call)

    def refresh_guest(self, uuid: str) -> Guest | None:
        """The guest as defined now (guests here are always current)."""
        with self._lock:
            found = [guest_of(g) for g in self._state.guests if g.uuid == uuid]
            return found[0] if found else None

    # -- the kernel ----------------------------------------------------

    def _wait(self) -> None:
        if self.latency:
            time.sleep(self.latency)

    def _check_fault(self, operation: str, subject: str) -> None:
        self.operations[operation] += 1
        predicate = self.failures.get(operation)
        if predicate is not None and predicate(subject):
            raise DeviceOperationFailed(
                action=operation, device=subject, reason="injected fault"
            )

    def create_mdev(self, parent: Parent, type_id: str, uuid: str) -> Mdev:
        self._wait()
        with self._lock:
            self._check_fault("create_mdev", parent.name)
            spec = next(
                (p for p in self._state.parents if p.name == parent.name),
                None,
            )
            if spec is None:
                raise DeviceOperationFailed(
                    action=f"create mdev {uuid}",
                    device=parent.name,
                    reason="no such device",
                )
            if any(m.uuid == uuid for m in self._state.mdevs):
                raise DeviceOperationFailed(
                    action=f"create mdev {uuid}",
                    device=parent.name,
                    reason="uuid in use",
                )
            if self._state.available(spec, type_id) < 1:
                raise DeviceNoRoom(
                    action=f"create mdev of type {type_id}",
                    device=parent.name,
                    reason="no available instances (EDQUOT)",
                )
            mdev = MdevSpec(
                uuid=uuid,
                parent=parent.name,
                type=type_id,
                iommu_group=200 + len(self._state.mdevs),
            )
            self._state.mdevs.append(mdev)
            self._persistent.add(uuid)
            return Mdev(
                uuid=uuid,
                type_id=type_id,
                parent=parent.name,
                name=mdev.libvirt_name,
                iommu_group=mdev.iommu_group,
            )

    def mdev_exists(self, mdev: Mdev) -> bool:
        self._wait()
        with self._lock:
            self.operations["mdev_exists"] += 1
            return any(m.uuid == mdev.uuid for m in self._state.mdevs)

    def start_mdev(self, mdev: Mdev) -> None:
        self._wait()
        with self._lock:
            self._check_fault("start_mdev", mdev.uuid)
            spec = next(
                (m for m in self._state.mdevs if m.uuid == mdev.uuid), None
            )
            if spec is None:
                raise DeviceOperationFailed(
                    action="start mdev", device=mdev.uuid, reason="not defined"
                )
            parent = self._state.parent(spec.parent)
            if (
                not spec.active
                and self._state.available(parent, spec.type) < 1
            ):
                raise DeviceNoRoom(
                    action="start mdev",
                    device=mdev.uuid,
                    reason="no available instances (EDQUOT)",
                )
            spec.active = True

    def remove_mdev(self, mdev: Mdev) -> None:
        self._wait()
        with self._lock:
            self._check_fault("remove_mdev", mdev.uuid)
            before = len(self._state.mdevs)
            self._state.mdevs = [
                m for m in self._state.mdevs if m.uuid != mdev.uuid
            ]
            if len(self._state.mdevs) == before:
                raise DeviceOperationFailed(
                    action="remove mdev", device=mdev.uuid, reason="gone"
                )
            self._persistent.discard(mdev.uuid)

    def set_vf_type(self, vf_address: str, type_id: int) -> None:
        self._wait()
        with self._lock:
            self._check_fault("set_vf_type", vf_address)
            pf = next(
                (p for p in self._state.pfs if vf_address in p.vf_addresses),
                None,
            )
            if pf is None:
                raise DeviceOperationFailed(
                    action="set vGPU type",
                    device=vf_address,
                    reason="not an SR-IOV VF of this host",
                )
            if type_id == 0:
                pf.vf_types.pop(vf_address, None)
                return
            if type_id not in {t.id for t in pf.creatable(vf_address)}:
                raise DeviceNoRoom(  # as the host adapter's check does
                    action=f"set vGPU type {type_id}",
                    device=vf_address,
                    reason="type not creatable on this VF now",
                )
            pf.vf_types[vf_address] = type_id

    def has_mdev(self, uuid: str) -> bool:
        with self._lock:
            return any(m.uuid == uuid and m.active for m in self._state.mdevs)

    def vf_type(self, vf_address: str) -> int | None:
        with self._lock:
            for pf in self._state.pfs:
                if vf_address in pf.vf_addresses:
                    return pf.vf_types.get(vf_address, 0)
            return None

    def unplug(self, device_name: str) -> None:
        """A device vanishes (hot-unplug, driver unbound, failure): the
        parent and its mdevs, or the SR-IOV card, are gone; guests stay
        defined with devices that no longer exist."""
        with self._lock:
            self._state.parents = [
                p for p in self._state.parents if p.name != device_name
            ]
            self._state.mdevs = [
                m for m in self._state.mdevs if m.parent != device_name
            ]
            self._state.pfs = [
                p for p in self._state.pfs if p.name != device_name
            ]

    def reboot(
        self, *, keep_persistent: bool = True, autostart: bool = True
    ) -> None:
        """Forget what a host reboot forgets: mdevs that were not
        persistent (all of them if ``keep_persistent`` is false), and every
        VF's vGPU type. Persistent mdevs come back started, or only
        defined without ``autostart``. Guests stay defined."""
        with self._lock:
            self._state.mdevs = [
                m
                for m in self._state.mdevs
                if keep_persistent and m.uuid in self._persistent
            ]
            for mdev in self._state.mdevs:
                mdev.active = autostart
            for pf in self._state.pfs:
                pf.vf_types.clear()
