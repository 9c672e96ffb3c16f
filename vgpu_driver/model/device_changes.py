"""A reading of the host whose node devices alone changed, taken from
the last one without rebuilding it (pure).

When an mdev is made or removed, its parent's ``availableInstances``
changes with it: one parent and one mdev differ from the last reading,
every other device and every guest is as it was. When a VF of an NVIDIA
SR-IOV card is typed or cleared, that card (its physical function)
alone differs. A host that knows which (the libvirt adapter, from its
listing; the simulated host) makes the next reading with
:func:`with_devices`: the mdevs put in place by bisection, the indexes
of the devices untouched carried over, and the parents and cards
touched said (``HostInventory.device_changes``) so that what follows
the host (the record of mdevs seen, the binder's view, the plan) need
only look at them.
"""

from __future__ import annotations

import bisect
import dataclasses
import operator
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from vgpu_driver.model.copies import replaced
from vgpu_driver.model.device import (
    _FIELDS,
    DEVICE_INDEXES,
    GUEST_INDEXES,
    Guest,
    GuestChanges,
    HostInventory,
    Mdev,
    Parent,
    PhysicalFunction,
    PlainSriovGpu,
)
from vgpu_driver.model.guest_indexes import CARRY, INDEXES, SINGLE, link
from vgpu_driver.model.nvml import NvmlReading

_BY_UUID = operator.attrgetter("uuid")
_BY_NAME = operator.attrgetter("name")


def with_devices(
    last: HostInventory,
    parents: Sequence[Parent],
    added: Collection[Mdev],
    gone: Collection[Mdev],
    generation: int,
    pfs: Sequence[PhysicalFunction] | None = None,
    guest_changes: GuestChanges | None = None,
) -> HostInventory | None:
    """``last`` with ``parents`` and ``pfs`` (the same names, in the same
    order, as :func:`~vgpu_driver.model.device.sort_inventory` orders
    them; ``pfs`` None: as they are), the mdevs ``added`` and ``gone``,
    the next ``generation``; everything else (guests, drivers, NVML) as
    it is. None when the parents or the cards are not the same names or
    an mdev does not match what ``last`` holds (the caller builds the
    reading whole). ``guest_changes``: those ``last`` was made with from
    the reading before it, when it was (the guests and the node devices
    changed together: both are said from the same reading, see
    :func:`node_devices_changed`)."""
    changed = _changed(parents, last.parents)
    cards = _changed(pfs, last.pfs) if pfs is not None else []
    if changed is None or cards is None:
        return None
    touched = {p.name for p in changed} | {p.name for p in cards}
    mdevs = list(last.mdevs)
    for mdev in gone:
        at = bisect.bisect_left(mdevs, mdev.uuid, key=_BY_UUID)
        if at == len(mdevs) or mdevs[at] != mdev:
            return None
        del mdevs[at]
        touched.add(mdev.parent)
    for mdev in added:
        at = bisect.bisect_left(mdevs, mdev.uuid, key=_BY_UUID)
        if at < len(mdevs) and mdevs[at].uuid == mdev.uuid:
            return None
        mdevs.insert(at, mdev)
        touched.add(mdev.parent)
    state = {
        name: value
        for name, value in last.__dict__.items()
        if name in _FIELDS or name in _CARRIED
    }
    state.update(_indexes_after(last, changed, touched, added, gone))
    if not state.keys() >= INDEXES:  # made from last's when asked
        state[CARRY] = link(last, mdevs={m.uuid for m in (*added, *gone)})
    if cards and "_pfs_by_name" in state:
        state["_pfs_by_name"] = {
            **state["_pfs_by_name"],
            **{p.name: p for p in cards},
        }
    state.update(
        pfs=tuple(pfs) if pfs is not None else last.pfs,
        parents=tuple(parents),
        mdevs=tuple(mdevs),
        generation=generation,
        guest_changes=guest_changes,
        device_changes=(last.generation, frozenset(touched)),
    )
    reading = object.__new__(HostInventory)
    reading.__dict__.update(state)
    return reading


def _changed(now: Sequence[Any], last: Sequence[Any]) -> list[Any] | None:
    """The devices of ``now`` that differ from ``last``'s, in order;
    None when they are not the same names in the same order."""
    if len(now) != len(last) or any(
        p.name != q.name for p, q in zip(now, last, strict=True)
    ):
        return None
    return [p for p, q in zip(now, last, strict=True) if p is not q and p != q]


