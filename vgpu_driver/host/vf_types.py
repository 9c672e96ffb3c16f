"""Each NVIDIA VF's current vGPU type (``<VF>/nvidia/current_vgpu_type``),
read again only where it may have changed.

:class:`VfTypes` owns what it keeps between scans: each VF's type as
last read, where its file is (its directory's parent, open, and the
path from there), the inode its directory had then, and the kernel's
watch on the file (:class:`~vgpu_driver.host.inotify.Written`). A steady
scan reads no VF's file: it reads one the kernel says was written since
(by anyone: an operator, another manager, this library), one whose
directory is another than when it was read (VFs disabled and enabled
again: kernfs never gives a new directory the inode number a removed
one had; one listing of the directory they sit in per scan tells), one
the driver no longer lists (moved to another driver), every one after a
write to the driver's ``bind`` or ``unbind`` (watched where the service
may read them: as root), one never read or not watched. Everything is
read again after :meth:`VfTypes.forget` (at each full listing of the
host, at least every ``relist_interval`` seconds: the net for a type
the kernel would change without a write), and at every scan where the
kernel cannot tell (no inotify, its queue overflowed).
"""

from __future__ import annotations

import os
from collections.abc import Collection

from vgpu_driver.host import sysfs_files as files
from vgpu_driver.host.inotify import Written

TYPE_FILE = "nvidia/current_vgpu_type"
# keys of the driver's own files (no VF address looks like them)
_DRIVER_FILES = ("bind", "unbind")


