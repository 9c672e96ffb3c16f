"""What a reading says changed (#24): an mdev made or gone touches its
parent even where its room is the same, other parents and mdevs that do
not match the last reading are never followed, the parents alone are a
reading of their own, a parent bound to another driver reads the
versions again, anything but node devices changed is read whole, and a
parent gone or a full reading forgets what went."""

from __future__ import annotations

import dataclasses
import random
import uuid

import pytest

from benchmarks.common import dense
from tests.helpers import load
from vgpu_driver.model import naming
from vgpu_driver.model.device import (
    DEVICE_INDEXES,
    HostInventory,
)
from vgpu_driver.model.device_changes import parents_alone, with_devices
from vgpu_driver.sim.simulated import SimulatedHost


def test_an_mdev_made_or_gone_touches_its_parent_whose_room_is_the_same():
    """A defined-only mdev takes no room: its parent's reading is the
    same, yet its mdevs changed."""
    reading = SimulatedHost(dense(2, 8, 4)).discover()
    reading = dataclasses.replace(reading, generation=1)
    [gone, *_] = reading.mdevs_of(reading.parents[1].name)
    inactive = dataclasses.replace(gone, active=False, persistent=True)
    without = with_devices(reading, reading.parents, (), (gone,), 2)
    assert without.device_changes == (1, {gone.parent})
    back = with_devices(without, reading.parents, (inactive,), (), 3)
    assert back.device_changes == (2, {gone.parent})
    assert back.mdevs_of(gone.parent) == tuple(
        sorted(
            (*without.mdevs_of(gone.parent), inactive), key=lambda m: m.uuid
        )
    )


def test_other_parents_are_never_followed_as_a_change():
    """A parent gone, or one gone and another come in its place: not a
    change of the same parents, so None (the reading is built whole),
    never the new one taken as the old one changed."""
    reading = SimulatedHost(dense(3, 6, 3)).discover()
    first, second, third = reading.parents
    other = dataclasses.replace(third, name="pci_0000_ff_00_0")
    for parents in [(first, second), (first, second, other)]:
        assert with_devices(reading, parents, (), (), 2) is None
    assert with_devices(reading, reading.parents, (), (), 2) is not None


def test_mdevs_that_do_not_match_the_last_reading_are_never_followed():
    """An mdev gone that the last reading does not hold (or holds as
    another), or one made whose uuid it holds: None, never the wrong
    mdev dropped or a uuid twice."""
    reading = SimulatedHost(dense(2, 8, 4)).discover()
    held = reading.mdevs[0]
    unknown = dataclasses.replace(held, uuid=str(uuid.uuid4()))
    moved = dataclasses.replace(held, type_id="nvidia-999")
    parents = reading.parents
    for gone in (unknown, moved):
        assert with_devices(reading, parents, (), (gone,), 2) is None
    assert with_devices(reading, parents, (moved,), (), 2) is None
    assert with_devices(reading, parents, (unknown,), (), 2) is not None


@pytest.mark.parametrize("seed", range(3))
def test_parents_alone_are_a_reading_of_their_own(seed):
    """What the plan of the parents touched is handed: as a reading of
    those parents alone, built whole, its indexes included."""
    rng = random.Random(seed)
    now = SimulatedHost(dense(6, 60, 30)).discover()
    names = {p.name for p in now.parents if rng.random() < 0.5}
    alone = parents_alone(now, names)
    whole = HostInventory(
        parents=tuple(p for p in now.parents if p.name in names),
        mdevs=tuple(m for m in now.mdevs if m.parent in names),
        driver_versions=now.driver_versions,
        modules=now.modules,
        nvml=now.nvml,
    )
    assert alone == whole
    for name in DEVICE_INDEXES & vars(alone).keys():
        assert vars(alone)[name] == getattr(whole, name), name


def test_a_parent_bound_to_another_driver_reads_the_versions_again(
    tmp_path, monkeypatch
):
    """The drivers changed with the parents' XML alone (every pGPU bound
    to vfio-pci, say, with no mdev made or gone): the drivers' versions
    are read again, not kept as for an mdev."""
    from tests.modelled_libvirt import modelled_host
    from vgpu_driver.sim.mdev_devices import ModelledParent

    host, _conn = modelled_host(tmp_path)
    before = host.discover(rescan_guests=True)
    assert dict(before.driver_versions).get("nvidia")
    xml = ModelledParent.XMLDesc

    def rebound(self, flags=0):
        # (the test driver names no driver: sysfs does, read once)
        return xml(self, flags).replace(
            "</parent>", "</parent><driver><name>vfio-pci</name></driver>"
        )

    monkeypatch.setattr(ModelledParent, "XMLDesc", rebound)
    now = host.discover()
    assert {p.driver for p in now.parents} == {"vfio-pci"}
    assert "nvidia" not in dict(now.driver_versions)


