"""libvirt's node-device events (#24): watched, a reading reads again
only the parents they name (an mdev's parent, with the VFs of its card),
so a steady reading makes no ``XMLDesc`` call at all; what it reads is
what a new adapter reading the whole host finds. Unwatched, or on a
connection that refuses them, every parent is read at every reading."""

from __future__ import annotations

import logging
import threading
import uuid
from pathlib import Path

import libvirt
import pytest

from tests import helpers
from tests.modelled_libvirt import logged_connection
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.host.nodedev_events import NodeDeviceEvents, parents_named
from vgpu_driver.model.device import Parent
from vgpu_driver.sim.mdev_devices import mdev_xml
from vgpu_driver.sim.mdev_events import CREATED, DELETED
from vgpu_driver.sim.mdev_libvirt import MdevConnection


@pytest.fixture(autouse=True)
def _event_loop():
    with helpers.libvirt_event_loop():
        yield


def _host(tmp_path, name="m10", watched=True, connection=logged_connection):
    """A LibvirtHost on host description ``name`` (mdevs modelled, every
    call logged), watching node-device events, after its first reading,
    and its connection."""
    description = helpers.load(name)
    uri, sysfs = helpers.hostdesc.materialize(description, tmp_path)
    conn = connection(uri, description, sysfs=Path(sysfs))
    host = LibvirtHost(uri, sysfs, opener=lambda _u: conn)
    if watched:
        host.watch_node_device_events()
    host.discover(rescan_guests=True)
    return host, conn


def _xml_read(conn, reading):
    """The node devices whose XML ``reading()`` read, and what it
    returned."""
    before = len(conn.calls("XMLDesc"))
    found = reading()
    return conn.calls("XMLDesc")[before:], found


def _whole(host, conn):
    """The host as a new adapter reading all of it finds it."""
    afresh = LibvirtHost(host.uri, host.sysfs.root, connection=conn)
    return afresh.discover(rescan_guests=True)


def test_a_steady_reading_reads_no_parent_where_events_are_watched(
    tmp_path,
):
    """(The first reading, a full listing, spent the events so far.)"""
    host, conn = _host(tmp_path)
    read, first = _xml_read(conn, host.discover)
    assert read == []
    assert host.discover() is first
    parents = sorted(p.name for p in first.parents)
    unwatched, conn = _host(tmp_path / "other", watched=False)
    read, _ = _xml_read(conn, unwatched.discover)
    assert sorted(read) == parents and len(parents) > 1


def test_the_first_reading_watched_reads_every_parent(tmp_path):
    """What changed before the callbacks were registered is unknown."""
    host, conn = _host(tmp_path, watched=False)
    parents = sorted(p.name for p in host.discover().parents)
    host.watch_node_device_events()
    read, _ = _xml_read(conn, host.discover)
    assert sorted(read) == parents
    read, _ = _xml_read(conn, host.discover)
    assert read == []


def test_another_manager_s_mdev_reads_its_parent_alone(tmp_path):
    host, conn = _host(tmp_path)
    before = host.discover()
    parent = next(p for p in before.parents if p.types[0].available)
    xml = mdev_xml(parent.name, parent.types[0].id, str(uuid.uuid4()))
    theirs = conn.nodeDeviceCreateXML(xml, 0).name()
    assert conn.events.sent[-1] == (theirs, CREATED)
    read, made = _xml_read(conn, host.discover)
    assert sorted(read) == sorted([parent.name, theirs])
    assert made.device_changes == (before.generation, {parent.name})
    assert theirs in {m.name for m in made.mdevs}
    assert made == _whole(host, conn)
    conn.gone.add(theirs)
    assert conn.events.sent[-1] == (theirs, DELETED)
    read, gone = _xml_read(conn, host.discover)
    assert read == [parent.name]
    assert gone == before


