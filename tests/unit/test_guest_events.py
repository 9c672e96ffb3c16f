"""A device plugged into or unplugged from a running guest (``virsh
attach-device --live``, ``detach-device``) sends libvirt's DEVICE_ADDED
or DEVICE_REMOVED, no lifecycle event: the watcher re-reads that guest
on them. A change no event told of is seen when the safety net's interval
has passed (every guest read again), not before.

libvirt's test driver cannot hot-plug (``virDomainAttachDeviceFlags`` is
unsupported), so the guest's XML is changed by defining it again on a
connection whose event registrations are only recorded (no lifecycle
event reaches the library), and the device events are delivered by
calling what was registered, as libvirt's event thread would."""

from __future__ import annotations

import libvirt
import pytest

from tests import helpers
from tests.helpers import RecordingConnection, new_tree
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.sim import description as hostdesc

FREE = "e905c06b-d33d-55fa-b0e1-6654dc764fac"  # a free mdev on m10
UUID = "77777777-0000-0000-0000-000000000011"


def _guest(with_mdev: bool, mdev: str = FREE) -> str:
    hostdev = (
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>"
        f"<source><address uuid='{mdev}'/></source></hostdev>"
        if with_mdev
        else ""
    )
    return (
        f"<domain type='test'><name>hotplug</name><uuid>{UUID}</uuid>"
        "<memory>65536</memory><os><type>hvm</type></os>"
        f"<devices>{hostdev}</devices></domain>"
    )


@pytest.fixture
def host(tmp_path):
    uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path)
    conn = RecordingConnection(libvirt.open(uri))
    conn.defineXML(_guest(with_mdev=False))
    host = LibvirtHost(uri, sysfs, connect=lambda: conn, api=libvirt)
    assert FREE not in host.discover().mdev_users()
    return host, conn


def test_a_device_hot_plugged_or_unplugged_is_seen_through_its_event(host):
    host, conn = host
    host.watch_domain_events()
    domain = conn.lookupByUUIDString(UUID)
    host.calls.clear()
    conn.defineXML(_guest(with_mdev=True))  # as attach-device --live
    assert FREE not in host.discover().mdev_users()  # no event yet
    conn.callbacks[libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_ADDED](
        conn, domain, "hostdev0", None
    )
    assert host.discover().mdev_users()[FREE] == UUID
    conn.defineXML(_guest(with_mdev=False))  # as detach-device --live
    conn.callbacks[libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED](
        conn, domain, "hostdev0", None
    )
    assert FREE not in host.discover().mdev_users()
    assert host.calls["listAllDomains"] == 0  # that guest alone re-read


def test_a_change_no_event_told_of_is_seen_after_the_safety_interval(host):
    host, conn = host
    conn.defineXML(_guest(with_mdev=True))
    host.calls.clear()
    assert FREE not in host.discover().mdev_users()
    assert host.calls["listAllDomains"] == 0  # within the interval
    host.guests.scanned_at -= host.guests.rescan_interval
    assert host.discover().mdev_users()[FREE] == UUID
    assert host.calls["listAllDomains"] == 1


def test_the_service_stops_handing_out_an_mdev_an_unseen_guest_took(
    make_conf, tmp_path
):
    """Through the service: the binder's free list follows the safety
    net's reading (a guest defined where no event reached the library)."""
    host, driver = _service(make_conf, tmp_path)
    free = sorted(driver.free_mdevs())[0]
    host.connection().defineXML(_guest(with_mdev=True, mdev=free))
    driver.update_provider_tree(new_tree(), "node1")
    assert free in driver.free_mdevs()  # no event: not known yet
    host.guests.scanned_at -= host.guests.rescan_interval
    driver.update_provider_tree(new_tree(), "node1")
    assert free not in driver.free_mdevs()
    assert driver.instance_devices()[UUID]["in_use"] == [free]


def test_the_watch_is_registered_again_on_the_connection_after_a_loss(
    tmp_path,
):
    """The adapter's own connection, lost (libvirtd restarted) and opened
    again: the next reading registers the callbacks on the new one, whose
    events then reach the library."""
    uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path)
    opened: list[RecordingConnection] = []

    def opener(uri: str) -> RecordingConnection:
        opened.append(RecordingConnection(libvirt.open(uri)))
        return opened[-1]

    host = LibvirtHost(uri, sysfs, opener=opener)
    host.discover()
    host.watch_domain_events()
    first = opened[0]
    assert set(first.callbacks) >= {libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_ADDED}
    host.link.lost("Cannot write data: Broken pipe")  # libvirtd restarted
    host.discover()  # connects again, reads every guest
    [_, again] = opened
    assert again.registered == first.registered
    host.discover()
    assert again.registered == first.registered  # once on it
    again.defineXML(_guest(with_mdev=True))
    domain = again.lookupByUUIDString(UUID)
    again.callbacks[libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_ADDED](
        again, domain, "hostdev0", None
    )
    assert host.discover().mdev_users()[FREE] == UUID


