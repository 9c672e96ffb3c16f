"""What a host has: parents, mdev types, mdevs, SR-IOV functions, guests.

These are immutable snapshots built by the ``host`` adapters; everything
above them (provider tree, binding) reads only these.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Iterable

from vgpu_driver.model import guest_indexes, naming
from vgpu_driver.model.nvml import NvmlReading
from vgpu_driver.model.sriov import (
    PhysicalFunction,
    PlainSriovGpu,
    SriovType,
    VirtualFunction,
    remember_types,
)


@dataclasses.dataclass(frozen=True)
class MdevType:
    """One mdev type a parent supports, as the kernel lists it."""

    id: str
    name: str | None
    device_api: str
    available: int
    description: str | None = None


@dataclasses.dataclass(frozen=True)
class Parent:
    """A device that can create mdevs (a pGPU, or a virtual parent)."""

    name: str  # libvirt node-device name, e.g. pci_0000_84_00_0
    address: str | None  # PCI address, None for non-PCI parents
    vendor_id: str | None = None
    vendor: str | None = None
    product_id: str | None = None
    product: str | None = None
    driver: str | None = None
    numa_node: int | None = None
    types: tuple[MdevType, ...] = ()
    # the PF's address when this parent is a VF (an NVIDIA Ampere GPU on
    # a kernel before 6.8: each VF is an mdev parent of one vGPU)
    physical_function: str | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        """What ``device_addresses`` may call it: its address or name,
        and for a VF its GPU's address (which means all its VFs)."""
        if not self.address:
            return (self.name,)
        if self.physical_function:
            return (self.address, self.name, self.physical_function)
        return (self.address, self.name)

    def type(self, type_id: str) -> MdevType | None:
        return next((t for t in self.types if t.id == type_id), None)

    @property
    def type_ids(self) -> tuple[str, ...]:
        return tuple(t.id for t in self.types)


@dataclasses.dataclass(frozen=True)
class Mdev:
    """A mediated device, active or only defined."""

    uuid: str
    type_id: str
    parent: str  # the parent's libvirt name
    name: str  # libvirt node-device name
    iommu_group: int | None = None
    active: bool = True
    persistent: bool | None = None  # None: libvirt cannot tell
    autostart: bool | None = None


@dataclasses.dataclass(frozen=True)
class Guest:
    """A libvirt domain and the host devices it is given."""

    uuid: str
    name: str
    mdevs: tuple[str, ...] = ()  # mdev uuids
    pci_devices: tuple[str, ...] = ()  # PCI addresses (VFs)
    # its XML carries Nova's instance metadata: Nova's, Placement holds an
    # allocation for what it uses (False: outside Nova, unless the
    # caller names the instance its own)
    nova: bool = True


GuestChanges = tuple[
    int, tuple[tuple[str, "Guest | None", "Guest | None"], ...]
]