def test_a_reading_again_leaves_the_events_to_the_next(tmp_path):
    """A pass reads the host again right after its first reading, for
    what it changed itself (``again``): an event that came in between,
    for another manager's mdev, is left to the next reading."""
    host, conn = _host(tmp_path)
    before = host.discover()
    parent = next(p for p in before.parents if p.types[0].available)
    xml = mdev_xml(parent.name, parent.types[0].id, str(uuid.uuid4()))
    theirs = conn.nodeDeviceCreateXML(xml, 0).name()
    read, _ = _xml_read(conn, lambda: host.discover(again=True))
    assert read == []
    read, made = _xml_read(conn, host.discover)
    assert sorted(read) == sorted([parent.name, theirs])
    assert made == _whole(host, conn)


class _Late(MdevConnection):
    """libvirt's events not sent yet (they come on its event thread,
    after the change)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events.send = lambda *_: None


def test_the_adapter_s_own_mdev_reads_its_parent_before_its_event(
    tmp_path,
):
    host, conn = _host(
        tmp_path, connection=lambda *a, **k: _Late(*a, **k, log=[])
    )
    before = host.discover()
    parent = next(p for p in before.parents if p.types[0].available)
    ours = host.create_mdev(parent, parent.types[0].id, str(uuid.uuid4()))
    read, made = _xml_read(conn, host.discover)
    assert parent.name in read
    whole = _whole(host, conn)
    # its room as the kernel left it (the mdev itself is as the adapter
    # made it, not read back)
    assert made.parents == whole.parents
    assert {m.uuid for m in made.mdevs} == {m.uuid for m in whole.mdevs}
    assert ours.uuid in {m.uuid for m in made.mdevs}


def test_a_vf_s_mdev_reads_every_vf_of_its_card(tmp_path):
    """An mdev made on one VF changes what its siblings can hold."""
    host, conn = _host(tmp_path, "a2-vf-parents")
    before = host.discover()
    vf, kind = next(
        (p, t.id) for p in before.parents for t in p.types if t.available
    )
    card = {
        p.name
        for p in before.parents
        if p.physical_function == vf.physical_function
    }
    xml = mdev_xml(vf.name, kind, str(uuid.uuid4()))
    theirs = conn.nodeDeviceCreateXML(xml, 0).name()
    read, made = _xml_read(conn, host.discover)
    assert set(read) == card | {theirs} and len(card) > 1
    assert made == _whole(host, conn)


def test_an_event_for_another_device_reads_no_parent(tmp_path):
    host, conn = _host(tmp_path)
    first = host.discover()
    host.devices.events.note("scsi_host12")
    host.devices.events.note("net_eth0_52_54_00_12_34_56")
    read, found = _xml_read(conn, host.discover)
    assert read == [] and found is first


def test_an_mdev_named_without_its_parent_reads_every_parent(tmp_path):
    """libvirt before 7.3 names an mdev by its uuid alone."""
    host, conn = _host(tmp_path)
    parents = sorted(p.name for p in host.discover().parents)
    host.devices.events.note("mdev_" + str(uuid.uuid4()).replace("-", "_"))
    read, _ = _xml_read(conn, host.discover)
    assert sorted(read) == parents


def test_every_parent_is_read_again_after_the_relist_interval(tmp_path):
    """The bound on a change libvirt sends no event for."""
    host, conn = _host(tmp_path)
    parents = sorted(p.name for p in host.discover().parents)
    host.devices.relist_interval = 0.0
    read, _ = _xml_read(conn, host.discover)
    assert sorted(read) == parents


class _Refusing(MdevConnection):
    def nodeDeviceEventRegisterAny(self, *args):
        error = libvirt.libvirtError("this driver has no node-device events")
        error.err = (libvirt.VIR_ERR_NO_SUPPORT, 0, "", 2, "", "", "", 0, 0)
        raise error


def test_a_connection_refusing_the_events_has_every_parent_read(
    tmp_path, caplog
):
    def refusing(uri, description, sysfs):
        return _Refusing(uri, description, sysfs=sysfs, log=[])

    caplog.set_level(logging.INFO, logger="vgpu_driver")
    host, conn = _host(tmp_path, connection=refusing)
    parents = sorted(p.name for p in host.discover().parents)
    for _ in range(2):
        read, _ = _xml_read(conn, host.discover)
        assert sorted(read) == parents
    assert "No node-device events" in caplog.text


def test_the_callbacks_follow_a_new_connection():
    """libvirtd restarted: the callbacks are registered on the new
    connection, and its first reading reads every parent."""
    events = NodeDeviceEvents(_Link())
    first, second = _Conn(), _Conn()
    events.want()
    events.watch_again(first)
    assert events.take(first) is None  # every parent, at first
    events.watch_again(first)
    assert len(first.callbacks) == 2  # asked once a connection
    first.send("pci_0000_84_00_0")
    assert events.take(first) == {"pci_0000_84_00_0"}
    assert events.take(second) is None  # not watched there
    events.watch_again(second)
    assert len(second.callbacks) == 2 and events.take(second) is None
    second.send("mdev_x")
    assert events.take(second) == {"mdev_x"}


def test_libvirt_s_test_driver_sends_its_own_devices_events_to_them():
    """The contract the modelled mdevs' events are held to: the test
    driver, given the same callbacks through the real event loop, sends
    a created and deleted device's name."""
    conn = libvirt.open("test:///default")
    events = NodeDeviceEvents(_Link())
    events.want()
    events.watch_again(conn)
    events.take(conn)
    vhba = conn.nodeDeviceCreateXML(
        "<device><parent>scsi_host1</parent><capability type='scsi_host'>"
        "<capability type='fc_host'><wwnn>2000000012345678</wwnn>"
        "<wwpn>1000000012345678</wwpn></capability></capability></device>",
        0,
    )
    name = vhba.name()
    vhba.destroy()
    seen: set[str] = set()
    done = threading.Event()
    for _ in range(100):
        seen |= events.take(conn) or set()
        if name in seen or done.wait(0.05):
            break
    assert seen == {name}


