"""Discovery through libvirt's real test driver: cost, faults, CLI."""

from __future__ import annotations

import json

import libvirt
import pytest

from tests import helpers
from vgpu_driver.exception import (
    DeviceOperationFailed,
    HostOperationFailed,
    HostUnreachable,
)
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim import guest_xml


def test_steady_refresh_costs_one_call_per_parent_whatever_the_mdevs(
    tmp_path,
):
    description = hostdesc.parse(
        json.dumps(hostdesc.dense_raw(4, 200, 150)), "dense"
    )
    host = helpers.libvirt_host(description, tmp_path)
    first = host.discover()
    assert len(first.mdevs) == 200 and len(first.guests) == 150
    host.calls.clear()
    again = host.discover()
    assert again == first
    # one XML per parent: the parents listed are kept
    assert host.call_count == host.calls["XMLDesc"] == len(first.parents)
    assert host.calls["domain.XMLDesc"] == 0


def test_guests_are_rescanned_only_when_asked(tmp_path):
    host = helpers.libvirt_host(helpers.load("m10"), tmp_path)
    host.discover()
    host.calls.clear()
    host.discover(rescan_guests=True)
    assert host.calls["listAllDomains"] == 1
    assert host.calls["domain.XMLDesc"] == 2


def test_refresh_guest_rereads_one_domain_and_forgets_a_gone_one(tmp_path):
    host = helpers.libvirt_host(helpers.load("m10"), tmp_path)
    inventory = host.discover()
    guest = inventory.guests[0]
    host.forget_guest(guest.uuid)
    assert guest.uuid not in {g.uuid for g in host.discover().guests}
    host.calls.clear()
    host.refresh_guest(guest.uuid)
    # read through the domain object kept for it when it was forgotten
    assert host.calls == {"domain.XMLDesc": 1}
    assert guest in host.discover().guests
    host.refresh_guest("00000000-0000-0000-0000-000000000000")
    assert len(host.discover().guests) == len(inventory.guests)


class _VanishingDevice:
    """A listed device whose XML read fails as libvirt's would when the
    device disappears in between: with VIR_ERR_NO_NODE_DEVICE."""

    def __init__(self, conn, name):
        self._conn, self._name = conn, name

    def name(self):
        return self._name

    def XMLDesc(self, flags):
        return self._conn.nodeDeviceLookupByName(self._name).XMLDesc(flags)


class _BrokenDevice(_VanishingDevice):
    def XMLDesc(self, flags):
        return "<device><name>pci_0000_99_00_0</name><capability type='pci'>"


class _ConnWith:
    """The real test-driver connection, listing extra devices."""

    def __init__(self, conn, extra):
        self._conn, self._extra = conn, extra

    def listAllDevices(self, flags):
        return self._conn.listAllDevices(flags) + [
            cls(self._conn, name) for cls, name in self._extra
        ]

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_vanished_and_broken_devices_are_skipped(tmp_path, caplog):
    uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path)
    # an mdev removed between the listing and its XML read, too
    gone = "mdev_0d1e2f3a_4b5c_4d6e_8f70_8192a3b4c5d6_0000_84_00_0"
    extra = [
        (_VanishingDevice, "pci_0000_aa_00_0"),
        (_BrokenDevice, "pci_0000_99_00_0"),
        (_VanishingDevice, gone),
    ]
    host = LibvirtHost(
        uri, sysfs, opener=lambda u: _ConnWith(libvirt.open(u), extra)
    )
    inventory = host.discover()
    assert len(inventory.parents) == 4
    whole = helpers.libvirt_host(helpers.load("m10"), tmp_path / "whole")
    assert inventory.mdevs == whole.discover().mdevs
    assert "pci_0000_99_00_0" in caplog.text  # warned, by name


class _FailingDevice(_VanishingDevice):
    def XMLDesc(self, flags):
        message = "internal error: udev went away"
        error = libvirt.libvirtError(message)
        error.err = (libvirt.VIR_ERR_INTERNAL_ERROR, 0, message, 2)
        error.err += ("", "", "", 0, 0)
        raise error


