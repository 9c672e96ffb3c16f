"""The guests of a reading in their canonical order (by uuid), kept in
order as they change."""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable

from vgpu_driver.model.device import Guest

_BY_UUID = operator.attrgetter("uuid")


def sort_guests(guests: Iterable[Guest]) -> tuple[Guest, ...]:
    return tuple(sorted(guests, key=_BY_UUID))


def resort_guests(
    guests: tuple[Guest, ...],
    changes: Iterable[tuple[str, Guest | None, Guest | None]],
) -> tuple[Guest, ...] | None:
    """``guests`` (as :func:`sort_guests` orders them) with each (uuid,
    guest before or None, guest now or None) applied, in the same order:
    each found by bisection, not all sorted again. None when a change
    does not match what ``guests`` holds (sort them all instead)."""
    found = list(guests)
    for uuid, before, now in changes:
        at = bisect.bisect_left(found, uuid, key=_BY_UUID)
        here = at < len(found) and found[at].uuid == uuid
        if here != (before is not None) or (here and found[at] != before):
            return None
        if now is None:
            if here:
                del found[at]
        elif here:
            found[at] = now
        else:
            found.insert(at, now)
    return tuple(found)
