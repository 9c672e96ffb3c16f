"""Nova's own events reaching the library through the integration: its
lifecycle callback tells of a hand-made guest, its connections tell of
devices hot-plugged, and events that arrive before the library starts
go to Nova alone (run by tools/nova-functional; skipped where Nova
cannot be imported)."""

from __future__ import annotations

import pytest

provider_tree = pytest.importorskip(
    "nova.compute.provider_tree",
    reason="needs Nova with its dependencies: run tools/nova-functional",
)
nova_conf = pytest.importorskip("nova.conf")

import libvirt  # noqa: E402

from tests import helpers  # noqa: E402
from tests.nova.nova_host import (  # noqa: E402
    FREE_ON_86,
    NODE,
    nova_driver_over,
)


def test_nova_s_lifecycle_callback_tells_the_library_of_a_hand_made_guest(
    nova,
):
    """The callback Nova's Host registers on each of its connections:
    a guest defined by hand (``virsh define``) takes its mdev off the free
    list, its undefine puts it back, and Nova still gets its own events;
    a transient guest (``virsh create``) the same through its STARTED and
    STOPPED events."""
    from nova.virt import event as virtevent

    adapter, driver, queued = nova_driver_over(nova)
    callback = driver._host._event_lifecycle_callback  # what Nova registers
    conn = adapter.driver.host.connection()
    assert FREE_ON_86 in adapter.free_mdevs(None)
    domain = conn.defineXML(
        "<domain type='test'><name>by-hand</name>"
        "<uuid>77777777-0000-0000-0000-000000000002</uuid>"
        "<memory>65536</memory><os><type>hvm</type></os><devices>"
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>"
        f"<source><address uuid='{FREE_ON_86}'/></source></hostdev>"
        "</devices></domain>"
    )
    callback(conn, domain, libvirt.VIR_DOMAIN_EVENT_DEFINED, 0, driver._host)
    assert FREE_ON_86 not in adapter.free_mdevs(None)
    callback(conn, domain, libvirt.VIR_DOMAIN_EVENT_STARTED, 0, driver._host)
    assert [e.transition for e in queued] == [
        virtevent.EVENT_LIFECYCLE_STARTED
    ]
    domain.undefine()
    callback(conn, domain, libvirt.VIR_DOMAIN_EVENT_UNDEFINED, 0, driver._host)
    assert FREE_ON_86 in adapter.free_mdevs(None)
    # a transient guest (virsh create) is never defined: STARTED takes
    # its mdev off the free list, STOPPED (it is gone) puts it back
    transient = conn.createXML(
        "<domain type='test'><name>transient</name>"
        "<uuid>77777777-0000-0000-0000-000000000003</uuid>"
        "<memory>65536</memory><os><type>hvm</type></os><devices>"
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>"
        f"<source><address uuid='{FREE_ON_86}'/></source></hostdev>"
        "</devices></domain>",
        0,
    )
    callback(
        conn, transient, libvirt.VIR_DOMAIN_EVENT_STARTED, 0, driver._host
    )
    assert FREE_ON_86 not in adapter.free_mdevs(None)
    transient.destroy()
    callback(
        conn, transient, libvirt.VIR_DOMAIN_EVENT_STOPPED, 0, driver._host
    )
    assert FREE_ON_86 in adapter.free_mdevs(None)


def test_nova_s_connections_tell_the_library_of_devices_hot_plugged(nova):
    """On each connection Nova's Host makes: a device plugged into a
    running guest by hand (DEVICE_ADDED, which Nova does not register)
    takes its mdev off the free list, one unplugged (DEVICE_REMOVED,
    Nova's callback) puts it back, and Nova still gets its own event.
    The test driver cannot hot-plug: the guest is defined again with and
    without the mdev, and the registered callbacks are called as
    libvirt's event thread would."""
    from nova.virt.libvirt import event as libvirtevent

    adapter, driver, queued = nova_driver_over(nova)
    conn = helpers.RecordingConnection(adapter.driver.host.connection())
    driver._host._connect = lambda uri, read_only: conn
    assert driver._host._get_new_connection() is conn
    assert FREE_ON_86 in adapter.free_mdevs(None)  # every guest read
    guest = (
        "<domain type='test'><name>hot-plugged</name>"
        "<uuid>77777777-0000-0000-0000-000000000004</uuid>"
        "<memory>65536</memory><os><type>hvm</type></os><devices>{}"
        "</devices></domain>"
    )
    domain = conn.defineXML(
        guest.format(
            "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>"
            f"<source><address uuid='{FREE_ON_86}'/></source></hostdev>"
        )
    )
    assert FREE_ON_86 in adapter.free_mdevs(None)  # no event yet
    conn.callbacks[libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_ADDED](
        conn, domain, "hostdev0", None
    )
    assert FREE_ON_86 not in adapter.free_mdevs(None)
    conn.defineXML(guest.format(""))
    conn.callbacks[libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED](
        conn, domain, "hostdev0", driver._host
    )
    assert FREE_ON_86 in adapter.free_mdevs(None)
    assert [type(e) for e in queued] == [libvirtevent.DeviceRemovedEvent]


def test_events_before_the_library_starts_go_to_nova_alone(nova):
    """libvirt's events reach Nova's callbacks before the library's
    adapter exists (its first scan reads every guest): Nova gets them,
    nothing is raised in libvirt's event thread. Once it exists, an
    event the library does not follow (a guest suspended) is Nova's
    alone."""
    from nova.virt import event as virtevent

    adapter, driver, queued = nova_driver_over(nova)
    driver._vgpu_adapter = None  # not made yet
    conn = adapter.driver.host.connection()
    domain = conn.lookupByName("instance-00000021")
    callback = driver._host._event_lifecycle_callback
    callback(conn, domain, libvirt.VIR_DOMAIN_EVENT_STARTED, 0, driver._host)
    driver._vgpu_device_event(conn, domain, "hostdev0", None)
    assert [e.transition for e in queued] == [
        virtevent.EVENT_LIFECYCLE_STARTED
    ]
    told = []
    adapter.domain_event = lambda uuid, defined: told.append(uuid)
    driver._vgpu_adapter = adapter
    callback(conn, domain, libvirt.VIR_DOMAIN_EVENT_SUSPENDED, 0, driver._host)
    assert told == []
    callback(conn, domain, libvirt.VIR_DOMAIN_EVENT_STOPPED, 0, driver._host)
    assert told == [domain.UUIDString()]


def test_the_adapter_reads_the_parents_node_device_events_name(nova):
    """Nova runs libvirt's event loop from its start: the adapter
    registers node-device callbacks on Nova's connection at its next
    reading (which reads every parent), then a refresh reads no parent's
    XML, and one after an event naming an mdev on a parent reads that
    parent alone."""
    adapter, tree, _root = nova
    host = adapter.driver.host
    with helpers.libvirt_event_loop():
        adapter.update_provider_tree(tree, NODE)
        every = host.calls["XMLDesc"]
        parents = {p.name for p in host.discover().parents}
        assert every >= len(parents) > 1
        adapter.update_provider_tree(tree, NODE)
        assert host.calls["XMLDesc"] == every
        # what the callback does with the event naming an mdev
        mdev = host.discover().mdevs[0]
        host.devices.events.note(mdev.name)
        adapter.update_provider_tree(tree, NODE)
        assert host.calls["XMLDesc"] == every + 1
