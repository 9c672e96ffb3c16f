"""The devices this library made, as a set that remembers what changed.

A bind adds the mdev it made, a release or a repair discards one: a
device or two of thousands at a time. Two questions are asked at every
refresh and every bind, and each was a walk of every device made:

* are the devices made still what the records on disk say (else the
  records are read again: an operation that changed them and failed to
  save is undone)? :attr:`MadeSet.unsaved`;
* which devices changed between the snapshot the last pass planned
  from and this one's (a pass plans the parents they are on alone)?
  :func:`changed`.

:class:`MadeSet` answers both from the changes alone: each
:meth:`~MadeSet.add` or :meth:`~MadeSet.discard` that changes the set
is noted, and each snapshot (:meth:`~MadeSet.frozen`, a
:class:`Made`, made again only after a change) is numbered, with the
devices changed since the one before it kept for the last
:data:`KEPT` snapshots. The set is changed by those two methods, or
by the others a set has, which go through them.
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Iterable, Set
from typing import Any, NoReturn

KEPT = 32  # snapshots whose changes a set keeps (see changed)


class Made(frozenset[str]):
    """A snapshot of a :class:`MadeSet` (equal to the frozenset of its
    devices): which set it is of, and its number there."""

    __slots__ = ("number", "source")
    number: int
    source: weakref.ReferenceType[MadeSet]


class MadeSet(set[str]):
    """The devices made (see the module's doc). ``saved``: the devices
    are what the records on disk hold (a set read from them); else
    :attr:`unsaved` until :meth:`saved` is called."""

    def __init__(self, devices: Iterable[str] = (), saved: bool = True):
        super().__init__(devices)
        # the devices whose membership differs from the records on disk
        # (and everything when never saved)
        self._unsaved: set[str] = set()
        self._replaced = not saved
        self._touched: set[str] = set()  # since the last snapshot
        self._frozen: Made | None = None
        # (snapshot number, devices changed since the one before), last
        # first out
        self._log: collections.deque[tuple[int, frozenset[str]]] = (
            collections.deque(maxlen=KEPT)
        )

    # -- the changes ---------------------------------------------------

    def add(self, device: str) -> None:
        if device not in self:
            super().add(device)
            self._note(device)

    def discard(self, device: object) -> None:
        if device in self:
            super().discard(device)
            self._note(device)

    def remove(self, device: object) -> None:
        if device not in self:
            raise KeyError(device)
        self.discard(device)

    def update(self, *others: Iterable[str]) -> None:
        for other in others:
            for device in other:
                self.add(device)

    def difference_update(self, *others: Iterable[object]) -> None:
        for other in others:
            for device in list(other):  # (other may be this set)
                self.discard(device)

    def clear(self) -> None:
        self.difference_update(self)

    def __ior__(self, other: Set[Any]) -> MadeSet:  # type: ignore[override,misc]
        self.update(other)
        return self

    def __isub__(self, other: Set[Any]) -> MadeSet:  # type: ignore[misc]
        self.difference_update(other)
        return self

    def _refused(self, *_args: Any) -> NoReturn:
        raise TypeError(
            "the devices made change by add and discard (or update, "
            "difference_update, clear): each change is noted"
        )

    pop = intersection_update = symmetric_difference_update = _refused
    __iand__ = __ixor__ = _refused

    def _note(self, device: Any) -> None:
        self._touched.add(device)
        # changed twice since saved: as on disk again
        self._unsaved.symmetric_difference_update((device,))

    # -- the records on disk -------------------------------------------

    @property
    def unsaved(self) -> bool:
        """Do the devices differ from what was last read or saved?"""
        return self._replaced or bool(self._unsaved)

    def saved(self) -> None:
        """The devices as they are are what the records on disk hold."""
        self._unsaved.clear()
        self._replaced = False

    # -- snapshots -------------------------------------------------------

    def frozen(self) -> Made:
        """The devices as a frozenset, made again only after a change."""
        last = self._frozen
        if last is not None and not self._touched:
            return last
        made = Made(self)
        made.number = last.number + 1 if last is not None else 0
        made.source = weakref.ref(self)
        if last is not None:
            self._log.append((made.number, frozenset(self._touched)))
        self._touched.clear()
        self._frozen = made
        return made

    def touched_between(self, older: int, newer: int) -> set[str] | None:
        """The devices that may have changed from snapshot ``older`` to
        ``newer`` (both of this set); None when it no longer knows."""
        wanted = range(older + 1, newer + 1)
        found: set[str] = set()
        seen = 0
        for number, touched in self._log:
            if number in wanted:
                found |= touched
                seen += 1
        return found if seen == len(wanted) else None


def changed(now: frozenset[str], last: frozenset[str]) -> Set[str]:
    """The devices in one of ``now`` and ``last`` alone (their symmetric
    difference): from the changes noted between them when both are
    snapshots of one :class:`MadeSet` that still knows them, else by
    comparing every device."""
    if now is last:
        return frozenset()
    if isinstance(now, Made) and isinstance(last, Made):
        source = now.source()
        if source is not None and last.source() is source:
            older, newer = sorted((last.number, now.number))
            touched = source.touched_between(older, newer)
            if touched is not None:
                return {d for d in touched if (d in now) != (d in last)}
    return now ^ last