def test_anything_but_node_devices_changed_is_read_whole():
    """What a reader read, the guests the same: made from the last
    reading while its node devices alone changed; NVML's word, the plain
    SR-IOV GPUs, the modules or the drivers' versions changed, None (the
    reading is built whole)."""
    from vgpu_driver.model.device_changes import node_devices_changed

    last = SimulatedHost(load("rtx6000-nvml")).discover()
    last = dataclasses.replace(last, generation=1)
    assert last.nvml is not None

    def read(**changed):
        parts = {
            "nvml": last.nvml,
            "plain": last.plain_gpus,
            "versions": last.driver_versions,
            "modules": last.modules,
            **changed,
        }
        return node_devices_changed(
            last,
            (
                last.parents,
                ((), ()),
                last.pfs,
                parts["nvml"],
                parts["plain"],
                parts["versions"],
                parts["modules"],
            ),
            2,
        )

    assert read() is not None
    for changed in [
        {"nvml": None},
        {"plain": SimulatedHost(load("amd-mxgpu")).discover().plain_gpus},
        {"versions": (("nvidia", "0.0"),)},
        {"modules": frozenset({"nvidia"})},
    ]:
        assert read(**changed) is None, changed


def test_a_parent_gone_with_its_mdevs_is_no_longer_offered(node):
    """A pGPU falls off the bus (its node device and its mdevs gone, the
    rest of the host as it was): the free mdev the library made on it is
    no longer handed out, and its provider, which a guest's allocation
    still holds, takes nothing more and says why."""
    n = node()
    n.driver.init_host([])
    parent = "pci_0000_84_00_0"
    spare = n.driver.create_free_mdev(parent)
    assert spare in n.driver.free_mdevs()
    n.host.unplug(parent)
    plan = n.update()[parent]
    assert plan.reserved == plan.total
    assert "no longer on the host" in (plan.reason or "")
    # it keeps the type its guest's mdev has (and that type's trait)
    assert plan.type_id == "nvidia-35"
    assert naming.type_trait("nvidia-35") in plan.traits
    assert spare not in n.driver.free_mdevs()
    assert not n.driver.free_mdevs(parent)


def test_a_full_reading_forgets_gone_mdevs_no_guest_uses(node):
    """The mdevs seen keep where a guest's mdev was while it is gone (a
    restart recreates it from that), and forget a gone free one."""
    from tests.helpers import M10_FREE_ON_86

    n = node()
    [used] = [g.mdevs[0] for g in n.host.discover().guests if g.mdevs][:1]
    assert {used, M10_FREE_ON_86} <= set(n.driver.seen_mdevs())
    inventory = n.host.discover()
    [free] = [m for m in inventory.mdevs if m.uuid == M10_FREE_ON_86]
    n.host.remove_mdev(free)
    [where] = [m.parent for m in inventory.mdevs if m.uuid == used]
    n.host.unplug(where)
    n.driver.discover(rescan_guests=True)
    seen = n.driver.seen_mdevs()
    assert used in seen and M10_FREE_ON_86 not in seen


def test_an_mdev_on_a_parent_not_listed_takes_the_reading_whole(node):
    """A reading whose new mdev names a parent it does not list (no
    parent to follow it on): the mdevs seen and the binder's view do not
    follow it as a change of the parents listed (which would leave it
    out); the reading is taken whole, and the mdev is seen where it
    is."""
    n = node()
    n.driver.discover()
    reading = n.driver._refresher.reading
    taken = reading._taken
    assert taken is not None and taken.guests_known
    mdev = dataclasses.replace(
        taken.mdevs[0], uuid=str(uuid.uuid4()), parent="pci_0000_ff_00_0"
    )
    now = with_devices(taken, taken.parents, (mdev,), (), taken.generation + 1)
    assert now is not None and now.device_changes[1] == {mdev.parent}
    assert reading._follow(taken, now) is False
    assert mdev.uuid not in n.driver.seen_mdevs()
    reading._take_in(now, whole=False)
    assert reading._taken is now
    assert n.driver.seen_mdevs()[mdev.uuid] == (mdev.parent, mdev.type_id)