def test_a_device_libvirt_fails_to_read_fails_the_reading(tmp_path):
    """Not taken as vanished: libvirt's words, and no reading."""
    uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path)
    extra = [(_FailingDevice, "pci_0000_aa_00_0")]
    host = LibvirtHost(
        uri, sysfs, opener=lambda u: _ConnWith(libvirt.open(u), extra)
    )
    with pytest.raises(HostOperationFailed, match="udev went away"):
        host.discover()


def test_unreachable_uri_is_one_clear_error():
    host = LibvirtHost("test:///nonexistent/host.xml")
    with pytest.raises(HostUnreachable) as caught:
        host.discover()
    assert "test:///nonexistent/host.xml" in str(caught.value)
    assert "connection_uri" in str(caught.value)


def test_libvirt_host_writes_sysfs_where_libvirt_cannot_create(tmp_path):
    """libvirt's test driver cannot create mdevs: the adapter falls back
    to the kernel's sysfs interface, as on libvirt < 7.3."""
    host = helpers.libvirt_host(helpers.load("m10"), tmp_path)
    inventory = host.discover()
    parent = inventory.parent("pci_0000_87_00_0")
    uuid = "0b5f4c1e-9a55-4a0f-8d2b-6f1e2a3b4c5d"
    mdev = host.create_mdev(parent, "nvidia-35", uuid)
    create = (
        tmp_path
        / "sys/devices/pci0000:00/0000:87:00.0"
        / "mdev_supported_types/nvidia-35/create"
    )
    assert create.read_text() == uuid
    assert (mdev.uuid, mdev.parent) == (uuid, parent.name)
    # removal goes through libvirt (nodedev destroy) when libvirt has it
    existing = inventory.mdevs[0]
    host.calls.clear()
    host.remove_mdev(existing)
    assert host.calls["destroy"] == 1
    remove = tmp_path / "sys/bus/mdev/devices" / existing.uuid / "remove"
    assert remove.read_text() == ""


def test_libvirt_host_sets_a_vf_type_through_sysfs(tmp_path):
    host = helpers.libvirt_host(helpers.load("l40-sriov"), tmp_path)
    host.set_vf_type("0000:41:00.6", 1150)
    current = (
        tmp_path / "sys/bus/pci/devices/0000:41:00.6/nvidia/current_vgpu_type"
    )
    assert current.read_text() == "1150"
    with pytest.raises(DeviceOperationFailed, match=r"0000:99:00\.1"):
        host.set_vf_type("0000:99:00.1", 1150)


def test_domain_events_keep_guests_current(tmp_path):
    """A guest defined or undefined by someone else is noticed through
    libvirt's lifecycle events, without a rescan."""
    with helpers.libvirt_event_loop():
        host = helpers.libvirt_host(helpers.load("m10"), tmp_path)
        helpers.check_domain_events_keep_guests_current(host)


def test_a_guest_read_before_any_scan_leaves_the_first_scan_whole(tmp_path):
    """A guest re-read (``refresh_guest``: a spawn's define, an event)
    before the adapter ever listed the guests is returned as read, and
    the first discovery then reads every guest (it is not taken as the
    only one there is)."""
    host = helpers.libvirt_host(helpers.load("m10"), tmp_path)
    everyone = {
        g.uuid for g in helpers.simulated_host("m10").discover().guests
    }
    first = sorted(everyone)[0]
    guest = host.refresh_guest(first)
    assert guest is not None and guest.uuid == first
    assert host.calls["listAllDomains"] == 0
    assert {g.uuid for g in host.discover().guests} == everyone
    assert len(everyone) > 1


