"""NVIDIA's management library (NVML), read through ``nvidia-ml-py``'s
``pynvml``: the only module that calls it.

What a card is (its types, their framebuffer and ``Max Instances``, its
virtualization capabilities) is read once per GPU and kept; what changes
(which types still fit, MIG mode and free GPU instances, faults) is read
each pass: a few calls per GPU, so a refresh stays O(pGPUs).

``lib`` is anything with pynvml's functions, constants and error class:
the real module on a host, the simulated host's library in tests.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from vgpu_driver.host.nvml_errors import ERROR_HOLD, XidErrors
from vgpu_driver.model.device import Parent, PhysicalFunction
from vgpu_driver.model.nvml import NvmlGpu, NvmlReading, NvmlType

LOG = logging.getLogger(__name__)

# GPU instances one GPU holds at most (7 on an A100/H100, 4 on an RTX PRO
# 6000); the buffer NVML fills
_MAX_GPU_INSTANCES = 32
# what NVML answers for "no GPU instance profile" / "no GPU instance"
_NONE = 0xFFFFFFFF


def load() -> tuple[NvmlReader | None, str]:
    """The reader over this host's NVML, or None and why not."""
    try:
        import pynvml  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None, (
            "nvidia-ml-py is not installed (pip install 'vgpu-driver[nvml]')"
        )
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return None, f"NVML is not usable here: {error}"
    return NvmlReader(pynvml), "NVML"


def maybe_load(
    enabled: bool, error_hold: float = ERROR_HOLD
) -> NvmlReader | None:
    """This host's NVML reader when ``[devices] use_nvml`` and NVML is
    here; why not is logged at debug level (most hosts have no NVIDIA
    GPU, and sysfs is then the whole truth)."""
    if not enabled:
        return None
    reader, why = load()
    if reader is None:
        LOG.debug("Capacity from sysfs and the board table: %s", why)
    else:
        reader.errors.hold = error_hold
    return reader


def nvidia_gpus(
    parents: Iterable[Parent], pfs: Iterable[PhysicalFunction]
) -> list[str]:
    """The PCI addresses of the NVIDIA GPUs the host lists: its SR-IOV
    cards, and the GPU of each mdev parent (a VF's PF)."""
    found = {pf.address for pf in pfs if pf.driver == "nvidia"}
    for parent in parents:
        if parent.driver == "nvidia" and parent.address:
            found.add(parent.physical_function or parent.address)
    return sorted(found)


def bus_id(address: str) -> str:
    """sysfs's ``0001:c8:00.0`` as NVML writes it: ``00000001:C8:00.0``."""
    domain, rest = address.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


@dataclasses.dataclass
class _Card:
    types: tuple[NvmlType, ...]
    virtualization_caps: int | None


