"""A host description as data: its parents and their types, mdevs,
guests and SR-IOV cards (see :mod:`vgpu_driver.sim.description` for the
JSON format), with the kernel's counting rules applied."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable

from vgpu_driver.model import capacity, naming
from vgpu_driver.sim import kernel

PARENT_KINDS = ("pci", "css", "ap_matrix", "virtual")


@dataclasses.dataclass
class TypeSpec:
    id: str
    capacity: int
    name: str | None = None
    device_api: str = "vfio-pci"
    description: str | None = None


@dataclasses.dataclass
class ParentSpec:
    kind: str
    name: str
    address: str | None
    types: list[TypeSpec]
    vendor_id: str | None = None
    vendor: str | None = None
    product_id: str | None = None
    product: str | None = None
    driver: str | None = None
    numa_node: int | None = None
    iommu_group: int | None = None
    homogeneous: bool = True
    # a VF of this GPU (Ampere before kernel 6.8): its VFs share the
    # GPU's max_instance of each type
    physical_function: str | None = None

    @property
    def sysfs_path(self) -> str:
        """Path below the sysfs root, as libvirt's ``<path>`` has it."""
        if self.kind == "pci":
            return f"devices/pci0000:00/{self.address}"
        if self.kind == "css":
            return f"devices/css0/{css_bus_id(self.name)}"
        if self.kind == "ap_matrix":
            return "devices/vfio_ap/matrix"
        return f"devices/virtual/{self.name}/{self.name}"

    def type(self, type_id: str) -> TypeSpec | None:
        return next((t for t in self.types if t.id == type_id), None)


@dataclasses.dataclass
class MdevSpec:
    uuid: str
    parent: str  # parent name
    type: str
    legacy_name: bool = False
    iommu_group: int | None = None
    active: bool = True  # False: defined in libvirt, not created

    @property
    def libvirt_name(self) -> str:
        """``mdev_<uuid>`` before libvirt 7.7, ``mdev_<uuid>_<parent>``."""
        base = "mdev_" + self.uuid.replace("-", "_")
        if self.legacy_name:
            return base
        parent = self.parent.removeprefix("pci_")
        return f"{base}_{parent}"


@dataclasses.dataclass
class GuestSpec:
    uuid: str
    name: str
    mdevs: list[str] = dataclasses.field(default_factory=list)
    pci: list[str] = dataclasses.field(default_factory=list)
    nova: bool = True  # False: defined outside Nova (no Nova metadata)


@dataclasses.dataclass
class SriovTypeSpec:
    id: int
    name: str
    capacity: int  # NVIDIA's "maximum vGPUs per GPU" for the type
    framebuffer_gb: int | None = None  # needed in mixed-size mode
    # MIG-backed: the GPU instance profile whose free instances it takes
    gi_profile: int | None = None
    # what NVML's Max Instances says, where it is not ``capacity`` (a
    # MIG-backed type's figure is the VF count on real cards)
    nvml_max_instances: int | None = None

    def size_gb(self) -> int | None:
        """Its framebuffer: as given, else as its name says."""
        if self.framebuffer_gb is not None:
            return self.framebuffer_gb
        found = capacity.type_size(self.name)
        return None if found is None else found.framebuffer_gb


@dataclasses.dataclass
class PfSpec:
    address: str
    vf_count: int
    types: list[SriovTypeSpec]
    vendor_id: str | None = None
    product_id: str | None = None
    driver: str | None = None
    numa_node: int | None = None
    vf_types: dict[str, int] = dataclasses.field(default_factory=dict)
    # mixed-size mode (vGPU 17+): VFs may hold types of different sizes
    # while the board's framebuffer lasts
    mixed_size: bool = False
    framebuffer_gb: int | None = None
    # NVML's view (hosts with an "nvml" section): MIG mode (None: not a
    # MIG GPU), its GPU instances as (id, profile), virtualization caps,
    # and a fault NVML reports ("lost", "rows_pending", "rows_failed")
    mig: bool | None = None
    gpu_instances: list[tuple[int, int]] = dataclasses.field(
        default_factory=list
    )
    virtualization_caps: int | None = None
    fault: str | None = None

    @property
    def name(self) -> str:
        return naming.libvirt_pci_name(self.address)

    @property
    def vf_addresses(self) -> list[str]:
        """VFs follow their PF: functions 4-7 of the PF's slot, then on."""
        domain, bus, rest = self.address.split(":")
        slot = int(rest.split(".")[0], 16)
        first = slot * 8 + 4
        return [
            f"{domain}:{bus}:{(first + i) // 8:02x}.{(first + i) % 8}"
            for i in range(self.vf_count)
        ]

    def capacities(self) -> dict[int, int]:
        return {t.id: min(t.capacity, self.vf_count) for t in self.types}

    def creatable(self, vf: str) -> list[SriovTypeSpec]:
        return self.creatable_by_vf([vf])[vf]

    def creatable_by_vf(
        self, vfs: Iterable[str]
    ) -> dict[str, list[SriovTypeSpec]]:
        """What each of ``vfs`` lists as creatable, the card's figures
        worked out once for them all (a reading asks for every VF)."""
        sizes = None
        if self.mixed_size:
            sizes = {t.id: t.framebuffer_gb or 0 for t in self.types}
        capacities = self.capacities()
        equal_sizes = {t.id: t.size_gb() for t in self.types}
        by_id = {t.id: t for t in self.types}
        found = {}
        for vf in vfs:
            ids = kernel.creatable_types(
                self.vf_types.get(vf, 0),
                self.vf_types.values(),
                capacities,
                sizes=sizes,
                board_gb=self.framebuffer_gb or 0,
                equal_sizes=equal_sizes,
            )
            found[vf] = [by_id[i] for i in ids if self._mig_allows(by_id[i])]
        return found

    def _mig_allows(self, wanted: SriovTypeSpec) -> bool:
        """On a MIG GPU only MIG-backed types run, each on a free GPU
        instance of its profile; off MIG, no MIG-backed type runs."""
        if not self.mig:
            return wanted.gi_profile is None
        if wanted.gi_profile is None:
            return False
        return wanted.gi_profile in self.free_profiles()

    def instance_of(self) -> dict[str, int]:
        """VF -> the GPU instance its MIG-backed vGPU runs on (in VF
        order, the first free instance of its profile)."""
        profile_of = {t.id: t.gi_profile for t in self.types}
        free = list(self.gpu_instances)
        found: dict[str, int] = {}
        for vf in sorted(self.vf_types):
            profile = profile_of.get(self.vf_types[vf])
            if profile is None or not self.mig:
                continue
            for entry in free:
                if entry[1] == profile:
                    found[vf] = entry[0]
                    free.remove(entry)
                    break
        return found

    def free_profiles(self) -> list[int]:
        """The profile of each GPU instance no vGPU runs on."""
        taken = set(self.instance_of().values())
        return [p for i, p in self.gpu_instances if i not in taken]


