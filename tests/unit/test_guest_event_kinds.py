"""Which of libvirt's domain events make a guest read again: those that
can change its devices (defined, started, stopped, a device plugged or
unplugged) do; an undefined one forgets a guest with no device without
a call; the others (suspended, resumed, shut down, crashed: a guest
paused for a backup, or migrating) cost nothing; and an event a read
after it already answered is not read again."""

from __future__ import annotations

import libvirt
import pytest

from tests import helpers
from tests.helpers import RecordingConnection
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.sim import description as hostdesc

UUID = "77777777-0000-0000-0000-000000000021"
XML = (
    f"<domain type='test'><name>kinds</name><uuid>{UUID}</uuid>"
    "<memory>65536</memory><os><type>hvm</type></os><devices/></domain>"
)


@pytest.fixture
def watched(tmp_path):
    uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path)
    conn = RecordingConnection(libvirt.open(uri))
    conn.defineXML(XML)
    host = LibvirtHost(uri, sysfs, connect=lambda: conn, api=libvirt)
    host.watch_domain_events()
    assert UUID in {g.uuid for g in host.discover().guests}
    domain = conn.lookupByUUIDString(UUID)
    lifecycle = conn.callbacks[libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE]

    def tell(event: int) -> None:
        lifecycle(conn, domain, event, 0, None)

    return host, conn, domain, tell


def _domain_calls(host: LibvirtHost) -> int:
    """(The parents' XML is read at every reading: no node-device
    events here.)"""
    return host.calls["domain.XMLDesc"] + host.calls["lookupByUUIDString"]


@pytest.mark.parametrize(
    "event",
    [
        libvirt.VIR_DOMAIN_EVENT_SUSPENDED,
        libvirt.VIR_DOMAIN_EVENT_RESUMED,
        libvirt.VIR_DOMAIN_EVENT_SHUTDOWN,
        libvirt.VIR_DOMAIN_EVENT_CRASHED,
    ],
)
def test_an_event_that_changes_no_device_reads_nothing(watched, event):
    host, _conn, _domain, tell = watched
    host.discover()
    host.calls.clear()
    tell(event)
    host.discover()
    assert _domain_calls(host) == 0


@pytest.mark.parametrize(
    "event",
    [
        libvirt.VIR_DOMAIN_EVENT_DEFINED,
        libvirt.VIR_DOMAIN_EVENT_STARTED,
        libvirt.VIR_DOMAIN_EVENT_STOPPED,
    ],
)
def test_an_event_that_can_change_devices_reads_the_guest(watched, event):
    host, _conn, _domain, tell = watched
    host.calls.clear()
    tell(event)
    host.discover()
    assert host.calls["domain.XMLDesc"] == 1


def test_an_undefined_guest_with_no_device_is_forgotten_without_a_call(
    watched,
):
    host, _conn, domain, tell = watched
    domain.undefine()
    host.calls.clear()
    tell(libvirt.VIR_DOMAIN_EVENT_UNDEFINED)
    assert UUID not in {g.uuid for g in host.discover().guests}
    assert _domain_calls(host) == 0


def test_an_event_a_read_after_it_answered_is_not_read_again(watched):
    host, _conn, _domain, tell = watched
    tell(libvirt.VIR_DOMAIN_EVENT_DEFINED)
    host.refresh_guest(UUID)  # read after the event (as a bind does)
    host.calls.clear()
    host.discover()
    assert _domain_calls(host) == 0
