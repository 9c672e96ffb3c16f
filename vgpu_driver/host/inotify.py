"""Which files were written since the last look, as the kernel tells it
(inotify), so a steady scan need not read them all.

A write to a sysfs attribute through ``write(2)``, by any process (an
operator's ``echo``, another manager, this library's privileged
helper), makes the kernel queue ``IN_MODIFY`` on that file's watch: the
VFS does it for every file system, sysfs included (seen on this
project's build machines on the real ``/sys``; see
``doc/source/performance.rst``). A value the kernel changes on its own
is not told (sysfs attributes are not notified unless their driver
asks), so a caller still reads everything now and then.

:class:`Written` holds one non-blocking inotify descriptor and a watch
per file, named by a key of the caller's. Where the kernel cannot tell
(no inotify, its queue overflowed, a watch refused at the user's limit)
it says so, and the caller reads what it cannot vouch for. libc is
called through ctypes: the standard library has no inotify, and this is
all of it the library needs.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import struct
import weakref
from typing import Any

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

IN_MODIFY = 0x2
IN_ATTRIB = 0x4  # (a file's links dropped: it is being deleted)
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000  # the watch is gone (its file deleted, or removed)
# a written value, or a file that is no longer the one watched
MASK = IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then the name)
_CHUNK = 65536


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library's inotify calls, looked up once a process."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_uint32,
        ]
    except (OSError, AttributeError):
        return None
    return libc


class Written:
    """The keys of the files written since :meth:`take` was last asked."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._closer: weakref.finalize[Any, Any] | None = None
        self._libc = _libc()
        self._keys: dict[int, str] = {}  # watch descriptor -> key
        self._watches: dict[str, int] = {}  # key -> watch descriptor
        self._overflowed = False
        self._spent = False  # told the operator the watches ran out
        self.unavailable = self._libc is None

    def _open(self) -> int | None:
        if self._fd is None and not self.unavailable:
            assert self._libc is not None
            fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                # (tried again after close(): at the next full reading)
                self.unavailable = True
                LOG.info(
                    "inotify is not available (%s): every VF's vGPU type "
                    "is read at every refresh until the next full reading",
                    os.strerror(ctypes.get_errno()),
                )
                return None
            self._fd = fd
            # closed with this object: a process that makes many (a test
            # run, Nova's functional tests) would spend the user's
            # instances (fs.inotify.max_user_instances, 128)
            self._closer = weakref.finalize(self, os.close, fd)
        return self._fd

    def watching(self, key: str) -> bool:
        return key in self._watches

    def watch(self, path: str, key: str) -> bool:
        """Tell writes to ``path`` under ``key`` from now on (before the
        file is read: a write between the two is then told). False when
        the kernel refuses (the file is gone, or the watches allowed the
        user are spent): the caller reads it at every scan."""
        fd = self._open()
        if fd is None:
            return False
        assert self._libc is not None
        wd = self._libc.inotify_add_watch(fd, os.fsencode(path), MASK)
        if wd < 0:
            if ctypes.get_errno() == errno.ENOSPC and not self._spent:
                self._spent = True
                LOG.warning(
                    "inotify's watches are spent (fs.inotify."
                    "max_user_watches): the VFs not watched have their "
                    "vGPU type read at every refresh; raise that sysctl"
                )
            self.forget(key)
            return False
        old = self._watches.get(key)
        if old is not None and old != wd:
            self._keys.pop(old, None)
        self._keys[wd] = key
        self._watches[key] = wd
        return True

    def forget(self, key: str) -> None:
        """Stop telling about ``key`` (its watch, if any, stays until its
        file goes: a write to it is then dropped)."""
        wd = self._watches.pop(key, None)
        if wd is not None:
            self._keys.pop(wd, None)

    def take(self) -> set[str] | None:
        """The keys written (or whose file went) since the last call; None
        when the kernel could not tell: every file may have changed."""
        fd = self._open()
        if fd is None:
            return None
        written: set[str] = set()
        while True:
            try:
                data = os.read(fd, _CHUNK)
            except BlockingIOError:
                break
            except OSError:
                self.close()
                return None
            if not data:
                break
            self._parse(data, written)
        if self._overflowed:
            self._overflowed = False
            return None
        return written

    def _parse(self, data: bytes, written: set[str]) -> None:
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            offset += _EVENT.size + length
            if mask & IN_Q_OVERFLOW:
                self._overflowed = True
                continue
            key = self._keys.get(wd)
            if key is None:
                continue
            written.add(key)
            if mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF):
                # no longer the file at that path: watched again when read
                self.forget(key)

    def close(self) -> None:
        """Drop every watch (the next call opens a new descriptor, or
        tries inotify again where it was not available)."""
        if self._closer is not None:
            self._closer()  # (closes the descriptor once)
        self._fd = self._closer = None
        self.unavailable = self._libc is None
        self._keys.clear()
        self._watches.clear()
        self._overflowed = False


__all__ = ["Written"]
