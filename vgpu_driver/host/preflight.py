"""What the kernel shows about a host's readiness for vGPUs: IOMMU
groups, loaded modules, NVIDIA's vGPU manager, tools on PATH. Read by
``vgpu-driver doctor`` only."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil


@dataclasses.dataclass(frozen=True)
class HostFacts:
    iommu_groups: int
    modules: frozenset[str]
    nvidia_version: str | None
    mdevctl: bool
    nvml: bool


def read_facts(root: str) -> HostFacts:
    try:
        groups = len(os.listdir(os.path.join(root, "kernel/iommu_groups")))
    except OSError:
        groups = 0
    try:
        modules = frozenset(os.listdir(os.path.join(root, "module")))
    except OSError:
        modules = frozenset()
    version = None
    try:
        with open(os.path.join(root, "module/nvidia/version")) as handle:
            version = handle.read().strip() or None
    except OSError:
        pass
    return HostFacts(
        iommu_groups=groups,
        modules=modules,
        nvidia_version=version,
        mdevctl=shutil.which("mdevctl") is not None,
        nvml=importlib.util.find_spec("pynvml") is not None,
    )
