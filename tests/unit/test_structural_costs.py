"""The structural figures behind the benchmarks (#24), guarded: what a
refresh costs after one guest event, and the durable writes of a bind."""

from __future__ import annotations

import os
import uuid
from collections import Counter

import libvirt
import pytest

from benchmarks.common import conf_for, dense
from tests import helpers
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.records import store as records_store
from vgpu_driver.records.claims import ClaimsRecord
from vgpu_driver.records.journal import Journal
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim import guest_xml
from vgpu_driver.sim.guest_xml import render_guest
from vgpu_driver.sim.specs import GuestSpec


def service(tmp_path, shape, extra=""):
    description = dense(*shape)
    description.config += extra
    uri, sysfs = hostdesc.materialize(description, tmp_path)
    host = helpers.LibvirtHost(uri, sysfs)
    driver = VgpuDriver(conf_for(description.config, tmp_path), host)
    tree = helpers.new_tree("n")
    guests = [g.uuid for g in host.discover(rescan_guests=True).guests]
    driver.init_host(guests)
    for _ in range(2):
        driver.update_provider_tree(tree, "n")
    return host, driver, tree, guests


def defined_again_as_it_was(host, driver, uuid):
    """libvirt undefines a guest and defines it again unchanged; the
    driver is told both, as Nova's lifecycle callback tells it."""
    conn = host.connection()
    guest = conn.lookupByUUIDString(uuid)
    xml = guest.XMLDesc(0)
    guest_xml.delete(guest)
    conn.defineXML(xml)
    driver.domain_event(uuid, False)
    driver.domain_event(uuid, True)


@pytest.mark.parametrize("shape", [(2, 16, 16), (8, 256, 256)])
def test_a_guest_event_costs_one_call_whatever_the_guests(tmp_path, shape):
    """The domain read before is read again through the object it was
    read from (libvirt finds a domain by uuid at each call): no lookup."""
    host, driver, tree, guests = service(tmp_path, shape)
    host.calls.clear()
    driver.update_provider_tree(tree, "n")
    idle = Counter(host.calls)
    assert idle == Counter({"XMLDesc": shape[0]})  # one per parent
    defined_again_as_it_was(host, driver, guests[0])
    host.calls.clear()
    driver.update_provider_tree(tree, "n")
    assert Counter(host.calls) - idle == Counter({"domain.XMLDesc": 1})


@pytest.mark.parametrize("kept", [64, 1])
def test_a_guest_seen_gone_and_defined_again_costs_one_call(
    tmp_path, monkeypatch, kept
):
    """A hard reboot undefines a guest and defines it again; a refresh
    in between sees it gone. Its domain object is kept (for the last
    GONE_KEPT guests gone): read again through it, no lookup."""
    from vgpu_driver.host import guests as guests_module

    monkeypatch.setattr(guests_module, "GONE_KEPT", kept)
    host, driver, tree, guests = service(tmp_path, (2, 16, 16))
    conn = host.connection()
    xmls = {}
    for guest in guests[:2]:
        domain = conn.lookupByUUIDString(guest)
        xmls[guest] = domain.XMLDesc(0)
        guest_xml.delete(domain)
        driver.domain_event(guest, False)
        driver.update_provider_tree(tree, "n")  # seen gone
    conn.defineXML(xmls[guests[1]])
    driver.domain_event(guests[1], True)
    host.calls.clear()
    driver.update_provider_tree(tree, "n")
    assert (
        host.calls["lookupByUUIDString"],
        host.calls["domain.XMLDesc"],
    ) == (
        0,
        1,
    )
    # the first one gone: kept too, or (past the limit) looked up
    conn.defineXML(xmls[guests[0]])
    driver.domain_event(guests[0], True)
    host.calls.clear()
    driver.update_provider_tree(tree, "n")
    assert host.calls["lookupByUUIDString"] == (0 if kept > 1 else 1)
    assert set(guests[:2]) <= set(driver.instance_devices())


