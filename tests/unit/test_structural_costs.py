"""The structural figures behind the benchmarks (#24), guarded: what a
refresh costs after one guest event, and the durable writes of a bind."""

from __future__ import annotations

import os
import uuid
from collections import Counter

import pytest

from benchmarks.common import conf_for, dense
from tests import helpers, records_helpers
from tests.dense_service import counting, defined_again_as_it_was, service
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.model.made import MadeSet
from vgpu_driver.records import store as records_store
from vgpu_driver.records.claims import ClaimsRecord
from vgpu_driver.sim import guest_xml
from vgpu_driver.sim.guest_xml import render_guest
from vgpu_driver.sim.specs import GuestSpec


def test_a_bind_and_a_release_are_one_durable_write_each(
    tmp_path, monkeypatch
):
    """One durable write, one flush to disk: the claims appended to their
    journal and that file's data flushed (``fdatasync``); no file made,
    renamed or freed, so no flush of the directory. Past the journal's
    limit, one save writes a snapshot of the claims instead (the file
    fsynced, renamed over the old one, its directory fsynced, in that
    order; the devices made listed in it, and in ``made.json`` first,
    which the release before this one reads) and empties the
    journal."""
    import stat

    from vgpu_driver.records import journal

    _host, driver, tree, _guests = service(tmp_path, (2, 24, 16))
    order = records_helpers.saves_in_order(monkeypatch)
    steps: list[str] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync
    real_replace = os.replace

    def fsync(fd):
        mode = os.fstat(fd).st_mode
        steps.append("fsync dir" if stat.S_ISDIR(mode) else "fsync file")
        return real_fsync(fd)

    def fdatasync(fd):
        steps.append("fdatasync file")
        return real_fdatasync(fd)

    def replace(src, dst):
        steps.append("rename")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "replace", replace)
    free = [p for p in driver.last_plans if p.total > p.reserved]
    rp = tree.data(free[0].name).uuid
    instance = str(uuid.uuid4())
    driver.allocate_mdevs(instance, {rp: {"resources": {"VGPU": 1}}})
    assert (order, steps) == (["claims"], ["fdatasync file"])
    order.clear()
    steps.clear()
    driver.release_mdevs(instance)
    assert (order, steps) == (["claims"], ["fdatasync file"])
    # the journal is full: the next save is a snapshot
    order.clear()
    steps.clear()
    monkeypatch.setattr(journal, "LIMIT", 0)
    driver.allocate_mdevs(instance, {rp: {"resources": {"VGPU": 1}}})
    assert (order, steps) == (
        ["made", "claims"],
        ["fsync file", "rename", "fsync dir"] * 2,
    )
    assert os.path.getsize(tmp_path / "vgpu-state" / "claims.journal") == 0
    assert records_helpers.claims_on_disk(tmp_path / "vgpu-state") == (
        driver._refresher.binder.claims()
    )


def test_an_idle_refresh_takes_no_records_lock_until_another_writes(
    tmp_path, monkeypatch
):
    """The claims file held open, compared by one stat: a refresh that
    finds the records as it left them neither locks nor reads them; one
    after another process wrote them does both."""
    _host, driver, tree, _guests = service(tmp_path, (2, 24, 16))
    plan = driver.update_provider_tree(tree, "n")[0]
    rp = tree.data(plan.name).uuid
    instance = str(uuid.uuid4())
    driver.allocate_mdevs(instance, {rp: {"resources": {"VGPU": 1}}})
    driver.update_provider_tree(tree, "n")
    locks = [0]
    real = records_store.StateStore._acquire

    def counted(self):
        locks[0] += 1
        return real(self)

    monkeypatch.setattr(records_store.StateStore, "_acquire", counted)
    driver.update_provider_tree(tree, "n")
    assert locks == [0]
    # another process (restore, audit --fix) writes the records
    other = ClaimsRecord(records_store.StateStore(driver.state.directory))
    with other.locked():
        other.save()
    locks[0] = 0
    driver.update_provider_tree(tree, "n")
    assert locks[0] >= 1


def test_the_guests_are_read_again_once_after_another_process_wrote(
    tmp_path,
):
    """Another process (``restore``, ``audit --fix``) wrote the records:
    the refresh after reads every guest again, once (under the records'
    lock: what it wrote may be newer than any reading), and the refreshes
    after it are idle again, making the idle refresh's calls (they read
    every guest at each pass while nothing else changed on the host)."""
    host, driver, tree, guests = service(tmp_path, (2, 24, 16))
    host.calls.clear()
    driver.update_provider_tree(tree, "n")
    idle = Counter(host.calls)
    other = ClaimsRecord(records_store.StateStore(driver.state.directory))
    with other.locked():
        other.save()
    host.calls.clear()
    driver.update_provider_tree(tree, "n")
    assert host.calls["listAllDomains"] == 1
    assert host.calls["domain.XMLDesc"] == len(guests)
    for _ in range(2):
        host.calls.clear()
        driver.update_provider_tree(tree, "n")
        assert Counter(host.calls) == idle