class NvmlReader:
    def __init__(
        self,
        lib: Any,
        *,
        error_hold: float = ERROR_HOLD,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``error_hold``: seconds a GPU that reported an XID error takes
        no new guest after the last one (NVML never says an error is
        over: a reset GPU reports none, and is offered again when the
        hold ends)."""
        self._lib = lib
        self.errors = XidErrors(self._call, lib, error_hold, clock)
        self._cards: dict[str, _Card] = {}  # by PCI address, read once
        self._types: dict[int, tuple[str, int, int | None]] = {}
        self._undescribed: set[str] = set()  # warned of, once each
        self._driver: tuple[str, bool] | None = None
        self.calls = 0  # NVML calls made (the structural tests count)

    def _call(self, name: str, *args: Any) -> Any:
        self.calls += 1
        return getattr(self._lib, name)(*args)

    def read(self, addresses: Iterable[str]) -> NvmlReading | None:
        """What NVML says of the NVIDIA GPUs at these PCI addresses (the
        host's own listing, so a GPU NVML lost is still named); None if
        NVML does not answer at all."""
        lib = self._lib
        try:
            if self._driver is None:
                self._driver = (
                    str(self._call("nvmlSystemGetDriverVersion")),
                    self._capable(),
                )
        except lib.NVMLError as error:
            LOG.warning(
                "NVML does not answer (%s): capacity from sysfs", error
            )
            return None
        self.errors.drain()
        gpus = [self._gpu(address) for address in sorted(set(addresses))]
        version, heterogeneous = self._driver
        return NvmlReading(
            driver_version=version,
            gpus=tuple(g for g in gpus if g is not None),
            heterogeneous=heterogeneous,
        )

    def _capable(self) -> bool:
        lib = self._lib
        try:
            return bool(
                self._call(
                    "nvmlGetVgpuDriverCapabilities",
                    lib.NVML_VGPU_DRIVER_CAP_HETEROGENEOUS_MULTI_VGPU,
                )
            )
        except lib.NVMLError:
            return False

    def _gpu(self, address: str) -> NvmlGpu | None:
        lib = self._lib
        try:
            handle = self._call(
                "nvmlDeviceGetHandleByPciBusId", bus_id(address)
            )
        except lib.NVMLError as error:
            if getattr(error, "value", None) == lib.NVML_ERROR_GPU_IS_LOST:
                return NvmlGpu(address, fault="lost (fallen off the bus)")
            return None  # not NVML's (bound to another driver)
        try:
            card = self._cards.get(address)
            if card is None:
                card = self._cards[address] = self._card(handle)
            creatable = frozenset(
                int(t)
                for t in self._call("nvmlDeviceGetCreatableVgpus", handle)
            )
            mig = self._mig(handle)
            mixed = self._mixed_size(handle)
            free = self._free_instances(handle, card) if mig else ()
            fault = self._fault(handle) or self.errors.recent(address)
        except lib.NVMLError as error:
            if getattr(error, "value", None) == lib.NVML_ERROR_GPU_IS_LOST:
                return NvmlGpu(address, fault="lost (fallen off the bus)")
            # NVML cannot describe this card (an older vGPU manager
            # without a call, an error it does not explain): its
            # capacity comes from sysfs and the board table, as without
            # NVML; never a reason to take the card out of service
            if address not in self._undescribed:
                self._undescribed.add(address)
                LOG.warning(
                    "NVML cannot describe GPU %s (%s): its capacity comes "
                    "from sysfs and the board table",
                    address,
                    error,
                )
            return None
        self._undescribed.discard(address)
        return NvmlGpu(
            address=address,
            types=card.types,
            creatable=creatable,
            mig=mig,
            mixed_size=mixed,
            free_instances=free,
            fault=fault,
            virtualization_caps=card.virtualization_caps,
        )

    def _card(self, handle: Any) -> _Card:
        lib = self._lib
        types = []
        for raw in self._call("nvmlDeviceGetSupportedVgpus", handle):
            type_id = int(raw)
            known = self._types.get(type_id)
            if known is None:
                try:
                    raw = int(
                        self._call(
                            "nvmlVgpuTypeGetGpuInstanceProfileId", type_id
                        )
                    )
                except lib.NVMLError:  # a manager older than MIG vGPU
                    raw = _NONE
                known = self._types[type_id] = (
                    str(self._call("nvmlVgpuTypeGetName", type_id)),
                    int(self._call("nvmlVgpuTypeGetFramebufferSize", type_id))
                    // (1024 * 1024),
                    None if raw == _NONE else raw,
                )
            name, framebuffer, profile = known
            types.append(
                NvmlType(
                    type_id=type_id,
                    name=name,
                    framebuffer_mib=framebuffer,
                    max_instances=int(
                        self._call(
                            "nvmlVgpuTypeGetMaxInstances", handle, type_id
                        )
                    ),
                    gi_profile=profile,
                )
            )
        self.errors.watch(handle)
        try:
            metadata = self._call("nvmlDeviceGetVgpuMetadata", handle)
            caps: int | None = int(metadata.pgpuVirtualizationCaps)
        except lib.NVMLError:
            caps = None
        return _Card(tuple(types), caps)

    def _mig(self, handle: Any) -> bool:
        lib = self._lib
        try:
            current, _pending = self._call("nvmlDeviceGetMigMode", handle)
        except lib.NVMLError:  # not a MIG-capable GPU
            return False
        return bool(current == lib.NVML_DEVICE_MIG_ENABLE)

    def _mixed_size(self, handle: Any) -> bool | None:
        """Whether the GPU is in mixed-size mode (``nvidia-smi vgpu -shm``;
        None where the manager cannot say)."""
        lib = self._lib
        try:
            mode = self._call("nvmlDeviceGetVgpuHeterogeneousMode", handle)
        except lib.NVMLError:
            return None
        return bool(mode)

    def _free_instances(
        self, handle: Any, card: _Card
    ) -> tuple[tuple[int, int], ...]:
        """GPU instances of each MIG-backed type's profile that hold no
        vGPU: the room of a MIG-backed type, and nothing else is."""
        lib = self._lib
        taken = set()
        for vgpu in self._call("nvmlDeviceGetActiveVgpus", handle):
            instance = int(
                self._call("nvmlVgpuInstanceGetGpuInstanceId", vgpu)
            )
            if instance != _NONE:
                taken.add(instance)
        free = []
        profiles = sorted(
            {t.gi_profile for t in card.types if t.gi_profile is not None}
        )
        for profile in profiles:
            count = ctypes.c_uint(_MAX_GPU_INSTANCES)
            found = (lib.c_nvmlGpuInstance_t * _MAX_GPU_INSTANCES)()
            self._call(
                "nvmlDeviceGetGpuInstances",
                handle,
                profile,
                found,
                ctypes.byref(count),
            )
            ids = [
                int(self._call("nvmlGpuInstanceGetInfo", found[i]).id)
                for i in range(count.value)
            ]
            free.append((profile, sum(1 for i in ids if i not in taken)))
        return tuple(free)

    def _fault(self, handle: Any) -> str | None:
        lib = self._lib
        try:
            _corr, _unc, pending, failure = self._call(
                "nvmlDeviceGetRemappedRows", handle
            )
        except lib.NVMLError:  # a card without row remapping
            return None
        if failure:
            return "failed to remap memory rows"
        if pending:
            return "has memory rows to remap at its next reset"
        return None
