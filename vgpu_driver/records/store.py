"""The library's own records on disk, under ``[devices] state_path``.

:class:`StateStore` owns the files and the lock (with its nesting depth,
so a thread holding it may take it again); each record's content is
owned by its own module in :mod:`vgpu_driver.records`.

Several processes of one host share these records (the compute service,
a periodic ``vgpu-driver sync``, ``restore`` at boot, an operator's
``audit``), so every change is a read-modify-write under one lock that
holds across processes (``fcntl.flock`` on ``state_path/.lock``) as well
as threads: :meth:`StateStore.update` takes the lock, re-reads the record
and lets the caller merge its change into what is on disk now. Nothing
ever writes a record it did not read under the same lock.

Each record is a small JSON document in its own file, replaced
atomically (write a temporary file, fsync, rename, fsync the directory),
so a crash, even of the host, leaves the old or the new version, never
half of one, and a save that returned is there after a power loss (the
rename is on disk too); temporary files of a failed or killed save are
removed. A record that cannot be read (empty,
truncated, not JSON, the wrong shape) is never taken as empty: loading it
raises :class:`StateRecordCorrupt`, and :meth:`StateStore.quarantine`
moves it aside, with a timestamp, for the caller that can rebuild it.

Nothing is created until there is something to record: while
``state_path`` does not exist every record reads as its default and the
lock is only the threads' (a host with no vGPU configured never needs
the directory, nor the right to make it). The first save makes it and
takes the file lock; if another process made records in between, that
save fails rather than write over what it never read.

The service runs as its own user (``nova``) while an operator runs
``restore`` or ``audit`` as root: whatever root makes here (directories,
the lock, records) is given to the owner of the directory it is made in,
so neither side is ever locked out by the other.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import VgpuDriverError

LOG = logging.getLogger(__name__)
LOCK_FILE = ".lock"
TEMP_PREFIX = ".tmp-"

# Checks a record's shape; raises ValueError (with the reason) if wrong.
Validator = Callable[[Any], None]


class StateStoreError(VgpuDriverError):
    msg_fmt = (
        "Cannot %(action)s %(path)s: %(reason)s. Check [devices] state_path."
    )
    code = "vgpu_driver.state.io"


class StateRecordCorrupt(VgpuDriverError):
    msg_fmt = (
        "The record %(path)s cannot be read (%(reason)s), so nothing that "
        "depends on it is done. Restart the compute service or run "
        "'vgpu-driver restore': that moves the file aside (it is kept) and "
        "rebuilds what it can from the guests."
    )
    code = "vgpu_driver.state.corrupt"


class StateStore:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        if not str(directory).strip():
            raise StateStoreError(
                action="use",
                path="''",
                reason="[devices] state_path is empty",
            )
        self.directory = Path(directory)
        # as strings too: the records are read through them (a Path
        # costs more to build and to pass to each call than the call)
        self._dir = os.fspath(self.directory)
        self._lock_path = os.path.join(self._dir, LOCK_FILE)
        self._files: dict[str, str] = {}
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._lock_fd: int | None = None
        self._swept = False
        self._absent = False  # held without a file: nothing exists yet

    def file(self, key: str) -> str:
        """The record's file (built once: a pass reads it by this string,
        and a peek at the claims stats it)."""
        found = self._files.get(key)
        if found is None:
            found = self._files[key] = os.path.join(self._dir, f"{key}.json")
        return found

    def path(self, key: str) -> Path:
        """:meth:`file` as a Path (for the writes and repairs)."""
        return Path(self.file(key))

    # -- the lock --------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the records' lock, against other threads and processes.
        Re-entrant within a thread."""
        with self._thread_lock:
            if self._depth == 0:
                self._acquire()
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._release()

    def _acquire(self) -> None:
        if not os.path.isdir(self._dir):
            self._absent = True
            return
        self._absent = False
        self._lock_file()

    def _materialize(self) -> None:
        """The first save: make the directory and take the file lock.
        Records another process made meanwhile were never read here."""
        if not self._absent:
            return
        made = make_directory(self.directory)
        self._lock_file()
        self._absent = False
        found = sorted(p.name for p in self.directory.glob("*.json"))
        if not made and found:
            raise StateStoreError(
                action="write",
                path=str(self.directory),
                reason=f"another process wrote {', '.join(found)} while "
                "this one read nothing there; try again",
            )

    def _lock_file(self) -> None:
        lock_path = self._lock_path
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            give_to_owner_of(self.directory, fd)
        except OSError as exc:
            raise StateStoreError(
                action="lock", path=str(lock_path), reason=str(exc)
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            os.close(fd)
            raise StateStoreError(
                action="lock", path=str(lock_path), reason=str(exc)
            ) from exc
        self._lock_fd = fd
        if not self._swept:
            self._sweep_temporaries()
            self._swept = True

    def _release(self) -> None:
        self._absent = False
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _sweep_temporaries(self) -> None:
        """Under the lock no save is under way: any temporary file is what
        a killed process left behind."""
        try:
            names = os.listdir(self._dir)
        except OSError:
            return
        for name in names:
            if name.startswith(TEMP_PREFIX):
                leftover = self.directory / name
                with contextlib.suppress(OSError):
                    leftover.unlink()
                    LOG.info(
                        "Removed %s, left by an interrupted save", leftover
                    )

    # -- reading and writing ---------------------------------------------

    def load(
        self, key: str, default: Any, validate: Validator | None = None
    ) -> Any:
        """The record, or ``default`` if there is none yet. Raises
        StateRecordCorrupt if it exists but cannot be read."""
        path = self.file(key)
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except (FileNotFoundError, NotADirectoryError):
            return default  # no record (or no state_path) yet
        except OSError as exc:
            raise StateStoreError(
                action="read", path=path, reason=str(exc)
            ) from exc
        try:
            # UnicodeDecodeError is a ValueError: a record with a byte
            # that is not UTF-8 is as unreadable as one cut in half
            value = json.loads(data.decode("utf-8"))
            if validate is not None:
                validate(value)
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            reason = "it is empty" if not data.strip() else str(exc)
            raise StateRecordCorrupt(path=path, reason=reason) from exc
        return value

    def save(self, key: str, value: Any) -> None:
        """Replace the record atomically (under the lock)."""
        path = self.path(key)
        with self.locked():
            self._materialize()
            tmp: str | None = None
            try:
                fd, tmp = tempfile.mkstemp(
                    dir=self.directory, prefix=f"{TEMP_PREFIX}{key}."
                )
                give_to_owner_of(self.directory, fd)
                with os.fdopen(fd, "w") as handle:
                    json.dump(value, handle, indent=1, sort_keys=True)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, path)
                tmp = None
                sync_directory(self.directory)
            except (OSError, TypeError, ValueError) as exc:
                raise StateStoreError(
                    action="write", path=str(path), reason=str(exc)
                ) from exc
            finally:
                if tmp is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)

    def update(
        self,
        key: str,
        change: Callable[[Any], Any],
        default: Any,
        validate: Validator | None = None,
    ) -> Any:
        """Under the lock: read the record as it is now, let ``change``
        return the merged value, write it if it differs. Returns it."""
        with self.locked():
            current = self.load(key, default, validate)
            merged = change(current)
            if merged != current:
                self.save(key, merged)
            return merged

    def quarantine(self, key: str) -> Path | None:
        """Move an unreadable record aside (kept for the operator, with a
        timestamp) so it can be rebuilt. Returns where it went."""
        return self.move_aside(self.path(key))

    def move_aside(self, path: Path) -> Path | None:
        """:meth:`quarantine` for a file of the store given by its path
        (a record's journal)."""
        with self.locked():
            if not path.exists():
                return None
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
            target = path.with_name(f"{path.name}.corrupt-{stamp}")
            n = 1
            while target.exists():
                target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
                n += 1
            try:
                os.replace(path, target)
            except OSError as exc:
                raise StateStoreError(
                    action="move aside", path=str(path), reason=str(exc)
                ) from exc
            LOG.error(
                "Record %s could not be read; moved it to %s and rebuilding "
                "it from the host",
                path,
                target,
            )
            return target

    def load_or_rebuild(
        self, key: str, default: Any, validate: Validator | None = None
    ) -> Any:
        """For records that are a cache of what can be seen on the host:
        an unreadable one is moved aside and ``default`` returned. Read
        without the lock first (every save replaces the file whole, so a
        reader sees one save or the next); an unreadable one is read
        again under the lock before it is moved aside."""
        try:
            return self.load(key, default, validate)
        except StateRecordCorrupt:
            pass
        with self.locked():
            try:
                return self.load(key, default, validate)
            except StateRecordCorrupt as exc:
                LOG.error("%s", exc)
                self.quarantine(key)
                return default


