"""A parent's mdevs as its sysfs directory lists them, since the parent
was last followed: which are new, which were made again under their
uuid, which no longer run.

:class:`MdevDirs` owns the inode of each running mdev's directory as
last seen, per parent. It reads sysfs only; what libvirt says of an
mdev it names is asked by :class:`~vgpu_driver.host.nodedevs.
NodeDevices`, which follows a parent with it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from pathlib import Path
from typing import NamedTuple

_UUID = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
)


class Seen(NamedTuple):
    """What a parent's directory says of its mdevs, against those known
    (read from libvirt): each set of uuids sorted."""

    made_again: list[str]  # known, to be read again (dropped first)
    new: list[str]  # running and not known (made again ones included)
    not_running: list[str]  # known running, no longer in the directory


class MdevDirs:
    def __init__(self) -> None:
        # parent name -> uuid -> the inode of its mdevs' sysfs directories
        # when the parent was last followed
        self._inodes: dict[str, dict[str, int]] = {}

    def follow(
        self,
        name: str,
        path: Path | None,
        known: Collection[str],
        stopped: frozenset[str],
    ) -> Seen | None:
        """The mdevs of parent ``name`` (its sysfs directory ``path``)
        against the uuids ``known`` of it, ``stopped`` among them those
        defined and not running when read. None where the directory
        cannot be read."""
        before = self._inodes.get(name, {})
        running = _running(path, before)
        if running is None:
            return None
        self._inodes[name] = running
        again = made_again(known, stopped, running, before)
        kept = set(known).difference(again)
        return Seen(
            again,
            sorted(running.keys() - kept),
            sorted(kept - running.keys() - stopped),
        )

    def unchanged(self, name: str, path: Path | None) -> bool:
        """Does parent ``name``'s directory list the mdevs it listed
        when last followed, each in the same directory? (Read around
        another read, it says that read saw them as they are.) True
        where it was never followed or cannot be read: nothing tells
        otherwise."""
        before = self._inodes.get(name)
        if before is None:
            return True
        now = _running(path, before)
        return now is None or now == before


def _running(
    path: Path | None, before: dict[str, int]
) -> dict[str, int] | None:
    """uuid -> inode of each mdev directory ``path`` lists (None where it
    cannot be read)."""
    try:
        with os.scandir(path or "") as entries:
            # (an entry listed last time is an mdev's: no match)
            return {
                e.name: e.inode()
                for e in entries
                if e.name in before
                or (len(e.name) == 36 and _UUID.fullmatch(e.name))
            }
    except OSError:
        return None


def made_again(
    known: Collection[str],
    stopped: frozenset[str],
    running: dict[str, int],
    before: dict[str, int],
) -> list[str]:
    """The uuids of ``known`` mdevs running now whose XML may have
    changed since it was read, to be read again: one defined and stopped
    that started (its definition may have been changed meanwhile), one
    whose directory is another than when its parent was last followed
    (removed and made again under its uuid, perhaps of another type:
    kernfs never gives a new directory the inode number a removed one
    had). ``stopped``: the known mdevs defined and not running when
    read. ``running`` and ``before``: uuid -> inode, now and then
    (compared in C: a Python loop per mdev costs a dense parent)."""
    moved = running.items() - before.items()  # new, or another inode
    return sorted(
        {uuid for uuid, _inode in moved if uuid in before and uuid in known}
        | (stopped & running.keys())
    )
