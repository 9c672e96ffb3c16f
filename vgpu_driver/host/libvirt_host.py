"""The libvirt adapter: the only module that talks to libvirt.

It imports libvirt-python only when it opens its own connection; given a
caller's connection it uses the binding that connection comes from.

Cost of :meth:`LibvirtHost.discover` (every call is counted in
``calls``):

* one ``listAllDevices(MDEV_TYPES | MDEV)``: parents and mdevs together,
  as objects, with no per-name lookup;
* one ``listAllDevices(MDEV | INACTIVE)`` for the mdevs that are only
  defined (skipped for good where libvirt refuses the flag);
* one ``XMLDesc`` per parent, whose ``availableInstances`` change; the
  parents' device objects are kept and listed again only when the
  kernel's mdev parents (``/sys/class/mdev_bus``, read at every
  refresh) or the connection changed, or a parent vanished;
* an mdev's XML never changes for a given name, so it is read once, on
  first sight, and cached; whether it is persistent is asked only when
  it is removed (a defined-only mdev is persistent by definition).

So a steady-state refresh costs P calls for P parents, whatever the
number of mdevs and guests (and libvirtd does not walk every node device
of the host to list them).

Guests: which guest uses which device is read from every domain's XML on
the first :meth:`discover` only (or when ``rescan_guests`` is asked, as a
service does at start, or when another process changed the claims).
After that it stays correct because every change to a guest's devices
goes through the library: the caller reports a guest it defined
(``VgpuDriver.guest_defined`` re-reads that one domain) and the binder
forgets a released one. A guest defined or undefined by someone else is
reported by libvirt's lifecycle events (:meth:`watch_domain_events`, or
the caller's own callback passing them to :meth:`domain_event`); the next
discovery re-reads that one domain (or forgets it).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from oslo_log import log as logging

from vgpu_driver.exception import (
    DeviceNoRoom,
    DeviceOperationFailed,
    DeviceXMLInvalid,
    HostUnreachable,
    says_no_room,
)
from vgpu_driver.host import domain_xml, nodedev_xml
from vgpu_driver.host.libvirt_api import LibvirtApi, host_edge, libvirt_python
from vgpu_driver.host.sysfs import SysfsTree
from vgpu_driver.model import naming
from vgpu_driver.model.device import (
    Guest,
    HostInventory,
    Mdev,
    Parent,
    implied_parents,
    sort_inventory,
)

LOG = logging.getLogger(__name__)
T = TypeVar("T")

# the longest wait between two attempts to connect again
MAX_RETRY_DELAY = 60.0
# libvirt >= 7.3 creates and defines mdevs itself.
MIN_LIBVIRT_MDEV_API = 7_003_000
# Creates an mdev the caller's way: (parent name, type id, uuid).
Creator = Callable[[str, str, str], object]


class LibvirtHost:
    def __init__(
        self,
        uri: str = "",
        sysfs_root: str | Path = "/sys",
        *,
        opener: Callable[[str], Any] | None = None,
        connection: Any = None,
        connect: Callable[[], Any] | None = None,
        api: LibvirtApi | ModuleType | None = None,
        creator: Creator | None = None,
        relist_interval: float = 300.0,
    ) -> None:
        """``connection``: the caller's open libvirt connection (a compute
        service's own); it is used as it is and never closed here.
        ``connect``: or a function returning the caller's current
        connection (e.g. Nova's ``Host.get_connection``, which reconnects
        after libvirtd restarts), asked each time one is needed.
        ``api``: the libvirt binding that connection comes from (found
        from the connection when not given; libvirt-python otherwise).
        ``creator``: create mdevs the caller's way (e.g. a compute
        service's privileged helper) instead of this adapter's."""
        self.uri = uri
        if isinstance(api, ModuleType):
            api = LibvirtApi(api)
        self._api = api
        self._connect = connect
        self._opener = opener
        self._creator = creator
        self._owns_connection = connection is None and connect is None
        self.sysfs = SysfsTree(sysfs_root)
        self.calls: Counter[str] = Counter()
        self._conn: Any = connection
        self._lock = threading.RLock()
        self._mdevs: dict[str, Mdev] = {}
        self._parent_extras: dict[str, tuple[Path, str | None]] = {}
        self._descriptions: dict[tuple[str, str], str | None] = {}
        # The mdev types whose sysfs description is read (for capability
        # traits); None: every type. A service sets its enabled types: a
        # GRID pGPU lists about 18 types, one file each.
        self.described_types: Callable[[], Collection[str]] | None = None
        # parent name -> (its last XML, the types described, the reading)
        self._parsed_parents: dict[
            str, tuple[str, frozenset[str] | None, Parent]
        ] = {}
        self._guests: dict[str, Guest] | None = None
        # mdevs are listed again when a parent's XML changes, when asked
        # (rescan), and at least every relist_interval seconds
        self.relist_interval = relist_interval
        self._listed_at = 0.0
        self._last: HostInventory | None = None
        self._dirty = True  # mdevs or guests changed since _last
        self._parent_ids: list[int] = []
        self._all_parent_ids: list[int] = []
        self._mdev_list: list[Mdev] = []
        self._implied: list[Parent] = []
        self._sysfs_only: list[Parent] = []
        self._sysfs_only_key: tuple[list[int], list[str]] | None = None
        # the parents' device objects as last listed, with the connection
        # they come from and the mdev_bus registrations they account for
        self._held: tuple[Any, list[str], list[tuple[str, Any]]] | None = None
        self._inactive_supported = True
        self._unsupported: set[str] = set()
        self._version: int | None = None
        # (sequence, domain uuid, defined) from libvirt's event thread:
        # appended there without a lock, applied by the next discovery or
        # bind; a domain re-read after an event answers it
        self._domain_events: collections.deque[tuple[int, str, bool]] = (
            collections.deque()
        )
        self._event_seq = itertools.count()
        self._read_at: dict[str, int] = {}
        # after a lost connection: every guest is read again
        self._rescan_guests = False
        # reconnection of a connection of our own, with backoff
        self._open_failures = 0
        self._retry_at = 0.0
        self._open_error = ""

    # -- plumbing ------------------------------------------------------

    def _call(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        self.calls[name] += 1
        api = self._api
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
        # out of the except block: the warning is not logged with
        # libvirt's exception attached
        raise self._lost(api.message(lost)) from lost

    def _lost(self, reason: str) -> HostUnreachable:
        """The connection to libvirtd is gone (it restarted or stopped):
        the next operation connects again (the caller's ``connect``
        reconnects on its own), lists every device again and reads every
        guest again, since lifecycle events may have been missed."""
        LOG.warning(
            "Lost the connection to libvirt at %s (%s); the next operation "
            "connects again and reads the host and every guest anew",
            self.uri or "the caller's connection",
            reason,
        )
        if self._owns_connection and self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                LOG.debug("Closing the broken connection failed too")
            self._conn = None
        self._held = None
        self._listed_at = float("-inf")
        self._rescan_guests = True
        self._version = None
        return HostUnreachable(
            uri=self.uri or "the caller's connection", reason=reason
        )

    @property
    def call_count(self) -> int:
        return sum(self.calls.values())

    def connection(self) -> Any:
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
                # back off, as Nova's Host does: 1, 2, 4 ... 60 s
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
        if self._api is None:
            if self._owns_connection:
                self._api = libvirt_python()
            else:
                self._api = LibvirtApi.of(self.connection())
        return self._api

    def close(self) -> None:
        """Close the connection this adapter opened (not a caller's)."""
        if self._conn is not None and self._owns_connection:
            self._conn.close()
            self._conn = None

    @host_edge
    def library_version(self) -> int:
        if self._version is None:
            conn = self.connection()
            self._version = int(
                self._call("getLibVersion", conn.getLibVersion)
            )
        return self._version

    @host_edge
    def mdev_exists(self, mdev: Mdev) -> bool:
        """One lookup: is this mdev (still) known to libvirt?"""
        api = self.api
        try:
            self._lookup(mdev)
        except api.error as exc:
            if api.code(exc) == api.no_node_device:
                return False
            raise
        return True

    # -- discovery -----------------------------------------------------

    @host_edge
    def discover(
        self, *, rescan_guests: bool = False, guests: bool = True
    ) -> HostInventory:
        with self._lock:
            conn = self.connection()
            now = time.monotonic()
            relist = (
                self._last is None
                or rescan_guests
                or now - self._listed_at >= self.relist_interval
            )
            parents: list[Parent] | None = None
            # the types whose descriptions are read, asked once a pass
            wanted = (
                frozenset(self.described_types())
                if self.described_types is not None
                else None
            )
            bus = self.sysfs.mdev_bus_listing()
            if not relist:
                parents = self._read_parents(
                    self._list_parents(conn, bus), wanted
                )
                # a parent whose XML changed (its availableInstances) may
                # have new or fewer mdevs: list them again (only them)
                relist = [id(p) for p in parents] != self._parent_ids
            if relist:
                parents = self._relist(conn, parents, wanted, bus)
                self._listed_at = now
                self.sysfs.forget_probes()
            assert parents is not None
            self._parent_ids = [id(p) for p in parents]
            parents.extend(self._sysfs_only_parents(parents, bus or []))
            if self._dirty or relist:
                self._mdev_list = self._mdevs_with_known_parents(parents)
                self._implied = implied_parents(parents, self._mdev_list)
            parents.extend(self._implied)
            # guests never read and not wanted: left to the first caller
            # that needs them
            known = guests or self._guests is not None
            if known and (
                self._guests is None or rescan_guests or self._rescan_guests
            ):
                self._rescan_guests = False
                self._take_domain_events()
                self._read_at.clear()
                self._scan_guests(conn)  # what the events said, and more
            else:
                self.take_guest_changes()
            pfs = self.sysfs.sriov_functions()
            last = self._last
            if (
                last is not None
                and not self._dirty
                and last.guests_known == known
                and [id(p) for p in parents] == self._all_parent_ids
                and tuple(sorted(pfs, key=lambda p: p.name)) == last.pfs
            ):
                return last  # nothing changed: the same reading
            self._all_parent_ids = [id(p) for p in parents]
            self._last = sort_inventory(
                parents,
                self._mdev_list,
                pfs,
                self._guests.values() if self._guests is not None else (),
                known,
            )
            self._dirty = False
            return self._last

    def _relist(
        self,
        conn: Any,
        parents_read: list[Parent] | None,
        wanted: frozenset[str] | None,
        bus: list[str] | None,
    ) -> list[Parent]:
        """Every mdev listed again (its XML read only when new), and the
        parents unless ``parents_read`` already has them."""
        devices = self._list_devices(conn, mdevs_only=parents_read is not None)
        if parents_read is None:
            self._hold(
                conn, bus, [d for d in devices if not d[0].startswith("mdev_")]
            )
        inactive = self._inactive_mdev_names(conn)
        parents: list[Parent] = []
        listed: set[str] = set()
        for name, device in devices:
            listed.add(name)
            if name.startswith("mdev_"):
                self._read_mdev(device, name, active=name not in inactive)
            else:
                parent = self._read_parent(device, name, wanted)
                if parent is not None:
                    parents.append(parent)
        for name in set(self._mdevs) - listed:
            del self._mdevs[name]
            self._dirty = True
        return parents if parents_read is None else parents_read

    def _read_parents(
        self, devices: list[tuple[str, Any]], wanted: frozenset[str] | None
    ) -> list[Parent]:
        found = []
        for name, device in devices:
            parent = self._read_parent(device, name, wanted)
            if parent is not None:
                found.append(parent)
        return found

    def _list_parents(
        self, conn: Any, bus: list[str] | None
    ) -> list[tuple[str, Any]]:
        """(name, device) of the parents only: those of the last listing
        while they still account for the kernel's mdev parents (``bus``)
        on the same connection; else one call (or, by names, one listing
        and a lookup per parent)."""
        held = self._held
        if held is not None and held[0] is conn and held[1] == bus:
            return held[2]
        api = self.api
        if api.list_parents is not None:
            listed = self._call(
                "listAllDevices", conn.listAllDevices, api.list_parents
            )
            devices = [(device.name(), device) for device in listed]
        else:
            devices = self._lookup_names(
                conn,
                self._call("listDevices", conn.listDevices, "mdev_types", 0),
            )
        self._hold(conn, bus, devices)
        return devices

    def _hold(
        self,
        conn: Any,
        bus: list[str] | None,
        devices: list[tuple[str, Any]],
    ) -> None:
        """Keep the parents listed for the next refreshes, if every PCI
        device the kernel registers as an mdev parent is among them. A
        device registered but not (yet) in libvirt's listing, and a host
        without ``class/mdev_bus`` (no sysfs to tell), are listed again
        at every refresh."""
        self._held = None
        if bus is None:
            return
        names = {name for name, _ in devices}
        accounted = all(
            naming.libvirt_pci_name(entry) in names
            for entry in bus
            if naming.normalize_pci_address(entry) is not None
        )
        if accounted:
            self._held = (conn, bus, devices)

    def _list_devices(
        self, conn: Any, *, mdevs_only: bool = False
    ) -> list[tuple[str, Any]]:
        """(name, device) of parents (unless ``mdevs_only``) and mdevs:
        one call; or, with a binding that has no ``mdev_types`` listing
        flag, name listings and one lookup per parent and per mdev not
        seen before (an mdev already read needs none: its XML never
        changes)."""
        api = self.api
        if api.list_parents_and_mdevs is not None:
            listed = self._call(
                "listAllDevices",
                conn.listAllDevices,
                api.list_mdevs if mdevs_only else api.list_parents_and_mdevs,
            )
            return [(device.name(), device) for device in listed]
        names = (
            []
            if mdevs_only
            else [
                *self._call("listDevices", conn.listDevices, "mdev_types", 0)
            ]
        )
        names += self._call("listDevices", conn.listDevices, "mdev", 0)
        return self._lookup_names(conn, names)

    def _lookup_names(
        self, conn: Any, names: list[str]
    ) -> list[tuple[str, Any]]:
        api = self.api
        devices: list[tuple[str, Any]] = []
        for name in names:
            if name in self._mdevs:
                devices.append((name, None))
                continue
            try:
                devices.append(
                    (
                        name,
                        self._call(
                            "nodeDeviceLookupByName",
                            conn.nodeDeviceLookupByName,
                            name,
                        ),
                    )
                )
            except api.error as exc:
                if api.code(exc) != api.no_node_device:
                    raise
                LOG.debug("Node device %s vanished while listed", name)
        return devices

    def _inactive_mdev_names(self, conn: Any) -> set[str]:
        if not self._inactive_supported:
            return set()
        api = self.api
        try:
            found = self._call(
                "listAllDevices", conn.listAllDevices, api.list_inactive_mdevs
            )
        except api.error as exc:
            if api.code(exc) not in api.unsupported:
                raise
            LOG.debug(
                "libvirt at %s cannot list inactive mdevs; all are active",
                self.uri,
            )
            self._inactive_supported = False
            return set()
        return {d.name() for d in found}

    def _xml(self, device: Any, name: str) -> str | None:
        api = self.api
        try:
            return str(self._call("XMLDesc", device.XMLDesc, 0))
        except api.error as exc:
            if api.code(exc) == api.no_node_device:
                LOG.debug("Node device %s vanished while listed", name)
                return None
            raise

    def _flag(self, name: str, fn: Callable[[], int]) -> bool | None:
        """A per-device flag; None (and never asked again) where the
        driver cannot tell."""
        if name in self._unsupported:
            return None
        api = self.api
        try:
            return bool(self._call(name, fn))
        except api.error as exc:
            if api.code(exc) in api.unsupported:
                self._unsupported.add(name)
                return None
            raise

    def _read_mdev(self, device: Any, name: str, active: bool) -> None:
        cached = self._mdevs.get(name)
        if cached is not None:
            if cached.active != active:
                self._mdevs[name] = _replace_active(cached, active)
                self._dirty = True
            return
        text = self._xml(device, name)
        if text is None:
            return
        try:
            mdev = nodedev_xml.parse_mdev(text)
        except DeviceXMLInvalid as exc:
            LOG.warning("Skipping mdev %s: %s", name, exc)
            return
        self._dirty = True
        # persistence is asked only when it matters (removal): no per-mdev
        # round trips at discovery. An inactive mdev is a defined one.
        self._mdevs[name] = (
            mdev
            if active
            else dataclasses.replace(mdev, active=False, persistent=True)
        )

    def _read_parent(
        self, device: Any, name: str, wanted: frozenset[str] | None
    ) -> Parent | None:
        """A parent, its ``wanted`` types described (all when None)."""
        text = self._xml(device, name)
        if text is None:
            self._held = None  # it vanished: list the parents again
            return None
        cached = self._parsed_parents.get(name)
        if cached is not None and cached[:2] == (text, wanted):
            return cached[2]  # availableInstances unchanged: same reading
        try:
            parent, libvirt_path = nodedev_xml.read_parent(text)
        except DeviceXMLInvalid as exc:
            LOG.warning("Skipping mdev parent %s: %s", name, exc)
            return None
        if parent is None:
            return None
        extras = self._parent_extras.get(name)
        if extras is None:
            path = self.sysfs.resolve(libvirt_path, parent.address)
            # libvirt names the driver of a bound device: sysfs only
            # where it does not
            driver = parent.driver or self.sysfs.driver(path)
            extras = self._parent_extras[name] = (path, driver)
        path, driver = extras
        enriched = self._enrich(parent, path, driver, wanted)
        self._parsed_parents[name] = (text, wanted, enriched)
        return enriched

    def _enrich(
        self,
        parent: Parent,
        path: Path,
        driver: str | None,
        wanted: frozenset[str] | None,
    ) -> Parent:
        """Fill in from sysfs what libvirt's XML left out (read once):
        the driver, and the descriptions of the ``wanted`` types (all when
        None)."""
        types = []
        described = False
        for mdev_type in parent.types:
            if mdev_type.description is None and (
                wanted is None or mdev_type.id in wanted
            ):
                key = (parent.name, mdev_type.id)
                if key in self._descriptions:
                    description = self._descriptions[key]
                else:
                    description = self._descriptions[key] = (
                        self.sysfs.type_description(path, mdev_type.id)
                    )
                if description is not None:
                    mdev_type = dataclasses.replace(
                        mdev_type, description=description
                    )
                    described = True
            types.append(mdev_type)
        adds_driver = not parent.driver and driver is not None
        if not described and not adds_driver:
            return parent  # nothing to add (dataclasses.replace is slow)
        return dataclasses.replace(
            parent, driver=parent.driver or driver, types=tuple(types)
        )

    def _sysfs_only_parents(
        self, known: list[Parent], entries: list[str]
    ) -> list[Parent]:
        """Parents the kernel registers (``entries``: in
        ``class/mdev_bus``) but libvirt has no device for (read again
        only when the parents or the registrations change)."""
        key = ([id(p) for p in known], entries)
        if key != self._sysfs_only_key:
            self._sysfs_only = self._read_sysfs_only_parents(known, entries)
            self._sysfs_only_key = key
        return list(self._sysfs_only)

    def _read_sysfs_only_parents(
        self, known: list[Parent], entries: list[str]
    ) -> list[Parent]:
        # a registration named as a known parent is that parent; links
        # are resolved only for the others (virtual parents, rare)
        keys = {key for p in known for key in p.keys}
        others = [e for e in entries if e not in keys]
        if not others:
            return []
        known_paths = {
            self.sysfs.real_path(self._parent_extras[p.name][0])
            for p in known
            if p.name in self._parent_extras
        }
        found = []
        for path, name in self.sysfs.mdev_bus_parents(others).items():
            if path in known_paths:
                continue
            parent = self.sysfs.read_parent(path, name)
            if parent is not None:
                found.append(parent)
        return found

    def _mdevs_with_known_parents(self, parents: list[Parent]) -> list[Mdev]:
        """libvirt names a virtual parent's mdevs' parent ``computer``:
        find the real parent in sysfs, once per mdev."""
        names = {p.name for p in parents}
        for key, mdev in list(self._mdevs.items()):
            if mdev.parent in names:
                continue
            real = self.sysfs.mdev_parent_name(mdev.uuid)
            if real in names:
                self._mdevs[key] = _replace_parent(mdev, str(real))
                self._dirty = True
        return list(self._mdevs.values())

    # -- guests --------------------------------------------------------

    def _scan_guests(self, conn: Any) -> None:
        guests: dict[str, Guest] = {}
        for domain in self._call(
            "listAllDomains", conn.listAllDomains, self.api.list_all_domains
        ):
            guest = self._read_guest(domain)
            if guest is not None:
                guests[guest.uuid] = guest
        self._guests = guests
        self._dirty = True

    def _read_guest(self, domain: Any) -> Guest | None:
        api = self.api
        try:
            text = self._call("domain.XMLDesc", domain.XMLDesc, 0)
            return domain_xml.parse_guest(str(text))
        except api.error as exc:
            if api.code(exc) == api.no_domain:
                return None
            raise
        except DeviceXMLInvalid as exc:
            LOG.warning("Skipping guest: %s", exc)
            return None

    def note_guest(self, guest: Guest) -> None:
        with self._lock:
            if self._guests is not None:
                self._guests[guest.uuid] = guest
                self._dirty = True

    def forget_guest(self, uuid: str) -> None:
        with self._lock:
            if self._guests is not None:
                self._guests.pop(uuid, None)
                self._dirty = True

    @host_edge
    def refresh_guest(self, uuid: str) -> Guest | None:
        """Re-read one domain (two calls), or forget it if it is gone."""
        # domain events about it queued before now are answered by this
        self._read_at[uuid] = next(self._event_seq)
        conn = self.connection()
        api = self.api
        try:
            domain = self._call(
                "lookupByUUIDString", conn.lookupByUUIDString, uuid
            )
        except api.error as exc:
            if api.code(exc) != api.no_domain:
                raise
            self.forget_guest(uuid)
            return None
        guest = self._read_guest(domain)
        if guest is None:
            self.forget_guest(uuid)
        else:
            self.note_guest(guest)
        return guest

    def domain_event(self, uuid: str, defined: bool) -> None:
        """libvirt reported the domain defined (or changed) or undefined,
        by anyone: the next discovery re-reads it (or forgets it). Safe to
        call from libvirt's event thread: it takes no lock, calls nothing
        and logs nothing."""
        self._domain_events.append((next(self._event_seq), uuid, defined))

    def guests_changed(self) -> bool:
        """Domain events wait to be applied."""
        return bool(self._domain_events)

    @host_edge
    def take_guest_changes(self) -> list[tuple[str, Guest | None]]:
        """Apply the waiting domain events: each domain defined is re-read,
        each one undefined forgotten, unless it was re-read since the event
        (the caller's own define, through :meth:`refresh_guest`: that
        reading is newer). Returns (uuid, the guest now or None) for each
        applied."""
        with self._lock:
            events = self._take_domain_events()
            changes: list[tuple[str, Guest | None]] = []
            if self._guests is not None:  # else the first scan reads all
                for uuid, (seq, defined) in events.items():
                    if self._read_at.get(uuid, -1) > seq:
                        continue  # read since: that reading is newer
                    if defined:
                        changes.append((uuid, self.refresh_guest(uuid)))
                    else:
                        self.forget_guest(uuid)
                        changes.append((uuid, None))
            # reads so far are older than any event still to come (losing
            # one only costs a read again)
            self._read_at.clear()
            return changes

    def _take_domain_events(self) -> dict[str, tuple[int, bool]]:
        """The waiting events, the last one per domain."""
        latest: dict[str, tuple[int, bool]] = {}
        while True:
            try:
                seq, uuid, defined = self._domain_events.popleft()
            except IndexError:
                return latest
            latest[uuid] = (seq, defined)

    @host_edge
    def watch_domain_events(self) -> int:
        """Keep guests current from libvirt's lifecycle events, on a
        connection this adapter may register callbacks on (a caller with
        its own lifecycle callback passes events to :meth:`domain_event`
        instead). Needs a running libvirt event loop (as a compute service
        has). Returns the callback id.
        """
        api = self.api

        def on_event(
            _conn: Any, domain: Any, event: int, _detail: int, _opaque: Any
        ) -> None:
            if event in (api.event_defined, api.event_undefined):
                self.domain_event(
                    domain.UUIDString(), event == api.event_defined
                )

        return int(
            self.connection().domainEventRegisterAny(
                None, api.event_lifecycle, on_event, None
            )
        )

    # -- changes -------------------------------------------------------

    @host_edge
    def create_mdev(self, parent: Parent, type_id: str, uuid: str) -> Mdev:
        """Create (and with libvirt >= 7.3 define and autostart) an mdev."""
        with self._lock:
            if self._creator is not None:
                return self._create_with_creator(parent, type_id, uuid)
            conn = self.connection()
            api = self.api
            if self.library_version() >= MIN_LIBVIRT_MDEV_API:
                try:
                    return self._create_with_libvirt(
                        conn, parent, type_id, uuid
                    )
                except api.error as exc:
                    if api.code(exc) not in api.create_unsupported:
                        error = _create_error(exc)
                        raise error(
                            action=f"create mdev {uuid} of type {type_id}",
                            device=parent.name,
                            reason=api.message(exc),
                        ) from exc
                    LOG.debug(
                        "libvirt cannot create mdevs here (%s); writing "
                        "to sysfs",
                        api.message(exc),
                    )
            path = self._parent_extras.get(parent.name, (None, None))[0]
            if path is None:
                path = self.sysfs.resolve(None, parent.address)
            self.sysfs.create_mdev(path, type_id, uuid)
            return Mdev(
                uuid=uuid,
                type_id=type_id,
                parent=parent.name,
                name="mdev_" + uuid.replace("-", "_"),
            )

    def _create_with_creator(
        self, parent: Parent, type_id: str, uuid: str
    ) -> Mdev:
        assert self._creator is not None
        try:
            self._creator(parent.name, type_id, uuid)
        except Exception as exc:
            raise _create_error(exc)(
                action=f"create mdev {uuid} of type {type_id}",
                device=parent.name,
                reason=str(exc) or type(exc).__name__,
            ) from exc
        # read (with its libvirt name) at the next discovery
        self._listed_at = float("-inf")
        return Mdev(
            uuid=uuid,
            type_id=type_id,
            parent=parent.name,
            name="mdev_" + uuid.replace("-", "_"),
        )

    def _create_with_libvirt(
        self, conn: Any, parent: Parent, type_id: str, uuid: str
    ) -> Mdev:
        xml = (
            f"<device><parent>{parent.name}</parent>"
            "<capability type='mdev'>"
            f"<type id='{type_id}'/><uuid>{uuid}</uuid>"
            "</capability></device>"
        )
        device = self._call(
            "nodeDeviceCreateXML", conn.nodeDeviceCreateXML, xml, 0
        )
        persistent = False
        try:
            defined = self._call(
                "nodeDeviceDefineXML", conn.nodeDeviceDefineXML, xml, 0
            )
            self._call("setAutostart", defined.setAutostart, 1)
            persistent = True
        except self.api.error as exc:
            LOG.warning(
                "mdev %s on %s is created but not persistent (%s); it will "
                "be recreated after a host reboot at service start",
                uuid,
                parent.name,
                self.api.message(exc),
            )
        mdev = Mdev(
            uuid=uuid,
            type_id=type_id,
            parent=parent.name,
            name=device.name(),
            persistent=persistent,
            autostart=persistent,
        )
        self._mdevs[mdev.name] = mdev
        self._dirty = True
        return mdev

    def _lookup(self, mdev: Mdev) -> Any:
        conn = self.connection()
        return self._call(
            "nodeDeviceLookupByName", conn.nodeDeviceLookupByName, mdev.name
        )

    @host_edge
    def start_mdev(self, mdev: Mdev) -> None:
        with self._lock:
            api = self.api
            try:
                self._call("create", self._lookup(mdev).create, 0)
            except api.error as exc:
                raise DeviceOperationFailed(
                    action="start mdev",
                    device=mdev.uuid,
                    reason=api.message(exc),
                ) from exc
            self._mdevs[mdev.name] = _replace_active(mdev, True)
            self._dirty = True

    @host_edge
    def remove_mdev(self, mdev: Mdev) -> None:
        with self._lock:
            api = self.api
            try:
                device = self._lookup(mdev)
                persistent = mdev.persistent
                if persistent is None:
                    persistent = self._flag(
                        "isPersistent", device.isPersistent
                    )
                if mdev.active:
                    self._call("destroy", device.destroy)
                if persistent:
                    self._call("undefine", device.undefine, 0)
            except api.error as exc:
                if api.code(exc) not in api.remove_via_sysfs:
                    raise DeviceOperationFailed(
                        action="remove mdev",
                        device=mdev.uuid,
                        reason=api.message(exc),
                    ) from exc
                self.sysfs.remove_mdev(mdev.uuid)
            self._mdevs.pop(mdev.name, None)
            self._dirty = True

    def set_vf_type(self, vf_address: str, type_id: int) -> None:
        self.sysfs.set_vf_type(vf_address, type_id)


def _replace_active(mdev: Mdev, active: bool) -> Mdev:
    return dataclasses.replace(mdev, active=active)


def _replace_parent(mdev: Mdev, parent: str) -> Mdev:
    return dataclasses.replace(mdev, parent=parent)


def _create_error(exc: BaseException) -> type[DeviceOperationFailed]:
    """The error a failed create is: the parent is full (the kernel's
    EDQUOT, however libvirt, mdevctl or the caller tell it) or it
    failed."""
    return DeviceNoRoom if says_no_room(exc) else DeviceOperationFailed