def _indexes_after(
    last: HostInventory,
    changed: Collection[Parent],
    touched: Collection[str],
    added: Collection[Mdev],
    gone: Collection[Mdev],
) -> dict[str, Any]:
    """The indexes of ``last`` that its parents' objects and its mdevs
    make, as they are after the change: those ``last`` has, each done
    again for the parents touched alone (the guests are the same)."""
    had = last.__dict__
    found: dict[str, Any] = {}
    if "_parents_by_name" in had:
        found["_parents_by_name"] = {
            **had["_parents_by_name"],
            **{p.name: p for p in changed},
        }
    if "_gpu_of" in had:  # names alone (a parent's GPU does not change)
        found["_gpu_of"] = had["_gpu_of"]
        if "_gpu_members" in had and not touched & had["_gpu_of"].keys():
            found["_gpu_members"] = had["_gpu_members"]  # no VF parent's
    if "_by_parent" in had:
        by_parent = found["_by_parent"] = dict(had["_by_parent"])
        for name in touched:
            left = {m.uuid for m in gone if m.parent == name}
            mine = [m for m in by_parent.get(name, ()) if m.uuid not in left]
            mine += (m for m in added if m.parent == name)
            if mine:
                by_parent[name] = tuple(sorted(mine, key=_BY_UUID))
            else:
                by_parent.pop(name, None)
    if "_absent_users" in had:
        users, new = last.mdev_users(), {m.uuid for m in added}
        found["_absent_users"] = (had["_absent_users"] - new) | {
            m.uuid for m in gone if m.uuid in users and m.uuid not in new
        }
    return found


# carried as they are: the indexes of the guests (the same), and of the
# devices but those made from the parents' objects and the mdevs (the
# cards' is carried, then updated)
_CARRIED = (DEVICE_INDEXES | GUEST_INDEXES | set(SINGLE.values())) - {
    "_parents_by_name",
    "_gpu_of",
    "_gpu_members",
    "_by_parent",
}


def parents_alone(now: HostInventory, names: Collection[str]) -> HostInventory:
    """The reading of the mdev parents (none a VF parent) and NVIDIA
    SR-IOV cards ``names`` alone, with their mdevs and VFs, the drivers,
    modules and NVML as they are: no other device, no guest. Its indexes
    are carried from ``now``'s, not made again."""
    parents = tuple(p for p in now.parents if p.name in names)
    pfs = tuple(p for p in now.pfs if p.name in names)
    by_parent = {n: now.mdevs_of(n) for n in names if now.mdevs_of(n)}
    alone = object.__new__(HostInventory)
    alone.__dict__.update(
        {f: getattr(_EMPTY, f) for f in _FIELDS},
        parents=parents,
        pfs=pfs,
        mdevs=tuple(
            sorted(
                (m for mine in by_parent.values() for m in mine), key=_BY_UUID
            )
        ),
        driver_versions=now.driver_versions,
        modules=now.modules,
        nvml=now.nvml,
        _parents_by_name={p.name: p for p in parents},
        _pfs_by_name={p.name: p for p in pfs},
        _by_parent=by_parent,
        _gpu_of={},
        _gpu_members={},
    )
    return alone


_EMPTY = HostInventory()


def touched_parents(
    before: HostInventory, now: HostInventory
) -> frozenset[str] | None:
    """The parents whose reading or mdevs changed from ``before`` to
    ``now``, when the host said so and nothing else changed; None when
    it did not say (the caller takes the reading whole)."""
    told = now.device_changes
    if told is None or told[0] != before.generation:
        return None
    return told[1]


def following(
    last: HostInventory, reading: HostInventory, generation: int
) -> HostInventory | None:
    """``reading`` (built whole, by a host that reads everything again)
    made from ``last`` with :func:`with_devices` when its node devices
    alone changed: what is the same keeps its objects, the parents
    touched are said. None when anything else changed."""
    same_cards = dataclasses.replace(reading, pfs=last.pfs)
    if (
        reading.guests != last.guests
        or reading.guests_known != last.guests_known
        or not same_cards.same_but_node_devices(last)
    ):
        return None
    old = {m.uuid: m for m in last.mdevs}
    new = {m.uuid: m for m in reading.mdevs}
    added = [m for u, m in new.items() if old.get(u) != m]
    gone = [m for u, m in old.items() if new.get(u) != m]
    parents = [
        q if p == q else p
        for p, q in zip(reading.parents, last.parents, strict=False)
    ]
    return with_devices(
        last, parents, added, gone, generation, pfs=reading.pfs
    )


