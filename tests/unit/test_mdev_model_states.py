"""The modelled libvirt refuses what a device's state does not allow, as
libvirt's node-device driver does (``nodeDeviceDestroy``,
``nodeDeviceUndefine``, ``nodeDeviceCreate``: VIR_ERR_OPERATION_INVALID),
and the library's removal of an mdev asks only what its state allows:
a stopped, defined mdev is undefined, never stopped again."""

from __future__ import annotations

import uuid

import libvirt
import pytest

from tests.modelled_libvirt import modelled_host
from vgpu_driver.sim.mdev_devices import mdev_xml


def _made(conn, parent, persistent: bool):
    """Made as the library makes one: created, then (``persistent``)
    defined with the same XML."""
    xml = mdev_xml(parent.name, parent.types[0].id, str(uuid.uuid4()))
    device = conn.nodeDeviceCreateXML(xml, 0)
    if persistent:
        conn.nodeDeviceDefineXML(xml, 0)
    return device


def _stopped(tmp_path):
    """A host, its connection, an mdev another manager defined and
    stopped, and that mdev as the host reads it."""
    host, conn = modelled_host(tmp_path)
    parent = next(p for p in host.discover().parents if p.types[0].available)
    device = _made(conn, parent, persistent=True)
    device.destroy()
    # (made and stopped between two readings: its parent's room is as it
    # was, so a full listing finds it)
    listed = host.discover(rescan_guests=True).mdevs
    [stopped] = [m for m in listed if m.name == device.name()]
    assert not stopped.active and stopped.persistent
    return host, conn, device, stopped


def _refused(call, *args) -> str:
    with pytest.raises(libvirt.libvirtError) as caught:
        call(*args)
    assert caught.value.get_error_code() == libvirt.VIR_ERR_OPERATION_INVALID
    return str(caught.value)


def test_libvirt_refuses_what_a_device_s_state_does_not_allow(tmp_path):
    host, conn = modelled_host(tmp_path)
    parent = next(p for p in host.discover().parents if p.types[0].available)
    transient = _made(conn, parent, persistent=False)
    assert "is not defined" in _refused(transient.undefine, 0)
    assert "already active" in _refused(transient.create, 0)
    defined = _made(conn, parent, persistent=True)
    defined.destroy()  # stopped: still defined
    assert "is not active" in _refused(defined.destroy)
    defined.create()  # started again
    defined.undefine(0)  # running on, no longer defined
    assert "is not defined" in _refused(defined.undefine, 0)


def test_a_stopped_defined_mdev_is_removed_without_a_stop(tmp_path):
    host, conn, device, stopped = _stopped(tmp_path)
    before = len(conn.calls("destroy"))
    host.remove_mdev(stopped)
    assert len(conn.calls("destroy")) == before
    assert device.name() not in {m.name for m in host.discover().mdevs}
    assert device.name() in conn.gone


def test_libvirt_refuses_a_flag_a_call_does_not_take(tmp_path):
    """``virCheckFlags``: nodeDeviceCreate and nodeDeviceUndefine take no
    flag, nodeDeviceDefineXML only VALIDATE."""
    host, conn = modelled_host(tmp_path)
    parent = next(p for p in host.discover().parents if p.types[0].available)
    xml = mdev_xml(parent.name, parent.types[0].id, str(uuid.uuid4()))
    device = conn.nodeDeviceCreateXML(xml, 0)
    calls = [
        lambda: conn.nodeDeviceDefineXML(xml, 2),
        lambda: (
            conn.nodeDeviceDefineXML(xml, 1)  # VALIDATE: taken
            and device.undefine(1)
        ),
        lambda: device.destroy() or device.create(1),
    ]
    for call in calls:
        with pytest.raises(libvirt.libvirtError) as caught:
            call()
        assert caught.value.get_error_code() == libvirt.VIR_ERR_INVALID_ARG
        assert "unsupported flags" in str(caught.value)


def test_an_mdev_the_library_makes_is_defined_and_autostarted(tmp_path):
    """So that it is there again after the host reboots."""
    host, conn = modelled_host(tmp_path)
    parent = next(p for p in host.discover().parents if p.types[0].available)
    made = host.create_mdev(parent, parent.types[0].id, str(uuid.uuid4()))
    assert made.persistent and made.autostart
    device = conn.made[made.name]
    assert device.persistent and device.autostart() == 1


def test_a_stopped_defined_mdev_the_library_starts_reads_as_running(
    tmp_path,
):
    """(As a service's start does for the mdevs its guests need.) The
    reading after says it runs, without listing every device again."""
    host, conn, device, stopped = _stopped(tmp_path)
    host.start_mdev(stopped)
    assert conn.running(device.name())
    before = len(conn.calls("listAllDevices"))
    [started] = [m for m in host.discover().mdevs if m.name == device.name()]
    assert started.active and started.persistent
    assert len(conn.calls("listAllDevices")) == before


def test_a_parent_s_xml_names_its_driver_as_libvirt_does(tmp_path):
    """libvirt names a bound device's driver in its XML; the test driver
    gives none back, so the model adds it: readings through the model
    take the path a real host takes (the driver from libvirt, the
    types' descriptions from sysfs)."""
    host, conn = modelled_host(tmp_path)
    xml = conn.nodeDeviceLookupByName("pci_0000_84_00_0").XMLDesc(0)
    assert "<driver><name>nvidia</name></driver>" in xml
    parent = host.discover().parent("pci_0000_84_00_0")
    assert parent.driver == "nvidia"
    assert "max_instance=16" in (parent.type("nvidia-35").description or "")


def test_a_bind_that_reuses_a_stopped_mdev_of_its_own_starts_it(
    make_conf, tmp_path
):
    """The library's free mdev is found stopped, still defined (a host
    rebooted, its mdev not autostarted): a bind that takes it starts it
    (``nodeDeviceCreate``), so the guest given it can start."""
    from tests.helpers import M10_FREE_ON_86, Node

    host, conn = modelled_host(tmp_path)
    n = Node(make_conf, tmp_path / "state", host=host)
    [mdev] = [m for m in host.discover().mdevs if m.uuid == M10_FREE_ON_86]
    conn.inactive.add(mdev.name)
    n.update()
    conn.log.clear()
    [device] = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_86_00_0", 1)))
    assert (device.id, device.created) == (M10_FREE_ON_86, False)
    assert conn.calls("create") == [mdev.name]
    [now] = [m for m in host.discover().mdevs if m.uuid == M10_FREE_ON_86]
    assert now.active
