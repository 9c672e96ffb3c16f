"""What a compute service does at start and at a clean stop, and
``vgpu-driver restore``.

At start: recreates mdevs guests need but that are gone (same uuid,
same parent), starts the ones only defined, re-applies the VF types
this library set (the card forgets them at reboot or driver reload),
finishes releases cut short, and drops the bind claims of instances the
service does not have. At a clean stop: writes each record that has a
journal whole (:func:`write_snapshots`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import DeviceNoRoom, VgpuDriverError
from vgpu_driver.model.claims import SPAWN
from vgpu_driver.model.device import Guest, HostInventory, Mdev, Parent
from vgpu_driver.records.store import StateStoreError
from vgpu_driver.service import release
from vgpu_driver.service.ledger import Ledger

LOG = logging.getLogger(__name__)


def recover(
    ledger: Ledger,
    inventory: HostInventory,
    seen: Mapping[str, tuple[str, str]],
    instances: Iterable[str] | None = None,
) -> dict[str, list[str]]:
    """``seen``: mdev uuid -> (parent, type) of every mdev seen. When
    the caller lists ``instances`` it has, the bind claims of unknown
    ones are dropped (live-migration claims stay: an incoming
    migration's instance is still the source host's)."""
    done: dict[str, list[str]] = {
        "released": release.finish_interrupted(ledger),
        "recreated": [],
        "started": [],
        "vf_types": [],
        "dropped_claims": [],
        "failed": [],
    }
    with ledger.peeked():  # a read of the claims alone
        claimed = {
            device_id: (c["parent"], c["type_id"])
            for device_id, c in ledger.claims.items()
        }
    present = {m.uuid: m for m in inventory.mdevs}
    parents = {p.name: p for p in inventory.parents}
    for guest in inventory.guests:
        for uuid in guest.mdevs:
            mdev = present.get(uuid)
            if mdev is not None and not mdev.active:
                _try(done, "started", uuid, _start, ledger, guest, mdev)
                continue
            if mdev is not None:
                continue
            where = seen.get(uuid) or claimed.get(uuid)
            if where is None or where[0] not in parents:
                LOG.error(
                    "Guest %s needs mdev %s, which is gone, and its parent "
                    "is unknown or absent; it cannot start",
                    guest.name,
                    uuid,
                )
                done["failed"].append(uuid)
                continue
            parent, type_id = where
            _try(
                done,
                "recreated",
                uuid,
                _recreate,
                ledger,
                guest,
                parents[parent],
                type_id,
                uuid,
            )
    done["vf_types"] = restore_vf_types(ledger, inventory, done["failed"])
    if instances is not None and _claimed_by_others(ledger, set(instances)):
        known = set(instances)
        with ledger.locked():  # compared again under the lock
            for device_id, claim in list(ledger.claims.items()):
                if (
                    claim["purpose"] == SPAWN
                    and claim["instance"] not in known
                ):
                    del ledger.claims[device_id]
                    done["dropped_claims"].append(device_id)
            if done["dropped_claims"]:
                ledger.save()
    return done


def _claimed_by_others(ledger: Ledger, known: set[str]) -> bool:
    """Spawn claims of instances the service does not have (a read of
    the claims alone: none, as at most starts, takes no lock)."""
    with ledger.peeked():
        return any(
            c["purpose"] == SPAWN and c["instance"] not in known
            for c in ledger.claims.values()
        )


def _try(
    done: dict[str, list[str]],
    key: str,
    name: str,
    fn: Callable[..., Any],
    *args: Any,
) -> None:
    try:
        if fn(*args) is False:
            return  # nothing to do any more
        done[key].append(name)
        LOG.info("Recovery: %s %s", key, name)
    except VgpuDriverError as exc:
        LOG.error("Recovery of %s failed: %s", name, exc)
        done["failed"].append(name)


def _start(ledger: Ledger, guest: Guest, mdev: Mdev) -> bool:
    """Start ``guest``'s mdev only defined, under the lock, unless
    another (a recovery beside this one) started it since the reading,
    or the guest's domain, read again, no longer names it (the service
    deleted it meanwhile). False: left as it is."""
    with ledger.locked(view=False):
        if ledger.host.has_mdev(mdev.uuid):
            why = "another started it"
        elif not _still_needs(ledger, guest, mdev.uuid):
            why = f"guest {guest.name} no longer has it"
        else:
            ledger.host.start_mdev(mdev)
            return True
    LOG.info("mdev %s not started: %s", mdev.uuid, why)
    return False


def _still_needs(ledger: Ledger, guest: Guest, uuid: str) -> bool:
    """Does ``guest``'s domain, read again now, still name mdev ``uuid``?"""
    now = ledger.host.refresh_guest(guest.uuid)
    return now is not None and uuid in now.mdevs