@pytest.mark.parametrize("event", [False, True])
def test_a_refresh_looks_at_the_records_once(tmp_path, monkeypatch, event):
    """A pass reads the records once (one look: a stat of the claims
    file and one of its journal), idle or after a guest's event, however
    many of its steps read them; a write by another process is seen by
    the next pass."""
    from vgpu_driver.records import claims_file as claims_module

    host, driver, tree, guests = service(tmp_path, (2, 16, 16))
    path = driver.state.directory
    looks = [0]
    real = os.stat

    def counted(target, *args, **kwargs):
        if str(target).startswith(str(path)) and "claims" in str(target):
            looks[0] += 1
        return real(target, *args, **kwargs)

    monkeypatch.setattr(claims_module.os, "stat", counted)
    if event:
        defined_again_as_it_was(host, driver, guests[0])
    driver.update_provider_tree(tree, "n")
    assert looks == [2]
    # another process writes: the next pass finds out at its one look
    other = ClaimsRecord(records_store.StateStore(path))
    with other.locked():
        other.save()
    record = driver._refresher.binder.ledger.record
    assert not record.current()
    driver.update_provider_tree(tree, "n")
    assert record.current()


def test_a_restart_with_nothing_to_recover_reads_the_host_once(
    tmp_path, monkeypatch
):
    """init_host reads the host (guests included) once; it reads it
    again only when its recovery changed the host."""
    host, _driver, _tree, guests = service(tmp_path, (2, 16, 16))
    conf = conf_for(dense(2, 16, 16).config, tmp_path)
    fresh = VgpuDriver(conf, host)
    reads = []
    real = host.discover

    def counted(**kwargs):
        reads.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(host, "discover", counted)
    done = fresh.init_host(guests)
    assert not any(done[k] for k in ("released", "recreated", "started"))
    assert len(reads) == 1 and reads[0].get("rescan_guests")


