"""The mdevs seen on disk: ``mdev-parents.json``, a snapshot replaced
whole (uuid -> [parent, type id], as every release has written it), and
``mdev-parents.journal``, the changes saved since, one entry each
(:mod:`.journal`; an entry's ``base`` is the CRC-32 of the snapshot's
bytes).

Where a guest's mdev is goes on disk on a spawn's path (its spawn claim
ends once it is there): one append and one flush of what changed, not a
rewrite of every mdev the host has (400 KB at 4096 mdevs). Several
processes save it (the service, the operator's tools): under the
store's lock each reads first the entries the others appended since it
last read or wrote, and reads the whole record again only when another
wrote a new snapshot (the snapshot is held open, so its inode is never
a new file's, and a new one is told by its stat signature). A snapshot
is written when the journal has grown past its limit, or there is no
journal or no snapshot yet.

A record that only helps: an unreadable snapshot is moved aside and
rebuilt from the host (its journal with it); an entry whole but of the
wrong shape has its journal moved aside, the snapshot kept. A release
before this one reads the snapshot alone (downgrade with the service
stopped: what the next reading sees again is kept, where the mdev of a
parent that vanished since the snapshot is, is lost).
"""

from __future__ import annotations

import contextlib
import json
import os
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from oslo_log import log as logging

from vgpu_driver.records.journal import SUFFIX, Journal, signature
from vgpu_driver.records.merged import is_string_list
from vgpu_driver.records.store import (
    StateRecordCorrupt,
    StateStore,
    StateStoreError,
    expect,
    validate_str_map,
)

LOG = logging.getLogger(__name__)
MDEVS_RECORD = "mdev-parents"

Where = tuple[str, str]  # (parent, type id)
# uuid -> where it is, or None: no longer seen
Changes = Mapping[str, "Where | None"]


