"""libvirt's domain events, told to whoever keeps the guests: a domain
defined, started or stopped is to be read again (a transient guest,
never defined, sends only the last two: stopped, it is gone), one
undefined forgotten, one a device was plugged into or unplugged from
while it runs read again.

:class:`DomainEvents` registers the callbacks on the connection it is
asked to watch and on each one opened after it was lost (libvirtd
restarted); the callbacks run on libvirt's event thread and only pass
the domain's uuid on (no lock, no call, no log).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oslo_log import log as logging

from vgpu_driver.host.connection import Connection

LOG = logging.getLogger(__name__)


class DomainEvents:
    def __init__(
        self, link: Connection, tell: Callable[[str, bool], None]
    ) -> None:
        """``tell(uuid, defined)``: a domain event, from libvirt's event
        thread (False: undefined)."""
        self.link = link
        self.tell = tell
        # the connection :meth:`watch` registered its callbacks on (None:
        # not asked to watch); a new one gets them again
        self._watched: Any = None

    def watch(self) -> list[int]:
        """Register the callbacks feeding ``tell`` on the adapter's
        connection, and (through :meth:`watch_again`) on each one opened
        after it was lost. Returns the callback ids."""
        return self._register(self.link.get())

    def watch_again(self, conn: Any) -> None:
        """At each reading: a connection opened since the callbacks were
        registered (libvirtd restarted) gets them too; the events missed
        in between are read by the rescan that follows a lost
        connection."""
        if self._watched is not None and conn is not self._watched:
            try:
                self._register(conn)
            except self.link.api.error as exc:
                self._watched = conn  # not asked again on this one
                LOG.warning(
                    "Could not watch domain events on the new libvirt "
                    "connection (%s): guests changed by others are read "
                    "at the next full reading",
                    self.link.api.message(exc),
                )

    def _register(self, conn: Any) -> list[int]:
        api = self.link.api

        def on_lifecycle(
            _conn: Any, domain: Any, event: int, _detail: int, _opaque: Any
        ) -> None:
            if event == api.event_undefined:
                self.tell(domain.UUIDString(), False)
            elif event in api.event_reread:
                self.tell(domain.UUIDString(), True)

        def on_device(
            _conn: Any, domain: Any, _alias: str, _opaque: Any
        ) -> None:
            self.tell(domain.UUIDString(), True)

        ids = [
            int(
                conn.domainEventRegisterAny(
                    None, api.event_lifecycle, on_lifecycle, None
                )
            ),
            *(
                int(conn.domainEventRegisterAny(None, event, on_device, None))
                for event in api.event_devices
            ),
        ]
        self._watched = conn
        return ids
