"""The mdevs libvirt's adapter has read, by name and by parent, and what
changed among them since the adapter last took a reading.

:class:`MdevCache` is the one place an mdev is put in or taken out, so
its two indexes and its record of changes stay together: the reading
after a change follows the mdevs made and gone alone
(:func:`~vgpu_driver.model.device_changes.with_devices`), and finding a
parent's mdevs costs what that parent holds, not what the host holds.
"""

from __future__ import annotations

from collections.abc import ValuesView

from vgpu_driver.model.device import Mdev


class MdevCache:
    def __init__(self) -> None:
        self.by_name: dict[str, Mdev] = {}
        self._by_parent: dict[str, dict[str, Mdev]] = {}  # by uuid
        # uuid -> the parents whose index above has it (a guest's event
        # asks whether its mdevs were read: one look, not one a parent)
        self._parents_of: dict[str, int] = {}
        # parent -> uuids of its mdevs defined and not running
        self._stopped: dict[str, set[str]] = {}
        # name -> the mdev as the last reading had it (None: it had none)
        self._since: dict[str, Mdev | None] = {}
        # names whose parent is not (yet) a parent listed
        self.unplaced: set[str] = set()

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def get(self, name: str) -> Mdev | None:
        return self.by_name.get(name)

    def names(self) -> set[str]:
        return set(self.by_name)

    def values(self) -> ValuesView[Mdev]:
        """Every mdev read: a view, not a copy (a reading after a change
        takes in what changed and never reads it; one made whole sorts
        it at once, under the adapter's lock)."""
        return self.by_name.values()

    def of_parent(self, parent: str) -> dict[str, Mdev]:
        """uuid -> mdev, of the mdevs read on ``parent`` (read-only)."""
        return self._by_parent.get(parent, {})

    def stopped_on(self, parent: str) -> frozenset[str]:
        """The uuids of the mdevs read on ``parent`` defined and not
        running (kept apart: following a parent looks at them alone)."""
        return frozenset(self._stopped.get(parent, ()))

    def has_uuid(self, uuid: str) -> bool:
        """Is an mdev of that uuid read, on any parent?"""
        return uuid in self._parents_of

    def put(self, name: str, mdev: Mdev) -> None:
        old = self.by_name.get(name)
        if old is mdev:
            return
        self._since.setdefault(name, old)
        if old is not None:
            self._unindex(old)
        self.by_name[name] = mdev
        mine = self._by_parent.setdefault(mdev.parent, {})
        if mdev.uuid not in mine:
            self._parents_of[mdev.uuid] = (
                self._parents_of.get(mdev.uuid, 0) + 1
            )
        mine[mdev.uuid] = mdev
        if not mdev.active:
            self._stopped.setdefault(mdev.parent, set()).add(mdev.uuid)
        self.unplaced.add(name)  # placed again by the caller

    def pop(self, name: str) -> Mdev | None:
        old = self.by_name.pop(name, None)
        if old is not None:
            self._since.setdefault(name, old)
            self._unindex(old)
            self.unplaced.discard(name)
        return old

    def take_changes(self) -> tuple[list[Mdev], list[Mdev]]:
        """(added, gone) since the last call: the mdevs put in that the
        last reading did not have as they are, and those it had that
        were taken out or replaced."""
        added, gone = [], []
        for name, before in self._since.items():
            now = self.by_name.get(name)
            if before is now:
                continue
            if before is not None:
                gone.append(before)
            if now is not None:
                added.append(now)
        self._since = {}
        return added, gone

    def _unindex(self, mdev: Mdev) -> None:
        mine = self._by_parent.get(mdev.parent)
        if mine is not None and mine.get(mdev.uuid) is mdev:
            del mine[mdev.uuid]
            left = self._parents_of.pop(mdev.uuid) - 1
            if left:
                self._parents_of[mdev.uuid] = left
            if not mine:
                del self._by_parent[mdev.parent]
            stopped = self._stopped.get(mdev.parent)
            if stopped is not None:
                stopped.discard(mdev.uuid)
                if not stopped:
                    del self._stopped[mdev.parent]
