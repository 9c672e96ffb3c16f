"""Handing an instance's devices back: decided and recorded first.

Under the records' lock the instance's claims go, and a device whose host
state must change (a VF's type cleared, an mdev removed) gets a
``release`` claim in their place, so no bind takes it while it changes.
Only then is the host changed, outside the lock, and each release claim
dropped if it is still that claim (compare-and-act). A write that fails
(a full disk) leaves the host untouched and the claims as they were; a
release cut short (the process died) is finished at the next start.
"""

from __future__ import annotations

from collections.abc import Iterable

from oslo_log import log as logging

from vgpu_driver.model.binding import BoundDevice
from vgpu_driver.model.claims import RELEASE, Claim, device_of
from vgpu_driver.service import hand_back
from vgpu_driver.service.ledger import Ledger

LOG = logging.getLogger(__name__)


def release(
    ledger: Ledger,
    instance: str,
    guest_devices: Iterable[str] = (),
) -> list[str]:
    """Drop an instance's claims and hand its devices back: mdevs stay
    for reuse (or are removed with ``remove_unused``), VF types are
    cleared. Returns the device ids released."""
    with ledger.locked(fresh_view=True):
        view = ledger.view
        ids = {
            k for k, c in ledger.claims.items() if c["instance"] == instance
        }
        ids |= view.used.of_guest(instance)
        ids |= set(guest_devices)
        claims = dict(ledger.claims)
        vf_types = dict(ledger.vf_types)
        released: list[BoundDevice] = []
        changing: list[BoundDevice] = []
        for device_id in sorted(ids):
            held = claims.get(device_id)
            if held is not None and _carried(ledger, held):
                continue  # a release in flight: its carrier's to finish
            device = view.device(device_id, claims.pop(device_id, None))
            if device is None:
                continue
            released.append(device)
            if device.kind == "vf":
                vf_types.pop(device.id, None)
            if ledger.changes_host(device):
                changing.append(device)
                claims[device.id] = hand_back.claim(ledger, device, instance)
        ledger.save(claims, vf_types)
        ledger.carrier.carrying.update(d.id for d in changing)
        for device in released:
            view.used.pop(device.id, None)
            if device not in changing:
                view.returned(device, made=False)
    ledger.host.forget_guest(instance)
    hand_back.finish_release(ledger, instance, changing)
    if released:
        LOG.info(
            "Released %s of instance %s",
            ", ".join(d.id for d in released),
            instance,
        )
    return [d.id for d in released]


def _carried(ledger: Ledger, claim: Claim) -> bool:
    """Is this a release claim a live process is carrying out?"""
    return claim["purpose"] == RELEASE and ledger.carrier.in_flight(claim)


def finish_interrupted(ledger: Ledger) -> list[str]:
    """Releases cut short (their carrier died, or failed, between
    recording them and changing the host): taken over (this process
    their carrier, recorded first) and done now; those in flight are
    left to their carriers. Returns the device ids finished. (None
    recorded, as at most starts: the records' lock is not taken.)"""
    with ledger.peeked():
        if not any(c["purpose"] == RELEASE for c in ledger.claims.values()):
            return []
    with ledger.locked():
        claims = dict(ledger.claims)
        leftover = [
            (c["instance"], device_of(c))
            for c in claims.values()
            if c["purpose"] == RELEASE and not _carried(ledger, c)
        ]
        for instance, device in leftover:
            claims[device.id] = hand_back.claim(ledger, device, instance)
        if leftover:
            ledger.save(claims)
            ledger.carrier.carrying.update(d.id for _, d in leftover)
    for instance, device in leftover:
        LOG.info("Finishing the release of %s (%s)", device.id, instance)
        hand_back.finish_release(ledger, instance, [device])
    return [device.id for _, device in leftover]
