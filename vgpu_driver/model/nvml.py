"""What NVIDIA's management library (NVML) says of each physical GPU,
and the room it proves for a vGPU type (pure).

NVML is the vGPU manager's own word: per GPU the types it supports with
their framebuffer and ``Max Instances``, which of them one more would
fit right now (``creatable``), whether MIG is on and which GPU instances
are free, and faults the kernel's view does not show. Where NVML is
present it is the source of truth for capacity; the board table of
:mod:`vgpu_driver.model.capacity` is the fallback.

Two traps, both in real ``nvidia-smi vgpu -s -v`` output:

* a MIG-backed type's ``Max Instances`` is not what fits: an RTX PRO
  6000's DC-1-2Q reports 48 (the VF count). Its room is the GPU
  instances of its profile that exist and hold no vGPU, nothing else;
* ``Max Instances`` of a time-sliced type is for a GPU holding only that
  type; in mixed-size mode the framebuffer other types hold comes off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

# NVIDIA's pGPU virtualization capability bit for vGPU migration
# (nvml.h, NVML_VGPU_PGPU_VIRTUALIZATION_CAP_MIGRATION 0:0)
MIGRATION_CAP = 0x1


@dataclasses.dataclass(frozen=True)
class NvmlType:
    type_id: int  # the vGPU type id, as in ``nvidia-<id>`` and sysfs
    name: str
    framebuffer_mib: int
    max_instances: int
    gi_profile: int | None = None  # MIG-backed: its GPU instance profile


@dataclasses.dataclass(frozen=True)
class NvmlGpu:
    address: str  # PCI address as sysfs writes it, 0000:42:00.0
    types: tuple[NvmlType, ...] = ()
    creatable: frozenset[int] = frozenset()
    mig: bool = False
    # mixed-size (heterogeneous) mode: vGPUs of several framebuffer sizes
    # at once (None: NVML did not say, as before vGPU 17)
    mixed_size: bool | None = None
    # GPU instance profile id -> instances of it that hold no vGPU
    free_instances: tuple[tuple[int, int], ...] = ()
    # why NVML says the GPU must take no new guest (lost, rows to remap)
    fault: str | None = None
    # pGPU virtualization capabilities (bit 0: vGPU migration); None if
    # NVML did not say
    virtualization_caps: int | None = None

    def type(self, type_id: int) -> NvmlType | None:
        for found in self.types:
            if found.type_id == type_id:
                return found
        return None

    @property
    def migration(self) -> bool | None:
        if self.virtualization_caps is None:
            return None
        return bool(self.virtualization_caps & MIGRATION_CAP)


@dataclasses.dataclass(frozen=True)
class NvmlReading:
    driver_version: str
    gpus: tuple[NvmlGpu, ...] = ()
    heterogeneous: bool = False  # the driver can mix vGPU sizes on a GPU

    def gpu(self, address: str) -> NvmlGpu | None:
        wanted = address.lower()
        for gpu in self.gpus:
            if gpu.address == wanted:
                return gpu
        return None


def room(
    gpu: NvmlGpu, type_id: int, placed: Mapping[int, int]
) -> tuple[int, str | None]:
    """More vGPUs of ``type_id`` that fit on ``gpu`` given the vGPUs
    ``placed`` (type id -> count), and why, when NVML limits it."""
    wanted = gpu.type(type_id)
    if wanted is None:
        return 0, f"NVML lists no type {type_id} on GPU {gpu.address}"
    if wanted.gi_profile is not None:
        free = dict(gpu.free_instances).get(wanted.gi_profile, 0)
        if not gpu.mig:
            return 0, (
                f"{wanted.name!r} is MIG-backed and MIG is off on GPU "
                f"{gpu.address}: enable MIG and create GPU instances of "
                f"profile {wanted.gi_profile}"
            )
        # NVML's count, not a guess: nothing to warn of
        return free, None
    if type_id not in gpu.creatable:
        return 0, None  # NVML's word: no more fits now
    fits = wanted.max_instances - placed.get(type_id, 0)
    sizes = {t.type_id: t.framebuffer_mib for t in gpu.types}
    total = framebuffer_mib(gpu)
    if total and wanted.framebuffer_mib and all(t in sizes for t in placed):
        held = sum(sizes[t] * n for t, n in placed.items())
        fits = min(fits, (total - held) // wanted.framebuffer_mib)
    # NVML said one more fits: never less than that
    return max(1, fits), None


def framebuffer_mib(gpu: NvmlGpu) -> int:
    """The framebuffer vGPUs of this GPU share: the largest of a time-
    sliced type's size times its ``Max Instances`` (NVML's own figures:
    DC-4Q 4096 MiB x 24 = 96 GiB on an RTX PRO 6000)."""
    return max(
        (
            t.framebuffer_mib * t.max_instances
            for t in gpu.types
            if t.gi_profile is None
        ),
        default=0,
    )


def migration_refusal(here: NvmlReading | None) -> str | None:
    """Why this host cannot take a live-migrating vGPU, by NVML's word
    (every GPU it reads says its vGPUs cannot migrate); None when NVML
    does not say, which is no reason to refuse."""
    if here is None:
        return None
    said = [g.migration for g in here.gpus if g.migration is not None]
    if not said or any(said):
        return None
    return (
        "NVML reports this host's GPUs cannot live-migrate vGPUs (no "
        "migration in their virtualization capabilities): require the "
        "CUSTOM_VGPU_LIVE_MIGRATION trait in the flavor to keep the "
        "scheduler to hosts that can"
    )


def free_instances_text(free: Iterable[tuple[int, int]]) -> str:
    """``profile 19: 5, profile 14: 3`` (or ``none``), as tools print it."""
    return ", ".join(f"profile {p}: {n}" for p, n in free) or "none"