def test_a_guest_event_on_a_new_connection_looks_the_domain_up(tmp_path):
    """Domain objects are of the connection they came from: after a new
    one (libvirtd restarted, the caller reconnected) a guest's event
    looks its domain up, and a guest gone is still seen gone."""
    description = dense(2, 16, 16)
    uri, sysfs = hostdesc.materialize(description, tmp_path)
    conns = [libvirt.open(uri)]
    host = helpers.LibvirtHost(sysfs_root=sysfs, connect=lambda: conns[-1])
    guests = [g.uuid for g in host.discover(rescan_guests=True).guests]
    conns.append(libvirt.open(uri))
    host.domain_event(guests[0], True)
    host.calls.clear()
    host.discover()
    assert host.calls["lookupByUUIDString"] == 1
    gone = conns[-1].lookupByUUIDString(guests[1])
    gone.destroy()  # (a running domain undefined stays, transient)
    guest_xml.delete(gone)
    host.domain_event(guests[1], True)  # (a late "defined")
    assert guests[1] not in {g.uuid for g in host.discover().guests}


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
    order = saves_in_order(monkeypatch)
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
    assert helpers.claims_on_disk(tmp_path / "vgpu-state") == (
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


def test_a_domain_defined_again_as_it_was_changes_no_reading(
    tmp_path, monkeypatch
):
    """A guest undefined and defined again unchanged (one event applied,
    the last): no reading is built (the last one stands, whatever the
    number of mdevs and guests); a guest really gone builds one."""
    from vgpu_driver.host import readings

    host, driver, _tree, guests = service(tmp_path, (2, 16, 16))
    before = host.discover().generation
    built = [0]
    real = readings.sort_inventory

    def counted(*args, **kwargs):
        built[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(readings, "sort_inventory", counted)
    # a reading whose guests alone changed is built from the last one
    from vgpu_driver.model.device import HostInventory

    with_guests = HostInventory.with_guests

    def counted_guests(self, *args, **kwargs):
        built[0] += 1
        return with_guests(self, *args, **kwargs)

    monkeypatch.setattr(HostInventory, "with_guests", counted_guests)
    defined_again_as_it_was(host, driver, guests[0])
    assert host.discover().generation == before and built == [0]
    guest_xml.delete(host.connection().lookupByUUIDString(guests[0]))
    driver.domain_event(guests[0], False)
    assert host.discover().generation != before and built == [1]


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


def counting(monkeypatch, module, name, counts):
    real = getattr(module, name)

    def counted(*args, **kwargs):
        counts[name] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)


@pytest.mark.parametrize("shape", [(2, 16, 16), (8, 256, 256)])
def test_a_guest_gone_and_back_builds_no_view_and_no_plan(
    tmp_path, monkeypatch, shape
):
    """A real change of a guest (gone: its mdev is free; back: in use)
    is applied to that guest's devices alone: no reading or list of
    guests sorted again, no view rebuilt, no plan made, whatever the
    number of mdevs and guests; and the view is right after each."""
    from vgpu_driver.host import readings
    from vgpu_driver.model import device_view
    from vgpu_driver.service import whole_host

    host, driver, tree, guests = service(tmp_path, shape)
    counts: Counter[str] = Counter()
    counting(monkeypatch, whole_host, "plan_providers", counts)
    counting(monkeypatch, device_view.DeviceView, "of", counts)
    counting(monkeypatch, readings, "sort_guests", counts)
    plans = driver.last_plans
    conn = host.connection()
    domain = conn.lookupByUUIDString(guests[0])
    xml = domain.XMLDesc(0)
    [mdev] = driver.instance_devices()[guests[0]]["in_use"]
    guest_xml.delete(domain)
    driver.domain_event(guests[0], False)
    assert driver.update_provider_tree(tree, "n") == plans
    assert mdev in driver.free_mdevs()
    conn.defineXML(xml)
    driver.domain_event(guests[0], True)
    assert driver.update_provider_tree(tree, "n") == plans
    assert mdev not in driver.free_mdevs()
    assert counts == Counter()


def test_where_guests_count_a_guest_gone_plans_again(tmp_path, monkeypatch):
    """With max_instances, in-use devices count first: a guest gone may
    change the plan, which is made again (and still honours the cap)."""
    from vgpu_driver.service import whole_host

    host, driver, tree, guests = service(
        tmp_path, (2, 16, 16), "[mdev_nvidia-35]\nmax_instances = 20\n"
    )
    counts: Counter[str] = Counter()
    counting(monkeypatch, whole_host, "plan_providers", counts)
    guest_xml.delete(host.connection().lookupByUUIDString(guests[0]))
    driver.domain_event(guests[0], False)
    plans = driver.update_provider_tree(tree, "n")
    assert counts == Counter({"plan_providers": 1})
    assert sum(p.total for p in plans) == 20


def test_a_guest_defined_with_its_bound_device_ends_the_spawn_claim(
    tmp_path,
):
    """Nova defines the domain of a bind it made (told by its lifecycle
    callback): the refresh that follows ends the spawn claim, on disk."""
    from vgpu_driver.host import domain_xml

    host, driver, tree, _guests = service(tmp_path, (2, 18, 16))
    instance = str(uuid.uuid4())
    rp = tree.data(driver.last_plans[0].name).uuid
    [device] = driver.allocate_mdevs(
        instance, {rp: {"resources": {"VGPU": 1}}}
    )
    assert driver.instance_devices()[instance]["claimed"] == [device.id]
    host.connection().defineXML(
        f"<domain type='test'><name>spawned</name><uuid>{instance}</uuid>"
        "<memory>1024</memory><os><type>hvm</type></os><devices>"
        f"{domain_xml.hostdev_xml(device)}</devices></domain>"
    )
    driver.domain_event(instance, True)
    driver.update_provider_tree(tree, "n")
    assert driver.instance_devices()[instance] == {
        "in_use": [device.id],
        "claimed": [],
    }
    again = VgpuDriver(driver.conf, host)  # the records, as on disk
    assert instance not in {
        c["instance"] for c in again.binder.claims().values()
    }


def saves_in_order(monkeypatch):
    """The records written, by key, in the order they are written
    (replaced whole, or appended to their journal)."""
    order: list[str] = []
    real_save = records_store.StateStore.save
    real_append = Journal.append

    def save(self, key, value):
        order.append(key)
        return real_save(self, key, value)

    def append(self, base, record):
        appended = real_append(self, base, record)
        if appended:
            order.append(self.path.stem)
        return appended

    monkeypatch.setattr(records_store.StateStore, "save", save)
    monkeypatch.setattr(Journal, "append", append)
    return order


def seen_on_disk(driver):
    from vgpu_driver.records.seen import SeenMdevs

    return SeenMdevs(driver._refresher.seen._record.state).snapshot()


def simulated(tmp_path):
    """A service on the in-process simulated host (which makes mdevs)."""
    from vgpu_driver.sim.simulated import SimulatedHost

    description = dense(1, 18, 16)
    host = SimulatedHost(description)
    driver = VgpuDriver(conf_for(description.config, tmp_path), host)
    tree = helpers.new_tree("n")
    driver.init_host([g.uuid for g in description.guests])
    driver.update_provider_tree(tree, "n")
    return host, driver, tree


def test_a_free_mdev_made_or_gone_writes_no_record(tmp_path, monkeypatch):
    """Another manager makes a free mdev, then removes it: the refresh
    after each knows it (reserved as another's, then gone) and writes
    nothing durable; what guests use is on disk as before."""
    host, driver, tree = simulated(tmp_path)
    on_disk = seen_on_disk(driver)
    order = saves_in_order(monkeypatch)
    parent = host.discover().parents[0]
    made = host.create_mdev(parent, parent.types[0].id, str(uuid.uuid4()))
    [plan] = driver.update_provider_tree(tree, "n")
    assert made.uuid in driver.seen_mdevs()
    assert plan.reserved == 1  # another manager's free mdev
    host.remove_mdev(made)
    [plan] = driver.update_provider_tree(tree, "n")
    assert made.uuid not in driver.seen_mdevs()
    assert (order, plan.reserved) == ([], 0)
    assert seen_on_disk(driver) == on_disk


@pytest.mark.parametrize("told", ["guest_defined", "refresh"])
def test_a_bound_mdev_is_on_disk_before_its_spawn_claim_ends(
    tmp_path, monkeypatch, told
):
    """The mdev a bind made is free at the next refresh (nothing
    written); once its guest is defined (told by the caller, or found
    by a refresh), where it is goes on disk, then its spawn claim ends:
    a crash between the two leaves it known."""
    from vgpu_driver.model.device import Guest

    host, driver, tree = simulated(tmp_path)
    for _ in range(3):  # a free mdev first, taken by the next guests
        plan = driver.update_provider_tree(tree, "n")[0]
        [device] = driver.allocate_mdevs(
            str(uuid.uuid4()),
            {tree.data(plan.name).uuid: {"resources": {"VGPU": 1}}},
        )
    instance = driver.instance_devices()
    [(instance, _)] = [
        (i, d) for i, d in instance.items() if d["claimed"] == [device.id]
    ]
    order = saves_in_order(monkeypatch)
    driver.update_provider_tree(tree, "n")
    assert device.created and device.id in driver.seen_mdevs()
    assert device.id not in seen_on_disk(driver) and order == []
    host.note_guest(Guest(instance, "spawned", (device.id,), ()))
    if told == "guest_defined":
        driver.guest_defined(instance)
    else:
        driver.update_provider_tree(tree, "n")
    assert order[:2] == ["mdev-parents", "claims"]
    assert seen_on_disk(driver)[device.id] == (device.parent, device.type_id)
    assert driver.instance_devices()[instance]["claimed"] == []


def test_a_guest_found_on_a_free_mdev_puts_it_on_disk(tmp_path, monkeypatch):
    """Another manager's free mdev (in memory only), then a guest
    defined on it outside any bind: the refresh that finds the guest
    writes where the mdev is (no spawn claim tells it)."""
    from vgpu_driver.model.device import Guest

    host, driver, tree = simulated(tmp_path)
    parent = host.discover().parents[0]
    made = host.create_mdev(parent, parent.types[0].id, str(uuid.uuid4()))
    driver.update_provider_tree(tree, "n")
    assert made.uuid not in seen_on_disk(driver)
    order = saves_in_order(monkeypatch)
    host.note_guest(Guest(str(uuid.uuid4()), "by-hand", (made.uuid,), ()))
    driver.update_provider_tree(tree, "n")
    assert order == ["mdev-parents"]
    assert seen_on_disk(driver)[made.uuid] == (made.parent, made.type_id)


def test_a_spawn_claim_stays_while_its_mdev_cannot_be_recorded(
    tmp_path, monkeypatch
):
    """The mdevs seen cannot be written (a full disk): the guest is
    defined, but its spawn claim stays (it still says where the mdev
    is); once the record can be written, the next refresh ends it."""
    from vgpu_driver.model.device import Guest
    from vgpu_driver.records.seen import SeenMdevs
    from vgpu_driver.records.store import StateStoreError

    host, driver, tree = simulated(tmp_path)
    for _ in range(3):  # the third makes a new mdev
        plan = driver.update_provider_tree(tree, "n")[0]
        [device] = driver.allocate_mdevs(
            str(uuid.uuid4()),
            {tree.data(plan.name).uuid: {"resources": {"VGPU": 1}}},
        )
    [instance] = [
        i
        for i, d in driver.instance_devices().items()
        if d["claimed"] == [device.id]
    ]
    real_save = SeenMdevs.save

    def full(self, new):
        raise StateStoreError(
            action="write", path="mdev-parents", reason="full"
        )

    monkeypatch.setattr(SeenMdevs, "save", full)
    host.note_guest(Guest(instance, "spawned", (device.id,), ()))
    driver.guest_defined(instance)
    assert driver.instance_devices()[instance]["claimed"] == [device.id]
    monkeypatch.setattr(SeenMdevs, "save", real_save)
    driver.update_provider_tree(tree, "n")
    assert driver.instance_devices()[instance]["claimed"] == []
    assert seen_on_disk(driver)[device.id] == (device.parent, device.type_id)


def test_a_guest_found_on_a_typed_vf_records_its_type(tmp_path):
    """A VF another manager typed, then a guest defined on it outside any
    bind: the refresh that finds the guest records the VF's type (so a
    restore gives it back after a reboot), on disk."""
    from vgpu_driver.model.device import Guest
    from vgpu_driver.sim.simulated import SimulatedHost

    description = helpers.load("l40-sriov")
    host = SimulatedHost(description)
    driver = VgpuDriver(conf_for(description.config, tmp_path), host)
    tree = helpers.new_tree("n")
    driver.init_host([g.uuid for g in description.guests])
    driver.update_provider_tree(tree, "n")
    [pf] = host.discover().pfs
    vf = next(v.address for v in pf.vfs if not v.current_type)
    host.set_vf_type(vf, 1157)
    driver.update_provider_tree(tree, "n")
    assert vf not in driver.binder.vf_types  # another's, not a guest's
    host.note_guest(Guest(str(uuid.uuid4()), "by-hand", (), (vf,)))
    driver.update_provider_tree(tree, "n")
    again = VgpuDriver(driver.conf, host)  # the records, as on disk
    assert again.binder.vf_types[vf] == 1157


class _Unwalkable(dict):
    def __iter__(self):
        raise AssertionError("walked every device in use")


class _UnwalkableSet(set):
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
    record._made_on_disk = _UnwalkableSet(record._made_on_disk)
    record._others_value = (record._others_value[0], record._made_on_disk)
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
