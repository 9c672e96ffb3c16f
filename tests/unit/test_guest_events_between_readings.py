"""Guest events the binder takes in between two readings of the host.

An operation on the view (a bind, a look at the free mdevs) first takes
in the domain events waiting, so it never hands out a device a guest
just took. The reading after it compares each guest with the last
reading, not with what the view took in: a guest defined and undefined
again between two readings (or undefined and defined again as it was)
reads as no change there. The view must still end as the host is."""

from __future__ import annotations

import random
import uuid

import pytest

from tests.domains import hand_made_domain_xml
from tests.random_host import RandomHost
from vgpu_driver.sim import guest_xml


def _host(tmp_path) -> RandomHost:
    host = RandomHost(random.Random(0), tmp_path)
    host.driver.update_provider_tree(host.service.tree, "bench")
    return host


def _refresh(host: RandomHost) -> None:
    host.driver.update_provider_tree(host.service.tree, "bench")


def test_a_guest_defined_and_undefined_between_readings_leaves_its_mdev_free(
    tmp_path,
):
    """A guest defined by hand on a free mdev; a look at the free mdevs
    takes its event in (the mdev in use); the guest is undefined before
    the next reading: after it the mdev is free again."""
    host = _host(tmp_path)
    driver = host.driver
    host.by_hand_define()
    [(guest, mdev)] = host.by_hand.items()
    assert mdev not in driver.free_mdevs()  # its event taken in
    host.by_hand_undefine()
    _refresh(host)
    assert guest not in driver.instance_devices()
    assert mdev in driver.free_mdevs()


def test_a_guest_undefined_and_defined_again_between_readings_keeps_its_mdev(
    tmp_path,
):
    """A guest defined by hand on an mdev, read; it is undefined, a look
    at the free mdevs takes that in (the mdev free), and it is defined
    again as it was before the next reading: after it the mdev is in use,
    never handed out."""
    host = _host(tmp_path)
    driver = host.driver
    host.by_hand_define()
    [(guest, mdev)] = host.by_hand.items()
    _refresh(host)
    assert mdev not in driver.free_mdevs()
    domain = host.conn.lookupByUUIDString(guest)
    xml = domain.XMLDesc(0)
    guest_xml.delete(domain)
    driver.domain_event(guest, False)
    assert mdev in driver.free_mdevs()  # its event taken in
    host.conn.defineXML(xml)
    driver.domain_event(guest, True)
    _refresh(host)
    assert mdev not in driver.free_mdevs()
    assert guest in driver.instance_devices()


def _spawned(host: RandomHost) -> tuple[str, str]:
    """An instance spawned as Nova spawns (bound, its guest defined and
    told by ``guest_defined``): its uuid and its mdev."""
    host.spawn()
    [(instance, [mdev])] = host.bound.items()
    assert instance in host.defined
    return instance, mdev


def test_a_guest_gone_behind_nova_after_guest_defined_frees_its_mdev(
    tmp_path,
):
    """``guest_defined`` set the instance's mdev in use; its guest is
    undefined behind Nova's back (``virsh undefine``) before the next
    reading: after it the mdev is as a reading of the whole host has it,
    free."""
    host = _host(tmp_path)
    driver = host.driver
    instance, mdev = _spawned(host)
    guest_xml.delete(host.conn.lookupByUUIDString(instance))
    driver.domain_event(instance, False)
    _refresh(host)
    assert instance not in driver.instance_devices()
    assert mdev in driver.free_mdevs()


def test_a_guest_defined_again_after_guest_undefined_keeps_its_mdev(
    tmp_path,
):
    """``guest_undefined`` freed the instance's mdev; its guest is
    defined again as it was before the next reading, and libvirt's
    events of both come after that: after it the mdev is in use again,
    never handed out."""
    host = _host(tmp_path)
    driver = host.driver
    instance, mdev = _spawned(host)
    _refresh(host)
    domain = host.conn.lookupByUUIDString(instance)
    xml = domain.XMLDesc(0)
    guest_xml.delete(domain)
    driver.guest_undefined(instance)
    assert mdev in driver.free_mdevs()
    host.conn.defineXML(xml)
    driver.domain_event(instance, False)
    driver.domain_event(instance, True)
    _refresh(host)
    assert mdev not in driver.free_mdevs()
    assert driver.instance_devices()[instance]["in_use"] == [mdev]


