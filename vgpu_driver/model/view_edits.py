"""The binder's own changes to its view, held to the next reading of
the host (pure).

Between two readings the binder keeps its view current by what it does:
an mdev it made is in the view, one it removed is not. A reading then
corrects the parents whose reading changed. But the host may have undone
a change before that reading (an mdev made by a bind, then removed by
another manager, or removed by a release whose call reported a failure):
the host then reads as it did before, its parent is not among those that
changed, and the view would keep an mdev that no longer exists (free, a
unit of room it holds) until that parent changes again. So the view
notes the parents it was changed on (``DeviceView.edits``), and the
reading that follows sets those it did not set already as it has them.
The same holds for an SR-IOV card whose VF a bind typed or a release
cleared: a clearing reported failed though done leaves a VF the view
holds typed and free, and a bind would hand a guest a VF with no vGPU.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from vgpu_driver.model.device import HostInventory
from vgpu_driver.model.device_view import DeviceView
from vgpu_driver.model.view_follow import follow_cards, follow_parents


def marks(view: DeviceView, names: Collection[str]) -> dict[str, object]:
    """What the view holds for the parents or cards ``names``: a reading
    taken in replaces it (see ``followed`` of :func:`resync_parents`)."""
    return {name: view.parents.get(name, view.pfs.get(name)) for name in names}


def replaced(view: DeviceView, marked: Mapping[str, object]) -> set[str]:
    """Those of ``marked`` (from :func:`marks`) a reading set since."""
    return {
        name
        for name, held in marked.items()
        if view.parents.get(name, view.pfs.get(name)) is not held
    }


def resync_parents(
    view: DeviceView,
    reading: HostInventory,
    edits: Mapping[str, Collection[str]],
    ours: Collection[str] | None,
    followed: Collection[str] = (),
) -> None:
    """The parents of ``edits`` (parent -> the mdevs the binder made or
    removed there, all before ``reading`` was taken) as ``reading`` has
    them: an mdev it does not have is dropped from the view; the room
    and the free mdevs are its, but for those ``followed`` (taking the
    reading in set them already). The SR-IOV cards of ``edits``: their
    VFs' types as it has them. A parent it does not list is left to the
    next full reading."""
    for name, uuids in edits.items():
        if reading.pf(name) is not None:
            if name not in followed:
                follow_cards(view, reading, [name], ours)
            continue
        if reading.parent(name) is None:
            continue
        held = {m.uuid for m in reading.mdevs_of(name)}
        for uuid in set(uuids).difference(held):
            view.mdevs.pop(uuid, None)
        if name not in followed:
            follow_parents(view, reading, reading, [name], ours)
