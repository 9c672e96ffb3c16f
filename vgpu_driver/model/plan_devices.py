"""The devices a plan reports, one provider each (pure): an mdev parent,
the VF parents of one GPU together (NVIDIA Ampere before kernel 6.8),
an NVIDIA SR-IOV physical GPU, or a GPU whose VFs are given as they are
(AMD, Intel), each reduced to what the plan needs.
"""

from __future__ import annotations

import dataclasses
import operator
from collections import Counter
from collections.abc import Callable, Mapping

from vgpu_driver.model import capacity, naming, nvml, trait
from vgpu_driver.model.config import DeviceConfig
from vgpu_driver.model.counting import tally
from vgpu_driver.model.device import (
    HostInventory,
    Parent,
    PhysicalFunction,
    PlainSriovGpu,
)


@dataclasses.dataclass(frozen=True)
class Device:
    """One parent or physical function, reduced to what the plan needs."""

    name: str
    keys: tuple[str, ...]
    supported: tuple[str, ...]
    existing: Counter[str]  # type id -> devices of it that exist
    available: Mapping[str, int]  # type id -> room for more
    # type id -> what it offers, asked for the type a plan reports only
    # (a GRID pGPU lists about 18 types)
    capabilities: Callable[[str], trait.Capabilities]
    # type id -> why it offers less than the host lists (capacity.Room)
    limits: Mapping[str, str] = dataclasses.field(default_factory=dict)
    gpu: str | None = None  # a VF parent's GPU (whose room its VFs share)
    driver: str | None = None  # its host driver (for the version trait)
    migration: bool | None = None  # NVML: its vGPUs can live-migrate
    # it may serve several types, a provider each (an NVIDIA SR-IOV card:
    # in mixed-size mode its VFs take vGPUs of several sizes)
    several: bool = False
    # type id -> how many the card holds when empty, where known
    card_max: Mapping[str, int] = dataclasses.field(default_factory=dict)
    # type id -> its mdevs defined and not running (among ``existing``;
    # they take no room until started: the room counts them already)
    stopped: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def share(self, type_id: str, percent: int, used: int) -> int:
        """More units of a type its ``card_share`` lets it take: its
        percent of what the empty card holds of it, less what it holds
        (where that figure is unknown, its percent of what still
        fits)."""
        whole = self.card_max.get(type_id)
        if whole is None:
            return max(0, self.available.get(type_id, 0)) * percent // 100
        return max(0, whole * percent // 100 - used)


def _from_parent(parent: Parent, existing: Counter[str]) -> Device:
    def caps(type_id: str) -> trait.Capabilities:
        found = parent.type(type_id)
        return trait.capabilities_of(found) if found else trait.NOTHING_KNOWN

    return Device(
        name=parent.name,
        keys=parent.keys,
        supported=parent.type_ids,
        existing=existing,
        available={t.id: t.available for t in parent.types},
        capabilities=caps,
        gpu=parent.physical_function,
        driver=parent.driver,
    )


def _from_gpu(
    gpu: str, members: tuple[Parent, ...], existing: Counter[str]
) -> Device:
    """The VF parents of one GPU as one device (its ``existing``: the
    mdevs on all of them): each VF holds one vGPU, the GPU what its
    type's ``max_instance`` says (applied by the plan)."""
    first = members[0]
    available: Counter[str] = Counter()
    for member in members:
        available.update({t.id: t.available for t in member.types})
    keys = [first.physical_function or gpu, gpu]
    for member in members:
        keys.extend(member.keys[:2])
    device = _from_parent(first, existing)
    return dataclasses.replace(
        device,
        name=gpu,
        keys=tuple(dict.fromkeys(keys)),
        supported=tuple(dict.fromkeys(t for m in members for t in m.type_ids)),
        available=available,
    )


def by_device(
    inventory: HostInventory, counts: Mapping[str, Mapping[str, int]]
) -> dict[str, Counter[str]]:
    """``counts`` (parent name -> type id -> n) summed per device: the VF
    parents of one GPU count as the GPU."""
    if not inventory.has_vf_parents:  # each parent is its own device
        return {
            name: per if type(per) is Counter else Counter(per)
            for name, per in counts.items()
        }
    found: dict[str, Counter[str]] = {}
    for name, per_type in counts.items():
        found.setdefault(inventory.device_of(name), Counter()).update(per_type)
    return found


def _from_pf(
    pf: PhysicalFunction, vouched: frozenset[str], gpu: nvml.NvmlGpu | None
) -> Device:
    existing = tally(
        naming.sriov_type_id(vf.current_type)
        for vf in pf.vfs
        if vf.current_type
    )
    available, limits = capacity.sriov_room(pf, vouched, gpu)
    names = {t.type_id: t.name for t in pf.known_types()}
    supported = tuple(dict.fromkeys([*names, *existing]))
    return Device(
        name=pf.name,
        keys=pf.keys,
        supported=supported,
        existing=existing,
        available=available,
        capabilities=lambda type_id: trait.CATALOGUE.get(
            names.get(type_id, ""), trait.NOTHING_KNOWN
        ),
        limits=limits,
        driver=pf.driver,
        migration=gpu.migration if gpu is not None else None,
        several=True,
        card_max=capacity.card_max(pf, gpu),
    )


def _from_plain(gpu: PlainSriovGpu) -> Device:
    """Every VF exists and is of the one type: total = its VFs."""
    return Device(
        name=gpu.name,
        keys=gpu.keys,
        supported=(gpu.type_id,),
        existing=Counter({gpu.type_id: len(gpu.vfs)}),
        available={},
        capabilities=lambda _type_id: trait.NOTHING_KNOWN,
        driver=gpu.driver,
    )


_WHERE = operator.attrgetter("parent", "type_id", "active")


def devices_of(inventory: HostInventory, config: DeviceConfig) -> list[Device]:
    """Every device of the reading, each with the mdevs on it."""
    on_parent: dict[str, Counter[str]] = {}
    stopped: dict[str, Counter[str]] = {}
    # (one pass over the mdevs: those stopped counted with the rest)
    for (parent, type_id, active), n in tally(
        map(_WHERE, inventory.mdevs)
    ).items():
        counts = on_parent.get(parent)
        if counts is None:
            counts = on_parent[parent] = Counter()
        counts[type_id] += n
        if not active:
            stopped.setdefault(parent, Counter())[type_id] = n
    # regrouped once per parent, not once per mdev
    on_device = by_device(inventory, on_parent)
    nothing: Counter[str] = Counter()  # (read, never changed)
    devices = [
        _from_parent(p, on_device.get(p.name, nothing))
        for p in inventory.parents
        if not p.physical_function
    ]
    if stopped:
        devices = [
            dataclasses.replace(d, stopped=stopped[d.name])
            if d.name in stopped
            else d
            for d in devices
        ]
    gpus = sorted(inventory.vf_parent_gpus())
    devices += [
        _from_gpu(
            gpu, inventory.vf_parents(gpu), on_device.get(gpu, Counter())
        )
        for gpu in gpus
    ]
    vouched = frozenset(t.type_id for t in config.types if t.max_instances)
    said = inventory.nvml
    devices += [
        _from_pf(pf, vouched, said.gpu(pf.address) if said else None)
        for pf in inventory.pfs
    ]
    devices += [_from_plain(gpu) for gpu in inventory.plain_gpus if gpu.vfs]
    return devices
