"""The guests as the binder learns of them: a guest defined (or
redefined) has its devices in use and ends its spawn claims; what it no
longer has is handed back, recorded under the records' lock as a release
and changed on the host once the lock is left (by :class:`~vgpu_driver.
service.ledger.Ledger`). Functions over the ledger, which owns the state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oslo_log import log as logging

from vgpu_driver.model.binding import BoundDevice
from vgpu_driver.model.claims import (
    RELEASE,
    SPAWN,
    claim_of,
    device_of,
    in_flight_of,
)
from vgpu_driver.model.device import Guest
from vgpu_driver.records.store import StateStoreError

if TYPE_CHECKING:
    from vgpu_driver.service.ledger import Ledger

LOG = logging.getLogger(__name__)


def note(ledger: Ledger, guest: Guest) -> list[str]:
    """The guest as defined now: its devices are in use, what it no
    longer has is handed back, its spawn claims on what it has end
    (returned; inside :meth:`Ledger.locked`, the caller saves)."""
    has = {*guest.mdevs, *guest.pci_devices}
    let_go(ledger, guest.uuid, keep=has)
    for device_id in has:
        ledger.view.used[device_id] = guest.uuid
        ledger.view.take_off_free_list(device_id)
    ended = [
        device_id
        for device_id, claim in ledger.claims.items()
        if claim["purpose"] == SPAWN
        and claim["instance"] == guest.uuid
        and ledger.view.used.get(device_id) == guest.uuid
    ]
    for device_id in ended:
        del ledger.claims[device_id]
    # its guest has its devices: what was held for it in flight, and
    # it does not have, goes back
    for device_id in in_flight_of(ledger.claims, guest.uuid):
        ledger.view.returned(device_of(ledger.claims.pop(device_id)), False)
        ended.append(device_id)
    return ended


def apply_changes(ledger: Ledger) -> None:
    """Guests someone else defined or undefined (domain events): only
    those domains are read, and the view follows (inside
    :meth:`Ledger.locked`)."""
    ended = []
    for uuid, guest in ledger.host.take_guest_changes():
        if guest is None:
            let_go(ledger, uuid, keep=set())
        else:
            ended += note(ledger, guest)
    if ended:
        ledger.save()


def let_go(ledger: Ledger, instance: str, keep: set[str]) -> list[str]:
    """Hand back what the instance's guest had and no longer has
    (inside :meth:`Ledger.locked`): a device whose host state must change
    gets a release claim, saved now; the host is changed once the
    lock is left. Returns the device ids freed."""
    freed: list[BoundDevice] = []
    for device_id, guest in list(ledger.view.used.items()):
        if guest != instance or device_id in keep:
            continue
        del ledger.view.used[device_id]
        if device_id in ledger.claims:
            continue
        device = ledger.view.device(device_id, None)
        if device is None:
            continue
        if device.kind == "mdev" and device.id not in ledger.view.mdevs:
            continue  # gone already
        freed.append(device)
    if not freed:
        return []
    claims, vf_types = dict(ledger.claims), dict(ledger.vf_types)
    changing = [d for d in freed if ledger.changes_host(d)]
    for device in freed:
        if device.kind == "vf":
            vf_types.pop(device.id, None)
    for device in changing:
        claims[device.id] = claim_of(device, instance, RELEASE)
    try:
        ledger.save(claims, vf_types)
    except StateStoreError as exc:
        # nothing recorded, nothing changed on the host: the devices
        # are free in the view as they are (a typed VF, an mdev)
        LOG.warning(
            "Could not record the devices %s let go: %s", instance, exc
        )
        changing = []
    for device in freed:
        if device in changing:
            ledger.hand_back_later(instance, device)
        else:
            ledger.view.released(device, done=True)
    return [d.id for d in freed]
