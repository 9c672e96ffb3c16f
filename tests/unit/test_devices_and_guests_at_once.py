"""Nova's spawn where no free mdev waits (its bind makes one), and its
delete with ``remove_unused_mdevs`` (the mdev removed): the refresh
after each sees a node device and a guest change at once. It plans the
parent touched alone and follows the binder's view there, whatever the
number of mdevs and guests, and agrees with a refresh of the whole
host (#24: a spawn on a host filling up is the common change)."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.common import conf_for, dense
from benchmarks.service import Service
from tests.dense_service import counting
from tests.domains import hand_made_domain_xml
from tests.random_host import view_agrees
from vgpu_driver.model import device_view, made
from vgpu_driver.service import touched, whole_host
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim import guest_xml
from vgpu_driver.sim.guest_xml import render_guest
from vgpu_driver.sim.mdev_devices import mdev_xml
from vgpu_driver.sim.mdev_libvirt import MdevConnection
from vgpu_driver.sim.specs import GuestSpec


def _making(tmp_path, shape, remove=True):
    """A dense host with no free mdev, unused ones removed (``remove``)."""
    description = dense(*shape)
    uri, sysfs = hostdesc.materialize(description, tmp_path)
    conn = MdevConnection(uri, description, sysfs=Path(sysfs))
    conf = conf_for(description.config, tmp_path)
    conf.set_override("remove_unused_mdevs", remove, "devices")
    return conn, Service(uri, sysfs, conf, tmp_path, conn=conn)


def _walked(*_args):
    raise AssertionError("compared every device made")


def _whole_host_agrees(driver, tree):
    plans = list(driver.last_plans)
    view_agrees(driver)
    driver._refresher._fingerprint = None  # plan the whole host
    driver.update_provider_tree(tree, "bench")
    assert driver.last_plans == plans


@pytest.mark.parametrize("shape", [(2, 16, 16), (8, 256, 256)])
def test_a_spawn_that_makes_its_mdev_plans_its_parent_alone(
    tmp_path, monkeypatch, shape
):
    conn, service = _making(tmp_path, shape)
    driver, tree = service.driver, service.tree
    whole: Counter[str] = Counter()
    alone: Counter[str] = Counter()
    counting(monkeypatch, whole_host, "plan_providers", whole)
    counting(monkeypatch, touched, "plan_providers", alone)
    counting(monkeypatch, device_view.DeviceView, "of", whole)
    # the devices made before and after the bind are compared by what
    # changed between them, not device by device
    monkeypatch.setattr(made.Made, "__xor__", _walked)
    monkeypatch.setattr(made.Made, "__eq__", _walked)
    plan = next(p for p in driver.last_plans if p.total > p.reserved)
    instance = str(uuid.uuid4())
    wanted = {tree.data(plan.name).uuid: {"resources": {"VGPU": 1}}}
    [device] = driver.allocate_mdevs(instance, wanted)
    assert device.created  # no free mdev: made
    spec = GuestSpec(uuid=instance, name="spawned", mdevs=[device.id])
    conn.defineXML(render_guest(spec))
    driver.domain_event(instance, True)
    driver.guest_defined(instance)
    driver.update_provider_tree(tree, "bench")
    assert whole == Counter() and alone == Counter({"plan_providers": 1})
    assert driver.instance_devices()[instance]["in_use"] == [device.id]
    guest_xml.delete(conn.lookupByUUIDString(instance))
    driver.domain_event(instance, False)
    driver.guest_undefined(instance)
    driver.release_mdevs(instance)
    driver.update_provider_tree(tree, "bench")
    assert whole == Counter() and alone == Counter({"plan_providers": 2})
    assert device.id not in {m.uuid for m in driver.discover().mdevs}
    assert device.id not in driver.free_mdevs()
    _whole_host_agrees(driver, tree)


def test_a_guest_gone_elsewhere_with_the_spawn_plans_the_host(
    tmp_path, monkeypatch
):
    """A guest on another parent undefined in the same interval as a
    spawn that made its mdev: planning the spawn's parent alone would
    miss what that guest let go of: the whole host is planned. (Unused
    mdevs kept: one removed would be a device change there too.)"""
    conn, service = _making(tmp_path, (2, 16, 16), remove=False)
    driver, tree = service.driver, service.tree
    plans = driver.last_plans
    reading = driver.discover()
    other = plans[1].device
    mdevs = {m.uuid for m in reading.mdevs_of(other)}
    gone = next(g for g in reading.guests if set(g.mdevs) & mdevs)
    instance = str(uuid.uuid4())
    wanted = {tree.data(plans[0].name).uuid: {"resources": {"VGPU": 1}}}
    [device] = driver.allocate_mdevs(instance, wanted)
    spec = GuestSpec(uuid=instance, name="spawned", mdevs=[device.id])
    conn.defineXML(render_guest(spec))
    driver.domain_event(instance, True)
    driver.guest_defined(instance)
    domain = conn.lookupByUUIDString(gone.uuid)
    domain.destroy()  # as Nova deletes: stopped, then undefined
    guest_xml.delete(domain)
    driver.domain_event(gone.uuid, False)
    whole: Counter[str] = Counter()
    counting(monkeypatch, whole_host, "plan_providers", whole)
    driver.update_provider_tree(tree, "bench")
    assert whole == Counter({"plan_providers": 1})
    _whole_host_agrees(driver, tree)


def test_an_mdev_made_and_a_guest_defined_on_it_by_hand_at_once(tmp_path):
    """Another manager makes an mdev and a guest outside Nova is defined
    on it between two refreshes: the binder's view follows the parent
    and then the guest (the mdev in that guest's use, reserved), as a
    view built whole has it."""
    conn, service = _making(tmp_path, (2, 16, 16))
    driver, tree = service.driver, service.tree
    parent = driver.discover().parents[0]
    before = next(p for p in driver.last_plans if p.device == parent.name)
    made = str(uuid.uuid4())
    conn.nodeDeviceCreateXML(
        mdev_xml(parent.name, parent.types[0].id, made), 0
    )
    guest = str(uuid.uuid4())
    conn.defineXML(hand_made_domain_xml(guest, guest[:8], [made]))
    driver.domain_event(guest, True)
    driver.update_provider_tree(tree, "bench")
    assert driver.instance_devices()[guest]["in_use"] == [made]
    after = next(p for p in driver.last_plans if p.device == parent.name)
    assert after.reserved == before.reserved + 1
    _whole_host_agrees(driver, tree)


@pytest.mark.parametrize("shape", [(2, 16, 16), (8, 256, 256)])
def test_a_guest_gone_by_its_event_alone_plans_its_parent_alone(
    tmp_path, monkeypatch, shape
):
    """A guest undefined behind Nova's back, told by its event alone,
    with ``remove_unused_mdevs``: the refresh lets go of its mdev,
    removes it and reads the host again. The two readings say their
    changes as one (the guest gone, then its parent's mdev), so the
    parent is planned alone, whatever the host's size, as a plan of
    the whole host has it."""
    conn, service = _making(tmp_path, shape)
    driver, tree = service.driver, service.tree
    reading = driver.discover()
    guest = reading.guests[0]
    [mdev] = guest.mdevs
    parent = next(m.parent for m in reading.mdevs if m.uuid == mdev)
    before = next(p for p in driver.last_plans if p.device == parent)
    whole: Counter[str] = Counter()
    alone: Counter[str] = Counter()
    counting(monkeypatch, whole_host, "plan_providers", whole)
    counting(monkeypatch, touched, "plan_providers", alone)
    guest_xml.delete(conn.lookupByUUIDString(guest.uuid))
    driver.domain_event(guest.uuid, False)
    calls = driver.host.link.calls
    counted = Counter(calls)
    driver.update_provider_tree(tree, "bench")
    assert whole == Counter() and alone == Counter({"plan_providers": 1})
    # the host read again after the removal: the XML of the parent
    # changed alone (the pass's first reading read none: the service
    # watches node-device events, and none came)
    assert (Counter(calls) - counted)["XMLDesc"] == 1
    assert mdev not in {m.uuid for m in driver.discover().mdevs}  # removed
    after = next(p for p in driver.last_plans if p.device == parent)
    assert (after.total, after.reserved) == (before.total, before.reserved)
    _whole_host_agrees(driver, tree)


def test_guests_gone_on_two_parents_plan_both_alone(tmp_path, monkeypatch):
    """Guests on two parents gone by their events in one interval: the
    first reading says both gone, the second both mdevs removed; planned
    alone, both parents are (neither change is lost in the telling)."""
    conn, service = _making(tmp_path, (4, 16, 16))
    driver, tree = service.driver, service.tree
    reading = driver.discover()
    parent_of = {m.uuid: m.parent for m in reading.mdevs}
    first = reading.guests[0]
    second = next(
        g
        for g in reading.guests
        if parent_of[g.mdevs[0]] != parent_of[first.mdevs[0]]
    )
    seen: list[frozenset[str] | None] = []
    real = touched.parents_to_plan
    monkeypatch.setattr(
        "vgpu_driver.service.refresh.parents_to_plan",
        lambda *a: seen.append(real(*a)) or seen[-1],
    )
    for guest in (first, second):
        guest_xml.delete(conn.lookupByUUIDString(guest.uuid))
        driver.domain_event(guest.uuid, False)
    driver.update_provider_tree(tree, "bench")
    assert seen == [frozenset(parent_of[g.mdevs[0]] for g in (first, second))]
    _whole_host_agrees(driver, tree)


def test_a_guest_gone_from_another_managers_mdev_plans_the_host(
    tmp_path, monkeypatch
):
    """Two guests gone in one interval: one from an mdev of ours (removed
    once unused), one outside Nova from an mdev another manager made on
    another parent (kept: not ours to remove). The second reading says
    the first parent alone changed; the guests the first said gone name
    the other parent too: the whole host is planned (what a guest let go
    of there is not the first parent's to plan)."""
    conn, service = _making(tmp_path, (2, 16, 16))
    driver, tree = service.driver, service.tree
    reading = driver.discover()
    ours = reading.guests[0]
    parent_of = {m.uuid: m.parent for m in reading.mdevs}
    other = next(
        p for p in reading.parents if p.name != parent_of[ours.mdevs[0]]
    )
    made = str(uuid.uuid4())
    conn.nodeDeviceCreateXML(mdev_xml(other.name, other.types[0].id, made), 0)
    outside = str(uuid.uuid4())
    conn.defineXML(hand_made_domain_xml(outside, outside[:8], [made]))
    driver.domain_event(outside, True)
    driver.update_provider_tree(tree, "bench")
    whole: Counter[str] = Counter()
    counting(monkeypatch, whole_host, "plan_providers", whole)
    for guest in (ours.uuid, outside):
        guest_xml.delete(conn.lookupByUUIDString(guest))
        driver.domain_event(guest, False)
    driver.update_provider_tree(tree, "bench")
    assert whole == Counter({"plan_providers": 1})
    now = driver.discover()
    assert ours.mdevs[0] not in {m.uuid for m in now.mdevs}  # removed
    assert made in {m.uuid for m in now.mdevs}  # left alone
    _whole_host_agrees(driver, tree)


@pytest.mark.parametrize("shape", [(1, 16, 16), (8, 256, 256)])
def test_a_bind_that_makes_its_mdev_is_one_durable_write(
    tmp_path, monkeypatch, shape
):
    """The devices made travel with the claims: a bind that makes its
    mdev appends one entry (the claim, and the one device made since the
    snapshot, whatever the number of devices made) and flushes it once;
    a release that removes it appends its decision, then the outcome.
    Another process reads the device as made, then no longer made."""
    import os

    from tests.records_helpers import made_on_disk, saves_in_order
    from vgpu_driver.records.journal import Journal

    _conn, service = _making(tmp_path, shape)
    driver, tree = service.driver, service.tree
    state = tmp_path / "vgpu-state"
    order = saves_in_order(monkeypatch)
    entries: list[dict] = []
    append = Journal.append
    monkeypatch.setattr(
        Journal,
        "append",
        lambda self, base, record: (
            entries.append(record) or append(self, base, record)
        ),
    )
    flushes: list[str] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)
        monkeypatch.setattr(
            os,
            name,
            lambda fd, real=real, name=name: flushes.append(name) or real(fd),
        )
    plan = next(p for p in driver.last_plans if p.total > p.reserved)
    wanted = {tree.data(plan.name).uuid: {"resources": {"VGPU": 1}}}
    [device] = driver.allocate_mdevs("i1", wanted)
    assert device.created
    assert (order, flushes) == (["claims"], ["fdatasync"])
    assert entries[-1]["made_since"] == {"added": [device.id], "removed": []}
    assert device.id in made_on_disk(state)
    order.clear()
    flushes.clear()
    driver.release_mdevs("i1")  # no guest: unused, removed
    assert (order, flushes) == (["claims"] * 2, ["fdatasync"] * 2)
    assert entries[-1]["made_since"] == {"added": [], "removed": []}
    assert device.id not in made_on_disk(state)
    assert device.id not in {m.uuid for m in driver.discover().mdevs}