class SeenFile:
    def __init__(self, state: StateStore) -> None:
        self.state = state
        self.path = state.path(MDEVS_RECORD)
        self.journal = Journal(state.directory / f"{MDEVS_RECORD}{SUFFIX}")
        # the snapshot as last read or written: (its stat signature, the
        # CRC of its bytes, the file held open); None: no snapshot
        self._held: tuple[tuple[int, ...], int, int] | None = None
        # (the journal's inode, the bytes of it read or written here)
        self._read_to: tuple[int, int] | None = None

    def read(self) -> dict[str, Where]:
        """The record as on disk now: the snapshot, every entry after it
        applied in turn. Read without the lock first, as a service
        starts (a snapshot is replaced whole, and a line being appended
        is read once whole; a snapshot replaced meanwhile is told at the
        next save, which reads it); an unreadable snapshot is read again
        under the lock before it is moved aside."""
        self.forget()
        try:
            record = self._read_snapshot()
        except StateRecordCorrupt:
            with self.state.locked():
                try:
                    record = self._read_snapshot()
                except StateRecordCorrupt as exc:
                    LOG.error("%s", exc)
                    self.state.quarantine(MDEVS_RECORD)
                    self._move_journal_aside()
                    return {}
        for changes in self._entries(0):
            apply(record, changes)
        return record

    def since(self) -> list[Changes] | None:
        """The changes other processes saved since this one last read or
        wrote (under the lock); None when another wrote a new snapshot,
        or the journal is not the one read: read the whole record again
        (:meth:`read`)."""
        held, read_to = self._held, self._read_to
        try:
            now = signature(os.stat(self.path))
        except OSError:
            now = None
        if (held[0] if held else None) != now:
            return None
        if held is None:
            return []  # no snapshot, none made since
        try:
            journal = os.stat(self.journal.path)
        except OSError:
            return [] if read_to is None else None
        if read_to is None or journal.st_ino != read_to[0]:
            return None
        if journal.st_size < read_to[1]:
            return None  # emptied by another's snapshot
        return self._entries(read_to[1])

    def write(
        self,
        changes: Changes,
        whole: Callable[[], Mapping[str, Where]],
        compact: bool = False,
    ) -> None:
        """Save ``changes``, appended to the journal of the snapshot on
        disk (one flush); else (no snapshot or no journal, or a full one;
        or ``compact``) a new snapshot of ``whole()`` (the record with
        them made), and the journal emptied (under the lock, after
        :meth:`since`). Raises StateStoreError if it cannot be written."""
        held = self._held
        entry = {
            "set": {u: list(w) for u, w in changes.items() if w is not None},
            "gone": sorted(u for u, w in changes.items() if w is None),
        }
        if (
            held is not None
            and not compact
            and self.journal.append(held[1], entry)
        ):
            self._note_journal()
            return
        self.state.save(MDEVS_RECORD, {u: list(w) for u, w in whole().items()})
        self.forget()
        self._hold_snapshot()
        try:
            self.journal.empty()
        except StateStoreError as exc:
            # its entries follow an earlier snapshot: never read; the
            # next save writes a snapshot if there is no journal
            LOG.warning("Could not empty the mdevs seen's journal: %s", exc)
        self._note_journal()

    def forget(self) -> None:
        if self._held is not None:
            os.close(self._held[2])
        self._held = self._read_to = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.forget()

    # -- the files ------------------------------------------------------

    def _read_snapshot(self) -> dict[str, Where]:
        """The snapshot, held open (empty, and none held, without one).
        Raises StateRecordCorrupt if it cannot be read."""
        opened = self._open_snapshot()
        if opened is None:
            return {}
        held, data = opened
        try:
            value = json.loads(data.decode("utf-8"))
            _validate_snapshot(value)
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            os.close(held[2])
            reason = "it is empty" if not data.strip() else str(exc)
            raise StateRecordCorrupt(
                path=str(self.path), reason=reason
            ) from exc
        self._held = held
        # (each a [parent, type] pair of strings: checked above)
        return {u: (w[0], w[1]) for u, w in value.items()}

    def _open_snapshot(
        self,
    ) -> tuple[tuple[tuple[int, ...], int, int], bytes] | None:
        """(what :attr:`_held` keeps of the snapshot: its signature, its
        CRC, the file open; its bytes), None without one."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise StateStoreError(
                action="read", path=str(self.path), reason=str(exc)
            ) from exc
        try:
            with open(fd, "rb", closefd=False) as handle:
                data = handle.read()
            return (signature(os.fstat(fd)), zlib.crc32(data), fd), data
        except OSError as exc:
            os.close(fd)
            raise StateStoreError(
                action="read", path=str(self.path), reason=str(exc)
            ) from exc

    def _hold_snapshot(self) -> None:
        """The snapshot just written, held open with its CRC (not parsed
        again: it is what was written)."""
        with contextlib.suppress(StateStoreError):
            opened = self._open_snapshot()
            self._held = opened[0] if opened is not None else None

    def _entries(self, start: int) -> list[Changes]:
        """The changes of the entries after the snapshot held, from byte
        ``start`` of the journal on; a journal whose entries are whole
        but not of their shape is moved aside (its changes lost: the
        snapshot is kept)."""
        held = self._held
        if held is None:
            return []
        try:
            found = self.journal.entries(held[1], _validate_entry, start)
        except StateRecordCorrupt as exc:
            LOG.error("%s", exc)
            self._move_journal_aside()
            return []
        if found is None:
            return []
        with contextlib.suppress(OSError):
            self._read_to = (os.stat(self.journal.path).st_ino, found[1])
        return [_changes_of(entry) for entry in found[0]]

    def _note_journal(self) -> None:
        """The journal as this process leaves it: read to its end."""
        try:
            found = os.stat(self.journal.path)
        except OSError:
            self._read_to = None
            return
        self._read_to = (found.st_ino, found.st_size)

    def _move_journal_aside(self) -> None:
        with contextlib.suppress(StateStoreError):
            self.state.move_aside(self.journal.path)
        self._read_to = None


def apply(record: dict[str, Where], changes: Changes) -> None:
    """``changes`` made to ``record``, in place."""
    for uuid, where in changes.items():
        if where is None:
            record.pop(uuid, None)
        else:
            record[uuid] = where


def _changes_of(entry: Any) -> Changes:
    changes: dict[str, Where | None] = dict.fromkeys(entry["gone"])
    changes.update(
        (u, (str(w[0]), str(w[1]))) for u, w in entry["set"].items()
    )
    return changes


def _pair(value: Any) -> bool:
    # (asked of every mdev seen at a start: no generator)
    return (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], str)
    )


_validate_snapshot = validate_str_map(_pair, "a [parent, type] pair")


def _validate_entry(entry: Any) -> None:
    expect(isinstance(entry, dict), "an entry is not a JSON object")
    _validate_snapshot(entry.get("set"))
    gone = entry.get("gone")
    expect(is_string_list(gone), "gone must list the uuids no longer seen")