def node_devices_changed(
    last: HostInventory,
    read: tuple[
        Sequence[Parent],
        tuple[Collection[Mdev], Collection[Mdev]],
        Iterable[PhysicalFunction],
        NvmlReading | None,
        Iterable[PlainSriovGpu],
        Iterable[tuple[str, str]],
        Iterable[str] | None,
    ],
    generation: int,
    guest_changes: GuestChanges | None = None,
) -> HostInventory | None:
    """What a reader read (parents, the mdevs it added and dropped since
    ``last``, SR-IOV functions, NVML, plain SR-IOV GPUs, driver versions,
    modules, as :func:`~vgpu_driver.model.device.sort_inventory` takes
    them), made from ``last`` with :func:`with_devices` when, the guests
    being the same, its node devices alone changed; None otherwise.
    ``last`` may be the reading before with the guests changed put in
    place (under its generation, never handed out): ``guest_changes``
    says which, and the reading made says both from that generation."""
    parents, (added, gone), pfs, nvml, plain, versions, modules = read
    if (
        nvml != last.nvml
        or tuple(sorted(plain, key=_BY_NAME)) != last.plain_gpus
        or (frozenset(modules) if modules is not None else None)
        != last.modules
        or tuple(sorted(set(versions))) != last.driver_versions
    ):
        return None
    return with_devices(
        last,
        sorted(parents, key=_BY_NAME),
        added,
        gone,
        generation,
        pfs=sorted(pfs, key=_BY_NAME),
        guest_changes=guest_changes,
    )


def said_since(
    first: HostInventory, second: HostInventory
) -> HostInventory | None:
    """``second`` saying its changes from the reading ``first`` says its
    own from: two readings taken one after the other in a pass (a guest
    gone, then the unused mdev it left removed) said as one change, as
    a pass that planned the reading before ``first`` sees them.
    ``second`` itself when it is ``first`` (the same generation); None
    when either does not say what changed, or ``second`` does not say it
    from ``first``."""
    if second.generation == first.generation:
        return second
    since = _said_from(first)
    if since is None or _said_from(second) != first.generation:
        return None
    guests = _guests_since(first.guest_changes, second.guest_changes)
    touched = _touched(first) | _touched(second)
    told = (first.device_changes, second.device_changes) != (None, None)
    # the same content: its indexes hold
    return replaced(
        second,
        guest_changes=(since, guests) if guests else None,
        device_changes=(since, touched) if told else None,
    )


def _said_from(reading: HostInventory) -> int | None:
    """The generation ``reading`` says its changes from (None: it says
    none, or not both from the same)."""
    said = {
        told[0]
        for told in (reading.guest_changes, reading.device_changes)
        if told is not None
    }
    return said.pop() if len(said) == 1 else None


def _touched(reading: HostInventory) -> frozenset[str]:
    told = reading.device_changes
    return told[1] if told is not None else frozenset()


def _guests_since(
    first: GuestChanges | None, second: GuestChanges | None
) -> tuple[tuple[str, Guest | None, Guest | None], ...]:
    """The guests changed by ``first`` then ``second``: each as it was
    before the first and is after the second (one defined and gone
    between is left out)."""
    diff = {uuid: (before, after) for uuid, before, after in _diff(first)}
    for uuid, before, after in _diff(second):
        diff[uuid] = (diff[uuid][0] if uuid in diff else before, after)
    return tuple(
        (uuid, before, after)
        for uuid, (before, after) in diff.items()
        if before is not None or after is not None
    )


def _diff(
    told: GuestChanges | None,
) -> tuple[tuple[str, Guest | None, Guest | None], ...]:
    return told[1] if told is not None else ()


__all__ = [
    "following",
    "node_devices_changed",
    "parents_alone",
    "said_since",
    "touched_parents",
    "with_devices",
]
