"""Taking in a reading of the host: the record of the mdevs seen and the
binder's view follow it.

:class:`HostReading` owns which reading was taken in last (its
generation, and the reading the binder's view was built from or
followed). A reading that changed is taken in one of three ways:

* its guests alone changed (the host says which, or they are compared):
  each guest defined or gone is applied alone (:mod:`.guests`);
* its node devices alone changed, and the host says which parents (an
  mdev made or removed, and its parent's room): the mdevs seen and the
  view follow those parents alone (:mod:`.devices`);
* anything else: the mdevs seen are noted and the view built again from
  the whole reading.

The first two cost what the change costs, not what the host holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from oslo_log import log as logging

from vgpu_driver.host.base import Host
from vgpu_driver.model import view_edits
from vgpu_driver.model.binding import Target
from vgpu_driver.model.check import host_problems
from vgpu_driver.model.device import HostInventory
from vgpu_driver.model.device_changes import said_since, touched_parents
from vgpu_driver.records.merged import keep
from vgpu_driver.records.seen import SeenMdevs
from vgpu_driver.service import devices
from vgpu_driver.service.binder import DeviceBinder
from vgpu_driver.service.guests import catch_up as guest_catch_up
from vgpu_driver.service.guests import changes as guest_changes
from vgpu_driver.service.guests import follow as follow_guests
from vgpu_driver.service.settings import Settings

LOG = logging.getLogger(__name__)


class HostReading:
    def __init__(
        self,
        settings: Settings,
        host: Host,
        binder: DeviceBinder,
        seen: SeenMdevs,
        lock: threading.RLock,
        targets: Callable[[], Mapping[str, Target]],
    ) -> None:
        self.settings = settings
        self.host = host
        self.binder = binder
        self.seen = seen
        self.lock = lock
        self.targets = targets
        # the generation of the last reading taken in (None: take the
        # next one in whatever it is)
        self._last_generation: int | None = None
        # the reading the binder's view was last built from or followed
        self._taken: HostInventory | None = None
        self.warned_addresses = False

    def discover(
        self, *, rescan_guests: bool = False, guests: bool = True
    ) -> HostInventory:
        """Read the host. ``guests=False``: guests never read so far stay
        unread (``guests_known`` False); nothing that needs them (the
        binder's view, the record of mdevs seen) is touched then. Where
        taking the reading in handed devices back to the host (a guest
        let go of an mdev removed once unused, of a VF cleared), the
        host as it is then is read again: what a caller plans is never
        what the library just changed (the reading says both changes
        from the one the first was said from, when both say theirs)."""
        ledger = self.binder.ledger
        handed = ledger.handed_back
        inventory = self._take(rescan_guests, guests)
        if ledger.handed_back != handed:
            first, inventory = inventory, self._take(False, guests, True)
            # both changes said as one, from the reading the caller had
            inventory = said_since(first, inventory) or inventory
        return inventory

    def _take(
        self, rescan_guests: bool, guests: bool, again: bool = False
    ) -> HostInventory:
        """Read the host and take the reading in (the binder's view, the
        mdevs seen). ``again``: right after the last, for what taking it
        in changed (see :meth:`Host.discover`). One reading at a time (a
        metrics scrape beside the periodic refresh waits): what the
        binder set ahead of readings is held by the one that took it
        until that reading sets it again, and another taken in meanwhile
        would build the view without it."""
        with self.lock:
            return self._read_and_take(rescan_guests, guests, again)

    def _read_and_take(
        self, rescan_guests: bool, guests: bool, again: bool
    ) -> HostInventory:
        # When another process changed the records (it ended a claim
        # because the guest has it, dropped one...), the reading is taken
        # in whole: the ledger reads every guest again under the records'
        # lock, and the view is built from that (once: the records are
        # then as this process last read them)
        whole = rescan_guests or self.binder.view_is_stale()
        ledger = self.binder.ledger
        edits: dict[str, set[str]] = {}
        marked: dict[str, object] = {}
        ahead: set[str] = set()
        view = ledger.view
        if view.edits or view.guests_ahead:  # (one made after this look:
            with ledger.lock:  # the next one) what the binder changed
                view = ledger.view  # before this reading
                edits, view.edits = view.edits, {}
                ahead, view.guests_ahead = view.guests_ahead, set()
                marked = view_edits.marks(view, edits)
        inventory = self.host.discover(
            rescan_guests=rescan_guests, guests=guests, again=again
        )
        try:
            taken = self._take_in(inventory, whole)
        except BaseException:
            self._put_back(edits, ahead)
            raise
        if edits:
            self._resync(inventory, edits, marked)
        if ahead:
            if inventory.guests_known:
                guest_catch_up(ledger, ahead)
            else:
                self._put_back({}, ahead)
        return taken

    def _put_back(self, edits: dict[str, set[str]], ahead: set[str]) -> None:
        """What the binder changed, still to be set by a reading."""
        ledger = self.binder.ledger
        with ledger.lock:
            view = ledger.view
            for name, uuids in edits.items():
                view.edits.setdefault(name, set()).update(uuids)
            view.guests_ahead |= ahead

    def _take_in(self, inventory: HostInventory, whole: bool) -> HostInventory:
        """``whole``: taken in whole (not followed), even when the host
        says nothing changed since the last reading."""
        with self.lock:
            if not self.warned_addresses:
                config = self.settings.config
                for problem in host_problems(config, inventory):
                    LOG.warning("Configuration: %s", problem)
                self.warned_addresses = True
            if inventory.generation == self._last_generation and not whole:
                # the adapter saw no change: the binder's view, kept
                # current by its own binds, stays (but for those the
                # host undid since: see _resync)
                return inventory
            if inventory.generation < self.binder.ledger.view_generation:
                # read before the one the view is from (another thread's,
                # taken in first): nothing of it is newer. (A first look:
                # the view changes only where it is looked again, under
                # the ledger's lock; see guests.may_follow.)
                return inventory
            self._last_generation = inventory.generation
            if not inventory.guests_known:
                return inventory
            taken, self._taken = self._taken, None
            if (
                taken is not None
                and not whole
                and self._follow(taken, inventory)
            ):
                self._taken = inventory
                return inventory
            seen = {m.uuid: (m.parent, m.type_id) for m in inventory.mdevs}
            # forget devices no guest uses any more and that are gone
            users = inventory.mdev_users()
            kept = {
                uuid: where
                for uuid, where in self.seen.snapshot().items()
                if uuid in users and uuid not in seen
            }
            saved = keep(
                "the mdevs seen",
                lambda: self.seen.note({**kept, **seen}, users),
            )
            if not saved:
                self._last_generation = None  # the next discovery retries
            took = self.binder.refresh(inventory, self.targets())
            # what the view was built from (none: the next reading builds
            # it again, as it retries the save, or as the view is from a
            # newer reading another thread took)
            self._taken = inventory if saved and took else None
        return inventory

    def _resync(
        self,
        inventory: HostInventory,
        edits: dict[str, set[str]],
        marked: Mapping[str, object],
    ) -> None:
        """The parents the binder changed before ``inventory`` was taken,
        as ``inventory`` has them (see
        :mod:`~vgpu_driver.model.view_edits`); those a bind changed since
        are left to the next reading, with who uses what when the
        reading did not say it."""
        ledger = self.binder.ledger
        with ledger.lock:
            view = ledger.view
            now = {}
            for name, uuids in edits.items():
                if name in view.edits or not inventory.guests_known:
                    view.edits.setdefault(name, set()).update(uuids)
                else:
                    now[name] = uuids
            # those taking the reading in set: their mdevs alone
            followed = view_edits.replaced(
                view, {name: marked[name] for name in now}
            )
            view_edits.resync_parents(
                view, inventory, now, ledger.record.made, followed
            )

    def _follow(self, taken: HostInventory, now: HostInventory) -> bool:
        """The record of mdevs seen and the binder's view follow what
        changed from ``taken`` to ``now``: the node devices the host
        names, then the guests it says changed with them (a spawn whose
        bind made its mdev), or its guests alone. False: take ``now``
        whole."""
        touched = touched_parents(taken, now)
        if touched is not None:
            if not devices.follow(
                self.binder.ledger, self.seen, taken, now, touched
            ):
                return False
            if now.guest_changes is None:
                return True
        elif not now.same_devices(taken):
            return False
        diff = guest_changes(taken, now)
        seen = self.seen
        # the mdevs the guests changed use now are on disk in the mdevs
        # seen first (before their spawn claims end)
        where = {
            uuid: found
            for _uuid, _before, guest in diff
            if guest is not None
            for uuid in guest.mdevs
            if (found := seen.get(uuid)) is not None
        }
        if not keep("the mdevs seen", lambda: seen.remember(where)):
            return False  # the full path retries the save
        return follow_guests(self.binder.ledger, diff, now.generation)
