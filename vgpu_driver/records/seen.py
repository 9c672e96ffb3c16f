"""The mdevs seen: mdev uuid -> (parent, type) of every mdev this host
showed, kept on disk, so a guest's device whose parent vanished (even
while the service was down) is still counted against its provider.

:class:`SeenMdevs` is the one owner of that record. What must be on disk
is where the mdevs guests use are: a free mdev made or removed (by a
bind, or by another manager) changes the record in memory alone, and is
written with the next write a guest's mdev needs (one durable write
less per free mdev made or gone).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from vgpu_driver.records.merged import MergedRecord, is_string_list
from vgpu_driver.records.store import StateStore, validate_str_map

MDEVS_RECORD = "mdev-parents"

Where = tuple[str, str]  # (parent, type id)


class SeenMdevs:
    def __init__(self, state: StateStore | None) -> None:
        self._record = MergedRecord(state, MDEVS_RECORD, _validate_seen)
        self._lock = threading.Lock()
        self._known: dict[str, Where] = _as_seen(self._record.load())
        # the record as this process last read or wrote it on disk
        self._written: dict[str, Where] = dict(self._known)

    def snapshot(self) -> dict[str, Where]:
        with self._lock:
            return dict(self._known)

    def get(self, uuid: str) -> Where | None:
        return self._known.get(uuid)

    def save(self, new: Mapping[str, Where]) -> None:
        """Make the record ``new`` (merged with other processes' entries
        on disk). Raises StateStoreError if it cannot be written."""
        with self._lock:
            old = self._written
            merged = self._record.merge(
                {u: list(w) for u, w in new.items() if old.get(u) != w},
                set(old) - set(new),
            )
            persisted = self._record.state is not None
            self._known = _as_seen(merged) if persisted else dict(new)
            self._written = dict(self._known)

    def note(self, new: Mapping[str, Where], needed: Iterable[str]) -> None:
        """The mdevs seen are ``new``; written only if one of ``needed``
        (the mdevs guests use) is not on disk as it is there. Raises
        StateStoreError if it cannot be written."""
        with self._lock:
            written = self._written
            if all(written.get(u) == new.get(u) for u in needed):
                self._known = dict(new)
                return
        self.save(new)

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
        dropped = [u for u in gone if u not in needed and u not in added]
        with self._lock:
            written = self._written
            if all(
                written.get(u) == w for u, w in added.items() if u in needed
            ):
                # in place (what a snapshot gave out is a copy): the cost
                # is the change's, not the record's
                known = self._known
                known.update(added)
                for uuid in dropped:
                    known.pop(uuid, None)
                return
            new = {**self._known, **added}
            for uuid in dropped:
                new.pop(uuid, None)
        self.save(new)

    def remember(self, where: Mapping[str, Where]) -> None:
        """These mdevs are where they are said to be: on disk (written
        only if one is not there so). Raises StateStoreError if it
        cannot be written."""
        with self._lock:
            written = self._written
            if all(written.get(u) == w for u, w in where.items()):
                return
            new = {**self._known, **where}
        self.save(new)


def _as_seen(record: Mapping[str, Any]) -> dict[str, Where]:
    return {u: (str(w[0]), str(w[1])) for u, w in record.items()}


_validate_seen = validate_str_map(
    lambda v: is_string_list(v) and len(v) == 2, "a [parent, type] pair"
)
