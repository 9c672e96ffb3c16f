"""The libvirt adapter: :class:`LibvirtHost` puts together the parts
that talk to libvirt, each owning its state: the connection
(:mod:`.connection`), the node devices (:mod:`.nodedevs`, with
:mod:`.parents`), the guests (:mod:`.guests`) and the mdev operations
(:mod:`.mdev_ops`), under one lock; what one reading hands the next is
:mod:`.readings`.

It imports libvirt-python only when it opens its own connection; given a
caller's connection it uses the binding that connection comes from.

Cost of :meth:`LibvirtHost.discover` (every call is counted in
``calls``):

* one ``listAllDevices(MDEV_TYPES | MDEV)``: parents and mdevs together,
  as objects, with no per-name lookup;
* one ``listAllDevices(MDEV | INACTIVE)`` for the mdevs that are only
  defined (skipped for good where libvirt refuses the flag);
* one ``XMLDesc`` per parent, whose ``availableInstances`` change (with
  node-device events, :meth:`watch_node_device_events`: only for the
  parents the events since the last reading name); the
  parents' device objects are kept and listed again only when the
  kernel's mdev parents (``/sys/class/mdev_bus``, read at every
  refresh) or the connection changed, or a parent vanished;
* an mdev's XML is read on first sight and cached; whether it is
  persistent is asked only when it is removed (a defined-only mdev is
  persistent by definition);
* a parent whose ``availableInstances`` changed (an mdev made, started,
  stopped or removed there) has its sysfs directory listed, which names
  its running mdevs and their directories' inodes: one lookup per mdev
  that came or went, or was made again under its uuid (a new inode) or
  started (a definition may change while stopped), and no listing of
  every mdev (that is left to the relist interval, and to a sysfs or
  libvirt that cannot tell).

So a steady-state refresh costs P calls for P parents (none with
node-device events), whatever the number of mdevs and guests (and
libvirtd does not walk every node device of the host to list them); a
refresh after an mdev came or went costs
one or two calls more. The reading then says which parents changed
(``HostInventory.device_changes``).

Guests: which guest uses which device is read from every domain's XML on
the first :meth:`discover` (again when ``rescan_guests`` is asked, as a
service does at start, when another process changed the claims, and
every ``guest_rescan_interval`` seconds as a safety net). In between it
stays correct because every change to a guest's devices goes through
the library: the caller reports a guest it defined
(``VgpuDriver.guest_defined`` re-reads that one domain) and the binder
forgets a released one. A guest defined, undefined or hot-plugged by
someone else is reported by libvirt's lifecycle and device events
(:meth:`watch_domain_events`, or the caller's own callbacks passing them
to :meth:`domain_event`); the next discovery re-reads that one domain
(or forgets it).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Collection
from pathlib import Path
from types import ModuleType
from typing import Any

from vgpu_driver.host.connection import MAX_RETRY_DELAY, Connection
from vgpu_driver.host.guests import Guests
from vgpu_driver.host.libvirt_api import DEVICE_ADDED, LibvirtApi, host_edge
from vgpu_driver.host.mdev_ops import Creator, MdevOperations
from vgpu_driver.host.nodedevs import NodeDevices
from vgpu_driver.host.nvml import NvmlReader, nvidia_gpus
from vgpu_driver.host.parents import ParentReader
from vgpu_driver.host.plain_sriov import PlainSriovScan
from vgpu_driver.host.readings import Devices, KnownGuests, Readings
from vgpu_driver.host.sysfs import SysfsTree
from vgpu_driver.model.device import (
    Guest,
    HostInventory,
    Mdev,
    Parent,
)

__all__ = ["DEVICE_ADDED", "MAX_RETRY_DELAY", "Creator", "LibvirtHost"]


class LibvirtHost:
    """The :class:`~vgpu_driver.host.base.Host` over libvirt: one lock,
    and the parts that own the state (the connection, the node devices
    with their parents, the guests, the mdev operations, the last
    reading)."""

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
        guest_rescan_interval: float = 3600.0,
        nvml: NvmlReader | None = None,
    ) -> None:
        """``connection``: the caller's open libvirt connection (a compute
        service's own); it is used as it is and never closed here.
        ``connect``: or a function returning the caller's current
        connection (e.g. Nova's ``Host.get_connection``, which reconnects
        after libvirtd restarts), asked each time one is needed.
        ``api``: the libvirt binding that connection comes from (found
        from the connection when not given; libvirt-python otherwise).
        ``creator``: create mdevs the caller's way (e.g. a compute
        service's privileged helper) instead of this adapter's.
        ``relist_interval``: seconds after which a discovery lists every
        node device again, a safety net for a change sysfs did not tell.
        ``guest_rescan_interval``: and reads every guest again, for a
        domain event that never reached the library (one full reading of
        the guests: about 90 ms at 2048 guests).
        ``nvml``: NVIDIA's management library, read at each discovery."""
        if isinstance(api, ModuleType):
            api = LibvirtApi(api)
        self.link = Connection(
            uri, opener=opener, connection=connection, connect=connect, api=api
        )
        self.sysfs = SysfsTree(sysfs_root)
        self.plain_sriov = PlainSriovScan(str(self.sysfs.root))
        reader = ParentReader(self.sysfs)
        self.devices = NodeDevices(
            self.link, self.sysfs, reader, relist_interval
        )
        self.guests = Guests(self.link, guest_rescan_interval)
        self.mdev_ops = MdevOperations(
            self.link, self.devices, reader, self.sysfs, creator
        )
        self.nvml = nvml
        self._lock = threading.RLock()
        # The mdev types whose sysfs description is read (for capability
        # traits); None: every type. A service sets its enabled types: a
        # GRID pGPU lists about 18 types, one file each.
        self.described_types: Callable[[], Collection[str]] | None = None
        self.readings = Readings(self.sysfs)

    # -- the connection ------------------------------------------------

    @property
    def uri(self) -> str:
        return self.link.uri

    @property
    def calls(self) -> Counter[str]:
        """Every libvirt call made, by name."""
        return self.link.calls

    @property
    def call_count(self) -> int:
        return sum(self.link.calls.values())

    @property
    def known_api(self) -> LibvirtApi | None:
        return self.link.known_api

    @property
    def api(self) -> LibvirtApi:
        return self.link.api

    @property
    def relist_interval(self) -> float:
        return self.devices.relist_interval

    def connection(self) -> Any:
        return self.link.get()

    def close(self) -> None:
        """Close the connection this adapter opened (not a caller's)."""
        self.link.close()

    @host_edge
    def library_version(self) -> int:
        return self.link.library_version()

    # -- discovery -----------------------------------------------------

    @host_edge
    def discover(
        self,
        *,
        rescan_guests: bool = False,
        guests: bool = True,
        again: bool = False,
    ) -> HostInventory:
        with self._lock:
            conn = self.link.get()
            # the types whose descriptions are read, asked once a pass
            wanted = (
                frozenset(self.described_types())
                if self.described_types is not None
                else None
            )
            # guests never read and not wanted: left to the first caller
            # that needs them
            tracker = self.guests
            tracker.watching.watch_again(conn)
            self.devices.events.watch_again(conn)
            known = guests or tracker.known is not None
            if known and (rescan_guests or tracker.scan_due()):
                tracker.scan(conn)
            else:
                tracker.take_changes()
            relist = self.readings.last is None or rescan_guests
            try:
                parents, mdevs = self.devices.read(
                    conn,
                    relist=relist
                    or (
                        tracker.dirty
                        and self.devices.made_unseen(
                            tracker.mdevs_of_changed()
                        )
                    ),
                    wanted=wanted,
                    again=again,
                )
            except Exception:
                # the node-device events it took are spent: every device
                # is listed at the next reading, so none is missed
                self.devices.forget_listing()
                raise
            pfs = self.sysfs.sriov_functions()
            plain = self.plain_sriov.gpus()
            said = (
                self.nvml.read(nvidia_gpus(parents, pfs))
                if self.nvml is not None
                else None
            )
            found = Devices(parents, mdevs, pfs, plain, said)
            readings = self.readings
            same = readings.same_devices(found, self.devices.dirty)
            last = readings.last
            if (
                same
                and not tracker.dirty
                and last is not None
                and last.guests_known == known
            ):
                return last  # nothing changed: the same reading
            self.devices.dirty = tracker.dirty = False
            everyone = (
                tracker.known.values() if tracker.known is not None else ()
            )
            return readings.take(
                found,
                same,
                self.devices.mdevs.take_changes(),
                KnownGuests(known, everyone, tracker.take_diff()),
            )

    # -- guests --------------------------------------------------------

    def note_guest(self, guest: Guest) -> None:
        with self._lock:
            self.guests.note(guest)

    def forget_guest(self, uuid: str) -> None:
        with self._lock:
            self.guests.forget(uuid)

    @host_edge
    def refresh_guest(self, uuid: str) -> Guest | None:
        """Re-read one domain (see :meth:`Guests.refresh`), or forget it
        if it is gone."""
        with self._lock:
            return self.guests.refresh(uuid)

    def known_guest(self, uuid: str) -> Guest | None:
        with self._lock:
            known = self.guests.known
            return None if known is None else known.get(uuid)

    def domain_event(self, uuid: str, defined: bool) -> None:
        """libvirt reported the domain defined (or changed), started or
        stopped, or undefined (``defined`` False), by anyone: the next
        discovery re-reads it (or forgets it). Safe to call from
        libvirt's event thread: it takes no lock, calls nothing and logs
        nothing."""
        self.guests.domain_event(uuid, defined)

    def guests_changed(self) -> bool:
        """Domain events wait to be applied."""
        return self.guests.changed()

    @host_edge
    def take_guest_changes(self) -> list[tuple[str, Guest | None]]:
        """Apply the waiting domain events (see :meth:`Guests.
        take_changes`)."""
        with self._lock:
            return self.guests.take_changes()

    @host_edge
    def watch_domain_events(self) -> list[int]:
        """Keep guests current from libvirt's lifecycle and device
        (hot-plug) events, on a connection this adapter may register
        callbacks on (a caller with its own callbacks passes events to
        :meth:`domain_event` instead), and on each one opened again after
        libvirtd restarted. Needs a running libvirt event loop (as a
        compute service has). Returns the callback ids."""
        with self._lock:
            return self.guests.watching.watch()

    def watch_node_device_events(self) -> None:
        """Read again only the parents libvirt's node-device events name,
        on each connection the adapter uses from the next reading on (see
        :mod:`.nodedev_events`). Needs a running libvirt event loop (as a
        compute service has); a connection that refuses the callbacks
        has every parent read at every reading."""
        self.devices.events.want()

    # -- changes -------------------------------------------------------

    @host_edge
    def mdev_exists(self, mdev: Mdev) -> bool:
        """One lookup: is this mdev (still) known to libvirt?"""
        return self.mdev_ops.exists(mdev)

    @host_edge
    def create_mdev(self, parent: Parent, type_id: str, uuid: str) -> Mdev:
        """Create (and with libvirt >= 7.3 define and autostart) an mdev."""
        with self._lock:
            return self.mdev_ops.create(parent, type_id, uuid)

    @host_edge
    def start_mdev(self, mdev: Mdev) -> None:
        with self._lock:
            self.mdev_ops.start(mdev)

    @host_edge
    def remove_mdev(self, mdev: Mdev) -> None:
        with self._lock:
            self.mdev_ops.remove(mdev)

    def set_vf_type(self, vf_address: str, type_id: int) -> None:
        self.sysfs.set_vf_type(vf_address, type_id)

    def has_mdev(self, uuid: str) -> bool:
        return self.sysfs.mdev_parent_name(uuid) is not None

    def vf_type(self, vf_address: str) -> int | None:
        return self.sysfs.vf_type(vf_address)
