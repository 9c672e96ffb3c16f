"""The binder's picture of the host's devices (pure).

Built from a reading of the host (:meth:`DeviceView.of`), kept current
between readings by the binder's own creates, removes and the guests it
is told of, and by the parents a later reading changed
(:mod:`~vgpu_driver.model.view_follow`). Its methods change the
picture only; they never touch the host. Which devices are *busy* also
depends on the claims, which the view does not hold: they are passed
in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Container, Iterable, Mapping

from vgpu_driver.model import naming
from vgpu_driver.model.binding import BoundDevice, ParentView, PfView
from vgpu_driver.model.claims import Claim, Claims, device_of
from vgpu_driver.model.device import (
    HostInventory,
    Mdev,
    Parent,
    PhysicalFunction,
)
from vgpu_driver.model.foreign import Busy, foreign_devices
from vgpu_driver.model.users import Users


@dataclasses.dataclass
class DeviceView:
    parents: dict[str, ParentView]
    parent_objects: dict[str, Parent]
    pfs: dict[str, PfView]
    mdevs: dict[str, Mdev]  # uuid -> mdev, made since the reading included
    used: Users  # device id -> guest uuid (and each guest's devices)
    # devices another manager made (an mdev this library did not create,
    # a VF it did not type): never handed out, removed or retyped
    foreign: set[str] = dataclasses.field(default_factory=set)
    # GPU name -> its VF parents' names (Ampere before kernel 6.8: one
    # provider stands for all of them)
    groups: dict[str, tuple[str, ...]] = dataclasses.field(
        default_factory=dict
    )
    # GPU name -> (its VFs' type, its VFs) for GPUs whose VFs are given
    # as they are (AMD, Intel)
    plain: dict[str, tuple[str, tuple[str, ...]]] = dataclasses.field(
        default_factory=dict
    )
    # parent -> the mdevs the binder made or removed there, or SR-IOV
    # card -> nothing (it typed or cleared a VF), since the last reading
    # (one that finds the host as it was says nothing: resync_parents)
    edits: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    # guests whose devices the binder set from their events or the
    # caller's calls, since the last reading (see guests.catch_up)
    guests_ahead: set[str] = dataclasses.field(default_factory=set)

    @classmethod
    def empty(cls) -> DeviceView:
        return cls({}, {}, {}, {}, Users())

    def device_of(self, parent: str) -> str:
        """The device whose provider reports ``parent`` (its GPU for a VF
        parent)."""
        for gpu, members in self.groups.items():
            if parent in members:
                return gpu
        return parent

    @classmethod
    def of(
        cls, inventory: HostInventory, ours: Collection[str] | None = None
    ) -> DeviceView:
        """``ours``: the devices this library made (None: all are)."""
        used = Users({**inventory.mdev_users(), **inventory.pci_users()})
        free: dict[str, dict[str, list[str]]] = {
            p.name: {} for p in inventory.parents
        }
        for mdev in inventory.mdevs:
            if mdev.uuid not in used and mdev.parent in free:
                free[mdev.parent].setdefault(mdev.type_id, []).append(
                    mdev.uuid
                )
        return cls(
            parents={
                parent.name: ParentView(
                    parent.name,
                    {t.id: t.available for t in parent.types},
                    free[parent.name],
                )
                for parent in inventory.parents
            },
            parent_objects={p.name: p for p in inventory.parents},
            pfs={pf.name: pf_view(pf) for pf in inventory.pfs},
            mdevs={m.uuid: m for m in inventory.mdevs},
            used=used,
            foreign=set()
            if ours is None
            else foreign_devices(inventory, ours),
            groups={
                gpu: tuple(m.name for m in inventory.vf_parents(gpu))
                for gpu in inventory.vf_parent_gpus()
            },
            plain={g.name: (g.type_id, g.vfs) for g in inventory.plain_gpus},
        )

    def busy(self, claims: Claims) -> Busy:
        """Device ids a guest uses, someone claimed, or another manager
        made: none is handed out."""
        return Busy((self.used, claims, self.foreign))

    def device(
        self, device_id: str, claim: Claim | None
    ) -> BoundDevice | None:
        """The device ``device_id`` as its claim or the view knows it."""
        if claim is not None:
            return device_of(claim)
        mdev = self.mdevs.get(device_id)
        if mdev is not None:
            return BoundDevice("mdev", mdev.uuid, mdev.parent, mdev.type_id)
        for pf in self.pfs.values():
            if device_id in pf.vfs:
                type_id = naming.sriov_type_id(pf.vfs[device_id])
                return BoundDevice("vf", device_id, pf.name, type_id)
        for gpu, (type_id, vfs) in self.plain.items():
            if device_id in vfs:
                return BoundDevice("pci", device_id, gpu, type_id)
        return None

    def vfs_managed(self) -> dict[str, bool]:
        """VF address -> whether libvirt manages it (given as it is)."""
        found = {v: False for pf in self.pfs.values() for v in pf.vfs}
        for _type, vfs in self.plain.values():
            found.update(dict.fromkeys(vfs, True))
        return found

    def plain_vfs(self) -> dict[str, tuple[str, ...]]:
        """GPU name -> its VFs given as they are."""
        return {gpu: vfs for gpu, (_type, vfs) in self.plain.items()}

    def changes_host(self, device: BoundDevice, remove_unused: bool) -> bool:
        """Does handing ``device`` back change the host (a VF's type is
        cleared; an mdev is removed when unused ones are not kept)?"""
        if device.id in self.foreign or device.kind == "pci":
            return False  # another manager's, or a VF given as it is
        if device.kind == "vf":
            pf = self.pfs.get(device.parent)
            return pf is None or pf.vfs.get(device.id) != 0
        return remove_unused and device.id in self.mdevs

    def free_mdevs(
        self,
        parent: str | None,
        types: Iterable[str] | None,
        busy: Container[str],
    ) -> set[str]:
        wanted = None if types is None else set(types)
        return {
            uuid
            for view in self.parents.values()
            if parent is None or view.name == parent
            for type_id, uuids in view.free.items()
            if wanted is None or type_id in wanted
            for uuid in uuids
            if uuid not in busy
        }

    def room(
        self, candidates: Mapping[str, str], busy: Container[str]
    ) -> dict[str, list[int]]:
        """parent -> [free mdevs, room for new ones] of its type in
        ``candidates`` (parent -> type id)."""
        room: dict[str, list[int]] = {}
        for parent, type_id in candidates.items():
            for name in self.groups.get(parent, (parent,)):
                view = self.parents.get(name)
                if view is None:
                    continue
                free = [u for u in view.free.get(type_id, []) if u not in busy]
                counts = room.setdefault(parent, [0, 0])
                counts[0] += len(free)
                counts[1] += view.available.get(type_id, 0)
        return room

    def take_off_free_list(self, device_id: str) -> None:
        """An mdev is no longer free (a guest has it, or it is gone)."""
        mdev = self.mdevs.get(device_id)
        view = self.parents.get(mdev.parent) if mdev else None
        if mdev is not None and view is not None:
            free = view.free.get(mdev.type_id, [])
            if device_id in free:
                free.remove(device_id)

    def made(self, mdev: Mdev) -> None:
        """The binder made ``mdev``."""
        self.mdevs[mdev.uuid] = mdev
        self.edits.setdefault(mdev.parent, set()).add(mdev.uuid)

    def forget_mdev(self, uuid: str) -> None:
        """An mdev removed from the host, or found gone."""
        self.take_off_free_list(uuid)
        mdev = self.mdevs.pop(uuid, None)
        if mdev is not None:
            self.edits.setdefault(mdev.parent, set()).add(uuid)

    def vanished(self, device: BoundDevice) -> None:
        """The free mdev ``device`` is gone from the host (another
        manager removed it since the last reading): off the view, and
        its room back, as the host has it back."""
        self.forget_mdev(device.id)
        view = self.parents.get(device.parent)
        if view is not None:
            view.available[device.type_id] = (
                view.available.get(device.type_id, 0) + 1
            )

    def claimed(self, device: BoundDevice) -> None:
        """``device`` is claimed: off the free list, or one less unit of
        room for a device to be made (a VF given as it is: busy by its
        claim alone)."""
        if device.kind == "pci":
            return
        if device.kind == "vf":
            number = naming.sriov_type_number(device.type_id)
            self.pfs[device.parent].vfs[device.id] = number
            if device.created:  # typed on the host
                self.edits.setdefault(device.parent, set())
            return
        view = self.parents[device.parent]
        if device.created:
            view.available[device.type_id] -= 1
            self.edits.setdefault(device.parent, set())
        else:
            view.free[device.type_id].remove(device.id)

    def returned(self, device: BoundDevice, made: bool) -> None:
        """Give a device back after its claim is dropped; ``made``: it
        was created and has since been removed."""
        if device.kind == "pci":
            return
        if device.kind == "vf":
            pf = self.pfs.get(device.parent)
            if pf is not None and device.created:
                pf.vfs[device.id] = 0
                self.edits.setdefault(device.parent, set())
            return
        view = self.parents.get(device.parent)
        if view is None:
            return
        if device.created and (made or device.id not in self.mdevs):
            view.available[device.type_id] = (
                view.available.get(device.type_id, 0) + 1
            )
        elif device.id in self.mdevs:
            view.free.setdefault(device.type_id, []).append(device.id)

    def released(self, device: BoundDevice, done: bool) -> None:
        """The host was handed ``device`` back (``done``) or refused it
        (it stays as it is: a typed VF, a free mdev)."""
        if device.kind == "pci":
            return
        if device.kind == "vf":  # (cleared, or told not: either may lie)
            self.edits.setdefault(device.parent, set())
            pf = self.pfs.get(device.parent)
            if pf is not None and done:
                pf.vfs[device.id] = 0
                pf.creatable.setdefault(device.id, set()).add(
                    naming.sriov_type_number(device.type_id)
                )
            return
        view = self.parents.get(device.parent)
        if view is None:
            return
        if device.id in self.mdevs:  # kept (or its removal failed)
            view.free.setdefault(device.type_id, []).append(device.id)
        elif done:
            view.available[device.type_id] = (
                view.available.get(device.type_id, 0) + 1
            )

    def stale_free_mdevs(
        self, configured: Mapping[str, str], claims: Claims
    ) -> list[tuple[str, str, str]]:
        """(parent, type, uuid) of free, unclaimed mdevs of another type
        than their parent's configured one (``configured``: parent ->
        type id)."""
        return [
            (parent, type_id, uuid)
            for parent, view in self.parents.items()
            if parent in configured
            for type_id, uuids in view.free.items()
            if type_id != configured[parent]
            for uuid in list(uuids)
            if uuid not in claims and uuid not in self.foreign
        ]

    def instance_devices(
        self, claims: Claims
    ) -> dict[str, dict[str, list[str]]]:
        """instance -> {"in_use": device ids its guest has, "claimed":
        device ids claimed for it}."""
        found: dict[str, dict[str, list[str]]] = {}
        for device_id, guest in sorted(self.used.items()):
            entry = found.setdefault(guest, {"in_use": [], "claimed": []})
            entry["in_use"].append(device_id)
        for device_id, claim in sorted(claims.items()):
            entry = found.setdefault(
                claim["instance"], {"in_use": [], "claimed": []}
            )
            entry["claimed"].append(device_id)
        return found


def pf_view(pf: PhysicalFunction) -> PfView:
    """An SR-IOV card as the view holds it: each VF's type and the
    types it can create."""
    return PfView(
        pf.name,
        {vf.address: vf.current_type for vf in pf.vfs},
        {vf.address: {t.id for t in vf.creatable} for vf in pf.vfs},
    )