@dataclasses.dataclass(frozen=True)
class HostInventory:
    """One consistent reading of a host."""

    parents: tuple[Parent, ...] = ()
    mdevs: tuple[Mdev, ...] = ()
    pfs: tuple[PhysicalFunction, ...] = ()
    guests: tuple[Guest, ...] = ()
    # False: the guests were not read (discover(guests=False) before any
    # scan): ``guests`` is empty, not "no guest uses anything"
    guests_known: bool = True
    # (driver, version) of the host drivers of the devices, as the kernel
    # reports them (/sys/module/<driver>/version): NVIDIA's vGPU manager
    driver_versions: tuple[tuple[str, str], ...] = ()
    # kernel modules loaded (None: not known to the reader)
    modules: frozenset[str] | None = None
    # what NVIDIA's management library says of the GPUs (None: no NVML)
    nvml: NvmlReading | None = None
    # GPUs whose SR-IOV VFs are given as they are (AMD, Intel)
    plain_gpus: tuple[PlainSriovGpu, ...] = ()
    # set by the host that took the reading: the same number iff the same
    # content (see Host.discover); not part of the content itself
    generation: int = dataclasses.field(default=0, compare=False)
    # set by a host that knows: (the generation of its reading before
    # this one, (uuid, guest then or None, guest now or None) of each
    # guest changed since); None: not known
    guest_changes: GuestChanges | None = dataclasses.field(
        default=None, compare=False
    )
    # set by a host that knows: (the generation of its reading before
    # this one, the parents whose reading or mdevs changed since and the
    # SR-IOV cards whose VFs did, the rest being the same); None: not
    # known (see device_changes.py)
    device_changes: tuple[int, frozenset[str]] | None = dataclasses.field(
        default=None, compare=False
    )

    def same_devices(self, other: HostInventory) -> bool:
        """Everything but the guests is as in ``other`` (cheap when the
        reader kept its device objects: tuples compare their items by
        identity first, never themselves)."""
        return (
            (self.parents is other.parents or self.parents == other.parents)
            and (self.mdevs is other.mdevs or self.mdevs == other.mdevs)
            and self.same_but_node_devices(other)
        )

    def same_but_node_devices(self, other: HostInventory) -> bool:
        """Everything but the guests, the parents and the mdevs."""
        return (
            self.pfs == other.pfs
            and self.plain_gpus == other.plain_gpus
            and self.nvml == other.nvml
            and self.modules == other.modules
            and self.driver_versions == other.driver_versions
        )

    def with_guests(
        self,
        guests: tuple[Guest, ...],
        guests_known: bool,
        generation: int,
        changes: GuestChanges | None,
        matched: bool = False,
    ) -> HostInventory:
        """This reading, the next ``generation``, with ``guests`` (as
        :func:`sort_guests` orders them) changed by ``changes``; the
        rest, already in order, as it is. ``matched``: ``guests`` are
        this reading's with ``changes`` made, no other (the indexes of
        who uses what are made from this reading's, see
        :mod:`~vgpu_driver.model.guest_indexes`)."""
        # what dataclasses.replace does, at a fraction of its cost (a
        # refresh after a guest's event makes one), keeping the indexes
        # of the devices, which are the same
        state = {
            name: value
            for name, value in self.__dict__.items()
            if name in _FIELDS or name in DEVICE_INDEXES
        }
        state.update(
            guests=guests,
            guests_known=guests_known,
            generation=generation,
            guest_changes=changes,
            device_changes=None,
        )
        if matched and changes is not None and self.guests_known:
            # who uses what: made from this reading's when asked
            state[guest_indexes.CARRY] = guest_indexes.link(self, changes[1])
        reading = object.__new__(HostInventory)
        reading.__dict__.update(state)
        return reading

    def with_generation(self, generation: int) -> HostInventory:
        return dataclasses.replace(self, generation=generation)

    def parent(self, name: str) -> Parent | None:
        return self._parents_by_name.get(name)

    def pf(self, name: str) -> PhysicalFunction | None:
        return self._pfs_by_name.get(name)

    # The indexes below are computed once per reading (an inventory is
    # immutable) and shared by every caller: treat them as read-only.

    @functools.cached_property
    def _parents_by_name(self) -> dict[str, Parent]:
        found: dict[str, Parent] = {}
        for parent in self.parents:
            found.setdefault(parent.name, parent)  # the first, as listed
        return found

    @functools.cached_property
    def _pfs_by_name(self) -> dict[str, PhysicalFunction]:
        found: dict[str, PhysicalFunction] = {}
        for pf in self.pfs:
            found.setdefault(pf.name, pf)
        return found

    # who uses what: carried from the reading this one was made from, or
    # built whole (see guest_indexes)
    @functools.cached_property
    def _mdev_users(self) -> dict[str, str]:
        return guest_indexes.users_of(self, "_mdev_users")

    @functools.cached_property
    def _pci_users(self) -> dict[str, str]:
        return guest_indexes.users_of(self, "_pci_users")

    @functools.cached_property
    def _unmarked(self) -> tuple[Guest, ...]:
        return guest_indexes.unmarked_of(self)

    @functools.cached_property
    def _absent_users(self) -> frozenset[str]:
        return guest_indexes.absent_of(self)

    @functools.cached_property
    def _by_parent(self) -> dict[str, tuple[Mdev, ...]]:
        found: dict[str, list[Mdev]] = {}
        for mdev in self.mdevs:
            found.setdefault(mdev.parent, []).append(mdev)
        return {name: tuple(mdevs) for name, mdevs in found.items()}

    @functools.cached_property
    def _gpu_of(self) -> dict[str, str]:
        return {
            p.name: naming.libvirt_pci_name(p.physical_function)
            for p in self.parents
            if p.physical_function
        }

    @functools.cached_property
    def _gpu_members(self) -> dict[str, tuple[Parent, ...]]:
        found: dict[str, list[Parent]] = {}
        for parent in self.parents:
            gpu = self._gpu_of.get(parent.name)
            if gpu is not None:
                found.setdefault(gpu, []).append(parent)
        return {gpu: tuple(members) for gpu, members in found.items()}

    @property
    def has_vf_parents(self) -> bool:
        """Some parent is a VF (see :meth:`device_of`)."""
        return bool(self._gpu_of)

    def device_of(self, name: str) -> str:
        """The device whose provider reports parent ``name``: its GPU for
        a VF parent (Ampere before kernel 6.8: the VFs of one GPU are one
        provider, named after the GPU), else the parent itself."""
        return self._gpu_of.get(name, name)

    def vf_parent_gpus(self) -> tuple[str, ...]:
        """The GPUs (libvirt names) whose VFs are mdev parents."""
        return tuple(self._gpu_members)

    def vf_parents(self, gpu: str) -> tuple[Parent, ...]:
        """The VF parents of GPU ``gpu`` (its libvirt name), in name
        order; () for any other device."""
        return self._gpu_members.get(gpu, ())

    def mdev_users(self) -> dict[str, str]:
        """mdev uuid -> uuid of the guest that has it (read-only)."""
        return self._mdev_users

    def absent_in_use(self) -> frozenset[str]:
        """The uuids of mdevs guests use that the host does not have (a
        parent gone, a guest defined with an mdev never made)."""
        return self._absent_users

    def unmarked_guests(self) -> tuple[Guest, ...]:
        """The guests using devices whose domains carry no Nova metadata
        (outside Nova, unless the caller names them its own)."""
        return self._unmarked

    def pci_users(self) -> dict[str, str]:
        """PCI address -> uuid of the guest that has it (read-only)."""
        return self._pci_users

    def mdevs_of(self, parent: str) -> tuple[Mdev, ...]:
        return self._by_parent.get(parent, ())

    def addresses(self) -> frozenset[str]:
        keys: list[str] = []
        for parent in self.parents:
            keys.extend(parent.keys)
        for pf in self.pfs:
            keys.extend(pf.keys)
        for gpu in self.plain_gpus:
            keys.extend(gpu.keys)
        return frozenset(keys)

    def plain_vf_owner(self) -> dict[str, PlainSriovGpu]:
        """VF address -> its plain SR-IOV GPU (read-only)."""
        return self._plain_vf_owner

    @functools.cached_property
    def _plain_vf_owner(self) -> dict[str, PlainSriovGpu]:
        return {vf: gpu for gpu in self.plain_gpus for vf in gpu.vfs}


