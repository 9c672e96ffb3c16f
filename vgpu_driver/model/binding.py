"""Which devices to give an instance: pure rules.

For each unit of each allocation, on the provider's parent: reuse a free
device of the configured type (an mdev no guest uses and nobody has
claimed; for SR-IOV, a VF already set to the type), else make one (a new
mdev, or a free VF set to the type). Nothing here touches the host.
"""

from __future__ import annotations

import dataclasses
import uuid as uuidlib
from collections.abc import Container, Iterable, Mapping
from typing import Any

from vgpu_driver.exception import DeviceCapacityExhausted, ProviderUnknown
from vgpu_driver.model import naming


@dataclasses.dataclass(frozen=True)
class BoundDevice:
    """A device given (or to be given) to a guest."""

    # "mdev"; "vf" (an NVIDIA SR-IOV VF, typed); "pci" (a VF given as it
    # is: AMD, Intel)
    kind: str
    id: str  # mdev uuid, or VF PCI address
    parent: str  # parent or physical function (libvirt name)
    type_id: str
    created: bool = False  # made for this bind (undone on failure)

    def record(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Target:
    """What a device provider stands for."""

    device: str
    type_id: str
    resource_class: str


@dataclasses.dataclass
class ParentView:
    """What the binder knows of one parent, kept current between
    discoveries by its own creates and removes."""

    name: str
    available: dict[str, int]  # type id -> room for more
    free: dict[str, list[str]]  # type id -> free mdev uuids


@dataclasses.dataclass
class PfView:
    name: str
    vfs: dict[str, int]  # VF address -> current type number (0: none)
    creatable: dict[str, set[int]]  # VF address -> type numbers it takes


def choose(
    wanted: Iterable[tuple[str, str, int]],
    parents: Mapping[str, ParentView],
    pfs: Mapping[str, PfView],
    busy: Container[str],
    groups: Mapping[str, tuple[str, ...]] | None = None,
    plain: Mapping[str, tuple[str, ...]] | None = None,
) -> list[BoundDevice]:
    """Devices for ``wanted`` units: (device name, type id, count).

    ``busy``: device ids used by guests or claimed. ``groups``: GPU name
    -> its VF parents, one of which takes each unit asked of the GPU (a
    free mdev on any of them first, else a new one on the first with
    room). ``plain``: GPU name -> its VFs given as they are (the first
    free one is taken). Raises
    DeviceCapacityExhausted when a parent has no room. ``created``
    marks what would have to be made.
    """
    taken = Taken(busy)
    chosen: list[BoundDevice] = []
    devices = Devices(parents, pfs, groups or {}, plain or {})
    for device, type_id, count in wanted:
        for _ in range(count):
            pick = _pick_for(device, type_id, devices, taken, chosen)
            if pick is None:
                raise DeviceCapacityExhausted(
                    count=count, type_id=type_id, parent=device
                )
            taken.add(pick.id)
            chosen.append(pick)
    return chosen


class Taken:
    """What is busy, and what the choice took so far."""

    __slots__ = ("busy", "chosen")

    def __init__(self, busy: Container[str]) -> None:
        self.busy = busy
        self.chosen: set[str] = set()

    def __contains__(self, device_id: object) -> bool:
        return device_id in self.chosen or device_id in self.busy

    def add(self, device_id: str) -> None:
        self.chosen.add(device_id)


@dataclasses.dataclass(frozen=True)
class Devices:
    """What a choice is made from (see :func:`choose`)."""

    parents: Mapping[str, ParentView]
    pfs: Mapping[str, PfView]
    groups: Mapping[str, tuple[str, ...]]
    plain: Mapping[str, tuple[str, ...]]


def _pick_for(
    device: str,
    type_id: str,
    devices: Devices,
    taken: Taken,
    chosen: list[BoundDevice],
) -> BoundDevice | None:
    if device in devices.plain:
        return next(
            (
                BoundDevice("pci", address, device, type_id)
                for address in devices.plain[device]
                if address not in taken
            ),
            None,
        )
    members = devices.groups.get(device, (device,))
    for reuse_only in (True, False):
        for name in members:
            pick = _pick(
                name,
                type_id,
                devices.parents,
                devices.pfs,
                taken,
                chosen,
                reuse_only,
            )
            if pick is not None:
                return pick
    return None


def _pick(
    device: str,
    type_id: str,
    parents: Mapping[str, ParentView],
    pfs: Mapping[str, PfView],
    taken: Taken,
    chosen: list[BoundDevice],
    reuse_only: bool = False,
) -> BoundDevice | None:
    if device in pfs:
        pf = pfs[device]
        number = naming.sriov_type_number(type_id)
        ready = [a for a, t in sorted(pf.vfs.items()) if t == number]
        for address in ready:
            if address not in taken:
                return BoundDevice("vf", address, device, type_id)
        for address in sorted(pf.vfs):
            if (
                address not in taken
                and pf.vfs[address] == 0
                and number in pf.creatable.get(address, set())
            ):
                return BoundDevice("vf", address, device, type_id, True)
        return None
    parent = parents.get(device)
    if parent is None:
        return None
    for uuid in parent.free.get(type_id, []):
        if uuid not in taken:
            return BoundDevice("mdev", uuid, device, type_id)
    if reuse_only:
        return None
    pending = sum(1 for c in chosen if c.parent == device and c.created)
    if parent.available.get(type_id, 0) - pending > 0:
        return BoundDevice("mdev", str(uuidlib.uuid4()), device, type_id, True)
    return None


def spread(
    resource_class: str,
    units: int,
    candidates: Mapping[str, str],
    room: Mapping[str, list[int]],
) -> list[tuple[str, str, int]]:
    """(parent, type, 1) for ``units`` not tied to a device.
    ``candidates``: parent -> its configured type; ``room``: parent ->
    [free mdevs, room for new ones]. Parents with a free mdev first, then
    the one with the most room."""
    left = {parent: list(counts) for parent, counts in room.items()}
    wanted = []
    for _ in range(units):
        usable = [p for p in sorted(left) if sum(left[p])]
        if not usable:
            raise DeviceCapacityExhausted(
                count=units,
                type_id=resource_class,
                parent=", ".join(sorted(candidates)) or "no parent",
            )
        best = max(usable, key=lambda p: (left[p][0] > 0, sum(left[p])))
        left[best][0 if left[best][0] else 1] -= 1
        wanted.append((best, candidates[best], 1))
    return wanted


def wanted_from_allocations(
    allocations: Mapping[str, Any],
    classes: Iterable[str],
    targets: Mapping[str, Target],
) -> list[tuple[str, str, int]]:
    """(device, type, units) for allocations (``{rp_uuid: {"resources":
    {rc: n}}}``) of the resource classes this library manages; other
    classes are ignored. Raises ProviderUnknown for a provider that is
    not one of ``targets``."""
    managed = set(classes)
    wanted = []
    for rp_uuid, alloc in allocations.items():
        for rc, amount in alloc.get("resources", {}).items():
            if rc not in managed:
                continue
            target = targets.get(rp_uuid)
            if target is None or target.resource_class != rc:
                raise ProviderUnknown(rp_uuid=rp_uuid)
            wanted.append((target.device, target.type_id, int(amount)))
    return wanted
