"""A record's journal: each save of a record between two snapshots of it
is one line appended to ``<key>.journal`` and made durable by one
``fdatasync`` (the claims' whole record each time, read back as the last
entry; the mdevs seen's changes, read back as every entry in turn).

Replacing the record whole (:meth:`StateStore.save
<vgpu_driver.records.store.StateStore.save>`) costs two flushes to disk
(the new file, then its directory after the rename) and frees the old
file's inode; a bind is on a spawn's path and saves the claims once, so
it appends instead. The file is never renamed between snapshots, so an
append needs no flush of the directory.

An entry is a line ``<crc32, 8 hex digits> <JSON>``, the JSON an object
``{"base": <the snapshot's epoch>, "record": <what the save wrote>}``,
written with a newline before and after it: a line cut short by a crash
is ended by the next entry's first newline, fails its checksum and is
passed over. Only the entries whose checksum holds and whose ``base``
is the snapshot's epoch follow it (:meth:`Journal.latest`, the last of
them; :meth:`Journal.entries`, all of them); the entries of
an earlier snapshot (a compaction's emptying of the journal lost to a
crash) follow no snapshot on disk and are never read. The caller writes
a new snapshot (and empties the journal) when the journal has grown past
:data:`LIMIT` or does not exist; the journal is made with a snapshot,
and its directory flushed then, so an append never makes a file.

Pure of any lock: the caller holds the store's lock around every append,
emptying and read.
"""

from __future__ import annotations

import contextlib
import json
import os
import zlib
from pathlib import Path
from typing import Any

from vgpu_driver.records.store import (
    StateRecordCorrupt,
    StateStoreError,
    Validator,
    give_to_owner_of,
    sync_directory,
)

# bytes past which the next save writes a snapshot and empties the journal
LIMIT = 256 * 1024
# bytes read from its end first: more than an entry of most records
TAIL = 16 * 1024
SUFFIX = ".journal"


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = os.fspath(path)

    def append(self, base: int, record: Any) -> bool:
        """Append ``record`` as following the snapshot of epoch ``base``,
        durably. False (nothing written) if the journal does not exist or
        the entry would take it past :data:`LIMIT`: the caller writes a
        snapshot. Raises StateStoreError if the write or the flush fails
        (the journal is cut back to where it was)."""
        text = json.dumps(
            {"base": base, "record": record},
            separators=(",", ":"),
            sort_keys=True,
        ).encode("utf-8")
        entry = b"\n%08x %s\n" % (zlib.crc32(text), text)
        try:
            fd = os.open(self._file, os.O_WRONLY | os.O_APPEND)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise self._error("write", exc) from exc
        try:
            size = os.fstat(fd).st_size
            if size + len(entry) > LIMIT:
                return False
            try:
                _write_all(fd, entry)
                os.fdatasync(fd)
            except OSError as exc:
                # what did reach the file must not be read as saved
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                raise self._error("write", exc) from exc
        except OSError as exc:
            raise self._error("write", exc) from exc
        finally:
            os.close(fd)
        return True

    def empty(self) -> None:
        """After a snapshot: no entry follows it. A journal made here has
        its directory flushed, so appends to it last."""
        try:
            made = not self.path.exists()
            fd = os.open(
                self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600
            )
            try:
                give_to_owner_of(self.path.parent, fd)
            finally:
                os.close(fd)
            if made:
                sync_directory(self.path.parent)
        except OSError as exc:
            raise self._error("write", exc) from exc

    def is_empty(self) -> bool:
        """No entry (or no journal)."""
        try:
            return self.path.stat().st_size == 0
        except OSError:
            return True

    def latest(self, base: int, validate: Validator) -> Any | None:
        """The record of the last whole entry, if it follows the snapshot
        of epoch ``base``; else None. Raises StateRecordCorrupt if that
        entry is whole but not of the record's shape."""
        found = self.last(validate, base)
        return found[1] if found is not None else None

    def last(
        self, validate: Validator, base: int | None = None
    ) -> tuple[int, Any] | None:
        """(the epoch of the snapshot it follows, its record) of the last
        whole entry, if any (and if it follows the snapshot of epoch
        ``base``, when given); raises StateRecordCorrupt as
        :meth:`latest` does."""
        try:
            text = self._last_whole()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise self._error("read", exc) from exc
        if text is None:
            return None
        return self._parsed(text, validate, base)

    def entries(
        self, base: int, validate: Validator, start: int = 0
    ) -> tuple[list[Any], int] | None:
        """The records of the whole entries from byte ``start`` on that
        follow the snapshot of epoch ``base``, in the order written, and
        the byte read to (the next read's ``start``: after the last whole
        line); None without a journal. Raises StateRecordCorrupt as
        :meth:`latest` does."""
        try:
            with open(self._file, "rb") as handle:
                handle.seek(start)
                data = handle.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise self._error("read", exc) from exc
        # up to the last newline: a line being appended (read without
        # the lock) is read whole next time
        whole = data[: data.rfind(b"\n") + 1]
        found = []
        for line in whole.split(b"\n"):
            text = _checked(line)
            entry = (
                None if text is None else self._parsed(text, validate, base)
            )
            if entry is not None:
                found.append(entry[1])
        return found, start + len(whole)

    def _parsed(
        self, text: bytes, validate: Validator, base: int | None
    ) -> tuple[int, Any] | None:
        """(its snapshot's epoch, its record) of an entry whose checksum
        holds; None if it follows another snapshot than ``base`` (when
        given). Raises StateRecordCorrupt if it is not of the shape."""
        try:
            entry = json.loads(text.decode("utf-8"))
            if not isinstance(entry, dict) or not isinstance(
                entry.get("base"), int
            ):
                raise ValueError("an entry without its snapshot's epoch")
            if base is not None and entry["base"] != base:
                return None  # it follows an earlier snapshot
            validate(entry["record"])
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            raise StateRecordCorrupt(
                path=str(self.path), reason=str(exc)
            ) from exc
        return entry["base"], entry["record"]

    def _last_whole(self) -> bytes | None:
        """The JSON of the last entry whose checksum holds (lines empty,
        cut short or damaged were never acknowledged). Read from the
        end: a window of :data:`TAIL` bytes, doubled until it holds such
        a line or the whole file, so a read costs an entry, not the
        journal."""
        with open(self._file, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            window = TAIL
            while True:
                start = max(0, size - window)
                handle.seek(start)
                lines = handle.read(size - start).split(b"\n")
                if start:
                    del lines[0]  # maybe cut by the window
                for line in reversed(lines):
                    text = _checked(line)
                    if text is not None:
                        return text
                if not start:
                    return None
                window *= 2

    def _error(self, action: str, exc: OSError) -> StateStoreError:
        return StateStoreError(
            action=action, path=str(self.path), reason=str(exc)
        )


def _checked(line: bytes) -> bytes | None:
    """The JSON of a line whose checksum holds, else None."""
    if len(line) < 10 or line[8:9] != b" ":
        return None
    try:
        crc = int(line[:8], 16)
    except ValueError:
        return None
    text = line[9:]
    return text if zlib.crc32(text) == crc else None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def signature(found: os.stat_result) -> tuple[int, ...]:
    """A file's stat signature: another file, or this one written, has
    another (a file held open keeps its inode from any new file)."""
    return (
        found.st_dev,
        found.st_ino,
        found.st_size,
        found.st_mtime_ns,
        found.st_ctime_ns,
    )
