"""Mdevs another manager makes, removes, stops, starts or makes again
(#24), followed by libvirt's adapter through each parent's sysfs
directory: each change reads as a new adapter would read the host, an
mdev libvirt has not seen yet is looked up again, and one swapped in
unseen is found by the guest that uses it."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest

from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.sim import guest_xml
from vgpu_driver.sim.mdev_devices import mdev_xml, no_device


def _made_by_them(conn, parent):
    xml = mdev_xml(parent.name, parent.types[0].id, str(uuid.uuid4()))
    return conn.nodeDeviceCreateXML(xml, 0)


def _the(reading, mdev_uuid):
    [mdev] = [m for m in reading.mdevs if m.uuid == mdev_uuid]
    return mdev


def _theirs_of_two_types(tmp_path):
    """(host, conn, mdev made by another manager, its parent's first
    type, another): on a parent offering two types, with no other mdev
    (one type at a time runs on an NVIDIA pGPU)."""
    from tests.modelled_libvirt import modelled_host

    host, conn = modelled_host(tmp_path)
    before = host.discover(rescan_guests=True)
    parent = next(
        p
        for p in before.parents
        if len(p.types) > 1 and all(t.available for t in p.types)
    )
    first, other = parent.types[0].id, parent.types[1].id
    xml = mdev_xml(parent.name, first, str(uuid.uuid4()))
    return host, conn, conn.nodeDeviceCreateXML(xml, 0), first, other


def test_libvirt_s_adapter_follows_a_parent_s_mdevs_through_its_sysfs(
    tmp_path,
):
    """Through libvirt (an mdev another manager makes, then removes, as
    libvirt >= 7.3 and the kernel show them): the parent's sysfs
    directory says which mdev came or went, one lookup reads it, and
    every mdev is not listed again. The reading names the parent, and is
    what a new adapter reading the whole host finds."""
    from tests.modelled_libvirt import modelled_host

    host, conn = modelled_host(tmp_path)
    before = host.discover(rescan_guests=True)
    parent = next(p for p in before.parents if p.types[0].available)
    listings = len(conn.calls("listAllDevices"))
    theirs = _made_by_them(conn, parent)
    made = host.discover()
    assert made.device_changes == (before.generation, {parent.name})
    assert len(conn.calls("listAllDevices")) == listings  # none
    afresh = LibvirtHost(host.uri, host.sysfs.root, connection=conn)
    assert made == afresh.discover(rescan_guests=True)
    listings = len(conn.calls("listAllDevices"))  # the new adapter's
    assert len(made.mdevs) == len(before.mdevs) + 1
    conn.gone.add(theirs.name())
    gone = host.discover()
    assert gone.device_changes == (made.generation, {parent.name})
    assert gone == before
    assert host.discover() is gone  # nothing more: the same reading
    assert len(conn.calls("listAllDevices")) == listings  # none


def test_an_mdev_libvirt_has_not_seen_yet_is_looked_up_again(tmp_path):
    """The kernel made it (sysfs lists it) before libvirt's node device
    driver learnt of it: the next reading looks again, though the
    parent's room is the same by then."""
    from tests.modelled_libvirt import modelled_host

    host, conn = modelled_host(tmp_path)
    before = host.discover(rescan_guests=True)
    parent = next(p for p in before.parents if p.types[0].available)
    theirs = _made_by_them(conn, parent)
    lookup, late = conn.nodeDeviceLookupByName, {theirs.name()}

    def not_yet(name):
        if name in late:
            raise no_device(name)
        return lookup(name)

    conn.nodeDeviceLookupByName = not_yet
    first = host.discover()
    assert len(first.mdevs) == len(before.mdevs)
    late.clear()
    second = host.discover()
    assert second.device_changes == (first.generation, {parent.name})
    assert len(second.mdevs) == len(before.mdevs) + 1


def test_a_defined_mdev_stopped_and_started_by_another_is_followed(
    tmp_path,
):
    from tests.modelled_libvirt import modelled_host

    host, conn = modelled_host(tmp_path)
    before = host.discover(rescan_guests=True)
    mdev = next(
        m for m in before.mdevs if before.parent(m.parent).types[0].available
    )
    conn.inactive.add(mdev.name)  # stopped, still defined
    stopped = host.discover()
    [now] = [m for m in stopped.mdevs if m.uuid == mdev.uuid]
    assert not now.active and now.persistent
    # an mdev made beside it: the stopped one is not asked about again
    asked = len(conn.log or ())
    parent = stopped.parent(mdev.parent)
    theirs = _made_by_them(conn, parent)
    beside = host.discover()
    assert len(beside.mdevs) == len(stopped.mdevs) + 1
    assert [s for _c, s in (conn.log or ())[asked:] if mdev.name in s] == []
    conn.gone.add(theirs.name())
    assert host.discover() == stopped
    conn.inactive.discard(mdev.name)  # started again
    started = host.discover()
    [now] = [m for m in started.mdevs if m.uuid == mdev.uuid]
    assert now.active
    assert started.device_changes[1] == {mdev.parent}