class VfTypes:
    def __init__(self) -> None:
        self.written = Written()
        self._known: dict[str, int] = {}  # VF address -> type last read
        # VF address -> (its directory's parent, open; that parent's path;
        # the VF directory's name there)
        self._files: dict[str, tuple[int, str, str]] = {}
        self._dirs: dict[str, int] = {}  # directory -> open descriptor
        self._inodes: dict[str, int] = {}  # VF address -> its directory's
        # what the kernel told at the start of this scan (None: read all)
        self._told: set[str] | None = None
        self._listed: dict[int, dict[str, int]] = {}  # this scan's
        self._driver: str | None = None  # a scan begun, nothing taken yet
        self._bound: frozenset[str] = frozenset()  # the driver's devices
        # PF address -> (its VFs, their types, the directories they sit
        # in, the scan that last found them so)
        self._of_pf: dict[
            str, tuple[list[str], dict[str, int], frozenset[int], int]
        ] = {}
        self._scans = 0
        # directory -> the inodes it lists, at this scan and the last
        self._inodes_now: dict[int, tuple[int, ...]] = {}
        self._inodes_before: dict[int, tuple[int, ...]] = {}
        self._same: dict[int, bool] = {}  # this scan's, by directory

    def forget(self) -> None:
        """Read every VF again at the next scan."""
        self._known.clear()
        self._of_pf.clear()
        self._files.clear()
        self._inodes.clear()
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()
        self.written.close()

    def begin(self, driver: str, bound: Collection[str]) -> None:
        """A scan of the VFs of ``driver`` (its directory) starts, whose
        listing is ``bound``: a VF not there is no longer the driver's
        (moved to another, as libvirt does for a ``managed`` hostdev) and
        is read. What the kernel told since the last scan is taken at its
        first VF (a host without SR-IOV cards asks nothing)."""
        self._driver = driver
        self._bound = frozenset(bound)

    def _start(self) -> None:
        if self._driver is not None:
            self._take(self._driver)
            self._driver = None

    def _take(self, driver: str) -> None:
        """What the kernel told since the last scan. A write to the
        driver's ``bind`` or ``unbind`` (a VF moved to another driver, as
        libvirt does for a ``managed`` hostdev, loses its type file) has
        every VF read again."""
        told = self.written.take()
        for name in _DRIVER_FILES:
            if told is not None and name in told:
                told = None
            if not self.written.watching(name):
                self.written.watch(f"{driver}/{name}", name)
        self._told = told
        self._listed = {}
        self._inodes_before, self._inodes_now = self._inodes_now, {}
        self._same = {}
        self._scans += 1

    def of(self, devices: str, pf: str, vfs: list[str]) -> dict[str, int]:
        """VF address -> type of ``pf``'s VFs ``vfs`` (those readable):
        the same dict as at the last scan where none may have changed
        (no VF's file told, every one watched, the directories they sit
        in listing what they did, and ``vfs`` the same list), so a steady
        card costs no loop over its VFs."""
        self._start()
        last = self._of_pf.get(pf)
        told = self._told
        if (
            last is not None
            and last[0] is vfs
            and last[3] == self._scans - 1
            and told is not None
            and told.isdisjoint(vfs)
            and self._bound.issuperset(vfs)
            and all(map(self._same_listing, last[2]))
        ):
            self._of_pf[pf] = (*last[:3], self._scans)
            return last[1]
        found: dict[str, int] = {}
        for vf in vfs:
            current = self.current(devices, vf)
            if current is not None:
                found[vf] = current
        if len(found) == len(vfs) and all(map(self.written.watching, vfs)):
            where = frozenset(self._files[vf][0] for vf in vfs)
            for fd in where:
                self._same_listing(fd)  # listed now, compared at the next
            self._of_pf[pf] = (vfs, found, where, self._scans)
        else:
            self._of_pf.pop(pf, None)
        return found

    def current(self, devices: str, vf: str) -> int | None:
        """A VF's type: as last read where nothing says it changed."""
        self._start()
        known = self._known.get(vf)
        if (
            known is not None
            and self._told is not None
            and vf not in self._told
            and vf in self._bound
            and self.written.watching(vf)
            and self._same_directory(vf)
        ):
            return known
        return self._read(devices, vf)

    def _same_directory(self, vf: str) -> bool:
        fd, _parent, name = self._files[vf]
        return self._listing(fd).get(name) == self._inodes.get(vf)

    def _same_listing(self, fd: int) -> bool:
        """Does a directory the VFs sit in list the inodes it did at the
        last scan (no VF's directory made again)? Listed once a scan, the
        loop in C: a steady card costs no Python step per entry."""
        same = self._same.get(fd)
        if same is None:
            listed = self._listed.get(fd)  # (listed already: not again)
            if listed is not None:
                inodes = tuple(listed.values())
            else:
                try:
                    with os.scandir(fd) as entries:
                        inodes = tuple(map(os.DirEntry.inode, entries))
                except OSError:
                    inodes = ()
            self._inodes_now[fd] = inodes
            same = self._same[fd] = inodes == self._inodes_before.get(fd)
        return same

    def _listing(self, fd: int) -> dict[str, int]:
        """name -> inode in a directory the VFs sit in, once a scan."""
        listed = self._listed.get(fd)
        if listed is None:
            try:
                with os.scandir(fd) as entries:
                    listed = {e.name: e.inode() for e in entries}
            except OSError:
                listed = {}
            self._listed[fd] = listed
        return listed

    def _read(self, devices: str, vf: str) -> int | None:
        """Read from its directory's parent (opened once), watched first
        (a write between the two is told); by its whole path when that is
        not found (the VF gone, or moved: found again at the next
        scan)."""
        self._known.pop(vf, None)
        at = self._files.get(vf)
        if at is None:
            at = self._locate(f"{devices}/{vf}")
            if at is not None:
                self._files[vf] = at
        if at is not None:
            fd, parent, name = at
            self.written.watch(f"{parent}/{name}/{TYPE_FILE}", vf)
            inode = self._listing(fd).get(name)
            if inode is None:
                self._inodes.pop(vf, None)
            else:
                self._inodes[vf] = inode
            current = files.read_int(f"{name}/{TYPE_FILE}", fd)
            if current is not None:
                self._known[vf] = current
                return current
        self._files.pop(vf, None)
        self.written.forget(vf)
        return files.read_int(f"{devices}/{vf}/{TYPE_FILE}")

    def _locate(self, device: str) -> tuple[int, str, str] | None:
        parent, name = os.path.split(os.path.realpath(device))
        fd = self._dirs.get(parent)
        if fd is None:
            try:
                fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                return None
            self._dirs[parent] = fd
        return fd, parent, name


__all__ = ["TYPE_FILE", "VfTypes"]
