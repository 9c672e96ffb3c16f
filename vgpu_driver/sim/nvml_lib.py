"""The simulated host's NVML: pynvml's functions, constants and error
class over a host description, so :mod:`vgpu_driver.host.nvml` reads a
simulated card exactly as it reads a real one.

Only the calls the reader makes exist. Errors carry pynvml's codes; the
vGPUs placed are what the host shows (each VF's ``current_vgpu_type``,
asked through ``placed`` at every call)."""

from __future__ import annotations

import collections
import ctypes
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vgpu_driver.host.nvml import NvmlReader
from vgpu_driver.sim.specs import HostDescription, NvmlSpec, PfSpec

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_VGPU_DRIVER_CAP_HETEROGENEOUS_MULTI_VGPU = 0
NVML_DEVICE_MIG_ENABLE = 1
nvmlEventTypeXidCriticalError = 8
c_nvmlGpuInstance_t = ctypes.c_void_p  # an opaque handle
_NONE = 0xFFFFFFFF
_MIB = 1024 * 1024


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclasses.dataclass(frozen=True)
class _Info:
    id: int = 0
    pgpuVirtualizationCaps: int = 0
    busId: str = ""
    device: str = ""
    eventType: int = 0
    eventData: int = 0


class SimulatedNvml:
    """``pfs``: the cards as the host shows them now (their VFs' types)."""

    def __init__(
        self, spec: NvmlSpec, pfs: Callable[[], list[PfSpec]]
    ) -> None:
        self.spec = spec
        self._pfs = pfs
        self.NVMLError = NVMLError
        self.NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
        self.NVML_VGPU_DRIVER_CAP_HETEROGENEOUS_MULTI_VGPU = (
            NVML_VGPU_DRIVER_CAP_HETEROGENEOUS_MULTI_VGPU
        )
        self.NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
        self.c_nvmlGpuInstance_t = c_nvmlGpuInstance_t
        self.NVML_ERROR_TIMEOUT = NVML_ERROR_TIMEOUT
        self.nvmlEventTypeXidCriticalError = nvmlEventTypeXidCriticalError
        # XID errors the GPUs report, in order: (PCI address, XID)
        self.errors: collections.deque[tuple[str, int]] = collections.deque()
        # calls this NVML answers with an error code (an older vGPU
        # manager's library lacks some: NVML_ERROR_FUNCTION_NOT_FOUND)
        self.failing: dict[str, int] = {}

    def __getattribute__(self, name: str) -> Any:
        failing = object.__getattribute__(self, "__dict__").get("failing")
        if failing and name in failing:
            code = failing[name]

            def refused(*_args: Any) -> Any:
                raise NVMLError(code)

            return refused
        return object.__getattribute__(self, name)

    def _cards(self) -> list[PfSpec]:
        return [pf for pf in self._pfs() if pf.driver == "nvidia"]

    def _card(self, handle: str) -> PfSpec:
        for pf in self._cards():
            if pf.address == handle:
                if pf.fault == "lost":
                    raise NVMLError(NVML_ERROR_GPU_IS_LOST)
                return pf
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)

    def _type(self, type_id: int) -> Any:
        for pf in self._cards():
            for t in pf.types:
                if t.id == type_id:
                    return t
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    # -- system --------------------------------------------------------

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.spec.driver_version

    def nvmlGetVgpuDriverCapabilities(self, capability: int) -> int:
        return int(self.spec.heterogeneous)

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> str:
        domain, rest = bus_id.split(":", 1)
        address = f"{int(domain, 16):04x}:{rest.lower()}"
        if not any(pf.address == address for pf in self._cards()):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return self._card(address).address

    # -- vGPU types ----------------------------------------------------

    def nvmlDeviceGetSupportedVgpus(self, handle: str) -> list[int]:
        return [t.id for t in self._card(handle).types]

    def nvmlDeviceGetCreatableVgpus(self, handle: str) -> list[int]:
        pf = self._card(handle)
        free = [vf for vf in pf.vf_addresses if not pf.vf_types.get(vf)]
        found: dict[int, None] = {}
        for types in pf.creatable_by_vf(free).values():
            found.update(dict.fromkeys(t.id for t in types))
        return list(found)

    def nvmlVgpuTypeGetName(self, type_id: int) -> str:
        return str(self._type(type_id).name)

    def nvmlVgpuTypeGetFramebufferSize(self, type_id: int) -> int:
        return int(self._type(type_id).framebuffer_gb or 0) * 1024 * _MIB

    def nvmlVgpuTypeGetMaxInstances(self, handle: str, type_id: int) -> int:
        found = self._type(type_id)
        if found.nvml_max_instances is not None:
            return int(found.nvml_max_instances)
        return int(found.capacity)

    def nvmlVgpuTypeGetGpuInstanceProfileId(self, type_id: int) -> int:
        profile = self._type(type_id).gi_profile
        return _NONE if profile is None else int(profile)

    def nvmlDeviceGetVgpuMetadata(self, handle: str) -> _Info:
        caps = self._card(handle).virtualization_caps
        if caps is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return _Info(pgpuVirtualizationCaps=caps)

    # -- MIG -----------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: str) -> list[int]:
        mig = self._card(handle).mig
        if mig is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return [int(mig), int(mig)]

    def nvmlDeviceGetVgpuHeterogeneousMode(self, handle: str) -> int:
        return int(self._card(handle).mixed_size)

    def nvmlDeviceGetActiveVgpus(self, handle: str) -> list[str]:
        pf = self._card(handle)
        return [
            f"{handle}/{vf}" for vf in sorted(pf.vf_types) if pf.vf_types[vf]
        ]

    def nvmlVgpuInstanceGetGpuInstanceId(self, vgpu: str) -> int:
        handle, vf = vgpu.split("/")
        return self._card(handle).instance_of().get(vf, _NONE)

    def nvmlDeviceGetGpuInstances(
        self, handle: str, profile: int, found: Any, count: Any
    ) -> int:
        ids = [i for i, p in self._card(handle).gpu_instances if p == profile]
        for index, instance in enumerate(ids):
            found[index] = instance + 1  # a handle is never 0
        count._obj.value = len(ids)
        return 0

    def nvmlGpuInstanceGetInfo(self, instance: int) -> _Info:
        return _Info(id=int(instance) - 1)

    # -- health --------------------------------------------------------

    def nvmlDeviceGetPciInfo(self, handle: str) -> _Info:
        domain, rest = self._card(handle).address.split(":", 1)
        return _Info(busId=f"{int(domain, 16):08X}:{rest.upper()}")

    def nvmlEventSetCreate(self) -> set[str]:
        """A set of its own: a GPU's events go to the sets it was
        registered in, as NVML's do."""
        return set()

    def nvmlDeviceRegisterEvents(
        self, handle: str, types: int, events: set[str]
    ) -> None:
        events.add(self._card(handle).address)

    def nvmlEventSetWait_v2(self, events: set[str], timeout: int) -> _Info:
        while self.errors:
            address, xid = self.errors.popleft()
            if address in events:
                return _Info(device=address, eventType=8, eventData=xid)
        raise NVMLError(NVML_ERROR_TIMEOUT)

    def nvmlDeviceGetRemappedRows(
        self, handle: str
    ) -> tuple[int, int, int, int]:
        fault = self._card(handle).fault
        return (
            0,
            0,
            int(fault == "rows_pending"),
            int(fault == "rows_failed"),
        )


def rendered(
    description: HostDescription, sysfs_root: Path
) -> NvmlReader | None:
    """The NVML reader of a host rendered into a sysfs tree: its cards as
    the tree shows them now (each VF's ``current_vgpu_type``), or None if
    the host has no NVML."""
    spec = description.nvml
    if spec is None:
        return None

    def pfs() -> list[PfSpec]:
        now = []
        for pf in description.pfs:
            types = {}
            for vf in pf.vf_addresses:
                path = sysfs_root / "bus/pci/devices" / vf / "nvidia"
                try:
                    number = int((path / "current_vgpu_type").read_text())
                except (OSError, ValueError):
                    number = 0
                if number:
                    types[vf] = number
            now.append(dataclasses.replace(pf, vf_types=types))
        return now

    return NvmlReader(SimulatedNvml(spec, pfs))
