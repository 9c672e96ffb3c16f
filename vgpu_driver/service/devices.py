"""Node devices changed on the host (an mdev made or removed, a VF of an
NVIDIA SR-IOV card typed or cleared, by the binder or by another
manager): the record of mdevs seen and the binder's view follow the
parents and cards the host names, not the whole host. Functions over
the ledger, which owns the view.
"""

from __future__ import annotations

import operator
from collections.abc import Collection
from typing import TYPE_CHECKING

from vgpu_driver.model.device import HostInventory
from vgpu_driver.model.device_changes import parents_alone
from vgpu_driver.model.view_follow import (
    follow_cards,
    follow_parents,
    vf_types_in_use,
)
from vgpu_driver.records.merged import keep
from vgpu_driver.records.seen import SeenMdevs, Where
from vgpu_driver.service.guests import may_follow

if TYPE_CHECKING:
    from vgpu_driver.service.ledger import Ledger

_UUID_OF = operator.attrgetter("uuid")


def follow(
    ledger: Ledger,
    seen: SeenMdevs,
    taken: HostInventory,
    now: HostInventory,
    touched: Collection[str],
) -> bool:
    """The mdevs seen and the view follow the parents and cards
    ``touched`` from ``taken`` (which the view was built from or
    followed) to ``now`` (whose other devices are the same; guests the
    host said changed with them are followed after, by the caller).
    False, with nothing done, for an mdev whose parent is not listed, a
    typed VF a guest uses whose type is not recorded (the full path
    records it), before the library took stock of the host, when the
    mdevs seen cannot be saved, and when the view is from a newer
    reading than ``now`` (see :func:`~.guests.may_follow`)."""
    parents = [name for name in touched if now.parent(name) is not None]
    cards = [name for name in touched if now.pf(name) is not None]
    if len(parents) + len(cards) != len(touched):
        return False  # an mdev whose parent is not listed
    if cards and _vf_types_to_record(ledger, now, cards):
        return False
    added: dict[str, Where] = {}
    gone: list[str] = []
    for name in parents:
        old, new = taken.mdevs_of(name), now.mdevs_of(name)
        # those kept are the same objects: compared in C, not per mdev
        kept = set(map(id, old))
        before = dict(zip(map(_UUID_OF, old), old, strict=True))
        for mdev in new:
            if id(mdev) not in kept and before.get(mdev.uuid) != mdev:
                added[mdev.uuid] = (mdev.parent, mdev.type_id)
        gone.extend(before.keys() - set(map(_UUID_OF, new)))
    with ledger.peeked():
        if not ledger.record.made_known:
            return False
    users = now.mdev_users()
    if not keep("the mdevs seen", lambda: seen.change(added, gone, users)):
        return False  # the full path retries the save
    with ledger.peeked():
        if not may_follow(ledger, now.generation):
            return False
        made = ledger.record.made
        follow_parents(ledger.view, taken, now, parents, made)
        follow_cards(ledger.view, now, cards, made)
    return True


def _vf_types_to_record(
    ledger: Ledger, now: HostInventory, cards: Collection[str]
) -> bool:
    """Has a guest a typed VF of ``cards`` whose type the records do not
    list (kept across reboots: recorded when the view is built)?"""
    alone = parents_alone(now, cards)
    with ledger.peeked():
        return bool(vf_types_in_use(alone, ledger.view.used, ledger.vf_types))
