"""The instances the caller (Nova) names as its own on this host.

A guest whose domain carries Nova's ``nova:instance`` metadata is
Nova's. One without it is outside Nova (its devices have no allocation
in Placement: they are reserved) unless the caller named it: Nova's own
test doubles write no metadata, nor did domains defined by hand for
instances Nova adopted. The caller names its instances at start
(``init_host``), and each one it binds devices for, defines a guest
for or moves here. A name is forgotten when the caller releases the
instance's devices (it left the host, or never came): a guest of that
uuid still read without metadata is outside Nova from then on, and the
set holds no more than the instances on the host.

A refresh judges a reading against the one it last planned, and each
against the names in force when it was judged: the names given or
forgotten since are kept (with what they were before) until a reading
judged after them is taken. An instance named or forgotten whose guest
is gone from the host, or never read, changes nothing; one whose guest
without metadata is still there crossed the line (see
:meth:`NamedInstances.crossed`). The caller names instances from its
own threads while a refresh runs: each change is numbered, and a
refresh lets go of those made before it began judging (:meth:`mark`,
:meth:`judged`) alone.
"""

from __future__ import annotations

import threading
from collections.abc import Container, Iterable

from vgpu_driver.model.device import HostInventory
from vgpu_driver.model.foreign import outside_of


class NamedThen:
    """The names as they were when the reading last judged was: those
    changed since as they were before, the others as they are."""

    def __init__(self, now: set[str], before: dict[str, bool]) -> None:
        self._now = now
        self.before = before  # uuid -> named then (changed since alone)

    def __contains__(self, uuid: object) -> bool:
        if isinstance(uuid, str) and uuid in self.before:
            return self.before[uuid]
        return uuid in self._now


class NamedInstances:
    def __init__(self) -> None:
        self.uuids: set[str] = set()
        self._lock = threading.Lock()
        # (number, uuid, named before that change), oldest first: the
        # changes since the reading last judged
        self._changes: list[tuple[int, str, bool]] = []
        self._number = 0

    def __contains__(self, uuid: object) -> bool:
        return uuid in self.uuids

    def name(self, uuids: Iterable[str]) -> None:
        """``uuids`` are the caller's."""
        new = set(uuids) - self.uuids
        if not new:
            return
        with self._lock:
            for uuid in sorted(new - self.uuids):
                self._note(uuid, named=False)
                self.uuids.add(uuid)

    def forget(self, uuid: str) -> None:
        """``uuid`` is no longer the caller's (its devices released)."""
        if uuid not in self.uuids:
            return
        with self._lock:
            if uuid in self.uuids:
                self._note(uuid, named=True)
                self.uuids.discard(uuid)

    def _note(self, uuid: str, named: bool) -> None:
        self._number += 1
        self._changes.append((self._number, uuid, named))

    def mark(self) -> int:
        """Where a refresh begins judging: the changes up to here are
        those :meth:`judged` lets go of."""
        return self._number  # (one read: no lock)

    def judged(self, mark: int) -> None:
        """A reading judged with the names as they were at ``mark`` is
        the one the next refresh is judged against."""
        if not self._changes:
            return  # (every refresh of a steady host: no lock)
        with self._lock:
            self._changes = [c for c in self._changes if c[0] > mark]

    def then(self) -> Container[str]:
        """The names as the reading last judged was judged with."""
        if not self._changes:
            return self  # the same
        with self._lock:
            before: dict[str, bool] = {}
            for _number, uuid, named in self._changes:
                before.setdefault(uuid, named)
            return NamedThen(self.uuids, before)

    def crossed(self, before: HostInventory, now: HostInventory) -> bool:
        """Did a name given or forgotten since ``before`` was judged
        move what a guest without metadata uses across the line: outside
        Nova in one reading (under the names of its day) and not in the
        other? Only the guests of those names are looked at."""
        then = self.then()
        if not isinstance(then, NamedThen):
            return False  # no name given or forgotten since
        return any(
            outside_of(before, uuid, then) != outside_of(now, uuid, self)
            for uuid in then.before
        )
