"""Binding Placement allocations to devices, through an instance's life.

A bind records, before anything is created, which devices it gives to
which instance (claims, see :mod:`vgpu_driver.model.claims`). A claimed
device is never given to anyone else, between the bind and the guest
being defined, across a restart of the service, and for the length of a
live migration, until it is released or (for a spawn) seen in the
guest's domain.

A bind: the wanted devices from the allocations (pure) -> under the
records' lock (:meth:`Ledger.locked`): the view read again if another
process changed the host, the devices chosen (pure), claimed and saved
-> outside the lock: created, typed or started on the host -> on
failure: undone on the host, then the claims dropped under the lock. A
parent whose device fails (not one that is merely full) is marked in
:class:`~vgpu_driver.service.failing.FailedParents`, so its provider is
reserved, until an operation on it works again.

:class:`DeviceBinder` is the binder's public face; its state lives in
its :class:`~vgpu_driver.service.ledger.Ledger` and its
:class:`FailedParents`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import (
    DeviceCapacityExhausted,
    VgpuDriverError,
)
from vgpu_driver.host.base import Host
from vgpu_driver.model import naming
from vgpu_driver.model.binding import BoundDevice, Target
from vgpu_driver.model.claims import (
    SPAWN,
    Claims,
    check_same_bind,
    claim_of,
    device_of,
    held_by,
    in_flight_of,
)
from vgpu_driver.model.device import Guest, HostInventory
from vgpu_driver.records.store import StateStore, StateStoreError
from vgpu_driver.service import guests, making, recovery, release, repairs
from vgpu_driver.service.failing import FailedParents
from vgpu_driver.service.ledger import Ledger

LOG = logging.getLogger(__name__)


class DeviceBinder:
    def __init__(
        self,
        host: Host,
        state: StateStore | None,
        *,
        remove_unused: bool = False,
    ) -> None:
        self.host = host
        # parents whose device fails: their providers are reserved
        self.unschedulable = FailedParents()
        self.ledger = Ledger(
            host,
            state,
            remove_unused=remove_unused,
            failed=self.unschedulable,
        )

    # -- the records and the view --------------------------------------

    def view_is_stale(self) -> bool:
        return self.ledger.is_stale()

    def repair_records(self) -> list[str]:
        """At service start: move unreadable records aside (they are
        kept) so they can be rebuilt from the host. Returns their new
        paths."""
        return self.ledger.repair()

    def claims(self) -> Claims:
        """The claims as on disk now (a read: the host is not read)."""
        with self.ledger.peeked():
            return {k: dict(v) for k, v in self.ledger.claims.items()}

    @property
    def vf_types(self) -> dict[str, int]:
        """The VF types recorded, as on disk now (the host is not read)."""
        with self.ledger.locked(view=False):
            return dict(self.ledger.vf_types)

    def owned(self) -> frozenset[str] | None:
        """The devices this library made, as on disk now (None before
        its first start on the host took stock)."""
        with self.ledger.peeked():
            record = self.ledger.record
            return record.made_frozen() if record.made_known else None

    def claimed_devices(self) -> list[tuple[str, str, str]]:
        """(device id, parent, type id) of every claim, as on disk now."""
        with self.ledger.peeked():
            return [
                (device_id, c["parent"], c["type_id"])
                for device_id, c in sorted(self.ledger.claims.items())
            ]

    def refresh(
        self, inventory: HostInventory, targets: Mapping[str, Target]
    ) -> bool:
        """Take a new reading of the host and of the providers (False:
        the view is from a newer one, and stays)."""
        return self.ledger.refresh(inventory, targets)

    def set_targets(self, targets: Mapping[str, Target]) -> None:
        """What each provider stands for (after the tree is updated)."""
        with self.ledger.lock:
            self.ledger.targets = dict(targets)

    def instance_devices(self) -> dict[str, dict[str, list[str]]]:
        """instance -> {"in_use": device ids its guest has, "claimed":
        device ids claimed for it (spawns and incoming migrations)}."""
        with self.ledger.locked():
            return self.ledger.view.instance_devices(self.ledger.claims)

    def vf_addresses(self) -> dict[str, bool]:
        """VF address -> whether libvirt manages it (a VF given as it is,
        AMD or Intel: True) or not (an NVIDIA SR-IOV vGPU's: False)."""
        with self.ledger.locked():
            return self.ledger.view.vfs_managed()

    def mdev_types(self, uuids: Iterable[str]) -> dict[str, str]:
        """mdev uuid -> type, from the current view (mdevs made since
        the last discovery included)."""
        with self.ledger.locked():
            mdevs = self.ledger.view.mdevs
            return {u: mdevs[u].type_id for u in uuids if u in mdevs}

    def free_mdevs(
        self, parent: str | None = None, types: Iterable[str] | None = None
    ) -> set[str]:
        with self.ledger.locked():
            view = self.ledger.view
            return view.free_mdevs(
                parent, types, view.busy(self.ledger.claims)
            )

    # -- guests --------------------------------------------------------

    def guest_defined(self, guest: Guest) -> list[str]:
        """The caller defined ``guest``: its spawn claims on devices the
        domain now has end (the domain itself keeps them from now on).
        Returns the device ids whose claims ended."""
        with self.ledger.locked(fresh_view=True):
            # a reading the lock took (another process wrote the records)
            # may have ended them already, and saved that
            read = self.ledger.view_ended.items()
            ended = [d for d, instance in read if instance == guest.uuid]
            self.ledger.view.guests_ahead.add(guest.uuid)
            noted = guests.note(self.ledger, guest)
            if noted:
                self.ledger.save()
        return ended + noted

    def guest_undefined(self, instance: str) -> list[str]:
        """The instance's guest is gone: the devices it had are free again,
        except those still claimed for it (e.g. held across a hard
        reboot). Returns the device ids freed."""
        with self.ledger.locked():
            self.ledger.view.guests_ahead.add(instance)
            freed = guests.let_go(self.ledger, instance, keep=set())
        self.host.forget_guest(instance)
        return freed

    def hold(self, instance: str) -> list[str]:
        return repairs.hold(self.ledger, instance)

    # -- binding -------------------------------------------------------

    def bind(
        self,
        instance: str,
        wanted: list[tuple[str, str, int]],
        purpose: str = SPAWN,
        *,
        any_parent: bool = False,
    ) -> list[BoundDevice]:
        """Claim, then make, the devices ``wanted`` asks for. The same
        bind again returns what it claimed; a bind of an instance that
        holds claims for other devices than ``wanted`` is refused
        (ClaimConflict). ``any_parent``: the parents of ``wanted`` were
        picked by room (units allocated on the compute node's own
        provider), so only the types are compared."""
        ledger = self.ledger
        with ledger.locked(fresh_view=True):
            # devices held for it as a spawn in flight were a guess: it
            # chooses again
            for device_id in in_flight_of(ledger.claims, instance):
                guess = ledger.claims.pop(device_id)
                ledger.view.returned(device_of(guess), made=False)
            mine = held_by(ledger.claims, instance, purpose)
            if mine:
                check_same_bind(
                    instance, mine, wanted, any_parent, ledger.view.device_of
                )
                return mine  # the same bind again: idempotent
            chosen = ledger.choose(wanted)
            for device in chosen:
                if device.created:  # recorded as ours before it exists
                    ledger.record.made.add(device.id)
                ledger.claims[device.id] = claim_of(device, instance, purpose)
                if device.kind == "vf":  # restored after a reboot
                    number = naming.sriov_type_number(device.type_id)
                    ledger.vf_types[device.id] = number
                ledger.view.claimed(device)
            try:
                ledger.save()
            except StateStoreError:
                # nothing recorded (the records are held as on disk): the
                # devices chosen are free again
                for device in chosen:
                    ledger.view.returned(device, made=False)
                raise
        done: list[BoundDevice] = []
        try:
            making.make(ledger, chosen, done)
        except VgpuDriverError as exc:
            making.undo(ledger, instance, chosen, done, exc)
            if making.is_exhaustion(exc) and not isinstance(
                exc, DeviceCapacityExhausted
            ):
                first = next(d for d in chosen if d not in done and d.created)
                raise DeviceCapacityExhausted(
                    count=1, type_id=first.type_id, parent=first.parent
                ) from exc
            raise
        self.unschedulable.worked(
            ledger.view.device_of(d.parent) for d in done
        )
        LOG.info(
            "Bound %s to instance %s: %s",
            ", ".join(f"{d.kind} {d.id}" for d in chosen) or "nothing",
            instance,
            "; ".join(
                f"{d.id} on {d.parent} ({'new' if d.created else 'reused'})"
                for d in chosen
            ),
        )
        return chosen

    # -- release, repairs, migration, start ------------------------------

    def release(
        self, instance: str, guest_devices: Iterable[str] = ()
    ) -> list[str]:
        """Drop an instance's claims and hand its devices back (see
        :mod:`vgpu_driver.service.release`). Returns the ids released."""
        return release.release(self.ledger, instance, guest_devices)

    def retry_failed(self, interval: float) -> list[str]:
        """Offer failed parents again once ``interval`` seconds passed."""
        return self.unschedulable.retry_due(interval)

    def drop_claims(
        self, expected: Mapping[str, Mapping[str, Any]]
    ) -> list[str]:
        return repairs.drop_claims(self.ledger, expected)

    def finish_releases(self) -> list[str]:
        """Releases cut short, finished (those in flight left)."""
        return release.finish_interrupted(self.ledger)

    def record_vf_types(self, types: Mapping[str, int]) -> list[str]:
        return repairs.record_vf_types(self.ledger, types)

    def remove_free_mdevs(self, uuids: Iterable[str]) -> list[str]:
        return repairs.remove_free_mdevs(self.ledger, uuids)

    def remove_stale_free_mdevs(
        self, configured: Mapping[str, str]
    ) -> list[str]:
        return repairs.remove_stale_free_mdevs(self.ledger, configured)

    def hold_in_flight(
        self, in_flight: Mapping[str, Mapping[str, int]]
    ) -> dict[str, list[str]]:
        return repairs.hold_in_flight(self.ledger, in_flight)

    def end_migration(self, instance: str) -> None:
        repairs.end_migration(self.ledger, instance)

    def recover(
        self,
        inventory: HostInventory,
        seen: Mapping[str, tuple[str, str]],
        instances: Iterable[str] | None = None,
    ) -> dict[str, list[str]]:
        return recovery.recover(self.ledger, inventory, seen, instances)

    def restore_vf_types(
        self, inventory: HostInventory, failed: list[str] | None = None
    ) -> list[str]:
        return recovery.restore_vf_types(self.ledger, inventory, failed)
