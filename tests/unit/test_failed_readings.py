"""A reading libvirt fails loses nothing: a domain event whose guest
could not be read is applied at the next reading, a scan of every guest
that failed is made again, and a node-device event taken by a reading
that failed is not lost (every device is listed next). Before, the
events were spent and the scan counted as made: a guest another manager
defined on a free mdev stayed unseen until the safety net's interval
(its mdev offered to the next instance), and so did another manager's
mdev and its parent's room until the next full listing."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import libvirt
import pytest

from tests import helpers
from tests.helpers import RecordingConnection
from tests.modelled_libvirt import logged_connection
from vgpu_driver.exception import HostOperationFailed
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim.mdev_devices import mdev_xml

FREE = "e905c06b-d33d-55fa-b0e1-6654dc764fac"  # a free mdev on m10
LATE = "77777777-0000-0000-0000-000000000099"
OTHER = "77777777-0000-0000-0000-000000000098"


def _guest(uuid: str, mdev: str | None) -> str:
    hostdev = (
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>"
        f"<source><address uuid='{mdev}'/></source></hostdev>"
        if mdev
        else ""
    )
    return (
        f"<domain type='test'><name>g-{uuid[-2:]}</name><uuid>{uuid}</uuid>"
        "<memory>65536</memory><os><type>hvm</type></os>"
        f"<devices>{hostdev}</devices></domain>"
    )


def _refusal() -> libvirt.libvirtError:
    exc = libvirt.libvirtError("internal error: transient")
    exc.err = (
        libvirt.VIR_ERR_INTERNAL_ERROR,
        libvirt.VIR_FROM_QEMU,
        "internal error: transient",
        2,
        None,
        None,
        None,
        0,
        0,
    )
    return exc


class Refusing(RecordingConnection):
    """Fails the next ``fail[name]`` calls of a method with an internal
    error (not "no such domain")."""

    def __init__(self, conn: Any) -> None:
        super().__init__(conn)
        self.fail: dict[str, int] = {}
        self.meanwhile: list[Any] = []  # run as a call fails

    def _maybe_fail(self, name: str) -> None:
        if self.fail.get(name):
            self.fail[name] -= 1
            for happen in self.meanwhile:
                happen()
            raise _refusal()

    def lookupByUUIDString(self, uuid: str) -> Any:
        self._maybe_fail("lookupByUUIDString")
        return self._conn.lookupByUUIDString(uuid)

    def listAllDomains(self, flags: int) -> Any:
        self._maybe_fail("listAllDomains")
        return self._conn.listAllDomains(flags)


def _refuse_once(host: LibvirtHost, wanted: Any) -> None:
    """libvirt fails the next call ``wanted(name, args)`` picks."""
    real, fail = host.link.call, [1]

    def call(name: str, fn: Any, *args: Any) -> Any:
        if fail[0] and wanted(name, args):
            fail[0] -= 1
            raise _refusal()
        return real(name, fn, *args)

    host.link.call = call  # type: ignore[method-assign]


def _a_parent_s_xml(call: str, _args: Any) -> bool:
    """A node device's XML read (a domain's is ``domain.XMLDesc``)."""
    return call == "XMLDesc"


@pytest.fixture
def host(tmp_path):
    uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path)
    conn = Refusing(libvirt.open(uri))
    host = LibvirtHost(uri, sysfs, connect=lambda: conn, api=libvirt)
    assert FREE not in host.discover().mdev_users()
    return host, conn


def test_an_event_whose_guest_could_not_be_read_is_applied_next(host):
    host, conn = host
    conn.defineXML(_guest(OTHER, None))
    conn.defineXML(_guest(LATE, FREE))
    host.domain_event(OTHER, True)
    host.domain_event(LATE, True)
    conn.fail["lookupByUUIDString"] = 1
    # an event libvirt's thread delivers while the read fails is newer
    # than those put back: still the last word (OTHER stays defined in
    # the test driver: read again, it would be seen)
    conn.meanwhile.append(lambda: host.domain_event(OTHER, False))
    with pytest.raises(HostOperationFailed, match="transient"):
        host.discover()
    found = host.discover()
    assert found.mdev_users().get(FREE) == LATE
    assert OTHER not in {g.uuid for g in found.guests}
    assert host.calls["listAllDomains"] == 1  # the events, not a scan


def test_a_scan_that_failed_is_made_again(host):
    host, conn = host
    conn.defineXML(_guest(LATE, FREE))  # no event reaches the library
    host.guests.scanned_at -= host.guests.rescan_interval  # a scan is due
    conn.fail["listAllDomains"] = 1
    with pytest.raises(HostOperationFailed, match="transient"):
        host.discover()
    assert host.discover().mdev_users().get(FREE) == LATE


def test_a_guest_event_after_a_reading_that_failed_past_its_scan(host):
    """The guests were all read, then libvirt failed the node devices:
    an event after that is applied at the next reading (every guest
    counts as changed since that scan)."""
    host, conn = host
    host.guests.scanned_at -= host.guests.rescan_interval  # a scan is due
    _refuse_once(host, _a_parent_s_xml)
    with pytest.raises(HostOperationFailed, match="transient"):
        host.discover()
    assert host.calls["listAllDomains"] == 2  # the first reading's, this
    conn.defineXML(_guest(LATE, FREE))
    host.domain_event(LATE, True)
    assert host.discover().mdev_users().get(FREE) == LATE
    assert host.calls["listAllDomains"] == 2  # not scanned again


def test_a_node_device_event_taken_by_a_failed_reading_is_not_lost(
    tmp_path,
):
    """Another manager's mdev, its event taken by a reading whose parent
    XML read libvirt fails: the next reading has it, and its parent's
    room, as a new adapter reading the whole host does."""
    description = helpers.load("m10")
    uri, sysfs = hostdesc.materialize(description, tmp_path)
    conn = logged_connection(uri, description, sysfs=Path(sysfs))
    with helpers.libvirt_event_loop():
        host = LibvirtHost(uri, sysfs, opener=lambda _u: conn)
        host.watch_node_device_events()
        before = host.discover(rescan_guests=True)
        parent = next(p for p in before.parents if p.types[0].available)
        xml = mdev_xml(parent.name, parent.types[0].id, str(uuid.uuid4()))
        theirs = conn.nodeDeviceCreateXML(xml, 0).name()
        _refuse_once(host, _a_parent_s_xml)
        with pytest.raises(HostOperationFailed, match="transient"):
            host.discover()
        after = host.discover()
        whole = LibvirtHost(uri, sysfs, connection=conn).discover(
            rescan_guests=True
        )
    assert theirs in {m.name for m in after.mdevs}
    assert after.parents == whole.parents
    assert after.mdevs == whole.mdevs


def test_a_lookup_libvirt_fails_is_not_a_gone_mdev(tmp_path):
    """A bind asks whether the free mdev it chose is still there: a
    lookup libvirt fails for another reason than "no such device" is the
    host's error, not an mdev gone (whose room would then be offered
    again beside it)."""
    description = helpers.load("m10")
    uri, sysfs = hostdesc.materialize(description, tmp_path)
    conn = logged_connection(uri, description, sysfs=Path(sysfs))
    host = LibvirtHost(uri, sysfs, opener=lambda _u: conn)
    [mdev, *_] = host.discover().mdevs
    assert host.mdev_exists(mdev)
    _refuse_once(host, lambda call, _args: call == "nodeDeviceLookupByName")
    with pytest.raises(HostOperationFailed, match="transient"):
        host.mdev_exists(mdev)


def _stopped_by_another_manager(tmp_path):
    """A host whose readings know an mdev another manager defined and
    started, then stopped (still defined), and its name."""
    description = helpers.load("m10")
    uri, sysfs = hostdesc.materialize(description, tmp_path)
    conn = logged_connection(uri, description, sysfs=Path(sysfs))
    host = LibvirtHost(uri, sysfs, opener=lambda _u: conn)
    parent = next(p for p in host.discover().parents if p.types[0].available)
    xml = mdev_xml(parent.name, parent.types[0].id, str(uuid.uuid4()))
    device = conn.nodeDeviceCreateXML(xml, 0)
    conn.nodeDeviceDefineXML(xml, 0)
    assert device.name() in {m.name for m in host.discover().mdevs}
    device.destroy()
    return host, device.name()


def test_a_failed_look_at_a_stopped_mdev_does_not_drop_it(tmp_path):
    """Its directory gone from sysfs, libvirt is asked whether it is
    still defined: a lookup libvirt fails is not "gone"."""
    host, name = _stopped_by_another_manager(tmp_path)
    _refuse_once(host, lambda call, _args: call == "nodeDeviceLookupByName")
    with pytest.raises(HostOperationFailed, match="transient"):
        host.discover()
    [mdev] = [m for m in host.discover().mdevs if m.name == name]
    assert not mdev.active  # defined, stopped: still the host's


def test_a_failed_listing_of_stopped_mdevs_is_asked_again(tmp_path):
    """libvirt failing the listing of defined, stopped mdevs once is
    not a libvirt that cannot list them: the next reading asks again."""
    host, name = _stopped_by_another_manager(tmp_path)
    inactive = host.link.api.list_inactive_mdevs
    host.devices.relist_interval = 0.0  # every reading lists all
    _refuse_once(host, lambda call, args: args == (inactive,))
    with pytest.raises(HostOperationFailed, match="transient"):
        host.discover()
    [mdev] = [m for m in host.discover().mdevs if m.name == name]
    assert not mdev.active  # defined, stopped: still the host's


def test_a_libvirt_that_cannot_list_stopped_mdevs_is_asked_once(tmp_path):
    """libvirt's test driver refuses the INACTIVE listing flag (no
    support, not a failure): asked at the first full listing, never
    again on that connection."""
    uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path)
    host = LibvirtHost(uri, sysfs)
    inactive = host.link.api.list_inactive_mdevs
    asked: list[Any] = []
    real = host.link.call

    def call(name: str, fn: Any, *args: Any) -> Any:
        if args == (inactive,):
            asked.append(name)
        return real(name, fn, *args)

    host.link.call = call  # type: ignore[method-assign]
    host.devices.relist_interval = 0.0  # every reading lists all
    for _ in range(3):
        assert host.discover().mdevs
    assert asked == ["listAllDevices"]
