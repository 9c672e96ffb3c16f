"""A reading whose guests alone changed is a copy of the last one: its
devices' indexes are carried over, its guests' are computed again."""

from __future__ import annotations

import dataclasses
import functools
import random
import uuid

import pytest

from vgpu_driver.model.device import (
    DEVICE_INDEXES,
    GUEST_INDEXES,
    MIXED_INDEXES,
    Guest,
    HostInventory,
    Mdev,
    MdevType,
    Parent,
)
from vgpu_driver.model.guest_order import resort_guests, sort_guests

PARENT = Parent(
    name="pci_0000_84_00_0",
    address="0000:84:00.0",
    driver="nvidia",
    types=(MdevType("nvidia-35", "GRID M10-2Q", "vfio-pci", 3),),
)
MDEVS = tuple(
    Mdev(uuid=u, type_id="nvidia-35", parent=PARENT.name, name=f"mdev_{u}")
    for u in ("a", "b")
)


def test_every_index_of_a_reading_is_of_its_devices_or_of_its_guests():
    cached = {
        name
        for name, value in vars(HostInventory).items()
        if isinstance(value, functools.cached_property)
    }
    assert cached == DEVICE_INDEXES | GUEST_INDEXES | MIXED_INDEXES
    assert not DEVICE_INDEXES & GUEST_INDEXES
    assert not (DEVICE_INDEXES | GUEST_INDEXES) & MIXED_INDEXES


def test_a_copy_with_other_guests_keeps_the_device_indexes_only():
    before = HostInventory(
        parents=(PARENT,),
        mdevs=MDEVS,
        guests=(Guest(uuid="g1", name="one", mdevs=("a",)),),
        generation=4,
    )
    assert before.mdev_users() == {"a": "g1"}
    by_parent = before.mdevs_of(PARENT.name)
    guests = (Guest(uuid="g2", name="two", mdevs=("b",)),)
    diff = (("g1", before.guests[0], None), ("g2", None, guests[0]))
    after = before.with_guests(guests, True, 5, (4, diff))

    assert after.mdev_users() == {"b": "g2"}  # computed again
    assert after.mdevs_of(PARENT.name) is by_parent  # carried
    assert (after.generation, after.guest_changes) == (5, (4, diff))
    expected = dataclasses.replace(
        before, guests=guests, generation=5, guest_changes=(4, diff)
    )
    assert after == expected
    assert before.mdev_users() == {"a": "g1"}  # the old one unchanged


def _guests(n, seed):
    rng = random.Random(seed)
    return [
        Guest(uuid=str(uuid.UUID(int=rng.getrandbits(128))), name=f"g{i}")
        for i in range(n)
    ]


@pytest.mark.parametrize("seed", range(20))
def test_guests_changed_are_put_in_order_as_a_full_sort_would(seed):
    rng = random.Random(seed)
    known = {g.uuid: g for g in _guests(rng.randrange(0, 12), seed)}
    before = sort_guests(known.values())
    changes = []
    for new in _guests(rng.randrange(1, 6), seed + 100):
        untouched = sorted(set(known) - {c[0] for c in changes})
        if untouched and rng.random() < 0.5:  # one gone or redefined
            uuid_ = rng.choice(untouched)
            old = known.pop(uuid_)
            if rng.random() < 0.5:
                known[uuid_] = Guest(uuid_, old.name, mdevs=(new.uuid,))
            changes.append((uuid_, old, known.get(uuid_)))
        else:  # one new
            known[new.uuid] = new
            changes.append((new.uuid, None, new))
    # each guest once, as the host's list of changes has them
    assert len({c[0] for c in changes}) == len(changes)
    assert resort_guests(before, changes) == sort_guests(known.values())


def test_a_change_that_does_not_match_the_guests_asks_for_a_full_sort():
    one, two = _guests(2, 7)
    guests = sort_guests([one])
    assert resort_guests(guests, [(two.uuid, two, None)]) is None
    assert resort_guests(guests, [(one.uuid, None, one)]) is None
    changed = Guest(one.uuid, "renamed")
    assert resort_guests(guests, [(one.uuid, changed, None)]) is None
    assert resort_guests(guests, [(one.uuid, one, None)]) == ()
