"""The rules about guests outside Nova, on readings built by hand: which
guest an event makes the refresh look at, which names a refresh judges
a reading with, and whose devices a guest the caller names takes back."""

from __future__ import annotations

import dataclasses
import uuid

from vgpu_driver.model.device import Guest, HostInventory
from vgpu_driver.model.foreign import outside_changed


class _Counted(set[str]):
    """The caller's named instances, counting the lookups."""

    looked = 0

    def __contains__(self, item: object) -> bool:
        self.looked += 1
        return super().__contains__(item)


def test_a_guest_s_event_looks_at_that_guest_alone():
    """Did what guests outside Nova use change? After one guest's event,
    the reading says which guest changed: that one is looked at, not the
    200 beside it (what a refresh after an event costs stays flat)."""
    guests = tuple(
        Guest(str(uuid.UUID(int=i)), f"g{i}", mdevs=(f"m{i}",), nova=False)
        for i in range(200)
    )
    before = HostInventory(guests=guests, generation=1)
    gone = guests[7]
    for then, after, told in [
        (gone, None, True),  # one outside Nova gone: its mdev is free
        (None, gone, True),
        (dataclasses.replace(gone, nova=True), None, False),  # Nova's
        # one outside Nova that uses nothing came: nothing to count
        (None, dataclasses.replace(gone, mdevs=()), False),
    ]:
        named = _Counted()
        now = HostInventory(
            guests=tuple(g for g in guests if g is not gone),
            generation=2,
            guest_changes=(1, ((gone.uuid, then, after),)),
        )
        assert outside_changed(before, now, named, named) is told
        assert named.looked <= 1
    # a reading that does not say which guests changed: every one
    named = _Counted()
    unsaid = dataclasses.replace(now, guest_changes=None)
    assert outside_changed(before, unsaid, named, named)
    assert named.looked == 399


def test_names_are_judged_as_they_were_when_the_last_reading_was():
    """The names a refresh judges the last reading with are those of its
    day: a name given and forgotten since is as it was before the first
    change; a change made while a refresh judged (after its mark) is
    kept for the next one, those before it are let go."""
    from vgpu_driver.service.named import NamedInstances

    named = NamedInstances()
    named.name(["a", "b"])
    named.judged(named.mark())
    assert "a" in named.then() and "c" not in named.then()
    assert named.then() is named  # no change since: the names as they are
    named.forget("a")
    named.name(["c"])
    named.forget("c")  # given and forgotten since: never named then
    then = named.then()
    assert "a" in then and "a" not in named
    assert "c" not in then and "c" not in named
    assert "b" in then and "b" in named
    mark = named.mark()
    named.name(["d"])  # while that refresh judged
    named.judged(mark)
    then = named.then()
    assert set(then.before) == {"d"}
    assert "d" not in then and "d" in named and "a" not in then
    named.judged(named.mark())
    assert named.then() is named
    named.name(["b"])  # named already: no change to judge
    assert named.then() is named


def test_naming_one_of_two_guests_without_metadata_gives_back_its_own():
    """Two guests without metadata on one reading; the caller names the
    second: that one crossed the line (its devices), the first did
    not."""
    from vgpu_driver.model.foreign import outside_of
    from vgpu_driver.service.named import NamedInstances

    a, b = (str(uuid.UUID(int=i)) for i in (1, 2))
    reading = HostInventory(
        guests=(
            Guest(a, "a", mdevs=("m1",), nova=False),
            Guest(b, "b", mdevs=("m2",), nova=False),
        ),
        generation=1,
    )
    named = NamedInstances()
    assert outside_of(reading, b, named) == frozenset({"m2"})
    assert outside_of(reading, "absent", named) == frozenset()
    named.name([b])
    assert outside_of(reading, b, named) == frozenset()
    assert outside_of(reading, b, named.then()) == frozenset({"m2"})
    assert named.crossed(reading, reading)
    named.judged(named.mark())
    named.name([str(uuid.UUID(int=3))])  # no guest of that name
    assert not named.crossed(reading, reading)
    # two names changed at once, one of them crossing: crossed
    named.forget(b)
    named.name([str(uuid.UUID(int=4))])
    assert named.crossed(reading, reading)


def test_any_guest_changed_outside_nova_among_several_is_a_change():
    """Two guests changed in one reading (Nova's first, then one outside
    Nova): the second's devices changed what Placement does not count,
    whatever the first did."""
    nova, theirs = (
        Guest(str(uuid.UUID(int=i)), f"g{i}", mdevs=(f"m{i}",), nova=i == 1)
        for i in (1, 2)
    )
    before = HostInventory(guests=(nova, theirs), generation=1)
    now = HostInventory(
        guests=(),
        generation=2,
        guest_changes=(
            1,
            ((nova.uuid, nova, None), (theirs.uuid, theirs, None)),
        ),
    )
    named: set[str] = set()
    assert outside_changed(before, now, named, named)
