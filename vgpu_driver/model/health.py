"""Devices that must take no new guest because their driver is down
(pure): the host's reading says which kernel modules are loaded.

* An NVIDIA device (mdev parent or SR-IOV card) whose host driver
  ``nvidia`` is not loaded, or, for an mdev parent, whose vGPU manager's
  VFIO module ``nvidia_vgpu_vfio`` is not: nothing could be created or
  started on it, so it is reserved with the reason until they are back.

* A GPU NVML reports lost, or with memory rows it must remap at the
  next reset (or could not): reserved with NVML's word until it reads
  healthy again; the mdev parents and VF parents on that GPU with it.

A device gone from the bus is handled by the plan itself (its provider
is kept, reserved, while guests use it).
"""

from __future__ import annotations

from vgpu_driver.model.device import HostInventory

NVIDIA = "nvidia"
NVIDIA_VFIO = "nvidia_vgpu_vfio"


def unhealthy(inventory: HostInventory) -> dict[str, str]:
    """Device name -> why it takes no new guest."""
    found = _nvml_faults(inventory)
    modules = inventory.modules
    if modules is None:
        return found
    for parent in inventory.parents:
        if parent.driver != NVIDIA:
            continue
        if NVIDIA not in modules:
            found[parent.name] = _down(NVIDIA)
        elif NVIDIA_VFIO not in modules:
            found[parent.name] = _down(NVIDIA_VFIO)
    for pf in inventory.pfs:
        if pf.driver == NVIDIA and NVIDIA not in modules:
            found[pf.name] = _down(NVIDIA)
    return found


def _nvml_faults(inventory: HostInventory) -> dict[str, str]:
    said = inventory.nvml
    if said is None:
        return {}
    faults = {g.address: g.fault for g in said.gpus if g.fault}
    if not faults:
        return {}
    found: dict[str, str] = {}
    for pf in inventory.pfs:
        if pf.address in faults:
            found[pf.name] = _fault(pf.address, faults[pf.address])
    for parent in inventory.parents:
        gpu = parent.physical_function or parent.address
        if gpu in faults:
            found[parent.name] = _fault(gpu, faults[gpu])
    return found


def _fault(address: str, why: str) -> str:
    return (
        f"NVML reports GPU {address} {why}: it takes no new guest until "
        "it reads healthy again (reset or replace it)"
    )


def _down(module: str) -> str:
    return (
        f"NVIDIA's vGPU manager is not running (kernel module {module} is "
        "not loaded): install or start it; the device is offered again "
        "once it is back"
    )


# why a provider takes no new guest, as a metric label: (cause, a phrase
# of the reasons the plan gives for it)
CAUSES = (
    ("driver_down", "vGPU manager is not running"),
    ("gpu_fault", "NVML reports GPU"),
    ("device_gone", "its device is no longer on the host"),
    ("operations_failing", "its device is failing"),
    ("max_instances", "max_instances is reached"),
    ("other_manager", "made by another manager"),
    ("outside_nova", "used by guests outside Nova"),
)


def cause_of(reason: str | None) -> str | None:
    """The bounded cause of a provider's reason (for metrics)."""
    if not reason:
        return None
    for cause, phrase in CAUSES:
        if phrase in reason:
            return cause
    return "other"