# -- validators of the records' shapes -----------------------------------


def expect(condition: bool, reason: str) -> None:
    if not condition:
        raise ValueError(reason)


def validate_str_map(
    check_value: Callable[[Any], bool], what: str
) -> Validator:
    def validate(value: Any) -> None:
        expect(isinstance(value, dict), "not a JSON object")
        for key, item in value.items():
            # the reason is formatted only for an entry that fails: a
            # record of 2048 mdevs seen was 0.5 ms of reasons at a start
            if not (isinstance(key, str) and check_value(item)):
                raise ValueError(f"entry {key!r} is not {what}")

    return validate


def make_directory(directory: Path) -> bool:
    """Make ``directory`` (and its parents) if missing, each given to the
    owner of the directory it is made in. True if this call made it."""
    missing = []
    probe = directory
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for path in reversed(missing):
        try:
            path.mkdir(exist_ok=True)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                give_to_owner_of(path.parent, fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StateStoreError(
                action="create", path=str(path), reason=str(exc)
            ) from exc
    return bool(missing)


def sync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX: the file's fsync
    does not cover the directory entry that names it)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def give_to_owner_of(directory: Path, fd: int) -> None:
    """As root, give what ``fd`` is to ``directory``'s owner (the service
    user that owns state_path), so the service can rewrite it."""
    if os.geteuid() != 0:
        return
    owner = os.stat(directory)
    current = os.fstat(fd)
    if (current.st_uid, current.st_gid) != (owner.st_uid, owner.st_gid):
        os.fchown(fd, owner.st_uid, owner.st_gid)
