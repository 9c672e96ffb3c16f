"""A new reading of the host, taken into the binder's picture of it and
into what its records say (pure).

:meth:`DeviceView.of <vgpu_driver.model.device_view.DeviceView.of>`
builds the picture from a whole reading; a reading that changed only
some parents or cards is taken in by :func:`follow_parents` and
:func:`follow_cards`, the rest of the picture kept as it is. A reading
also tells the records which devices the library may take as its own
at its first start (:func:`adopted`) and which typed VFs guests keep
(:func:`vf_types_in_use`).
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Iterable, Mapping

from vgpu_driver.model.binding import ParentView
from vgpu_driver.model.device import HostInventory
from vgpu_driver.model.device_view import DeviceView, pf_view
from vgpu_driver.model.foreign import foreign_vfs

_UUID_OF = operator.attrgetter("uuid")


def follow_parents(
    view: DeviceView,
    before: HostInventory,
    now: HostInventory,
    touched: Iterable[str],
    ours: Collection[str] | None,
) -> None:
    """The parents ``touched`` as :meth:`DeviceView.of` would see them
    in ``now`` (read after ``before``, whose other devices and guests
    are the same): their room, their free mdevs, the mdevs made or gone
    there; the rest of the view stays as it is."""
    # by set operations (in C): a Python loop per mdev costs a dense
    # parent
    for name in touched:
        parent = now.parent(name)
        assert parent is not None
        present = now.mdevs_of(name)
        uuids = list(map(_UUID_OF, present))
        were = set(map(_UUID_OF, before.mdevs_of(name)))
        for gone in were.difference(uuids):
            view.mdevs.pop(gone, None)  # (removed by the binder too)
        view.foreign -= were
        view.mdevs.update(zip(uuids, present, strict=True))
        if ours is not None:
            view.foreign.update(set(uuids).difference(ours))
        free: dict[str, list[str]] = {}
        used = view.used
        for mdev in present:
            if mdev.uuid not in used:
                free.setdefault(mdev.type_id, []).append(mdev.uuid)
        view.parents[name] = ParentView(
            name, {t.id: t.available for t in parent.types}, free
        )
        view.parent_objects[name] = parent


def follow_cards(
    view: DeviceView,
    now: HostInventory,
    names: Iterable[str],
    ours: Collection[str] | None,
) -> None:
    """The SR-IOV cards ``names`` as :meth:`DeviceView.of` would see
    them in ``now`` (whose other devices and guests are as the view
    has them): their VFs' types and what each can create, and which
    typed VFs another manager made."""
    for name in names:
        pf = now.pf(name)
        assert pf is not None
        view.pfs[name] = pf_view(pf)
        view.foreign -= {vf.address for vf in pf.vfs}
        if ours is not None:
            view.foreign |= foreign_vfs(pf, ours)


def vf_types_in_use(
    inventory: HostInventory, used: Mapping[str, str], known: Mapping[str, int]
) -> dict[str, int]:
    """VF address -> type of every typed VF a guest uses that ``known``
    does not list (it keeps its type across reboots, even one this
    library did not set)."""
    return {
        vf.address: vf.current_type
        for pf in inventory.pfs
        for vf in pf.vfs
        if vf.current_type and vf.address in used and vf.address not in known
    }


def adopted(inventory: HostInventory, recorded: Iterable[str]) -> set[str]:
    """At the library's first start on a host: the devices taken as its
    own, every mdev and typed VF already there (made for this service's
    guests, by Nova's own vGPU code or an operator preparing the host, as
    Nova reuses them) and the VFs whose type it recorded. Whatever
    another manager makes from then on stays that manager's."""
    found = {m.uuid for m in inventory.mdevs}
    found.update(
        vf.address for pf in inventory.pfs for vf in pf.vfs if vf.current_type
    )
    found.update(recorded)
    return found
