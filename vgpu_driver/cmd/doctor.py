"""``vgpu-driver doctor``: is this host ready to offer vGPUs, and what
is in the way? Run it before and after setting a host up."""

from __future__ import annotations

import dataclasses
from typing import Any

from vgpu_driver.cmd import output
from vgpu_driver.cmd.context import Context
from vgpu_driver.conf import loader
from vgpu_driver.host.pci_scan import scan_gpus
from vgpu_driver.host.preflight import HostFacts, read_facts
from vgpu_driver.model import check, gpus, nvml
from vgpu_driver.model.config import DeviceConfig
from vgpu_driver.model.device import HostInventory


@dataclasses.dataclass(frozen=True)
class Finding:
    level: str  # ok, info, warning, error
    check: str
    detail: str


def kernel_findings(
    facts: HostFacts, cards: list[gpus.PciGpu]
) -> list[Finding]:
    found = []
    if facts.iommu_groups:
        found.append(
            Finding("ok", "IOMMU", f"{facts.iommu_groups} IOMMU groups")
        )
    else:
        found.append(
            Finding(
                "error",
                "IOMMU",
                "no IOMMU group: enable VT-d (AMD-Vi) in the firmware and "
                "boot with intel_iommu=on (or amd_iommu=on) iommu=pt",
            )
        )
    missing = sorted({"vfio", "vfio_pci"} - facts.modules)
    found.append(
        Finding("error", "vfio", f"not loaded: modprobe {' '.join(missing)}")
        if missing
        else Finding("ok", "vfio", "vfio and vfio_pci are loaded")
    )
    if any(c.vendor == "NVIDIA" for c in cards):
        if facts.nvidia_version:
            found.append(
                Finding(
                    "ok",
                    "NVIDIA vGPU manager",
                    f"host driver {facts.nvidia_version}",
                )
            )
        else:
            found.append(
                Finding(
                    "error",
                    "NVIDIA vGPU manager",
                    "NVIDIA GPUs are present but the nvidia module is not "
                    "loaded: install NVIDIA's vGPU manager (host driver)",
                )
            )
    return found


def nvml_findings(
    facts: HostFacts, cards: list[gpus.PciGpu], inventory: HostInventory
) -> list[Finding]:
    """Where capacity comes from, and what NVML says of each GPU."""
    said = inventory.nvml
    if said is None:
        if not any(c.vendor == "NVIDIA" for c in cards):
            return []
        why = (
            "NVML did not answer (vGPU manager missing, or [devices] "
            "use_nvml = false)"
            if facts.nvml
            else "nvidia-ml-py is not installed (the 'nvml' extra)"
        )
        return [
            Finding(
                "info",
                "capacity source",
                f"no NVML: {why}; capacity comes from the type descriptions "
                "and the board table (a board not in it, and a MIG-backed "
                "type, offer one more than in use at a time)",
            )
        ]
    mixed = "supported" if said.heterogeneous else "not supported"
    found = [
        Finding(
            "ok",
            "capacity source",
            f"NVML, host driver {said.driver_version} (mixed vGPU sizes "
            f"{mixed}): capacity, MIG instances and faults in the vGPU "
            "manager's own words",
        )
    ]
    for gpu in said.gpus:
        if gpu.fault:
            found.append(
                Finding("error", f"GPU {gpu.address}", f"NVML: {gpu.fault}")
            )
        elif gpu.mixed_size is not None and not gpu.mig:
            mode = (
                "mixed-size mode: vGPUs of several sizes at once"
                if gpu.mixed_size
                else "equal-size mode: the first vGPU fixes the size of "
                "the others (nvidia-smi vgpu -i <GPU> -shm 1 mixes them)"
            )
            found.append(Finding("info", f"GPU {gpu.address}", mode))
        elif gpu.mig:
            free = nvml.free_instances_text(gpu.free_instances)
            found.append(
                Finding(
                    "info",
                    f"GPU {gpu.address}",
                    f"MIG on; free GPU instances {free} (each "
                    "MIG-backed vGPU takes one of its profile)",
                )
            )
    return found


def gpu_findings(
    cards: list[gpus.PciGpu], inventory: HostInventory, config: DeviceConfig
) -> list[Finding]:
    found = []
    for row in gpus.roles(cards, inventory, config):
        card = row.gpu
        name = f"{card.address} {card.vendor} {card.product_id or ''}".strip()
        if row.offered:
            level = "ok"
        elif "not enabled" in row.role:
            level = "error"
        elif "no vGPU" in row.role or "no enabled type" in row.note:
            level = "warning"
        else:
            level = "info"
        vfs = f", {row.vfs} VFs" if row.vfs else ""
        found.append(Finding(level, name, f"{row.role}{vfs}: {row.note}"))
    if not cards:
        found.append(Finding("info", "GPUs", "no display controller found"))
    return found


def tool_findings(facts: HostFacts, inventory: HostInventory) -> list[Finding]:
    if not inventory.parents:
        return []
    return [
        Finding(
            "ok" if facts.mdevctl else "info",
            "mdevctl",
            "present"
            if facts.mdevctl
            else "not installed: the library recreates the mdevs guests "
            "need at start; mdevctl only matters for mdevs made by hand",
        )
    ]


def run(context: Context) -> int:
    conf = context.conf
    config, problems = loader.read_device_config(conf)
    root = str(conf.libvirt.sysfs_root)
    facts = read_facts(root)
    cards = scan_gpus(root)
    inventory = context.host.discover(guests=False)
    findings = kernel_findings(facts, cards)
    findings += nvml_findings(facts, cards, inventory)
    findings += gpu_findings(cards, inventory, config)
    findings += tool_findings(facts, inventory)
    for problem in [*problems, *check.host_problems(config, inventory)]:
        level = "error" if problem.severity == "error" else "warning"
        findings.append(Finding(level, "configuration", str(problem)))
    if conf.command.format == "json":
        data: dict[str, Any] = {
            "findings": [dataclasses.asdict(f) for f in findings]
        }
        output.dump_json(data)
    else:
        output.table(
            ["Level", "Check", "Detail"],
            [[f.level.upper(), f.check, f.detail] for f in findings],
        )
    if problems:
        return 2
    return 1 if any(f.level == "error" for f in findings) else 0
