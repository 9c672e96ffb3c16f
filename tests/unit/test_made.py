"""The devices made as a set that notes its changes
(:mod:`vgpu_driver.model.made`): what changed between two snapshots,
and whether the set is still what the records on disk hold, are told
from the changes alone, and always agree with comparing every device."""

from __future__ import annotations

import random

import pytest

from vgpu_driver.model import made as made_module
from vgpu_driver.model.made import KEPT, Made, MadeSet, changed


def _walked(*_args):
    raise AssertionError("compared every device")


@pytest.mark.parametrize("seed", range(20))
def test_what_changed_between_two_snapshots_is_their_difference(seed):
    """Random adds, discards and snapshots; every pair of snapshots up
    to :data:`KEPT` apart, in either order, gives their symmetric
    difference."""
    rng = random.Random(seed)
    devices = MadeSet(f"m{i}" for i in range(40))
    snapshots = [devices.frozen()]
    for _ in range(KEPT):
        for _ in range(rng.randrange(4)):
            device = f"m{rng.randrange(60)}"
            (devices.add if rng.random() < 0.5 else devices.discard)(device)
        snapshots.append(devices.frozen())
    for a in snapshots:
        for b in snapshots:
            assert changed(a, b) == frozenset(a) ^ frozenset(b)


def test_snapshots_are_compared_by_their_changes_alone(monkeypatch):
    devices = MadeSet(f"m{i}" for i in range(100))
    before = devices.frozen()
    devices.add("new")
    devices.discard("m3")
    after = devices.frozen()
    monkeypatch.setattr(Made, "__xor__", _walked)
    monkeypatch.setattr(Made, "__rxor__", _walked)
    assert changed(after, before) == {"new", "m3"}
    assert changed(before, after) == {"new", "m3"}
    # a device added and discarded again: no change
    devices.add("brief")
    devices.discard("brief")
    assert changed(devices.frozen(), after) == set()


def test_a_snapshot_is_one_object_until_the_set_changes():
    devices = MadeSet({"a", "b"})
    first = devices.frozen()
    devices.add("a")  # already there: no change
    devices.discard("zz")
    assert devices.frozen() is first
    assert changed(first, first) == frozenset()
    devices.add("c")
    assert devices.frozen() is not first
    assert devices.frozen() == {"a", "b", "c"}


def test_beyond_what_is_kept_every_device_is_compared():
    """Snapshots further apart than :data:`KEPT`, or of two sets (the
    records read again): the answer is still their difference, found
    by comparing them."""
    devices = MadeSet({"a"})
    oldest = devices.frozen()
    for n in range(KEPT + 2):
        devices.add(f"d{n}")
        devices.frozen()
    assert devices.touched_between(oldest.number, devices.frozen().number) is (
        None
    )
    assert changed(devices.frozen(), oldest) == {
        f"d{n}" for n in range(KEPT + 2)
    }
    other = MadeSet(devices).frozen()
    assert changed(other, devices.frozen()) == frozenset()
    assert changed(frozenset({"a"}), oldest) == frozenset()


def test_snapshots_of_a_set_gone_are_compared_whole():
    devices = MadeSet({"a", "b"})
    before = devices.frozen()
    devices.add("c")
    after = devices.frozen()
    del devices  # (the records read again: a new set)
    assert after.source() is None
    assert changed(after, before) == {"c"}


def test_unsaved_until_saved_and_back_as_saved_when_undone():
    devices = MadeSet({"a", "b"})  # as read from the records
    assert not devices.unsaved
    devices.add("c")
    assert devices.unsaved
    devices.discard("c")  # as on disk again
    assert not devices.unsaved
    devices.discard("a")
    devices.saved()
    assert not devices.unsaved
    devices.add("a")
    devices.add("x")
    devices.discard("a")
    assert devices.unsaved  # x
    replaced = MadeSet({"a"}, saved=False)
    assert replaced.unsaved
    replaced.saved()
    assert not replaced.unsaved


def test_every_change_goes_through_the_notes():
    devices = MadeSet({"a", "b"})
    before = devices.frozen()
    devices.update({"c"}, ["d"])
    devices |= {"e"}
    devices -= {"a"}
    devices.difference_update(["b"])
    devices.remove("c")
    with pytest.raises(KeyError):
        devices.remove("c")
    assert devices == {"d", "e"} and devices.unsaved
    assert changed(devices.frozen(), before) == {"a", "b", "d", "e"}
    devices.clear()
    assert changed(devices.frozen(), before) == {"a", "b"}
    devices.update({"g", "h"})
    devices -= devices  # a set taken from itself: emptied, noted
    assert devices == set() and changed(devices.frozen(), before) == {
        "a",
        "b",
    }
    for refused in ("pop", "intersection_update", "__iand__", "__ixor__"):
        with pytest.raises(TypeError, match="add and discard"):
            getattr(devices, refused)(*([{"a"}] if refused != "pop" else []))
    devices.add("f")
    with pytest.raises(TypeError):
        devices.symmetric_difference_update({"f"})
    assert devices == {"f"}


def test_records_replaced_whole_are_unsaved_and_read_again(tmp_path):
    """The claims record's devices made: replaced whole (a first start
    adopting what is there) they differ from disk until saved; changed
    and not saved, they are read again under the lock."""
    from vgpu_driver.records.claims import ClaimsRecord
    from vgpu_driver.records.store import StateStore

    record = ClaimsRecord(StateStore(str(tmp_path)))
    with record.locked():
        record.made = {"a", "b"}
        assert isinstance(record.made, MadeSet) and record.made.unsaved
        record.save()
    assert not record.made.unsaved
    with record.locked():
        record.made.add("c")  # never saved
    with record.locked():
        assert record.made == {"a", "b"}  # read again
        assert record.made_frozen() == {"a", "b"}
    assert made_module.KEPT >= 2
