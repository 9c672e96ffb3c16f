"""The adapter's cache of mdevs read: its indexes by name and by parent
stay in step whatever is put in, replaced or taken out, and what it
reports changed between two readings is what a reading would see."""

from __future__ import annotations

import dataclasses
import random

import pytest

from vgpu_driver.host.mdev_cache import MdevCache
from vgpu_driver.model.device import Mdev

UUID = "4b20d080-1b54-4048-85b3-a6a62d165c01"
P1, P2 = "pci_0000_84_00_0", "pci_0000_85_00_0"
OLD_NAME = f"mdev_{UUID.replace('-', '_')}"  # libvirt before 7.3
NEW_NAME = f"{OLD_NAME}_0000_84_00_0"  # and since


def _mdev(name: str = OLD_NAME, parent: str = P1, **more: object) -> Mdev:
    return Mdev(
        uuid=UUID, type_id="nvidia-35", parent=parent, name=name, **more
    )


def test_an_mdev_is_found_by_name_and_by_parent_until_taken_out():
    cache = MdevCache()
    mdev = _mdev()
    cache.put(mdev.name, mdev)
    assert mdev.name in cache and "mdev_other" not in cache
    assert cache.get(mdev.name) is mdev and cache.get("mdev_other") is None
    assert (cache.names(), list(cache.values())) == ({mdev.name}, [mdev])
    assert cache.of_parent(P1) == {UUID: mdev} and cache.has_uuid(UUID)
    assert cache.pop(mdev.name) is mdev
    assert mdev.name not in cache and cache.of_parent(P1) == {}
    assert cache.pop(mdev.name) is None  # already gone: nothing to undo
    assert not cache.has_uuid(UUID)


def test_an_mdev_read_again_on_another_parent_leaves_the_first():
    cache = MdevCache()
    cache.put(OLD_NAME, _mdev())
    moved = _mdev(parent=P2, active=False)
    cache.put(OLD_NAME, moved)
    assert cache.of_parent(P1) == {} and cache.stopped_on(P1) == frozenset()
    assert cache.of_parent(P2) == {UUID: moved}
    assert cache.stopped_on(P2) == {UUID}
    cache.put(OLD_NAME, dataclasses.replace(moved, active=True))
    assert cache.stopped_on(P2) == frozenset()


def test_one_uuid_under_two_names_keeps_the_index_of_the_one_left():
    """The same mdev listed under libvirt's old name and its new one
    (both read in one listing): taking out the name the index no longer
    points to leaves the other's entry; taking out both empties it."""
    cache = MdevCache()
    first, second = _mdev(OLD_NAME), _mdev(NEW_NAME)
    cache.put(OLD_NAME, first)
    cache.put(NEW_NAME, second)
    cache.pop(OLD_NAME)
    assert cache.of_parent(P1) == {UUID: second}
    cache.pop(NEW_NAME)
    assert cache.of_parent(P1) == {}
    cache.put(NEW_NAME, second)
    cache.pop(NEW_NAME)
    cache.put(OLD_NAME, first)
    assert cache.pop(OLD_NAME) is first and cache.of_parent(P1) == {}


def test_the_changes_are_what_changed_since_the_last_reading():
    cache = MdevCache()
    mdev = _mdev()
    cache.put(mdev.name, mdev)
    assert cache.take_changes() == ([mdev], [])
    assert cache.take_changes() == ([], [])
    # replaced, then put back as it was: no change
    cache.put(mdev.name, dataclasses.replace(mdev, active=False))
    cache.put(mdev.name, mdev)
    assert cache.take_changes() == ([], [])
    stopped = dataclasses.replace(mdev, active=False)
    cache.put(mdev.name, stopped)
    assert cache.take_changes() == ([stopped], [mdev])
    cache.pop(mdev.name)
    assert cache.take_changes() == ([], [stopped])


def test_an_mdev_put_in_again_as_it_is_needs_no_placing():
    """``unplaced``: the names whose parent the caller has to find; the
    same mdev put in again is not one of them."""
    cache = MdevCache()
    mdev = _mdev()
    cache.put(mdev.name, mdev)
    assert cache.unplaced == {mdev.name}
    cache.unplaced.clear()  # placed by the caller
    cache.put(mdev.name, mdev)
    assert cache.unplaced == set()
    cache.put(mdev.name, dataclasses.replace(mdev, iommu_group=7))
    assert cache.unplaced == {mdev.name}


def test_a_parent_keeps_its_other_mdevs_when_one_is_taken_out():
    cache = MdevCache()
    other = "0c8e2d1a-3b4f-4e5a-8c6d-7e8f9a0b1c2d"
    kept = Mdev(other, "nvidia-35", P1, "mdev_other", active=False)
    cache.put(OLD_NAME, _mdev(active=False))
    cache.put(kept.name, kept)
    cache.pop(OLD_NAME)
    assert cache.of_parent(P1) == {other: kept}
    assert cache.stopped_on(P1) == {other}


@pytest.mark.parametrize("seed", range(10))
def test_an_uuid_is_known_while_some_parent_s_index_has_it(seed):
    """Random puts (under both of libvirt's names, on either parent) and
    removals: ``has_uuid`` says what a look at every parent's index
    says."""
    rng = random.Random(seed)
    cache = MdevCache()
    uuids = [UUID, "0c8e2d1a-3b4f-4e5a-8c6d-7e8f9a0b1c2d"]
    for _ in range(200):
        uuid = rng.choice(uuids)
        old = f"mdev_{uuid.replace('-', '_')}"
        name = rng.choice([old, f"{old}_0000_84_00_0"])
        if rng.random() < 0.6:
            parent = rng.choice([P1, P2])
            cache.put(name, Mdev(uuid, "nvidia-35", parent, name))
        else:
            cache.pop(name)
        for each in uuids:
            held = any(each in cache.of_parent(p) for p in (P1, P2))
            assert cache.has_uuid(each) == held
