"""The mdevs seen: mdev uuid -> (parent, type) of every mdev this host
showed, kept on disk, so a guest's device whose parent vanished (even
while the service was down) is still counted against its provider.

:class:`SeenMdevs` is the one owner of that record.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
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

    def snapshot(self) -> dict[str, Where]:
        with self._lock:
            return dict(self._known)

    def get(self, uuid: str) -> Where | None:
        return self._known.get(uuid)

    def save(self, new: Mapping[str, Where]) -> None:
        """Make the record ``new`` (merged with other processes' entries
        on disk). Raises StateStoreError if it cannot be written."""
        with self._lock:
            old = self._known
            merged = self._record.merge(
                {u: list(w) for u, w in new.items() if old.get(u) != w},
                set(old) - set(new),
            )
            persisted = self._record.state is not None
            self._known = _as_seen(merged) if persisted else dict(new)


def _as_seen(record: Mapping[str, Any]) -> dict[str, Where]:
    return {u: (str(w[0]), str(w[1])) for u, w in record.items()}


_validate_seen = validate_str_map(
    lambda v: is_string_list(v) and len(v) == 2, "a [parent, type] pair"
)