_FIELDS = frozenset(f.name for f in dataclasses.fields(HostInventory))
# the cached indexes of a reading that depend on its devices alone (kept
# when only its guests change); every other index is of its guests
DEVICE_INDEXES = frozenset(
    {
        "_parents_by_name",
        "_pfs_by_name",
        "_by_parent",
        "_gpu_of",
        "_gpu_members",
        "_plain_vf_owner",
    }
)
GUEST_INDEXES = frozenset({"_mdev_users", "_pci_users", "_unmarked"})
# of both (made again when either changes)
MIXED_INDEXES = frozenset({"_absent_users"})


_BY_NAME = operator.attrgetter("name")
_BY_UUID = operator.attrgetter("uuid")


def sort_inventory(
    parents: Iterable[Parent],
    mdevs: Iterable[Mdev],
    pfs: Iterable[PhysicalFunction],
    guests: Iterable[Guest],
    guests_known: bool = True,
    driver_versions: Iterable[tuple[str, str]] = (),
    modules: Iterable[str] | None = None,
    nvml: NvmlReading | None = None,
    plain_gpus: Iterable[PlainSriovGpu] = (),
) -> HostInventory:
    """A canonical inventory: everything in a stable order."""
    return HostInventory(
        parents=tuple(sorted(parents, key=_BY_NAME)),
        mdevs=tuple(sorted(mdevs, key=_BY_UUID)),
        pfs=tuple(sorted(pfs, key=_BY_NAME)),
        guests=tuple(sorted(guests, key=_BY_UUID)),
        guests_known=guests_known,
        driver_versions=tuple(sorted(set(driver_versions))),
        modules=frozenset(modules) if modules is not None else None,
        nvml=nvml,
        plain_gpus=tuple(sorted(plain_gpus, key=_BY_NAME)),
    )


__all__ = [
    "Guest",
    "HostInventory",
    "Mdev",
    "MdevType",
    "Parent",
    "PhysicalFunction",
    "PlainSriovGpu",
    "SriovType",
    "VirtualFunction",
    "remember_types",
    "sort_inventory",
]