def test_a_guest_undefined_while_the_guests_are_listed_is_passed_over(
    tmp_path,
):
    """Nova deletes an instance while every guest is being read: its
    domain, listed, is gone when its XML is asked (libvirt's no-domain
    error). It is passed over and the others are read; any other error
    of libvirt's fails the reading (naming libvirt's words), never taken
    as a guest gone."""
    description = helpers.load("m10")
    uri, sysfs = hostdesc.materialize(description, tmp_path)
    everyone = {
        g.uuid for g in helpers.simulated_host("m10").discover().guests
    }
    victim = sorted(everyone)[0]
    real = libvirt.open(uri)

    class Racing:
        def __getattr__(self, name):
            return getattr(real, name)

        def listAllDomains(self, flags=0):
            domains = real.listAllDomains(flags)
            gone = real.lookupByUUIDString(victim)
            if gone.isActive():
                gone.destroy()
            guest_xml.delete(gone)
            return domains

    host = LibvirtHost(uri, sysfs, opener=lambda _uri: Racing())
    assert {g.uuid for g in host.discover().guests} == everyone - {victim}

    class Failing(Racing):
        def listAllDomains(self, flags=0):
            domains = real.listAllDomains(flags)
            failing = domains[0]

            class Domain:
                def __getattr__(self, name):
                    return getattr(failing, name)

                def XMLDesc(self, flags=0):
                    raise _libvirt_error(libvirt.VIR_ERR_INTERNAL_ERROR)

            return [Domain(), *domains[1:]]

    host = LibvirtHost(uri, sysfs, opener=lambda _uri: Failing())
    with pytest.raises(HostOperationFailed, match="cannot be read"):
        host.discover()


def _libvirt_error(code):
    from vgpu_driver.sim.mdev_devices import libvirt_error

    return libvirt_error(code, "internal error: the domain cannot be read")


def test_a_virtual_parent_registered_late_gets_its_mdevs(tmp_path):
    """libvirt names a virtual parent's mdev's parent ``computer``; the
    adapter finds the real one among the parents the kernel registers.
    Read while the registration was not there yet (the module loading,
    an mdev made at once), the mdev is held under an implied parent;
    once it is there, the next reading places the mdev on it, as a new
    adapter would, without waiting for a full listing."""
    description = helpers.load("mtty")
    uri, sysfs = hostdesc.materialize(description, tmp_path)
    registration = tmp_path / "sys/class/mdev_bus/mtty"
    target = registration.readlink()
    registration.unlink()
    host = LibvirtHost(uri, sysfs)
    early = host.discover()
    assert [p.name for p in early.parents] == ["computer"]
    registration.symlink_to(target)
    later = host.discover()
    fresh = LibvirtHost(uri, sysfs).discover()
    assert [p.name for p in later.parents] == ["mtty"]
    assert [m.parent for m in later.mdevs] == ["mtty"]
    assert later == fresh


def test_a_parent_whose_xml_names_its_driver_still_gets_its_descriptions(
    tmp_path,
):
    """On a host libvirt names a bound device's driver in its XML (the
    test driver never does): the types' descriptions, which no XML has,
    still come from sysfs, and with them what the GPU can hold."""
    from pathlib import Path

    from tests.nodedev_samples import M10_PARENT
    from vgpu_driver.host.parents import ParentReader
    from vgpu_driver.host.sysfs import SysfsTree

    description = helpers.load("m10")
    _uri, sysfs = hostdesc.materialize(description, tmp_path)
    # the sample's path, as the rendered sysfs has the device
    real = (Path(sysfs) / "bus/pci/devices/0000:84:00.0").resolve()
    xml = M10_PARENT.replace(
        "/sys/devices/pci0000:80/0000:80:01.0/0000:84:00.0",
        "/sys/" + str(real.relative_to(Path(sysfs).resolve())),
    )
    reader = ParentReader(SysfsTree(sysfs))
    parent = reader.read("pci_0000_84_00_0", xml, None)
    assert parent is not None and parent.driver == "nvidia"
    [spec] = [t for t in description.parents[0].types if t.id == "nvidia-35"]
    assert parent.type("nvidia-35").description == spec.description
    assert "max_instance=16" in (spec.description or "")