def _recreate(
    ledger: Ledger, guest: Guest, parent: Parent, type_id: str, uuid: str
) -> bool:
    """Recreate ``guest``'s gone mdev ``uuid``, under the lock, if it is
    still gone and the guest's domain, read again, still names it:
    ``restore`` runs beside the service (which may have deleted the
    guest) and beside another recovery (which may have made it again)
    since the reading this plan came from. False: left as it is."""
    with ledger.locked(view=False):
        if ledger.host.has_mdev(uuid):
            why = "another made it again"
        elif not _still_needs(ledger, guest, uuid):
            why = f"guest {guest.name} no longer has it"
        else:
            ledger.host.create_mdev(parent, type_id, uuid)
            return True
    LOG.info("mdev %s not recreated: %s", uuid, why)
    return False


def restore_vf_types(
    ledger: Ledger, inventory: HostInventory, failed: list[str] | None = None
) -> list[str]:
    """Re-apply the VF types this library set. A VF that refuses its type
    is logged and added to ``failed``; the others are still restored.

    ``restore`` runs beside the service, so each VF is typed under the
    records' lock, and only if the record still gives it that type (a
    release drops it before clearing the VF) and the VF, read again,
    has none: what was read before is only a plan. (A bind typing it
    recorded that type first, and takes the VF as typed.)"""
    current = {
        vf.address: vf.current_type for pf in inventory.pfs for vf in pf.vfs
    }
    with ledger.peeked():  # a read of the VF types alone
        recorded = dict(ledger.vf_types)
    restored = []
    for address, number in sorted(recorded.items()):
        if address not in current:
            LOG.warning("VF %s is not on the host; its type waits", address)
            continue
        if current[address] == number:
            continue
        if current[address]:
            LOG.error(
                "VF %s has type %d, not the recorded %d; leaving it",
                address,
                current[address],
                number,
            )
            continue
        try:
            if _restore(ledger, address, number):
                restored.append(address)
        except VgpuDriverError as exc:
            LOG.error("Could not restore the type of VF %s: %s", address, exc)
            if failed is not None:
                failed.append(f"{address}: {exc}")
    if restored:
        LOG.info("Restored vGPU types of VFs %s", ", ".join(restored))
    return restored


def _restore(ledger: Ledger, address: str, number: int) -> bool:
    """Type the VF, under the lock, if all still says so (compare and
    act). False: the service changed it meanwhile, left as it is; or a
    bind is typing it and the card has no room for it (the bind finds
    none either: its failure, which it reports and undoes)."""
    with ledger.locked(view=False):
        if ledger.vf_types.get(address) != number:
            why = "its recorded type changed"
        elif ledger.host.vf_type(address) != 0:
            why = "it has a type now"
        else:
            try:
                ledger.host.set_vf_type(address, number)
            except DeviceNoRoom:
                claim = ledger.claims.get(address)
                if claim is None or claim["purpose"] != SPAWN:
                    raise
                why = "no room for its type, and a bind typing it"
            else:
                return True
    LOG.info("VF %s not restored: %s since it was read", address, why)
    return False


def write_snapshots(ledger: Ledger) -> list[str]:
    """At a clean stop: each record with a journal (the claims with the
    devices made, the mdevs seen) is written whole as a new snapshot,
    its journal emptied, so a release that reads the snapshots alone (a
    downgrade) finds everything. Returns the records written; one that
    cannot be written is logged and left as it is (its journal is read
    at the next start)."""
    written = []
    for name, compact in (
        ("claims", ledger.record.compact),
        ("mdevs seen", ledger.seen.compact),
    ):
        try:
            with ledger.lock:  # the service's threads wait
                if compact():
                    written.append(name)
        except StateStoreError as exc:
            LOG.warning(
                "Could not write the %s as a snapshot at stop (its "
                "journal is read at the next start; a release before "
                "this one would not read it): %s",
                name,
                exc,
            )
    return written
