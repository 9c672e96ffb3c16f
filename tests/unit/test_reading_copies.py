"""A reading whose guests alone changed is a copy of the last one: its
devices' indexes are carried over, its guests' are computed again."""

from __future__ import annotations

import dataclasses
import functools

from vgpu_driver.model.device import (
    DEVICE_INDEXES,
    GUEST_INDEXES,
    Guest,
    HostInventory,
    Mdev,
    MdevType,
    Parent,
)

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
    assert cached == DEVICE_INDEXES | GUEST_INDEXES
    assert not DEVICE_INDEXES & GUEST_INDEXES


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
