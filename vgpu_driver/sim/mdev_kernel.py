"""The kernel's side of :class:`~.mdev_libvirt.MdevConnection`: which
mdevs run on each parent, the room each of its types has left, and the
fake sysfs kept as the kernel keeps it.

The room follows the host description's rules (:mod:`.kernel`, the same
ones its first rendering used): on a homogeneous parent (an NVIDIA pGPU
in time-sliced mode) every other type has no room while one type runs,
and the VF parents of one GPU (Ampere before kernel 6.8) share what the
GPU holds. A create the room does not allow is refused, as the kernel
refuses it (EDQUOT).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from vgpu_driver.model import naming
from vgpu_driver.sim.specs import HostDescription, MdevSpec, ParentSpec


class KernelSet(set[str]):
    """Names whose membership the kernel follows (``on_change``)."""

    def __init__(self, on_change: Callable[[str], None]) -> None:
        super().__init__()
        self.on_change = on_change

    def add(self, element: str) -> None:
        super().add(element)
        self.on_change(element)

    def discard(self, element: object) -> None:
        if element in self and isinstance(element, str):
            super().discard(element)
            self.on_change(element)


class MdevKernel:
    """The running mdevs of a described host, as they change."""

    def __init__(
        self, description: HostDescription, sysfs: Path | None
    ) -> None:
        self.description, self.sysfs = description, sysfs
        self._parents = {p.name: p for p in description.parents}
        # parent name -> uuid -> type of its running mdevs
        self.running: dict[str, dict[str, str]] = {
            name: {} for name in self._parents
        }
        for mdev in description.mdevs:
            if mdev.active:
                self.running.setdefault(mdev.parent, {})[mdev.uuid] = mdev.type
        self._rooms: dict[str, dict[str, int]] = {}  # parent -> type -> room
        self._removed = 0  # mdev directories removed

    def rooms(self, parent: str) -> dict[str, int]:
        """Type id -> ``availableInstances`` of ``parent`` now ({}: a
        device that is no mdev parent of the description)."""
        found = self._rooms.get(parent)
        if found is None:
            spec = self._parents.get(parent)
            if spec is None:
                return {}
            now = dataclasses.replace(
                self.description, mdevs=list(self._running_near(spec))
            )
            found = {t.id: now.available(spec, t.id) for t in spec.types}
            self._rooms[parent] = found
        return found

    def follow(self, uuid: str, parent: str, type_id: str, on: bool) -> None:
        """An mdev started (``on``) or stopped or gone: its parent's room
        (and its siblings', sharing a GPU) and its sysfs directory."""
        mine = self.running.setdefault(parent, {})
        if on:
            mine[uuid] = type_id
        else:
            mine.pop(uuid, None)
        for name in self._sharing(parent):
            before = self._rooms.pop(name, None)
            if self.sysfs is not None and before != self.rooms(name):
                self._write_rooms(name)
        if self.sysfs is not None:
            self._directory(uuid, parent, type_id, on)

    def _sharing(self, parent: str) -> list[str]:
        """``parent`` and the parents whose room it shares."""
        spec = self._parents.get(parent)
        if spec is None or spec.physical_function is None:
            return [parent]
        return [
            p.name
            for p in self.description.parents
            if p.physical_function == spec.physical_function
        ]

    def _running_near(self, spec: ParentSpec) -> list[MdevSpec]:
        return [
            MdevSpec(uuid=uuid, parent=name, type=type_id)
            for name in self._sharing(spec.name)
            for uuid, type_id in self.running.get(name, {}).items()
        ]

    def _path(self, parent: str) -> Path | None:
        """A parent's sysfs directory (registered by PCI address, or by
        name: a virtual parent such as mtty); None where the kernel does
        not register it."""
        assert self.sysfs is not None
        key = naming.canonical_pci_address(parent) or parent
        path = (self.sysfs / "class/mdev_bus" / key).resolve()
        return path if path.is_dir() else None

    def _write_rooms(self, parent: str) -> None:
        path = self._path(parent)
        if path is None:
            return
        for type_id, room in self.rooms(parent).items():
            found = path / "mdev_supported_types" / type_id
            if found.is_dir():
                (found / "available_instances").write_text(f"{room}\n")

    def _directory(
        self, uuid: str, parent: str, type_id: str, on: bool
    ) -> None:
        """A running mdev is a directory named by its uuid under its
        parent's (its ``mdev_type`` a link to its type's, a ``remove``
        file) and a link in ``bus/mdev/devices``; a stopped or gone one
        has neither."""
        assert self.sysfs is not None
        base = self._path(parent)
        if base is None:
            return
        path = base / uuid
        link = self.sysfs / "bus/mdev/devices" / uuid
        if on:
            path.mkdir(exist_ok=True)
            (path / "remove").touch()
            kind = path / "mdev_type"
            if kind.is_symlink():
                kind.unlink()
            kind.symlink_to(base / "mdev_supported_types" / type_id)
            if not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(path)
        elif path.exists():
            link.unlink(missing_ok=True)
            # kernfs numbers a new directory anew (cyclically, never a
            # removed one's number at once); a disk reuses it: the removed
            # directory is kept aside, its inode taken
            self._removed += 1
            aside = self.sysfs / ".removed" / str(self._removed)
            aside.parent.mkdir(exist_ok=True)
            path.rename(aside)