def test_a_restart_with_nothing_to_recover_locks_the_records_once(
    tmp_path, monkeypatch
):
    """init_host and the first refresh take the records' lock once, for
    the start-up repair. The binder's view of the host (it ends no claim,
    records no VF type), releases cut short and claims of instances the
    service does not have are looked for without it (none here); with
    such a claim, the lock is taken to drop it."""
    host, driver, tree, guests = service(tmp_path, (2, 16, 16))
    conf = conf_for(dense(2, 16, 16).config, tmp_path)
    locks = [0]
    real = records_store.StateStore._acquire

    def counted(self, *args, **kwargs):
        locks[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(records_store.StateStore, "_acquire", counted)
    fresh = VgpuDriver(conf, host)
    fresh.init_host(guests)
    fresh.update_provider_tree(helpers.new_tree("n"), "n")
    assert locks == [1]
    # a spawn claim of an instance the service does not have: dropped,
    # under the lock
    stray = str(uuid.uuid4())
    plan = driver.update_provider_tree(tree, "n")[0]
    [device] = driver.allocate_mdevs(
        stray, {tree.data(plan.name).uuid: {"resources": {"VGPU": 1}}}
    )
    locks[0] = 0
    again = VgpuDriver(conf, host)
    done = again.init_host(guests)
    assert done["dropped_claims"] == [device.id] and locks == [2]


def test_a_restart_asks_no_abstract_class_of_what_it_counts(
    tmp_path, monkeypatch
):
    """init_host and the first refresh ask no abstract class whether an
    object is one of its own (``Counter(items)`` asks ``Mapping``): the
    first answer for each type walks every subclass the process has, a
    cost a restarted service pays in full (see
    :mod:`vgpu_driver.model.counting`)."""
    import abc

    host, _driver, _tree, guests = service(tmp_path, (2, 16, 16))
    conf = conf_for(dense(2, 16, 16).config, tmp_path)
    fresh = VgpuDriver(conf, host)
    asked: list[tuple[str, str]] = []
    instance, subclass = (
        abc.ABCMeta.__instancecheck__,
        abc.ABCMeta.__subclasscheck__,
    )

    def instance_check(cls, obj):
        asked.append((cls.__name__, type(obj).__name__))
        return instance(cls, obj)

    def subclass_check(cls, other):
        asked.append((cls.__name__, getattr(other, "__name__", "?")))
        return subclass(cls, other)

    monkeypatch.setattr(abc.ABCMeta, "__instancecheck__", instance_check)
    monkeypatch.setattr(abc.ABCMeta, "__subclasscheck__", subclass_check)
    fresh.init_host(guests)
    plans = fresh.update_provider_tree(helpers.new_tree("n"), "n")
    monkeypatch.undo()
    assert plans and asked == []


class _Unwalkable(dict):
    def __iter__(self):
        raise AssertionError("walked every device in use")


class _UnwalkableMade(MadeSet):
    def __iter__(self):
        raise AssertionError("walked every device made")


def test_a_later_bind_walks_nothing_the_size_of_the_host(tmp_path):
    """A bind asks whether each device it looks at is busy, one id at a
    time (no set of every device in use, claimed or another's is built),
    and its save neither copies nor sorts the devices made: its cost
    does not grow with the guests."""
    _host, driver, tree, _guests = service(tmp_path, (2, 24, 16))
    free = [p for p in driver.last_plans if p.total > p.reserved]
    rp = tree.data(free[0].name).uuid
    allocation = {rp: {"resources": {"VGPU": 1}}}
    driver.allocate_mdevs(str(uuid.uuid4()), allocation)  # reads guests
    ledger = driver._refresher.binder.ledger
    ledger.view.used = _Unwalkable(ledger.view.used)
    record = ledger.record
    record._made = _UnwalkableMade(record.made)  # as read
    [device] = driver.allocate_mdevs(str(uuid.uuid4()), allocation)
    assert device.id in driver._refresher.binder.claims()


@pytest.mark.parametrize("shape", [(2, 18, 16), (8, 264, 256)])
def test_a_spawn_and_a_delete_cost_a_refresh_no_call_and_no_plan(
    tmp_path, monkeypatch, shape
):
    """Nova's own change, as its integration makes it: a bind reusing a
    free mdev, the guest defined, told, and read by ``guest_defined``;
    then undefined, told, ``guest_undefined`` and released. The refresh
    after each makes the idle refresh's calls and no other, plans
    nothing, builds no view, whatever the number of mdevs and guests;
    and the mdev is in use after the spawn, free after the delete (a
    spawn that makes its mdev: ``test_devices_and_guests_at_once``)."""
    from vgpu_driver.model import device_view
    from vgpu_driver.service import touched, whole_host

    host, driver, tree, _guests = service(tmp_path, shape)
    host.calls.clear()
    plans = driver.update_provider_tree(tree, "n")
    idle = Counter(host.calls)
    counts: Counter[str] = Counter()
    counting(monkeypatch, whole_host, "plan_providers", counts)
    counting(monkeypatch, touched, "plan_providers", counts)
    counting(monkeypatch, device_view.DeviceView, "of", counts)
    conn = host.connection()
    instance = str(uuid.uuid4())
    rp = tree.data(plans[0].name).uuid
    [device] = driver.allocate_mdevs(
        instance, {rp: {"resources": {"VGPU": 1}}}
    )
    assert not device.created  # a free mdev reused
    spec = GuestSpec(uuid=instance, name="spawned", mdevs=[device.id])
    conn.defineXML(render_guest(spec))
    driver.domain_event(instance, True)
    driver.guest_defined(instance)
    host.calls.clear()
    assert driver.update_provider_tree(tree, "n") == plans
    assert Counter(host.calls) == idle
    assert driver.instance_devices()[instance]["in_use"] == [device.id]
    guest_xml.delete(conn.lookupByUUIDString(instance))
    driver.domain_event(instance, False)
    driver.guest_undefined(instance)
    driver.release_mdevs(instance)
    host.calls.clear()
    assert driver.update_provider_tree(tree, "n") == plans
    assert Counter(host.calls) == idle
    assert device.id in driver.free_mdevs()
    assert counts == Counter()


def test_a_guest_defined_again_writes_no_record(tmp_path, monkeypatch):
    """Nova tells ``guest_defined`` at every definition, a spawn's and a
    redefinition's alike: only a spawn's ends claims and writes them
    (one durable write); a guest defined again, no claim on its
    devices, writes nothing."""
    host, driver, tree, guests = service(tmp_path, (2, 24, 16))
    order = records_helpers.saves_in_order(monkeypatch)
    assert driver.guest_defined(guests[0]) == []
    assert order == []
    free = [p for p in driver.last_plans if p.total > p.reserved]
    instance = str(uuid.uuid4())
    rp = tree.data(free[0].name).uuid
    [device] = driver.allocate_mdevs(
        instance, {rp: {"resources": {"VGPU": 1}}}
    )
    order.clear()
    spec = GuestSpec(uuid=instance, name="spawned", mdevs=[device.id])
    host.connection().defineXML(render_guest(spec))
    assert driver.guest_defined(instance) == [device.id]
    assert order == ["claims"]
