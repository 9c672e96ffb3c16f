"""Devices a release or a guest let go of, handed back to the host.

The decision is recorded first, under the records' lock: a device whose
host state must change carries a ``release`` claim of its instance,
naming this process as its carrier (:mod:`vgpu_driver.records.
carriers`), so no bind takes it meanwhile and no other process's
recovery finishes it (:mod:`.release`, :mod:`.guests`). Here, outside
the lock, the host is changed (a VF's type cleared, an mdev removed) if
the release claim is still there, and then, under the lock again, the
claim is dropped if it still is (compare-and-act: a recovery that could
not see the carrier, its file removed, may have finished it in between,
and a bind taken the device). A device the host would not change marks
its parent failing and stays the library's own, free.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from oslo_log import log as logging

from vgpu_driver.exception import VgpuDriverError
from vgpu_driver.model.binding import BoundDevice
from vgpu_driver.model.claims import Claim, release_claim

if TYPE_CHECKING:
    from vgpu_driver.service.ledger import Ledger

LOG = logging.getLogger(__name__)


def finish_release(
    ledger: Ledger, instance: str, devices: Iterable[BoundDevice]
) -> None:
    """Outside the lock: change the host for each device under a release
    claim of ``instance`` carried by this process, then drop that claim.
    Each step acts only if the claim is still that one (looked at before
    the host is changed, and under the lock after): otherwise another
    finished the release meanwhile, and the device may be another
    instance's since."""
    for device in devices:
        mine = release_claim(device, instance, ledger.carrier.token)
        try:
            _finish(ledger, device, mine)
        finally:
            with ledger.lock:
                ledger.carrier.carrying.discard(device.id)


def claim(ledger: Ledger, device: BoundDevice, instance: str) -> Claim:
    """The release claim of ``device`` for ``instance``, this process its
    carrier (its lock taken before the claim is written); once saved,
    the device goes into ``ledger.carrier.carrying``."""
    return release_claim(device, instance, ledger.carrier.held())


def _finish(ledger: Ledger, device: BoundDevice, mine: Claim) -> None:
    with ledger.peeked():  # a look: the records as last read, or anew
        if ledger.claims.get(device.id) != mine:
            LOG.info(
                "%s was handed back meanwhile (its release claim of %s "
                "is gone): left as it is",
                device.id,
                mine["instance"],
            )
            return
    try:
        if ledger.changes_host(device):
            unmake(ledger, device)
        done = True
    except VgpuDriverError as exc:
        LOG.error("Releasing %s: %s", device.id, exc)
        ledger.failed.mark(device.parent)
        done = False
    with ledger.locked(view=False):
        claims = dict(ledger.claims)
        if claims.get(device.id) != mine:
            # handed back by another while the host changed (and
            # perhaps bound again since): theirs to record
            return
        del claims[device.id]
        # cleared or removed: nothing of ours any more (a VF typed
        # again by a bind is ours again)
        if done and (
            device.kind == "vf" or device.id not in ledger.view.mdevs
        ):
            ledger.record.made.discard(device.id)
        ledger.save(claims)
        ledger.view.released(device, done)


def unmake(ledger: Ledger, device: BoundDevice) -> None:
    """Clear a VF's type, or remove an mdev (from the view too)."""
    if device.kind == "vf":
        ledger.host.set_vf_type(device.id, 0)
        return
    mdev = ledger.view.mdevs.get(device.id)
    if mdev is not None:
        ledger.host.remove_mdev(mdev)
        with ledger.lock:
            # off the free list too: a claimed mdev the view followed
            # there (claims are busy, not off the list) is gone
            ledger.view.forget_mdev(device.id)