def test_a_stopped_mdev_undefined_by_another_is_gone_at_the_next_rescan(
    tmp_path,
):
    """A defined, stopped mdev undefined by another manager leaves no
    trace in sysfs nor in a parent's rooms: a reading asked to rescan (a
    service's start, the audit, another process's claims changed) lists
    every node device again and finds it gone."""
    from tests.modelled_libvirt import modelled_host

    host, conn = modelled_host(tmp_path)
    before = host.discover(rescan_guests=True)
    mdev = next(
        m for m in before.mdevs if before.parent(m.parent).types[0].available
    )
    conn.inactive.add(mdev.name)  # stopped, still defined
    assert _the(host.discover(), mdev.uuid).persistent
    conn.gone.add(mdev.name)  # and undefined
    conn.inactive.discard(mdev.name)
    rescanned = host.discover(rescan_guests=True)
    assert mdev.uuid not in {m.uuid for m in rescanned.mdevs}


def test_an_mdev_made_again_under_its_uuid_is_read_again(tmp_path):
    """Another manager removes an mdev and makes it again under the same
    uuid (so under the same libvirt name), of another type, between two
    readings: its sysfs directory is a new one (kernfs numbers it anew),
    so the reading has the new type, as a new adapter reads it."""
    host, conn, theirs, first, other = _theirs_of_two_types(tmp_path)
    assert _the(host.discover(), theirs.uuid).type_id == first
    conn.gone.add(theirs.name())
    conn.nodeDeviceCreateXML(mdev_xml(theirs.parent, other, theirs.uuid), 0)
    again = host.discover()
    assert _the(again, theirs.uuid).type_id == other
    afresh = LibvirtHost(host.uri, host.sysfs.root, connection=conn)
    assert again == afresh.discover(rescan_guests=True)


def test_a_defined_mdev_changed_while_stopped_is_read_again(tmp_path):
    """Its definition changed while it was stopped (``mdevctl modify``):
    started, it is read again."""
    host, conn, theirs, first, other = _theirs_of_two_types(tmp_path)
    conn.nodeDeviceDefineXML(mdev_xml(theirs.parent, first, theirs.uuid), 0)
    assert _the(host.discover(), theirs.uuid).type_id == first
    theirs.destroy()
    assert not _the(host.discover(), theirs.uuid).active
    theirs.xml = theirs.xml.replace(first, other)  # as mdevctl modify
    theirs.type_id = other
    theirs.create()
    started = _the(host.discover(), theirs.uuid)
    assert (started.active, started.type_id) == (True, other)


@pytest.mark.parametrize("seed", range(4))
def test_any_one_change_of_another_manager_reads_as_a_new_adapter_does(
    tmp_path, seed
):
    """Another manager makes (and maybe defines), removes, stops,
    starts, undefines mdevs, or makes one again under its uuid, one
    change between two readings, the kernel refusing those its parent
    has no room for: each reading is what a new adapter reading the
    whole host finds. (A change that leaves no trace in sysfs or in a
    parent's rooms, a defined-only mdev undefined, waits for the next
    full listing: not made here.)"""
    import libvirt

    from tests.modelled_libvirt import modelled_host

    rng = random.Random(seed)
    host, conn = modelled_host(tmp_path / "host")
    last = host.discover(rescan_guests=True)
    parents = last.parents
    theirs = {}
    done = Counter()

    def make(parent, mdev_uuid):
        xml = mdev_xml(parent.name, rng.choice(parent.types).id, mdev_uuid)
        try:
            made = conn.nodeDeviceCreateXML(xml, 0)
        except libvirt.libvirtError:
            done["refused"] += 1  # no room: nothing changed
            return
        if rng.random() < 0.5:
            conn.nodeDeviceDefineXML(xml, 0)
        theirs[made.uuid] = made
        done["made"] += 1

    for _step in range(30):
        running = [d for d in theirs.values() if conn.running(d.name())]
        stopped = [d for d in theirs.values() if d.name() in conn.inactive]
        change = rng.choice(["make", "gone", "stop", "start", "again"])
        if change == "make" or not running:
            make(rng.choice(parents), str(uuid.UUID(int=rng.getrandbits(128))))
        elif change == "start" and stopped:
            try:
                rng.choice(stopped).create()
            except libvirt.libvirtError:
                done["refused"] += 1
        else:
            mdev = rng.choice(running)
            if change == "stop":
                mdev.destroy()  # stopped if defined, else gone
            elif change == "again":
                conn.gone.add(mdev.name())
                make(
                    next(p for p in parents if p.name == mdev.parent),
                    mdev.uuid,
                )
            elif rng.random() < 0.5 and mdev.persistent:
                mdev.undefine()  # its definition alone (libvirt refuses
                # to undefine one never defined)
            else:
                conn.gone.add(mdev.name())
        afresh = LibvirtHost(host.uri, host.sysfs.root, connection=conn)
        now = host.discover()
        assert now == afresh.discover(rescan_guests=True)
        if now is not last:  # a new reading: a generation never seen
            assert now.generation > last.generation
            if now.device_changes is not None:  # followed from the last
                assert now.device_changes[0] == last.generation
        last = now
    assert done["made"] > 5 and done["refused"]


