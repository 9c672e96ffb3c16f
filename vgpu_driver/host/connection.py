"""The connection to libvirtd: opened (or the caller's, used as it is),
counted, and given up when it is lost.

:class:`Connection` owns the libvirt connection, the binding it comes
from, the count of every call made on it (``calls``: the figure the
steady-refresh checks read), and the backoff of a connection of our own
that cannot be opened again (1, 2, 4 ... 60 s, as Nova's ``Host``). A
call that finds the connection lost (libvirtd restarted or stopped)
raises :class:`~vgpu_driver.exception.HostUnreachable` and tells the
parts that cache what they read (``on_lost``), so the next operation
lists every device and reads every guest again.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from oslo_log import log as logging

from vgpu_driver.exception import HostUnreachable
from vgpu_driver.host.libvirt_api import LibvirtApi, libvirt_python

LOG = logging.getLogger(__name__)
T = TypeVar("T")

# the longest wait between two attempts to connect again
MAX_RETRY_DELAY = 60.0


class Connection:
    def __init__(
        self,
        uri: str,
        *,
        opener: Callable[[str], Any] | None,
        connection: Any,
        connect: Callable[[], Any] | None,
        api: LibvirtApi | None,
    ) -> None:
        self.uri = uri
        self.known_api = api  # None until found (from the connection)
        self._connect = connect
        self._opener = opener
        self.owned = connection is None and connect is None
        self._conn: Any = connection
        self.calls: Counter[str] = Counter()
        # told when the connection is lost: what they cached is stale
        self.on_lost: list[Callable[[], None]] = []
        self._version: int | None = None
        # reconnection of a connection of our own, with backoff
        self._open_failures = 0
        self._retry_at = 0.0
        self._open_error = ""

    def call(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, counted under ``name``; a lost connection
        becomes HostUnreachable (other libvirt errors pass).

        The garbage collector is held off during the call: libvirt keeps
        its last error per thread, and a libvirt object the collector
        frees between a failed call and its exception clears it, so the
        error would lose its code (a lookup of a device that is gone
        would read as any other failure)."""
        self.calls[name] += 1
        api = self.known_api
        collecting = gc.isenabled()
        gc.disable()
        try:
            return fn(*args)
        except Exception as exc:
            if (
                api is None
                or not isinstance(exc, api.error)
                or not api.connection_lost(exc)
            ):
                raise
            lost = exc
        finally:
            if collecting:
                gc.enable()
        # out of the except block: the warning is not logged with
        # libvirt's exception attached
        raise self.lost(api.message(lost)) from lost

    def lost(self, reason: str) -> HostUnreachable:
        """The connection to libvirtd is gone (it restarted or stopped):
        the next operation connects again (the caller's ``connect``
        reconnects on its own), and whoever cached a reading is told."""
        LOG.warning(
            "Lost the connection to libvirt at %s (%s); the next operation "
            "connects again and reads the host and every guest anew",
            self.uri or "the caller's connection",
            reason,
        )
        if self.owned and self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                LOG.debug("Closing the broken connection failed too")
            self._conn = None
        self._version = None
        for forget in self.on_lost:
            forget()
        return HostUnreachable(
            uri=self.uri or "the caller's connection", reason=reason
        )

    def get(self) -> Any:
        """The connection: the caller's current one, or ours (opened again
        after a loss, with backoff)."""
        if self._connect is not None:
            return self._connect()
        if self._conn is None:
            api = self.api
            now = time.monotonic()
            if now < self._retry_at:
                raise HostUnreachable(
                    uri=self.uri,
                    reason=f"{self._open_error}; next attempt in "
                    f"{self._retry_at - now:.0f}s",
                )
            opener = self._opener or api.module.open
            self.calls["open"] += 1
            try:
                self._conn = opener(self.uri)
            except api.error as exc:
                self._open_failures += 1
                delay = min(2.0 ** (self._open_failures - 1), MAX_RETRY_DELAY)
                self._retry_at = now + delay
                self._open_error = api.message(exc)
                raise HostUnreachable(
                    uri=self.uri, reason=self._open_error
                ) from exc
            if self._open_failures:
                LOG.info("Connected to libvirt at %s again", self.uri)
            self._open_failures, self._retry_at = 0, 0.0
        return self._conn

    @property
    def api(self) -> LibvirtApi:
        if self.known_api is None:
            if self.owned:
                self.known_api = libvirt_python()
            else:
                self.known_api = LibvirtApi.of(self.get())
        return self.known_api

    def close(self) -> None:
        """Close the connection this adapter opened (not a caller's)."""
        if self._conn is not None and self.owned:
            self._conn.close()
            self._conn = None

    def library_version(self) -> int:
        if self._version is None:
            conn = self.get()
            self._version = int(self.call("getLibVersion", conn.getLibVersion))
        return self._version

    def flag(
        self, name: str, fn: Callable[[], int], unsupported: set[str]
    ) -> bool | None:
        """A per-device flag; None (and, through ``unsupported``, never
        asked again) where the driver cannot tell."""
        if name in unsupported:
            return None
        api = self.api
        try:
            return bool(self.call(name, fn))
        except api.error as exc:
            if api.code(exc) in api.unsupported:
                unsupported.add(name)
                return None
            raise
