"""The mdevs seen: mdev uuid -> (parent, type) of every mdev this host
showed, kept on disk, so a guest's device whose parent vanished (even
while the service was down) is still counted against its provider.

:class:`SeenMdevs` is the one owner of that record. What must be on disk
is where the mdevs guests use are: a free mdev made or removed (by a
bind, or by another manager) changes the record in memory alone, and is
written with the next write a guest's mdev needs (one durable write
less per free mdev made or gone). Each write saves what changed since
the last (:mod:`.seen_file`): its cost is the change's, not the host's.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping

from vgpu_driver.records.seen_file import (
    MDEVS_RECORD,
    Changes,
    SeenFile,
    Where,
    apply,
)
from vgpu_driver.records.store import StateStore


class SeenMdevs:
    def __init__(self, state: StateStore | None) -> None:
        self.file = SeenFile(state) if state is not None else None
        self._lock = threading.Lock()
        # the record as this process last read or wrote it on disk
        self._written: dict[str, Where] = (
            self.file.read() if self.file is not None else {}
        )
        # the mdevs seen: the record with the changes not written yet
        self._known: dict[str, Where] = dict(self._written)
        # uuid -> where, or None (gone): how _known differs from _written
        self._pending: dict[str, Where | None] = {}

    def snapshot(self) -> dict[str, Where]:
        with self._lock:
            return dict(self._known)

    def get(self, uuid: str) -> Where | None:
        return self._known.get(uuid)

    def save(self, changes: Changes) -> None:
        """Put ``changes`` on disk (uuid -> where it is, or None: no
        longer seen), with those noted in memory alone so far, merged
        with what other processes saved. Raises StateStoreError if it
        cannot be written (nothing changes). The records' lock is taken
        before this record's own, as by every thread: a bind holds it
        when it saves the mdevs seen."""
        if self.file is None:
            with self._lock:
                pending = {**self._pending, **changes}
                self._pending = {}
                apply(self._known, changes)
                apply(self._written, pending)
            return
        with self.file.state.locked(), self._lock:
            pending = {**self._pending, **changes}
            self._take_others()
            written = self._written
            for uuid in [u for u, w in pending.items() if written.get(u) == w]:
                del pending[uuid]  # on disk so already
            if pending:
                self.file.write(pending, lambda: _after(written, pending))
            apply(written, pending)
            apply(self._known, changes)
            self._pending = {}

    def compact(self) -> bool:
        """Write the record whole as a new snapshot, its journal emptied,
        when the journal has entries or a change is held in memory alone
        (at a clean stop: a release without the journal then reads it
        all). False: nothing to write. Raises StateStoreError if it
        cannot be written (nothing changes)."""
        if self.file is None:
            return False
        with self.file.state.locked(), self._lock:  # (as save takes them)
            self._take_others()
            pending = self._pending
            if not pending and self.file.journal.is_empty():
                return False
            written = self._written
            after = _after(written, pending)
            self.file.write(pending, lambda: after, compact=True)
            self._written = after
            self._pending = {}
        return True

    def note(self, new: Mapping[str, Where], needed: Iterable[str]) -> None:
        """The mdevs seen are ``new``; written only if one of ``needed``
        (the mdevs guests use) is not on disk as it is there. Raises
        StateStoreError if it cannot be written (then held in memory
        alone, as a free mdev's change is)."""
        with self._lock:
            written = self._written
            changes: dict[str, Where | None] = {
                u: w for u, w in new.items() if written.get(u) != w
            }
            changes.update((u, None) for u in written.keys() - new.keys())
            self._known = dict(new)
            self._pending = changes
            if all(written.get(u) == new.get(u) for u in needed):
                return
        self.save({})

    def change(
        self,
        added: Mapping[str, Where],
        gone: Iterable[str],
        needed: Collection[str],
    ) -> None:
        """Mdevs made (``added``) and removed (``gone``; those in
        ``needed``, the mdevs guests use, are kept): what :meth:`note`
        makes of the whole host, for these alone. Written only if one of
        ``added`` that is needed is not on disk as it is. Raises
        StateStoreError if it cannot be written."""
        changes: dict[str, Where | None] = dict(added)
        changes.update(
            (u, None) for u in gone if u not in needed and u not in added
        )
        with self._lock:
            written = self._written
            if all(
                written.get(u) == w for u, w in added.items() if u in needed
            ):
                # in memory: the cost is the change's, not the record's
                apply(self._known, changes)
                self._pending.update(changes)
                return
        self.save(changes)

    def remember(self, where: Mapping[str, Where]) -> None:
        """These mdevs are where they are said to be: on disk (written
        only if one is not there so). Raises StateStoreError if it
        cannot be written."""
        with self._lock:
            written = self._written
            if all(written.get(u) == w for u, w in where.items()):
                return
        self.save(where)

    def _take_others(self) -> None:
        """What other processes saved since this one last read or wrote,
        taken in (under both locks): a change of its own not written yet
        stays as it is in memory."""
        assert self.file is not None
        others = self.file.since()
        if others is None:  # another wrote a snapshot: read it whole
            self._written = self.file.read()
            self._known = dict(self._written)
            apply(self._known, self._pending)
            return
        for changes in others:
            apply(self._written, changes)
            apply(
                self._known,
                {u: w for u, w in changes.items() if u not in self._pending},
            )


def _after(written: Mapping[str, Where], pending: Changes) -> dict[str, Where]:
    """The record once ``pending`` is written (for a new snapshot)."""
    record = dict(written)
    apply(record, pending)
    return record


__all__ = ["MDEVS_RECORD", "SeenMdevs", "Where"]