def test_an_mdev_swapped_in_unseen_is_found_by_the_guest_using_it(
    tmp_path,
):
    """Another manager removes an mdev and makes another of its type on
    the same parent between two readings: the parent's rooms are the
    same, so nothing says so. A guest defined with the new one (told by
    a domain event) takes up an mdev sysfs has and the adapter never
    read: every mdev is listed again."""
    from tests.domains import hand_made_domain_xml
    from tests.modelled_libvirt import modelled_host

    host, conn = modelled_host(tmp_path)
    before = host.discover(rescan_guests=True)
    parent = next(p for p in before.parents if p.types[0].available)
    old = _made_by_them(conn, parent)
    host.discover()
    conn.gone.add(old.name())
    new = _made_by_them(conn, parent)
    unseen = host.discover()
    # what no reading can tell (the rooms are the same): kept as it was
    assert old.uuid in {m.uuid for m in unseen.mdevs}
    guest = str(uuid.uuid4())
    conn.defineXML(hand_made_domain_xml(guest, "theirs", [new.uuid]))
    host.domain_event(guest, True)
    listings = len(conn.calls("listAllDevices"))
    seen = host.discover()
    assert len(conn.calls("listAllDevices")) > listings
    assert {new.uuid} <= {m.uuid for m in seen.mdevs} - {old.uuid}
    afresh = LibvirtHost(host.uri, host.sysfs.root, connection=conn)
    assert seen == afresh.discover(rescan_guests=True)
    # a guest using a known mdev lists nothing
    other = str(uuid.uuid4())
    conn.defineXML(hand_made_domain_xml(other, "theirs-too", [new.uuid]))
    host.domain_event(other, True)
    listings = len(conn.calls("listAllDevices"))
    host.discover()
    assert len(conn.calls("listAllDevices")) == listings


def test_an_mdev_made_alone_reads_no_module_and_other_changes_do(
    tmp_path, monkeypatch
):
    """An mdev made or gone is no driver event: the kernel's modules and
    the drivers' versions are those last read. With any other change
    (here a guest gone at the same time) they are read again, and a
    module unloaded meanwhile is seen (its parents then take nothing)."""
    from tests.modelled_libvirt import modelled_host

    host, conn = modelled_host(tmp_path)
    before = host.discover(rescan_guests=True)
    reads = []
    modules = host.sysfs.modules

    def counted():
        reads.append("modules")
        return modules()

    monkeypatch.setattr(host.sysfs, "modules", counted)
    parent = next(p for p in before.parents if p.types[0].available)
    theirs = _made_by_them(conn, parent)
    made = host.discover()
    assert made.device_changes == (before.generation, {parent.name})
    assert not reads
    assert made.modules == before.modules and "nvidia_vgpu_vfio" in (
        made.modules
    )
    (tmp_path / "sys/module/nvidia_vgpu_vfio").rename(tmp_path / "unloaded")
    conn.gone.add(theirs.name())
    host.discover()  # an mdev alone again: as last read
    assert not reads
    _made_by_them(conn, parent)
    guest = conn.listAllDomains()[0]
    guest_xml.delete(guest)
    host.forget_guest(guest.UUIDString())
    now = host.discover(rescan_guests=True)
    assert len(reads) == 1
    assert "nvidia_vgpu_vfio" not in now.modules
    afresh = LibvirtHost(host.uri, host.sysfs.root, connection=conn)
    assert now == afresh.discover(rescan_guests=True)
