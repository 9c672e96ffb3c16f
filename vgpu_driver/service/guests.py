"""The guests as the binder learns of them: a guest defined (or
redefined) has its devices in use and ends its spawn claims; what it no
longer has is handed back, recorded under the records' lock as a release
and changed on the host once the lock is left (by :class:`~vgpu_driver.
service.ledger.Ledger`). Functions over the ledger, which owns the state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from oslo_log import log as logging

from vgpu_driver.model.binding import BoundDevice
from vgpu_driver.model.claims import SPAWN, device_of, in_flight_of
from vgpu_driver.model.device import Guest, HostInventory
from vgpu_driver.records.store import StateStoreError
from vgpu_driver.service import hand_back

if TYPE_CHECKING:
    from vgpu_driver.service.ledger import Ledger

LOG = logging.getLogger(__name__)


def note(
    ledger: Ledger, guest: Guest, had: Iterable[str] | None = None
) -> list[str]:
    """The guest as defined now: its devices are in use, what it no
    longer has is handed back, its spawn claims on what it has end
    (returned; inside :meth:`Ledger.locked`, the caller saves).
    ``had``: the devices it had, when known (else those the view has
    it using)."""
    has = {*guest.mdevs, *guest.pci_devices}
    let_go(ledger, guest.uuid, keep=has, had=had)
    for device_id in has:
        ledger.view.used[device_id] = guest.uuid
        ledger.view.take_off_free_list(device_id)
    if not ledger.claims:
        return []  # no claim to end (the usual guest event)
    ended = ledger.where_kept(
        [
            device_id
            for device_id, claim in ledger.claims.items()
            if claim["purpose"] == SPAWN
            and claim["instance"] == guest.uuid
            and ledger.view.used.get(device_id) == guest.uuid
        ]
    )
    for device_id in ended:
        del ledger.claims[device_id]
    # its guest has its devices: what was held for it in flight, and
    # it does not have, goes back
    for device_id in in_flight_of(ledger.claims, guest.uuid):
        ledger.view.returned(device_of(ledger.claims.pop(device_id)), False)
        ended.append(device_id)
    return ended


def may_follow(ledger: Ledger, generation: int) -> bool:
    """May the view follow a reading of ``generation`` (inside the
    ledger's lock, in the same hold as the view is changed)? Not when
    the view is from a newer reading: one another thread read later and
    took in first, or one a bind built the view again from meanwhile.
    If it may, the view is from that reading from then on."""
    if generation < ledger.view_generation:
        return False
    ledger.view_generation = generation
    return True


def follow(ledger: Ledger, diff: Diff, generation: int) -> bool:
    """The view, built from or following a reading of the host, follows
    a reading of the same devices whose guests changed (``diff``, from
    :func:`changes`; ``generation``, the reading's): each guest defined,
    redefined or gone is applied alone (as its domain event would be).
    False, with nothing done, when a changed guest has a PCI device (its
    VF's type is recorded by a full rebuild), and when the view is from
    a newer reading (see :func:`may_follow`)."""
    if any(
        g.pci_devices for _uuid, *pair in diff for g in pair if g is not None
    ):
        return False
    touched = {uuid for uuid, _before, _now in diff}
    with ledger.peeked():
        if not may_follow(ledger, generation):
            return False
        # nothing to record (no claim of theirs ends or is made, no
        # device to remove): the view follows under the thread lock alone
        if not ledger.remove_unused and not any(
            claim["instance"] in touched for claim in ledger.claims.values()
        ):
            _apply(ledger, diff)
            return True
    with ledger.locked():
        if not may_follow(ledger, generation):
            return False
        if _apply(ledger, diff):
            ledger.save()
    return True


Diff = Sequence[tuple[str, Guest | None, Guest | None]]


def changes(taken: HostInventory, now: HostInventory) -> Diff:
    """(uuid, guest in ``taken`` or None, guest in ``now`` or None) of
    each guest that differs: the host's own list of changes when it has
    one, else found by comparing every guest."""
    told = now.guest_changes
    if told is not None and told[0] == taken.generation:
        return told[1]
    old = {g.uuid: g for g in taken.guests}
    found: list[tuple[str, Guest | None, Guest | None]] = []
    for guest in now.guests:
        before = old.pop(guest.uuid, None)
        if before is not guest:
            found.append((guest.uuid, before, guest))
    found += [(uuid, before, None) for uuid, before in old.items()]
    return found


def _apply(ledger: Ledger, diff: Diff) -> list[str]:
    """Guests defined or redefined, and gone: the spawn claims ended.
    One the view set since the reading of ``diff`` was taken (its event
    taken in by a bind, ``guest_defined``...) is newer there than in the
    reading: left as it is (the next reading catches it up)."""
    ended = []
    ahead = ledger.view.guests_ahead
    for uuid, before, guest in diff:
        if uuid in ahead:
            continue
        had = before.mdevs if before is not None else ()
        if guest is not None:
            ended += note(ledger, guest, had)
        else:
            let_go(ledger, uuid, keep=set(), had=had)
    return ended


def apply_changes(ledger: Ledger) -> None:
    """Guests someone else defined or undefined (domain events): only
    those domains are read, and the view follows (inside
    :meth:`Ledger.locked`)."""
    ended = []
    for uuid, guest in ledger.host.take_guest_changes():
        ledger.view.guests_ahead.add(uuid)
        if guest is None:
            let_go(ledger, uuid, keep=set())
        else:
            ended += note(ledger, guest)
    if ended:
        ledger.save()


def catch_up(ledger: Ledger, uuids: Iterable[str]) -> None:
    """After a reading: the guests ``uuids``, whose devices the view set
    ahead of it (from their events, :func:`apply_changes`, or the
    caller's ``guest_defined`` and ``guest_undefined``), as the host
    knows them now. That reading compares each guest with the reading
    before, not with the view: a guest defined and undefined again in
    between, or undefined and defined again as it was, reads as no
    change there, and the view would keep its devices in use (or free
    while it uses them). Those set ahead since are left to the next
    reading; only a guest the view holds otherwise takes the records'
    lock."""
    host = ledger.host
    with ledger.lock:  # (the thread lock alone, for the usual case:
        used = ledger.view.used  # the view set them as the host has them)
        if all(
            used.of_guest(uuid) == _devices(host.known_guest(uuid))
            for uuid in uuids
        ):
            return
    with ledger.locked(view=False):
        ahead = ledger.view.guests_ahead
        if set_as_known(ledger, [u for u in uuids if u not in ahead]):
            ledger.save()  # (those set again since: the next reading's)


def set_as_known(ledger: Ledger, uuids: Iterable[str]) -> list[str]:
    """The guests ``uuids`` as the host knows them now (inside
    :meth:`Ledger.locked`, the caller saves): the spawn claims ended.
    Those defined are set first: a view from an older reading may have
    a device one of them has now with a guest gone since, and letting
    that one go first would hand the device back from under it."""
    known = {uuid: ledger.host.known_guest(uuid) for uuid in uuids}
    ended = []
    for guest in known.values():
        if guest is not None:
            ended += note(ledger, guest)
    for uuid, guest in known.items():
        if guest is None:
            let_go(ledger, uuid, keep=set())
    return ended


def _devices(guest: Guest | None) -> frozenset[str]:
    if guest is None:
        return frozenset()
    return frozenset((*guest.mdevs, *guest.pci_devices))


def let_go(
    ledger: Ledger,
    instance: str,
    keep: set[str],
    had: Iterable[str] | None = None,
) -> list[str]:
    """Hand back what the instance's guest had and no longer has
    (inside :meth:`Ledger.locked`): a device whose host state must change
    gets a release claim, saved now; the host is changed once the
    lock is left. ``had``: the devices it had, when known (else those
    the view has it using, in order). Returns the device ids freed."""
    freed: list[BoundDevice] = []
    used = ledger.view.used
    candidates = [
        (d, used[d])
        for d in (sorted(used.of_guest(instance)) if had is None else had)
        if d in used
    ]
    for device_id, guest in candidates:
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
    recorded = True
    try:
        for device in changing:
            claims[device.id] = hand_back.claim(ledger, device, instance)
        if changing or vf_types != ledger.vf_types:  # else nothing to write
            ledger.save(claims, vf_types)
    except StateStoreError as exc:
        # nothing recorded, nothing changed on the host: the devices
        # are free in the view as they are (a typed VF, an mdev)
        LOG.warning(
            "Could not record the devices %s let go: %s", instance, exc
        )
        recorded = False
    for device in freed:
        if device not in changing:
            ledger.view.released(device, done=True)
        elif recorded:
            ledger.hand_back_later(instance, device)
        else:
            ledger.view.released(device, done=False)
    return [d.id for d in freed]
