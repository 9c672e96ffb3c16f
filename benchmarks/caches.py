"""The CPU's caches emptied before a timed call, as a periodic task
finds them.

Timed back to back, a refresh finds its code and data in the caches the
refresh before it filled: the idle refresh of a service looks several
times cheaper than the one a compute service runs once a minute, after
the rest of the process and the host's guests have used the caches for
everything else. A call timed ``cold`` follows a copy of a buffer twice
the size of the last-level cache (this machine's, as sysfs says it;
64 MiB where it does not), which leaves none of the caller's lines in
any level. Both sides of a comparison are timed the same way.
"""

from __future__ import annotations

from pathlib import Path

_INDEX = Path("/sys/devices/system/cpu/cpu0/cache")
_LIMIT = 1 << 30  # never more than 1 GiB a buffer


def last_level_bytes(index: Path = _INDEX) -> int:
    """The size of the largest cache sysfs lists for cpu0 (0 when it
    lists none)."""
    largest = 0
    for size in index.glob("index*/size"):
        text = size.read_text().strip()
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        factor = units.get(text[-1:].upper(), 1)
        digits = text[:-1] if text[-1:].upper() in units else text
        if digits.isdigit():
            largest = max(largest, int(digits) * factor)
    return largest


def buffer_bytes(last_level: int) -> int:
    """Twice ``last_level``: 64 MiB where no cache is listed, never more
    than 1 GiB."""
    return min(max(2 * last_level, 64 << 20), _LIMIT)


class Caches:
    """Two buffers of twice the last-level cache, made once."""

    _buffers: tuple[bytearray, bytearray] | None = None

    @classmethod
    def empty(cls) -> None:
        """Copy one buffer over the other: every cache line the caller
        had is evicted."""
        if cls._buffers is None:
            size = buffer_bytes(last_level_bytes())
            cls._buffers = (bytearray(size), bytearray(size))
        target, source = cls._buffers
        target[:] = source
