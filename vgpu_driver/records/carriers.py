"""Who is carrying out each release recorded: a release claim names its
carrier, so a recovery finishes only releases whose carrier is gone.

A release is recorded under the records' lock and carried out after the
lock is left (a VF's type cleared, an mdev removed). Another process's
recovery (a start, ``vgpu-driver restore``) runs meanwhile; without a
carrier it cannot tell a release in flight from one cut short, and two
of them would both change the host for it.

Each process that records a release is a :class:`Carrier`: a random
token, and an exclusive ``flock`` held on ``state_path/carriers/<token>``
from its first release until it ends. The kernel lets go of a lock when
its process dies, however it dies, and a lock holds across PID
namespaces (a kolla container beside an operator's shell), where a
process id would not. Another process asks whether a carrier is alive
by trying a shared lock on it without waiting: refused, the release is
in flight; taken, its carrier is gone and the file is removed. The file
is made under a temporary name and renamed once locked, so no process
ever finds a live carrier's file unlocked.

Within one process, the releases in flight are those a thread of it is
carrying out (:attr:`Carrier.carrying`); one of its own claims that no
thread carries was cut short (an error between the record and the host
change) and is finished like a dead carrier's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oslo_log import log as logging

from vgpu_driver.model.claims import CARRIER
from vgpu_driver.records.store import (
    StateStoreError,
    give_to_owner_of,
    make_directory,
)

LOG = logging.getLogger(__name__)
CARRIERS = "carriers"
_MAKING = ".making-"


class Carrier:
    def __init__(self, state_path: Path | None) -> None:
        self.token = uuid.uuid4().hex
        # None: no records, no other process sharing them
        self._dir = None if state_path is None else state_path / CARRIERS
        self._fd: int | None = None
        # device ids whose release a thread of this process carries out
        # (changed under the binder's lock)
        self.carrying: set[str] = set()

    def held(self) -> str:
        """The token, with this process's lock on it taken (once; before
        the first release claim naming it is written)."""
        if self._fd is None and self._dir is not None:
            self._fd = self._hold(self._dir)
        return self.token

    def in_flight(self, claim: Mapping[str, Any]) -> bool:
        """Is a live process carrying out this release claim? One with
        no carrier (written before carriers were recorded) is taken as
        cut short, as it always was."""
        by = claim.get(CARRIER)
        if by is None:
            return False
        if by == self.token:
            return bool(claim["id"] in self.carrying)
        return self._dir is not None and _alive(self._dir / by)

    def let_go(self) -> None:
        """Release the lock as this process's end does (the file stays,
        for the next carrier's sweep); its releases not yet carried out
        are then another's to finish."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _hold(self, directory: Path) -> int:
        """Make the carrier file, locked, and sweep away those of
        carriers gone."""
        path = directory / self.token
        making = directory / f"{_MAKING}{self.token}"
        try:
            make_directory(directory)
            fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            raise StateStoreError(
                action="create", path=str(making), reason=str(exc)
            ) from exc
        try:
            give_to_owner_of(directory, fd)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(making, path)
        except OSError as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(making)
            raise StateStoreError(
                action="lock", path=str(path), reason=str(exc)
            ) from exc
        _sweep(directory, keep=self.token)
        return fd


def _alive(path: Path) -> bool:
    """Is the carrier of this file alive (its lock held)? Taken: it is
    gone, and so is its file. One that cannot be opened for another
    reason is taken as alive: its release is left, not done twice."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError as exc:
        LOG.warning(
            "Cannot tell whether the carrier %s is alive (%s); its "
            "releases are left to it",
            path,
            exc,
        )
        return True
    try:
        # shared: two processes asking at once do not take each other
        # for the carrier (only its exclusive lock refuses this one)
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError as exc:
        LOG.warning("Cannot lock %s (%s); taken as alive", path, exc)
        return True
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return False
    finally:
        os.close(fd)


def _sweep(directory: Path, keep: str) -> None:
    """The files of carriers gone (no lock held on them): removed. A
    file still being made is left to its maker."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name != keep and not name.startswith(_MAKING):
            _alive(directory / name)