def _parent(name, pf=None):
    return Parent(name=name, address=None, physical_function=pf)


def test_parents_named():
    listed = ["pci_0000_41_00_4", "pci_0000_41_00_5", "pci_0000_84_00_0"]
    last = {
        "pci_0000_41_00_4": _parent("a", "0000:41:00.0"),
        "pci_0000_41_00_5": _parent("b", "0000:41:00.0"),
        "pci_0000_84_00_0": _parent("c"),
    }.get
    mdev = "mdev_" + "1" * 8 + "_1111_1111_1111_" + "1" * 12
    assert parents_named({mdev + "_0000_84_00_0"}, listed, {}.get, last) == {
        "pci_0000_84_00_0"
    }
    assert parents_named({mdev}, listed, {mdev: listed[2]}.get, last) == {
        listed[2]
    }
    assert parents_named({mdev}, listed, {}.get, last) is None
    assert parents_named({listed[0]}, listed, {}.get, last) == set(listed[:2])
    assert (
        parents_named({"pci_0000_00_02_0", "usb_1"}, listed, {}.get, last)
        == set()
    )


class _Link:
    api = LibvirtHost("test:///default").api


class _Conn:
    def __init__(self):
        self.callbacks = []

    def nodeDeviceEventRegisterAny(self, dev, event, callback, opaque):
        self.callbacks.append((event, callback))
        return len(self.callbacks)

    def send(self, name):
        device = type("D", (), {"name": lambda _self: name})()
        self.callbacks[0][1](self, device, 0, 0, None)


def test_a_type_described_since_the_last_reading_is_read_without_an_event(
    tmp_path,
):
    """The configuration now enables another type (the caller describes
    other types): a steady reading, no event since, reads each parent
    again with that type's description, not the reading made without
    it."""
    host, conn = _host(tmp_path)
    host.described_types = lambda: {"nvidia-35"}
    first = host.discover()
    [m10] = [p for p in first.parents if p.name == "pci_0000_87_00_0"]
    assert m10.type("nvidia-35").description is not None
    assert m10.type("nvidia-36").description is None
    host.described_types = lambda: {"nvidia-36"}
    read, now = _xml_read(conn, host.discover)
    [m10] = [p for p in now.parents if p.name == "pci_0000_87_00_0"]
    assert m10.type("nvidia-36").description is not None
    assert "pci_0000_87_00_0" in read
