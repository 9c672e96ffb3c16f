"""Reading sysfs attributes: one file each, cheaply (pure helpers for
the host adapters that read sysfs)."""

from __future__ import annotations

import os

from vgpu_driver.model.device import SriovType

_CHUNK = 4096  # a sysfs attribute is at most a page (more is read on)


def read(
    path: str | os.PathLike[str], dir_fd: int | None = None
) -> str | None:
    """A sysfs attribute's value, stripped (None if unreadable). Raw
    file descriptor reads, about half of ``open()``'s cost: a first
    discovery reads one per parent and several per SR-IOV VF.
    ``dir_fd``: ``path`` is relative to that open directory (no walk of
    the path up to it)."""
    try:
        fd = os.open(path, os.O_RDONLY, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        chunks = [os.read(fd, _CHUNK)]
        while len(chunks[-1]) == _CHUNK:  # no second read for most
            chunks.append(os.read(fd, _CHUNK))
        return b"".join(chunks).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def read_int(
    path: str | os.PathLike[str], dir_fd: int | None = None
) -> int | None:
    text = read(path, dir_fd)
    try:
        return int(text, 0) if text is not None else None
    except ValueError:
        return None


def parse_creatable(text: str) -> tuple[SriovType, ...]:
    """``creatable_vgpu_types``: a header, then ``1145  : NVIDIA L40S-1B``."""
    types = []
    for line in text.splitlines():
        head, sep, name = line.partition(":")
        if not sep or not head.strip().isdigit():
            continue  # the header line, or noise
        types.append(SriovType(int(head.strip()), name.strip()))
    return tuple(types)


__all__ = ["parse_creatable", "read", "read_int"]
