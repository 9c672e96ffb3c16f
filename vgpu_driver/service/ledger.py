"""The binder's state: the claims record and the view of the host, under
one lock.

:class:`Ledger` owns, for one binder:

* ``record`` (:class:`~vgpu_driver.records.claims.ClaimsRecord`): the
  claims and VF types, re-read from disk under the records' lock by
  every operation (:meth:`Ledger.locked`);
* ``view`` (:class:`~vgpu_driver.model.device_view.DeviceView`): which
  devices exist, which are free, who uses what, built from a reading of
  the host and kept current by the binder's own changes (set again from
  the next reading: :mod:`~vgpu_driver.model.view_edits`) and by the
  guests it is told of;
* ``targets``: what each device provider stands for;
* ``seen`` (:class:`~vgpu_driver.records.seen.SeenMdevs`): where the
  mdevs are; an mdev's spawn claim ends only once its parent and type
  are on disk there (its guest's domain names the mdev, not its
  parent).

Several processes may bind on one host, so choosing and claiming happen
under the records' lock after re-reading the claims. A binder that finds
an epoch it did not write knows another process changed the host, so it
reads the host again, guests included, before it chooses anything.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping

from oslo_log import log as logging

from vgpu_driver.exception import DeviceCapacityExhausted
from vgpu_driver.host.base import Host
from vgpu_driver.model import binding
from vgpu_driver.model.binding import BoundDevice, Target
from vgpu_driver.model.claims import (
    RELEASE,
    Claims,
    ended_by_guests,
)
from vgpu_driver.model.device import Guest, HostInventory, Mdev
from vgpu_driver.model.device_view import DeviceView
from vgpu_driver.model.view_follow import adopted, vf_types_in_use
from vgpu_driver.records.carriers import Carrier
from vgpu_driver.records.claims import ClaimsRecord
from vgpu_driver.records.seen import SeenMdevs
from vgpu_driver.records.store import StateStore, StateStoreError
from vgpu_driver.service import guests, hand_back
from vgpu_driver.service.failing import FailedParents

LOG = logging.getLogger(__name__)


class Ledger:
    def __init__(
        self,
        host: Host,
        state: StateStore | None,
        *,
        remove_unused: bool,
        failed: FailedParents,
    ) -> None:
        self.host = host
        self.failed = failed
        self.record = ClaimsRecord(state)
        # this process as the carrier of the releases it records
        self.carrier = Carrier(None if state is None else state.directory)
        self.seen = SeenMdevs(state)
        self.view = DeviceView.empty()
        self.remove_unused = remove_unused
        self.targets: dict[str, Target] = {}
        self.lock = threading.RLock()
        self._has_view = False  # a reading with guests was taken
        # the generation of the reading the view was last built from or
        # followed (see guests.may_follow)
        self.view_generation = -1
        self._depth = 0  # nested locked() of this thread
        # per thread: None outside a pass (see one_look), else whether a
        # read in it found the records current
        self._pass = threading.local()
        # devices guests let go of, recorded under the lock, to hand back
        # to the host once it is left
        self._handing_back: list[tuple[str, BoundDevice]] = []
        self.handed_back = 0  # devices handed back so far (compared only)
        # device -> instance of the spawn claims the reading of the
        # outermost locked() ended (a guest's domain had the device)
        self.view_ended: dict[str, str] = {}

    @property
    def claims(self) -> Claims:
        """The claims as read under the current :meth:`locked`."""
        return self.record.claims

    @property
    def vf_types(self) -> dict[str, int]:
        return self.record.vf_types

    @contextlib.contextmanager
    def locked(
        self, *, fresh_view: bool = False, view: bool = True
    ) -> Iterator[None]:
        """Hold the thread lock and the records' cross-process lock, with
        the claims and VF types freshly read from disk. ``fresh_view``:
        also re-read the host if another process changed the records (do
        it before choosing or removing devices). ``view``: the operation
        reads the view, which is built now (guests included) if no
        reading with guests was taken yet, and brought up to date with
        the guests domain events reported since."""
        handing_back: list[tuple[str, BoundDevice]] = []
        with self.lock:
            if not self._depth:
                self.view_ended = {}
            self._depth += 1
            try:
                with self.record.locked():
                    if fresh_view and self.record.stale:
                        self.rebuild_view("another process changed the claims")
                    elif view and not self._has_view:
                        self.rebuild_view("the first operation needs it")
                    elif view and self.host.guests_changed():
                        guests.apply_changes(self)
                    yield
            except BaseException:
                if self._depth == 1:
                    # recorded, never to be carried out by this call: cut
                    # short, for the next recovery to finish
                    for _, device in self._handing_back:
                        self.carrier.carrying.discard(device.id)
                    self._handing_back = []
                raise
            finally:
                self._depth -= 1
                if not self._depth:
                    handing_back, self._handing_back = self._handing_back, []
        # outside both locks: the host is changed for devices guests let
        # go of (recorded as release claims under the lock)
        for instance, device in handing_back:
            hand_back.finish_release(self, instance, [device])
            self.handed_back += 1

    @contextlib.contextmanager
    def peeked(self) -> Iterator[None]:
        """For a read of the records alone: held without the records'
        cross-process lock when they are as this process last read or
        wrote them (:meth:`ClaimsRecord.current`: one look, a stat of the
        claims file and one of its journal), read afresh
        under it otherwise."""
        looked = getattr(self._pass, "current", None)
        with self.lock:
            if looked or self.record.current():
                if looked is False:
                    self._pass.current = True
                yield
                return
        with self.locked(view=False):
            yield

    @contextlib.contextmanager
    def one_look(self) -> Iterator[None]:
        """A pass whose reads of the records (:meth:`peeked`) look at the
        claims files once: the first that finds them current stands for
        the rest of this thread's pass, as if the pass had read them
        then. An action (:meth:`locked`) still looks again under the
        lock (and re-reads what another process changed)."""
        if getattr(self._pass, "current", None) is not None:
            yield  # nested: the outer pass looks
            return
        self._pass.current = False
        try:
            yield
        finally:
            self._pass.current = None

    def save(
        self,
        claims: Claims | None = None,
        vf_types: dict[str, int] | None = None,
    ) -> None:
        """Write the records (inside :meth:`locked`)."""
        self.record.save(claims, vf_types)

    def is_stale(self) -> bool:
        """Has another process changed the records since we last read
        them (so our reading of the host may be out of date)?"""
        if self.record.state is None:
            return False
        with self.peeked():
            return self.record.stale

    def repair(self) -> list[str]:
        with self.lock:
            return self.record.repair()

    # -- the view of the host ------------------------------------------

    def refresh(
        self, inventory: HostInventory, targets: Mapping[str, Target]
    ) -> bool:
        """Take a new reading of the host and of the providers. When the
        records are as this process last read them and the reading ends
        no claim and records no VF type, nothing is written: the records'
        lock is not taken. False: the view was built meanwhile from a
        newer reading (another thread's, after another process changed
        the records), which is kept."""
        with self.peeked():
            if inventory.generation < self.view_generation:
                self.targets = dict(targets)
                return False
            if (
                self.record.made_known
                and not self.view.guests_ahead
                and not self.record.stale
            ):
                view = DeviceView.of(inventory, self.record.made)
                if not ended_by_guests(
                    self.claims, view.used
                ) and not vf_types_in_use(inventory, view.used, self.vf_types):
                    self.targets = dict(targets)
                    self._has_view, self.record.stale = True, False
                    self.view = view
                    self.view_generation = inventory.generation
                    return True
        with self.locked(view=False):
            self.targets = dict(targets)
            if inventory.generation < self.view_generation:
                return False
            if self.record.stale:
                # another process wrote the records since the view: they
                # may be newer than the reading (a claim it ended for a
                # guest the reading does not have yet), so the host is
                # read again under their lock
                self.rebuild_view("another process changed the claims")
                return False
            self.take_view(inventory)  # (the guests set ahead kept)
        return True

    def rebuild_view(self, why: str) -> tuple[Guest, ...]:
        """Read the host again, guests too (inside :meth:`locked`).
        Returns the guests read."""
        LOG.info("Reading the host and every guest: %s", why)
        inventory = self.host.discover(rescan_guests=True)
        self.take_view(inventory)
        return inventory.guests

    def take_view(self, inventory: HostInventory) -> None:
        self._has_view = True
        self.record.stale = False
        adopting = not self.record.made_known
        if adopting:
            self.record.made = adopted(inventory, self.vf_types)
            LOG.info(
                "First start on this host: the %d mdev(s) and typed VF(s) "
                "already here are taken as this library's; any another "
                "manager makes from now on is left alone",
                len(self.record.made),
            )
        ahead = self.view.guests_ahead  # (kept: see guests.catch_up)
        self.view = DeviceView.of(inventory, self.record.made)
        self.view.guests_ahead = ahead
        self.view_generation = inventory.generation
        # those the view set since the reading was taken are newer than
        # it: set as the host knows them now, before anything is judged
        # from the view (a VF of a guest deleted since would have its
        # type recorded again)
        noted = guests.set_as_known(self, ahead) if ahead else []
        # a spawn claim ends when the guest's domain has the device
        ended = self.where_kept(ended_by_guests(self.claims, self.view.used))
        for device_id in ended:
            self.view_ended[device_id] = self.claims.pop(device_id)["instance"]
        # every VF a guest uses keeps its type across reboots
        in_use = vf_types_to_record(self, inventory)
        self.vf_types.update(in_use)
        if noted or ended or in_use or adopting:
            # ending claims the domains now hold and recording VF types in
            # use can wait for a later reading: never stop one for it
            try:
                self.save()
            except StateStoreError as exc:
                LOG.warning("Could not update the claims now: %s", exc)

    def where_kept(self, ending: list[str]) -> list[str]:
        """The spawn claims that may end (inside :meth:`locked`): their
        mdevs' parents and types are put on disk in the mdevs seen
        first. None may if that cannot be written: the claims stay, and
        a later reading ends them."""
        where = {
            device_id: (claim["parent"], claim["type_id"])
            for device_id in ending
            if (claim := self.claims[device_id])["kind"] == "mdev"
        }
        try:
            self.seen.remember(where)
        except StateStoreError as exc:
            LOG.warning(
                "Could not record where the mdevs %s are; their spawn "
                "claims stay until it is: %s",
                ", ".join(sorted(where)),
                exc,
            )
            return []
        return ending

    def choose(self, wanted: list[tuple[str, str, int]]) -> list[BoundDevice]:
        """Choose devices for ``wanted`` (inside :meth:`locked`); a free
        mdev that vanished behind our back (one lookup each) is dropped
        from the view and the choice made again."""
        view = self.view
        for _attempt in range(8):
            busy = view.busy(self.claims)
            chosen = binding.choose(
                wanted,
                view.parents,
                view.pfs,
                busy,
                view.groups,
                view.plain_vfs(),
            )
            gone = _vanished(self.host, view, chosen)
            if not gone:
                return chosen
            for device in gone:
                LOG.warning("mdev %s vanished; not reusing it", device.id)
                view.vanished(device)
        raise DeviceCapacityExhausted(
            count=sum(n for _, _, n in wanted),
            type_id=",".join({t for _, t, _ in wanted}),
            parent=",".join({d for d, _, _ in wanted}),
        )

    def made_mdev(self, mdev: Mdev) -> None:
        with self.lock:
            self.view.made(mdev)

    # -- handing devices back to the host ------------------------------

    def hand_back_later(self, instance: str, device: BoundDevice) -> None:
        """``device`` is under a release claim of ``instance`` (saved):
        the host is changed once the outermost :meth:`locked` is left,
        this process its carrier meanwhile."""
        self.carrier.carrying.add(device.id)
        self._handing_back.append((instance, device))

    def changes_host(self, device: BoundDevice) -> bool:
        return self.view.changes_host(device, self.remove_unused)


def _vanished(
    host: Host, view: DeviceView, chosen: list[BoundDevice]
) -> list[BoundDevice]:
    """The free mdevs ``chosen`` that are no longer there (one lookup
    each; one the view no longer has is gone)."""
    return [
        d
        for d in chosen
        if d.kind == "mdev"
        and not d.created
        and (d.id not in view.mdevs or not host.mdev_exists(view.mdevs[d.id]))
    ]


def vf_types_to_record(
    ledger: Ledger, inventory: HostInventory
) -> dict[str, int]:
    """VF address -> type of each typed VF a guest uses in the view taken
    from ``inventory`` whose type the records do not list (inside
    :meth:`Ledger.locked`): only if, looked at again now, the VF still
    has that type and no release of it is under way. The reading may be
    older than a delete another process (or thread) finished since: its
    VF, recorded again, would be typed again by ``restore`` for
    nobody."""
    return {
        address: number
        for address, number in vf_types_in_use(
            inventory, ledger.view.used, ledger.vf_types
        ).items()
        if still_typed(ledger, address, number)
    }


def still_typed(ledger: Ledger, address: str, number: int) -> bool:
    """Looked at again now (inside :meth:`Ledger.locked`), the VF has
    type ``number`` and no release of it is under way: its type may be
    recorded from a reading."""
    claim = ledger.claims.get(address)
    return (claim is None or claim["purpose"] != RELEASE) and (
        ledger.host.vf_type(address) == number
    )
