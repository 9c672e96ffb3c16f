"""Two readings taken one after the other in a pass (a guest gone, then
the unused mdev it left removed) said as one change
(:func:`~vgpu_driver.model.device_changes.said_since`): from the reading
the first said its changes from, the guests and the parents of both."""

from __future__ import annotations

import dataclasses

from vgpu_driver.model.device import Guest, HostInventory
from vgpu_driver.model.device_changes import said_since, touched_parents

A = Guest("a", "a", mdevs=("m1",))
B = Guest("b", "b", mdevs=("m2",))
B2 = Guest("b", "b", mdevs=("m3",))


def _reading(generation, guests=None, devices=None):
    return dataclasses.replace(
        HostInventory(),
        generation=generation,
        guest_changes=guests,
        device_changes=devices,
    )


def test_a_guest_gone_then_its_mdev_removed_are_said_from_the_first():
    first = _reading(6, guests=(5, (("a", A, None),)))
    second = _reading(7, devices=(6, frozenset({"p1"})))
    both = said_since(first, second)
    assert both is not None and both.generation == 7
    assert both.guest_changes == (5, (("a", A, None),))
    assert both.device_changes == (5, frozenset({"p1"}))
    assert touched_parents(_reading(5), both) == {"p1"}
    # the reading taken is left as it is
    assert second.device_changes == (6, frozenset({"p1"}))


def test_the_parents_and_guests_of_both_are_kept():
    first = _reading(
        6,
        guests=(5, (("a", None, A), ("b", B, None))),
        devices=(5, frozenset({"p1"})),
    )
    second = _reading(
        7,
        guests=(6, (("b", None, B2), ("c", None, None))),
        devices=(6, frozenset({"p2"})),
    )
    both = said_since(first, second)
    assert both is not None
    assert both.device_changes == (5, frozenset({"p1", "p2"}))
    # b as it was before the first, as it is after the second
    assert dict((u, (x, y)) for u, x, y in both.guest_changes[1]) == {
        "a": (None, A),
        "b": (B, B2),
    }


def test_a_guest_defined_and_gone_between_is_left_out():
    first = _reading(6, guests=(5, (("a", None, A),)))
    second = _reading(7, guests=(6, (("a", A, None),)))
    both = said_since(first, second)
    assert both is not None
    assert both.guest_changes is None and both.device_changes is None


def test_devices_alone_in_both_say_no_guest():
    first = _reading(6, devices=(5, frozenset({"p1"})))
    second = _reading(7, devices=(6, frozenset({"p1"})))
    both = said_since(first, second)
    assert both is not None
    assert both.guest_changes is None
    assert both.device_changes == (5, frozenset({"p1"}))


def test_the_same_reading_twice_is_itself():
    first = _reading(6, guests=(5, (("a", A, None),)))
    assert said_since(first, first) is first


def test_readings_that_do_not_say_or_do_not_follow_are_not_joined():
    said = _reading(6, guests=(5, (("a", A, None),)))
    follows = _reading(7, devices=(6, frozenset({"p1"})))
    # a whole reading says nothing
    assert said_since(_reading(6), follows) is None
    assert said_since(said, _reading(7)) is None
    # the second said from another reading than the first
    assert said_since(said, _reading(7, devices=(4, frozenset()))) is None
    # the first says its guests and devices from two readings
    mixed = _reading(6, guests=(5, ()), devices=(4, frozenset({"p1"})))
    assert said_since(mixed, follows) is None
    # the second's guests from the first, its devices from another
    torn = _reading(7, guests=(6, ()), devices=(5, frozenset({"p1"})))
    assert said_since(said, torn) is None