# the vGPU manager version simulated hosts report (illustrative)
NVIDIA_HOST_DRIVER = "570.124.03"


@dataclasses.dataclass
class OtherGpuSpec:
    """A GPU that is no mdev parent and no NVIDIA SR-IOV vGPU card: an
    AMD or Intel GPU whose SR-IOV VFs are given as they are, or one the
    library does not drive (an NVIDIA GPU without the vGPU manager)."""

    address: str
    vendor_id: str
    product_id: str
    pci_class: str = "0x030000"
    driver: str | None = None
    total_vfs: int | None = None
    vf_addresses: list[str] = dataclasses.field(default_factory=list)
    vf_product_id: str | None = None
    vf_driver: str | None = None  # the host driver its VFs are bound to


@dataclasses.dataclass
class NvmlSpec:
    """A host whose NVML answers (the simulated library serves it)."""

    driver_version: str
    heterogeneous: bool = False


@dataclasses.dataclass
class HostDescription:
    source: str
    parents: list[ParentSpec]
    mdevs: list[MdevSpec]
    guests: list[GuestSpec]
    pfs: list[PfSpec]
    summary: str = ""
    hostname: str = "compute1"
    config: str = ""
    other_gpus: list[OtherGpuSpec] = dataclasses.field(default_factory=list)
    # kernel modules loaded (None: what the devices imply)
    modules: list[str] | None = None
    iommu: bool = True  # False: booted without the IOMMU on
    nvml: NvmlSpec | None = None

    def parent(self, name: str) -> ParentSpec:
        return next(p for p in self.parents if p.name == name)

    def loaded_modules(self) -> list[str]:
        """The kernel modules loaded: as described, or as the devices
        imply (vfio; NVIDIA's vGPU manager where an NVIDIA card is)."""
        if self.modules is not None:
            return list(self.modules)
        modules = ["vfio", "vfio_pci", "mdev"]
        if self.pfs or any(p.vendor_id == "0x10de" for p in self.parents):
            modules += ["nvidia", "nvidia_vgpu_vfio"]
        return modules

    def driver_versions(self) -> list[tuple[str, str]]:
        """(driver, version) the kernel reports for loaded drivers."""
        if "nvidia" in self.loaded_modules():
            version = self.nvml.driver_version if self.nvml else None
            return [("nvidia", version or NVIDIA_HOST_DRIVER)]
        return []

    def available(self, parent: ParentSpec, type_id: str) -> int:
        spec = parent.type(type_id)
        if spec is None:
            return 0
        used = [
            m.type for m in self.mdevs if m.parent == parent.name and m.active
        ]
        available = kernel.available_instances(
            type_id, spec.capacity, used, parent.homogeneous
        )
        if parent.physical_function is None or not available:
            return available
        siblings = {
            p.name
            for p in self.parents
            if p.physical_function == parent.physical_function
        }
        on_gpu = [
            m.type for m in self.mdevs if m.parent in siblings and m.active
        ]
        descriptions = {t.id: t.description for t in parent.types}
        return min(
            available,
            kernel.gpu_room(type_id, spec.description, on_gpu, descriptions),
        )

    def copy(self) -> HostDescription:
        return copy.deepcopy(self)


def css_bus_id(name: str) -> str:
    """``css_0_0_0023`` is sysfs ``0.0.0023``."""
    return ".".join(name.split("_")[1:])


# -- loading -----------------------------------------------------------
