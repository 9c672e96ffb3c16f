"""Making what a bind chose on the host, and undoing it when that fails.

Functions over the binder's :class:`~vgpu_driver.service.ledger.Ledger`:
:func:`make` runs outside the records' lock (the claims are saved
already), :func:`undo` unmakes what was made, then drops the claims
under the lock and marks a parent whose device failed (not one that is
merely full) in the ledger's failed parents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oslo_log import log as logging

from vgpu_driver.exception import (
    DeviceCapacityExhausted,
    DeviceNoRoom,
    HostUnreachable,
    VgpuDriverError,
)
from vgpu_driver.model import naming
from vgpu_driver.model.binding import BoundDevice
from vgpu_driver.service import hand_back

if TYPE_CHECKING:
    from vgpu_driver.service.ledger import Ledger

LOG = logging.getLogger(__name__)


def make(
    ledger: Ledger, chosen: list[BoundDevice], done: list[BoundDevice]
) -> None:
    """Create what the bind needs, appending each device made to
    ``done`` as soon as it exists (so a failure can undo exactly it)."""
    view = ledger.view
    for device in chosen:
        if device.kind == "vf" and device.created:
            number = naming.sriov_type_number(device.type_id)
            try:
                ledger.host.set_vf_type(device.id, number)
            except DeviceNoRoom:
                # refused as typed already (a typed VF lists no type as
                # creatable): ``restore`` gave it the type recorded for
                # this bind meanwhile, as wanted
                if ledger.host.vf_type(device.id) != number:
                    raise
            done.append(device)
        elif device.kind == "mdev" and device.created:
            parent = view.parent_objects[device.parent]
            mdev = ledger.host.create_mdev(parent, device.type_id, device.id)
            ledger.made_mdev(mdev)
            done.append(device)
        elif device.kind == "mdev":
            mdev = view.mdevs[device.id]
            if not mdev.active:
                ledger.host.start_mdev(mdev)


def undo(
    ledger: Ledger,
    instance: str,
    chosen: list[BoundDevice],
    done: list[BoundDevice],
    exc: VgpuDriverError,
) -> None:
    """A bind failed with ``exc``: unmake what it made (``done``), then,
    under the lock, drop its claims and what it recorded as made. A
    device the host would not unmake stays as it is and is kept as the
    library's own, free: an mdev to reuse, a typed VF."""
    unmade = []
    for device in done:
        try:
            hand_back.unmake(ledger, device)
            unmade.append(device)
        except VgpuDriverError as cleanup:
            # it stays as made: the library's own, free for the next bind
            LOG.error(
                "Could not undo %s (kept as a free device): %s",
                device.id,
                cleanup,
            )
    with ledger.locked():
        for device in chosen:
            if device.created and device not in done:
                ledger.record.made.discard(device.id)  # never made
                if device.kind == "vf" and ledger.vf_types.get(
                    device.id
                ) == naming.sriov_type_number(device.type_id):
                    # never typed: the type this bind recorded goes too
                    # (``restore`` would type a VF nobody uses)
                    del ledger.vf_types[device.id]
        for device in unmade:
            ledger.record.made.discard(device.id)  # unmade again
            if device.kind == "vf":
                ledger.vf_types.pop(device.id, None)
        for device in chosen:
            claim = ledger.claims.get(device.id)
            if claim and claim["instance"] == instance:
                del ledger.claims[device.id]
                if device in done:
                    ledger.view.released(device, done=device in unmade)
                else:
                    ledger.view.returned(device, made=False)
        failing = {d.parent for d in chosen if d.created and d not in done}
        # a full parent or a libvirtd restarting says nothing of the
        # device itself
        if not is_exhaustion(exc) and not isinstance(exc, HostUnreachable):
            for parent in failing:
                ledger.failed.mark(ledger.view.device_of(parent), exc)
        ledger.save()
    LOG.warning(
        "Bind for instance %s failed and was undone: %s", instance, exc
    )


def is_exhaustion(exc: VgpuDriverError) -> bool:
    """A parent that is full says nothing of its device: the host adapter
    tells it by the error's type."""
    return isinstance(exc, (DeviceCapacityExhausted, DeviceNoRoom))
