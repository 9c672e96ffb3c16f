"""Which guest uses which device, read from the domains' XML.

:class:`Guests` owns the guests as last read (None until a first full
scan), the domain objects they were read from (a domain read again is
read through its object: one call, not a lookup and a read; those of
the last guests seen gone are kept for one defined again), the domain
events waiting to be applied, and when each domain was last re-read.
Every guest is read on the first reading that wants them, and again
when asked (a service's start), after a lost connection (events were
missed), when another process changed the claims, and as a safety net
every ``rescan_interval`` seconds (an event the caller never passed on).
In between it stays right because every change to a guest's devices
goes through the library (:meth:`note`, :meth:`forget`,
:meth:`refresh`) or is reported by libvirt's lifecycle and device
events (:meth:`domain_event`), which make the next reading re-read that
one domain.
"""

from __future__ import annotations

import collections
import itertools
import time
from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import DeviceXMLInvalid
from vgpu_driver.host import domain_xml
from vgpu_driver.host.connection import Connection
from vgpu_driver.host.domain_events import DomainEvents
from vgpu_driver.model.device import Guest

LOG = logging.getLogger(__name__)
# domain objects of guests seen gone, kept for one that comes back (a
# hard reboot undefines and defines it again): the newest ones
GONE_KEPT = 64