class RefusingConnection(RecordingConnection):
    def domainEventRegisterAny(self, *args: object) -> int:
        self.registered.append(-1)
        raise libvirt.libvirtError("this URI does not support events")


def test_a_new_connection_refusing_the_watch_is_read_all_the_same(
    tmp_path, caplog
):
    """A registration libvirt refuses on the connection opened again is a
    warning, asked once: the reading goes on."""
    uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path)
    opened = iter(
        [
            RecordingConnection(libvirt.open(uri)),
            RefusingConnection(libvirt.open(uri)),
        ]
    )
    host = LibvirtHost(uri, sysfs, opener=lambda _uri: next(opened))
    host.discover()
    host.watch_domain_events()
    host.link.lost("Broken pipe")  # libvirtd restarted
    reading = host.discover()  # read whole, the refusal a warning
    refusing = host.connection()
    assert isinstance(refusing, RefusingConnection)
    assert reading.guests_known and reading.mdev_users()
    assert "Could not watch domain events" in caplog.text
    host.discover()
    assert refusing.registered == [-1]  # not asked again on it


def test_a_running_guest_undefined_keeps_its_mdev_until_it_stops(host):
    """``virsh undefine`` of a running guest leaves it running, transient,
    and libvirt sends UNDEFINED: its mdev stays in use until the guest
    stops (STOPPED, and the domain is gone). A guest that is gone when
    the event is applied is forgotten, with the one call that found it
    gone; one the library already forgot costs no call."""
    host, conn = host
    conn.defineXML(_guest(with_mdev=True))
    domain = conn.lookupByUUIDString(UUID)
    domain.create()
    host.domain_event(UUID, True)
    assert host.discover().mdev_users()[FREE] == UUID
    domain.undefine()  # still running, transient
    host.domain_event(UUID, False)
    host.calls.clear()
    assert host.discover().mdev_users()[FREE] == UUID
    assert host.calls["listAllDomains"] == 0  # that guest alone re-read
    domain.destroy()  # transient: gone
    host.domain_event(UUID, True)  # STOPPED
    assert FREE not in host.discover().mdev_users()
    # defined, read, then undefined while stopped: one call finds it gone
    conn.defineXML(_guest(with_mdev=True))
    host.domain_event(UUID, True)
    assert host.discover().mdev_users()[FREE] == UUID
    conn.lookupByUUIDString(UUID).undefine()
    host.domain_event(UUID, False)
    host.calls.clear()
    assert FREE not in host.discover().mdev_users()
    assert host.calls["domain.XMLDesc"] == 1, host.calls
    assert host.calls["lookupByUUIDString"] == 0, host.calls
    # forgotten by the caller first (Nova's own delete): no call
    conn.defineXML(_guest(with_mdev=True))
    host.domain_event(UUID, True)
    host.discover()
    conn.lookupByUUIDString(UUID).undefine()
    host.forget_guest(UUID)
    host.domain_event(UUID, False)
    host.calls.clear()
    assert FREE not in host.discover().mdev_users()
    assert "domain.XMLDesc" not in host.calls, host.calls


def test_a_spawn_claim_a_domain_event_ends_is_ended_on_disk(
    make_conf, tmp_path
):
    """The guest of a spawn is defined with its mdev and told by its
    event alone: the next operation ends the spawn claim, on disk too
    (another process, or the next start, reads it ended)."""
    from tests.records_helpers import claims_on_disk

    host, driver = _service(make_conf, tmp_path)
    tree = new_tree()
    driver.update_provider_tree(tree, "node1")
    rp = tree.data("node1_pci_0000_86_00_0").uuid
    [device] = driver.allocate_mdevs(UUID, {rp: {"resources": {"VGPU": 1}}})
    assert set(claims_on_disk(tmp_path / "state")) == {device.id}
    host.connection().defineXML(_guest(with_mdev=True, mdev=device.id))
    host.domain_event(UUID, True)
    assert driver.instance_devices()[UUID]["in_use"] == [device.id]
    assert driver.binder.claims() == {}
    assert claims_on_disk(tmp_path / "state") == {}


def _service(make_conf, tmp_path):
    """A service on m10 through libvirt's test driver, started: its host
    and its driver (records in ``tmp_path / "state"``)."""
    description = helpers.load("m10")
    host = helpers.libvirt_host(description, tmp_path / "host")
    conf = make_conf(description.config)
    conf.set_override("state_path", str(tmp_path / "state"), "devices")
    driver = VgpuDriver(conf, host)
    driver.init_host([])
    return host, driver
