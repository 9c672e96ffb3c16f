"""Node devices changed on the host (an mdev made or removed, by the
binder or by another manager): the record of mdevs seen and the binder's
view follow the parents the host names, not the whole host. Functions
over the ledger, which owns the view.
"""

from __future__ import annotations

import operator
from collections.abc import Collection
from typing import TYPE_CHECKING

from vgpu_driver.model.device import HostInventory
from vgpu_driver.records.merged import keep
from vgpu_driver.records.seen import SeenMdevs, Where

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
    """The mdevs seen and the view follow the parents ``touched`` from
    ``taken`` (which the view was built from or followed) to ``now``
    (whose other devices and guests are the same). False, with nothing
    done, for an mdev whose parent is not listed, before the library
    took stock of the host, and when the mdevs seen cannot be saved."""
    if any(now.parent(name) is None for name in touched):
        return False  # an mdev whose parent is not listed
    added: dict[str, Where] = {}
    gone: list[str] = []
    for name in touched:
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
        ledger.view.follow_parents(taken, now, touched, ledger.record.made)
    return True