def _undefined_while_read(host: RandomHost, instance: str, monkeypatch):
    """The instance's guest undefined and ``guest_undefined`` called (as
    Nova's delete does, in another thread) while a refresh is between
    reading the host and taking that reading in."""
    driver, real = host.driver, host.driver.host.discover

    def read_then_delete(**kwargs):
        reading = real(**kwargs)
        monkeypatch.setattr(driver.host, "discover", real)
        guest_xml.delete(host.conn.lookupByUUIDString(instance))
        driver.domain_event(instance, False)
        driver.guest_undefined(instance)
        return reading

    monkeypatch.setattr(driver.host, "discover", read_then_delete)


@pytest.mark.parametrize("whole", [False, True])
def test_a_reading_taken_before_guest_undefined_does_not_bring_it_back(
    tmp_path, monkeypatch, whole
):
    """A spawn, then a refresh whose reading (the guest defined) is taken
    just before Nova's delete undefines the guest and calls
    ``guest_undefined``, and taken in after: the guest's mdev stays free
    (were it set in use by the older reading, ``release_mdevs`` would
    free it again later, whoever had it by then). ``whole``: the reading
    builds the view whole instead of following it."""
    host = _host(tmp_path)
    driver = host.driver
    instance, mdev = _spawned(host)
    if whole:  # (the spawn read already: only the view built whole
        _refresh(host)  # from that reading has the guest again; another
        host.make()  # manager's mdev makes the reading a new one)
        driver._refresher.reading._taken = None
    _undefined_while_read(host, instance, monkeypatch)
    _refresh(host)
    assert instance not in driver.instance_devices()
    assert mdev in driver.free_mdevs()


def _read_then(host: RandomHost, monkeypatch, beside) -> tuple[str, str]:
    """An instance bound (its claim recorded), then a refresh that reads
    the host (a new reading, taken whole) and, before it takes that
    reading in, has the instance's guest defined and ``beside()`` run
    (as other threads and processes would meanwhile). Returns the
    instance and its mdev."""
    driver = host.driver
    host.bind()
    [(instance, [mdev])] = host.bound.items()
    host.make()  # (another manager's mdev: a new reading, taken whole)
    driver._refresher.reading._taken = None
    real = driver.host.discover

    def read_then_beside(**kwargs):
        reading = real(**kwargs)
        monkeypatch.setattr(driver.host, "discover", real)
        xml = hand_made_domain_xml(instance, instance[:8], [mdev], nova=True)
        host.conn.defineXML(xml)
        beside(instance)
        return reading

    monkeypatch.setattr(driver.host, "discover", read_then_beside)
    _refresh(host)
    return instance, mdev


def test_a_view_built_from_a_newer_reading_is_not_replaced_by_an_older_one(
    tmp_path, monkeypatch
):
    """A refresh reads the host; before it takes that reading in, a
    spawn's guest is defined, another process writes the records, and a
    bind in another thread builds the view again from a newer reading
    (the spawn's guest using its mdev, its claim ended there). The
    refresh's older reading (no such guest, no claim) must not replace
    that view: the mdev would be free, and handed out again."""
    host = _host(tmp_path)
    driver = host.driver

    def spawn_beside(instance: str) -> None:
        driver.domain_event(instance, True)
        other = host.service._new(None, host.conn)[0].binder.ledger
        with other.locked(view=False):
            other.save()  # another process wrote the records
        other.carrier.let_go()
        host.bind()  # builds the view again: the guest has the mdev

    instance, mdev = _read_then(host, monkeypatch, spawn_beside)
    assert mdev not in driver.free_mdevs()
    assert driver.instance_devices()[instance]["in_use"] == [mdev]


def test_a_reading_older_than_a_claim_another_process_ended_is_not_taken(
    tmp_path, monkeypatch
):
    """A refresh reads the host; before it takes that reading in, a
    spawn's guest is defined (its event not come yet) and another process
    (``restore``) reads the host and ends the spawn's claim, as the guest
    now has the mdev. The older reading has no such guest: taken in with
    the claims as they are now, the mdev would be neither in use nor
    claimed, and free for the next bind."""
    host = _host(tmp_path)
    driver = host.driver

    def restore_beside(_instance: str) -> None:
        # a call on another instance: the reading is then taken in under
        # the records' lock
        driver.guest_undefined(str(uuid.uuid4()))
        tool = host.service._new(None, host.conn)[0]
        tool.discover(rescan_guests=True)  # ends the claim: the guest has it
        tool.binder.ledger.carrier.let_go()

    instance, mdev = _read_then(host, monkeypatch, restore_beside)
    claimed_for = [c["instance"] for c in driver.binder.claims().values()]
    assert instance not in claimed_for
    assert mdev not in driver.free_mdevs()
