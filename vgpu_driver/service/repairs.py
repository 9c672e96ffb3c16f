"""Changes to claims and free devices outside a bind: the operator's
repairs (``vgpu-driver audit --fix``), a type switch removing free mdevs
of the old type, a hard reboot holding a guest's devices, the end of a
live migration. Each is compare-and-act under the records' lock: it acts
only on what is still as it was read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import VgpuDriverError
from vgpu_driver.model.binding import BoundDevice
from vgpu_driver.model.claims import (
    MIGRATION,
    RELEASE,
    SPAWN,
    claim_of,
    deal_in_flight,
    in_flight_claim,
)
from vgpu_driver.records.store import StateStoreError
from vgpu_driver.service.ledger import Ledger, still_typed

LOG = logging.getLogger(__name__)


def drop_claims(
    ledger: Ledger, expected: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Drop claims of instances that are gone. ``expected``: device id ->
    the claim as it was read when its instance was found gone. A claim is
    dropped only if it is still that very claim (the same instance,
    purpose and device) and that instance has no guest now; one released
    and made again for another instance since is left alone."""
    with ledger.locked(view=False):  # the view is rebuilt just below
        guests = {
            g.uuid
            for g in ledger.rebuild_view("checking claims under the lock")
        }
        dropped = [
            device_id
            for device_id, claim in sorted(expected.items())
            if ledger.claims.get(device_id) == dict(claim)
            and claim["instance"] not in guests
            and claim["purpose"] != RELEASE  # finished, never dropped
        ]
        for device_id in dropped:
            del ledger.claims[device_id]
        if dropped:
            ledger.save()
    return dropped


def remove_free_mdevs(ledger: Ledger, uuids: Iterable[str]) -> list[str]:
    """Remove mdevs that are still free and unclaimed when checked under
    the records' lock (with a fresh view of the guests)."""
    removed = []
    with ledger.locked(view=False):  # the view is rebuilt just below
        ledger.rebuild_view("checking free mdevs under the lock")
        view = ledger.view
        for uuid in uuids:
            mdev = view.mdevs.get(uuid)
            if mdev is None or uuid in view.busy(ledger.claims):
                continue  # in use, claimed, or another manager's
            try:
                ledger.host.remove_mdev(mdev)
            except VgpuDriverError as exc:
                LOG.error("Could not remove mdev %s: %s", uuid, exc)
                continue
            view.forget_mdev(uuid)
            ledger.record.made.discard(uuid)  # gone: no longer recorded
            removed.append(uuid)
        if removed:
            ledger.save()
    return removed


def remove_stale_free_mdevs(
    ledger: Ledger, configured: Mapping[str, str]
) -> list[str]:
    """Free mdevs of another type than the parent's configured one block
    the switch (one type per pGPU): remove them. Done under the records'
    lock, so no other process can claim one meanwhile; a view with no
    candidate at all (every pass but a switch) takes no records lock."""
    removed: list[str] = []
    with ledger.lock:
        if not ledger.view.stale_free_mdevs(configured, ledger.claims):
            return removed
    with ledger.locked(fresh_view=True):
        view = ledger.view
        stale = view.stale_free_mdevs(configured, ledger.claims)
        if stale:
            # others must re-read the host: told before it changes, and
            # nothing is removed if they cannot be told
            try:
                ledger.save()
            except StateStoreError as exc:
                LOG.warning("Not removing stale free mdevs now: %s", exc)
                return []
        for parent, type_id, uuid in stale:
            mdev = view.mdevs.get(uuid)
            if mdev is None:
                continue
            try:
                ledger.host.remove_mdev(mdev)
            except VgpuDriverError as exc:
                LOG.error("Could not remove stale mdev %s: %s", uuid, exc)
                continue
            # (noted: a removal told done but not done is read back)
            view.forget_mdev(uuid)
            ledger.record.made.discard(uuid)
            removed.append(uuid)
            LOG.info(
                "Removed free %s mdev %s: %s now serves %s",
                type_id,
                uuid,
                parent,
                configured[parent],
            )
        if removed:
            _save_made(ledger)
    return removed


def _save_made(ledger: Ledger) -> None:
    """The devices made, without those just removed (inside
    :meth:`Ledger.locked`). A write that fails leaves them recorded, which
    is harmless: a record of an mdev that is gone hands nothing out."""
    try:
        ledger.save()
    except StateStoreError as exc:
        LOG.warning("Could not record the mdevs removed: %s", exc)


