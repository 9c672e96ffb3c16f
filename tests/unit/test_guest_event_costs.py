"""What one guest's event costs a refresh (#24's structural figures):
one libvirt call whatever the guests, one lookup on a new connection,
no reading changed by a domain defined again as it was, no view and no
plan built for a guest gone and back where guests do not count, and a
spawn claim ended by the guest defined with its device."""

from __future__ import annotations

import uuid
from collections import Counter

import libvirt
import pytest

from benchmarks.common import dense
from tests import helpers
from tests.dense_service import counting, defined_again_as_it_was, service
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim import guest_xml


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


class _Compared(frozenset):
    """A set of the devices made that counts its comparisons."""

    count = 0

    def __eq__(self, other):
        _Compared.count += 1
        return frozenset.__eq__(self, other)

    def __ne__(self, other):
        _Compared.count += 1
        return frozenset.__ne__(self, other)

    def __xor__(self, other):
        _Compared.count += 1
        return frozenset.__xor__(self, other)

    def __rxor__(self, other):
        _Compared.count += 1
        return frozenset.__rxor__(self, other)

    __hash__ = frozenset.__hash__


def test_a_guest_event_compares_no_set_of_devices_made_with_itself():
    """The devices the library made are one set from pass to pass while
    the records stand: a guest's event takes them in by identity, not
    element by element (Python compares a set with itself in full: a
    walk over every device made, at each guest's event)."""
    from vgpu_driver.model.config import DeviceConfig
    from vgpu_driver.model.device import Guest, HostInventory
    from vgpu_driver.service.fingerprint import (
        RefreshFingerprint,
        same_but_guests,
    )

    one = Guest("g1", "one")
    before = HostInventory(guests=(), generation=1)
    now = before.with_guests((one,), True, 2, (1, (("g1", None, one),)))
    made = _Compared(f"m{i}" for i in range(64))
    last = RefreshFingerprint(
        "n", before, DeviceConfig(), (), {}, frozenset(), frozenset(),
        owned=made, guests_free=True,
    )  # fmt: skip
    _Compared.count = 0
    found = same_but_guests(last, now, (), made, dict, (set(), set()))
    assert found is not None and found.inventory is now
    assert _Compared.count == 0
    # another set, even an equal one, is compared
    assert same_but_guests(
        last, now, (), frozenset(made), dict, (set(), set())
    )
    assert _Compared.count == 1
    # and found different where it is
    fewer = frozenset(list(made)[1:])
    assert same_but_guests(last, now, (), fewer, dict, (set(), set())) is None