class Guests:
    def __init__(self, link: Connection, rescan_interval: float) -> None:
        self.link = link
        self.known: dict[str, Guest] | None = None  # None: never scanned
        self.rescan_interval = rescan_interval
        self.scanned_at = float("-inf")  # time.monotonic() of the last scan
        self.dirty = True  # changed since the adapter's last reading
        # after a lost connection: every guest is read again
        self.rescan = False
        # (sequence, domain uuid, defined) from libvirt's event thread:
        # appended there without a lock, applied by the next reading or
        # bind; a domain re-read after an event answers it
        self._events: collections.deque[tuple[int, str, bool]] = (
            collections.deque()
        )
        self._seq = itertools.count()
        self._read_at: dict[str, int] = {}
        # uuid -> the guest as the adapter's last reading had it (None: it
        # had none), for each guest changed since; None after a scan
        self._since: dict[str, Guest | None] | None = None
        # uuid -> its domain object, from the connection they came from:
        # a domain is found by uuid at each call on it, so its object
        # stays good across an undefine and a define again
        self._domains: dict[str, Any] = {}
        # and those of guests seen gone, the newest last (at most
        # GONE_KEPT): one defined again is read through it, no lookup
        self._gone: collections.OrderedDict[str, Any] = (
            collections.OrderedDict()
        )
        self._domains_of: Any = None
        # libvirt's callbacks feeding :meth:`domain_event`, once asked
        self.watching = DomainEvents(link, self.domain_event)
        link.on_lost.append(self._rescan_next)

    def _rescan_next(self) -> None:
        self.rescan = True

    def scan_due(self) -> bool:
        """Are the guests to be read whole now (never read, the connection
        lost since, or the safety net's interval passed)?"""
        return (
            self.known is None
            or self.rescan
            or time.monotonic() - self.scanned_at >= self.rescan_interval
        )

    def scan(self, conn: Any) -> None:
        """Read every domain (what the waiting events said, and more). A
        scan libvirt fails is due again, its events still waiting."""
        started = time.monotonic()
        events = self._take_events()
        self._read_at.clear()
        guests: dict[str, Guest] = {}
        domains: dict[str, Any] = {}
        api = self.link.api
        try:
            for domain in self.link.call(
                "listAllDomains", conn.listAllDomains, api.list_all_domains
            ):
                guest = self._read(domain)
                if guest is not None:
                    guests[guest.uuid] = guest
                    domains[guest.uuid] = domain
        except Exception:
            self._put_back(events)
            raise
        self.rescan = False
        self.scanned_at = started
        self.known = guests
        self._domains, self._domains_of = domains, conn
        self._gone.clear()
        self._since = None
        self.dirty = True

    def mdevs_of_changed(self) -> set[str]:
        """The uuids of the mdevs that the guests changed since the
        adapter's last reading use (every guest's after a scan)."""
        if self.known is None:
            return set()
        if self._since is None:
            changed = list(self.known.values())
        else:
            changed = [g for u in self._since if (g := self.known.get(u))]
        return {uuid for guest in changed for uuid in guest.mdevs}

    def take_diff(
        self,
    ) -> tuple[tuple[str, Guest | None, Guest | None], ...] | None:
        """(uuid, before, now) of each guest changed since the last call
        (made at each new reading); None when every guest was read again
        in between."""
        since, self._since = self._since, {}
        if since is None or self.known is None:
            return None
        return tuple(
            (uuid, before, self.known.get(uuid))
            for uuid, before in since.items()
        )

    def _read(self, domain: Any) -> Guest | None:
        api = self.link.api
        try:
            text = self.link.call("domain.XMLDesc", domain.XMLDesc, 0)
            return domain_xml.parse_guest(str(text))
        except api.error as exc:
            if api.code(exc) == api.no_domain:
                return None
            raise
        except DeviceXMLInvalid as exc:
            LOG.warning("Skipping guest: %s", exc)
            return None

    def note(self, guest: Guest) -> None:
        """A guest as read now; the reading changes only if it differs
        (a domain undefined and defined again as it was changes
        nothing)."""
        if self.known is not None and self.known.get(guest.uuid) != guest:
            self._remember(guest.uuid)
            self.known[guest.uuid] = guest
            self.dirty = True

    def forget(self, uuid: str) -> None:
        domain = self._domains.pop(uuid, None)
        if domain is not None:
            self._gone[uuid] = domain
            self._gone.move_to_end(uuid)
            if len(self._gone) > GONE_KEPT:
                self._gone.popitem(last=False)
        if self.known is not None and uuid in self.known:
            self._remember(uuid)
            del self.known[uuid]
            self.dirty = True

    def _remember(self, uuid: str) -> None:
        if self._since is not None and self.known is not None:
            self._since.setdefault(uuid, self.known.get(uuid))

    def refresh(self, uuid: str) -> Guest | None:
        """Re-read one domain (one call for a domain read before on this
        connection, gone since or not, two for another), or forget it if
        it is gone."""
        # domain events about it queued before now are answered by this
        self._read_at[uuid] = next(self._seq)
        conn = self.link.get()
        if self._domains_of is not conn:
            self._domains, self._domains_of = {}, conn
            self._gone.clear()
        domain = self._domains.get(uuid)
        if domain is None:
            domain = self._gone.pop(uuid, None)
        if domain is None:
            api = self.link.api
            try:
                domain = self.link.call(
                    "lookupByUUIDString", conn.lookupByUUIDString, uuid
                )
            except api.error as exc:
                if api.code(exc) != api.no_domain:
                    raise
                self.forget(uuid)
                return None
        self._domains[uuid] = domain
        guest = self._read(domain)
        if guest is None:
            self.forget(uuid)
        else:
            self.note(guest)
        return guest

    def domain_event(self, uuid: str, defined: bool) -> None:
        """Safe from libvirt's event thread: no lock, no call, no log."""
        self._events.append((next(self._seq), uuid, defined))

    def changed(self) -> bool:
        """Domain events wait to be applied."""
        return bool(self._events)

    def take_changes(self) -> list[tuple[str, Guest | None]]:
        """Apply the waiting domain events: each domain defined is re-read,
        each one undefined forgotten, unless it was re-read since the
        event (that reading is newer); one undefined that used a device
        is re-read too (see :meth:`_holds_devices`). Returns (uuid, the
        guest now or None) for each applied."""
        events = self._take_events()
        changes: list[tuple[str, Guest | None]] = []
        if self.known is not None:  # else the first scan reads all
            try:
                for uuid, (seq, defined) in events.items():
                    if self._read_at.get(uuid, -1) > seq:
                        continue  # read since: that reading is newer
                    if defined or self._holds_devices(uuid):
                        changes.append((uuid, self.refresh(uuid)))
                    else:
                        self.forget(uuid)
                        changes.append((uuid, None))
            except Exception:
                # libvirt failed a read: every event taken waits for the
                # next reading, none is lost (one applied is read again)
                self._put_back(events)
                raise
        # reads so far are older than any event still to come (losing one
        # only costs a read again)
        self._read_at.clear()
        return changes

    def _put_back(self, events: dict[str, tuple[int, bool]]) -> None:
        """Events taken (one per domain), waiting again before any that
        came since."""
        for uuid in events:
            self._read_at.pop(uuid, None)
        self._events.extendleft(
            (seq, uuid, defined) for uuid, (seq, defined) in events.items()
        )

    def _holds_devices(self, uuid: str) -> bool:
        """Does the guest, as known, use a device? Undefined while running
        (``virsh undefine``), it runs on, transient, and keeps them until
        it stops: such a guest is read again on UNDEFINED, not forgotten
        (one call; none for a guest the caller forgot first, as Nova's
        delete does)."""
        guest = None if self.known is None else self.known.get(uuid)
        return guest is not None and bool(guest.mdevs or guest.pci_devices)

    def _take_events(self) -> dict[str, tuple[int, bool]]:
        """The waiting events, the last one per domain."""
        latest: dict[str, tuple[int, bool]] = {}
        while True:
            try:
                seq, uuid, defined = self._events.popleft()
            except IndexError:
                return latest
            latest[uuid] = (seq, defined)