def record_vf_types(ledger: Ledger, types: Mapping[str, int]) -> list[str]:
    """Record the vGPU types of VFs guests use, to restore them: each
    only if, looked at again under the lock, the VF still has it and no
    release of it is under way (``audit --fix`` read them before the
    service deleted a guest: recorded, its VF would be typed again by
    ``restore`` for nobody)."""
    with ledger.locked():
        changed = [
            a
            for a, t in types.items()
            if ledger.vf_types.get(a) != t and still_typed(ledger, a, t)
        ]
        ledger.vf_types.update({a: types[a] for a in changed})
        if changed:
            ledger.save()
    return changed


def hold(ledger: Ledger, instance: str) -> list[str]:
    """Claim the devices the instance's guest has, so nothing else takes
    them while the caller undefines and defines it again (a hard
    reboot). The claims end when the guest is defined with them."""
    with ledger.locked():
        held = []
        for device_id, guest in sorted(ledger.view.used.items()):
            if guest != instance or device_id in ledger.claims:
                continue
            device = ledger.view.device(device_id, None)
            if device is not None:
                ledger.claims[device_id] = claim_of(device, instance, SPAWN)
                held.append(device_id)
        if held:
            ledger.save()
    return held


def hold_in_flight(
    ledger: Ledger, in_flight: Mapping[str, Mapping[str, int]]
) -> dict[str, list[str]]:
    """After the claims were lost (their record moved aside): keep the
    devices of spawns in flight from being handed out. ``in_flight``:
    consumer -> parent or PF -> units it holds in Placement. Consumers
    with a guest on this host or with claims are not in flight; for the
    others, every free, unclaimed device of those parents (an mdev no
    guest has, a VF typed and unused) is claimed for one of them (see
    :func:`~vgpu_driver.model.claims.deal_in_flight`). Returns consumer
    -> the device ids held for it."""
    with ledger.locked(fresh_view=True):
        view = ledger.view
        claims = ledger.claims
        settled = set(view.used.values()) | {
            c["instance"] for c in claims.values()
        }
        waiting = {
            consumer: dict(units)
            for consumer, units in in_flight.items()
            if consumer not in settled and any(units.values())
        }
        busy = view.busy(claims)
        free: dict[str, list[str]] = {}
        for name, parent in view.parents.items():
            free[name] = sorted(
                u for uuids in parent.free.values() for u in uuids
            )
        for name, pf in view.pfs.items():
            free[name] = sorted(a for a, t in pf.vfs.items() if t)
        free = {
            p: [d for d in ids if d not in busy] for p, ids in free.items()
        }
        held: dict[str, list[str]] = {}
        taken: list[BoundDevice] = []
        for device_id, consumer in deal_in_flight(waiting, free).items():
            device = view.device(device_id, None)
            if device is None:
                continue
            claims[device_id] = in_flight_claim(device, consumer)
            view.claimed(device)
            taken.append(device)
            held.setdefault(consumer, []).append(device_id)
        if held:
            try:
                ledger.save()
            except StateStoreError:
                for device in taken:  # nothing recorded: free again
                    view.returned(device, made=False)
                raise
    for consumer, devices in sorted(held.items()):
        LOG.warning(
            "Instance %s holds devices in Placement but has no guest here "
            "and its claims were lost: a spawn in flight. Holding %s for "
            "it until it binds again, its guest is defined or it is "
            "released",
            consumer,
            ", ".join(sorted(devices)),
        )
    return held


def record_made(ledger: Ledger, device_id: str, made: bool = True) -> None:
    """A device this library makes outside a bind, recorded as ours
    before it is made (a pass reading the host meanwhile never takes it
    for another manager's); if that cannot be written, it stays another
    manager's: left alone. ``made`` False: it could not be made after
    all, and is no longer recorded."""
    with ledger.locked(view=False):
        if made:
            ledger.record.made.add(device_id)
        else:
            ledger.record.made.discard(device_id)
        try:
            ledger.save()
        except StateStoreError as exc:
            LOG.warning(
                "%s %s (%s)",
                device_id,
                "cannot be recorded as this library's: once made, it is "
                "left alone, as another manager's"
                if made
                else "was not made, and is still recorded as made",
                exc,
            )
            return
        ledger.view.foreign.discard(device_id)


def end_migration(ledger: Ledger, instance: str) -> None:
    """A live migration succeeded: its claims become spawn claims, ended
    as soon as the guest's domain is seen with them."""
    with ledger.locked():
        for claim in ledger.claims.values():
            if claim["instance"] == instance and claim["purpose"] == MIGRATION:
                claim["purpose"] = SPAWN
        ledger.save()
