"""Readings of the host taken in out of the order they were read.

Two threads read the host (the periodic refresh, a metrics scrape, a
bind building the view again); the reading taken in last may be the
older one, and a bind in another thread may build the view again from a
newer reading while a refresh is following its own. The view must never
go back to what an older reading says: a guest it has would lose its
mdev, and the next bind hand that mdev out again."""

from __future__ import annotations

import random
import threading

from tests.domains import hand_made_domain_xml
from tests.random_host import RandomHost, in_use, view_in_use
from vgpu_driver.service import reading
from vgpu_driver.sim import guest_xml


def _host(tmp_path, remove_unused: bool = False) -> RandomHost:
    host = RandomHost(random.Random(0), tmp_path, remove_unused=remove_unused)
    _refresh(host)
    return host


def _refresh(host: RandomHost) -> None:
    host.driver.update_provider_tree(host.service.tree, "bench")


def _another_process_writes(host: RandomHost) -> None:
    """Another process (``restore``, ``audit --fix``) writes the records:
    the next bind builds the view again from a fresh reading."""
    other = host.service._new(None, host.conn)[0].binder.ledger
    with other.locked(view=False):
        other.save()
    other.carrier.let_go()


def _taken_in_late(driver, older, monkeypatch) -> None:
    """``older``, a reading a slow thread took, taken in now (the next
    reading of the host is that one)."""
    real, fired = driver.host.discover, []

    def slow_thread(**kwargs):
        fired.append(True)
        monkeypatch.setattr(driver.host, "discover", real)
        return older

    monkeypatch.setattr(driver.host, "discover", slow_thread)
    driver.discover()
    assert fired


def test_an_older_reading_taken_in_after_a_newer_one_is_not_followed(
    tmp_path, monkeypatch
):
    """A reading taken before a spawn (no guest) is taken in after the
    refresh that followed the spawn's guest in (its mdev in use, its
    claim ended): the guest keeps its mdev."""
    host = _host(tmp_path)
    driver = host.driver
    older = driver.host.discover()  # (a slow thread's reading)
    host.spawn()
    [(instance, [mdev])] = host.bound.items()
    _refresh(host)
    assert driver.instance_devices()[instance]["in_use"] == [mdev]
    _taken_in_late(driver, older, monkeypatch)
    assert mdev not in driver.free_mdevs()
    assert driver.instance_devices()[instance]["in_use"] == [mdev]


def _gone_by_hand(host: RandomHost) -> tuple[str, str, str]:
    """A guest defined by hand on a free mdev, read, then undefined by
    hand (its event told): its uuid, its mdev and its domain's XML."""
    driver = host.driver
    host.by_hand_define()
    [(guest, mdev)] = host.by_hand.items()
    _refresh(host)
    domain = host.conn.lookupByUUIDString(guest)
    xml = domain.XMLDesc(0)
    guest_xml.delete(domain)
    driver.domain_event(guest, False)
    return guest, mdev, xml


def _defined_again_beside(host: RandomHost, xml: str) -> None:
    """The guest defined again as it was (its event not delivered yet),
    and a bind in another thread that builds the view again from a newer
    reading (the guest using its mdev)."""
    host.conn.defineXML(xml)
    _another_process_writes(host)
    host.bind()


def test_a_view_built_again_while_a_reading_is_followed_stays(
    tmp_path, monkeypatch
):
    """A refresh reads the host (a guest defined by hand gone) and starts
    following that reading; before it sets the guest gone in the view,
    the guest is defined again and the view built again from a newer
    reading. The refresh must not set the guest gone over that view: its
    mdev would be offered free."""
    host = _host(tmp_path)
    driver = host.driver
    guest, mdev, xml = _gone_by_hand(host)
    real, fired = reading.guest_changes, []

    def defined_again_beside(taken, now):
        fired.append(True)
        monkeypatch.setattr(reading, "guest_changes", real)
        _defined_again_beside(host, xml)
        return real(taken, now)

    monkeypatch.setattr(reading, "guest_changes", defined_again_beside)
    _refresh(host)
    assert fired
    assert mdev not in driver.free_mdevs()
    assert driver.instance_devices()[guest]["in_use"] == [mdev]


def test_a_view_built_again_between_the_look_and_the_lock_stays(
    tmp_path, monkeypatch
):
    """As above, with unused mdevs removed (the guests are followed under
    the records' lock), and the guest on another manager's mdev: the
    view is built again after the first look and before that lock is
    taken. The guest must keep its mdev in the view, as on the host."""
    host = _host(tmp_path, remove_unused=True)
    driver = host.driver
    host.make()
    [theirs] = [m.name() for m in host.theirs]
    guest = host.uuid()
    xml = hand_made_domain_xml(guest, guest[:8], [_uuid_of(theirs)])
    host.conn.defineXML(xml)
    driver.domain_event(guest, True)
    _refresh(host)
    guest_xml.delete(host.conn.lookupByUUIDString(guest))
    driver.domain_event(guest, False)  # (taken in by the reading)
    ledger = driver.binder.ledger
    real, real_locked, fired = reading.guest_changes, ledger.locked, []

    def locked_after_beside(**kwargs):
        fired.append(True)
        monkeypatch.setattr(ledger, "locked", real_locked)
        _defined_again_beside(host, xml)
        return real_locked(**kwargs)

    def armed(taken, now):
        monkeypatch.setattr(reading, "guest_changes", real)
        monkeypatch.setattr(ledger, "locked", locked_after_beside)
        return real(taken, now)

    monkeypatch.setattr(reading, "guest_changes", armed)
    _refresh(host)
    assert fired
    assert view_in_use(driver) == in_use(host)
    assert in_use(host)[guest] == {_uuid_of(theirs)}


def _uuid_of(node_device: str) -> str:
    """The uuid of the mdev libvirt names ``node_device``."""
    return "-".join(node_device.split("_")[1:6])


def _node_device(host: RandomHost, uuid: str) -> str:
    """The libvirt name of mdev ``uuid`` (mdev_<uuid>_<parent>)."""
    named = uuid.replace("-", "_")
    [name] = [
        d.name() for d in host.conn.listAllDevices(0) if named in d.name()
    ]
    return name


def test_a_view_built_again_while_a_parent_is_followed_stays(
    tmp_path, monkeypatch
):
    """A refresh reads the host (another manager made an mdev on a
    parent) and starts following that parent; before it sets the parent
    in the view, a free mdev of the library's there goes (removed by
    hand) and a bind in another thread builds the view again from a
    newer reading. The refresh must not set the parent's mdevs as its
    older reading has them: the mdev gone would be offered free."""
    host = _host(tmp_path)
    driver = host.driver
    parent = host.parents[0]
    [mine, *_] = sorted(driver.free_mdevs(parent.name))
    host.rng.choice = lambda _seq: parent  # (the make on that parent)
    host.make()
    del host.rng.choice
    seen = driver._refresher.reading.seen
    real, fired = seen.change, []

    def gone_beside(*args):
        fired.append(True)
        monkeypatch.setattr(seen, "change", real)
        host.conn.gone.add(_node_device(host, mine))
        _another_process_writes(host)
        host.bind()  # builds the view again: the mdev gone
        return real(*args)

    monkeypatch.setattr(seen, "change", gone_beside)
    _refresh(host)
    assert fired
    assert mine not in driver.free_mdevs()


def test_an_older_reading_taken_in_after_a_newer_one_keeps_the_mdevs_seen(
    tmp_path, monkeypatch
):
    """A spawn makes its mdev; a reading taken before it (no such mdev,
    no such guest) is taken in after the one that has both: where the
    guest's mdev is stays recorded (were it lost, an mdev a reboot
    removed could not be made again for the guest)."""
    host = RandomHost(random.Random(0), tmp_path, making=True)
    driver = host.driver
    _refresh(host)
    older = driver.host.discover()  # (a slow thread's reading)
    host.spawn()
    [(instance, [mdev])] = host.bound.items()
    _refresh(host)
    seen = driver._refresher.reading.seen
    where = seen.get(mdev)
    assert where is not None
    driver._refresher.reading._taken = None  # (taken whole)
    _taken_in_late(driver, older, monkeypatch)
    assert seen.get(mdev) == where
    assert driver.instance_devices()[instance]["in_use"] == [mdev]


def test_a_reading_taken_in_beside_another_keeps_guests_set_ahead(
    tmp_path, monkeypatch
):
    """Two threads read the host at once (the periodic refresh, a metrics
    scrape). A spawn's guest is set in the view by ``guest_defined``
    (ahead of any reading); the refresh, reading the host, holds that
    mark to set the guest from its own reading. The scrape read the host
    before the spawn and takes its reading in meanwhile: it must not
    build the view from it without the spawn's guest (its mdev free, its
    claim ended: handed out again)."""
    host = _host(tmp_path)
    driver = host.driver
    host.make()  # (the scrape's reading is a new one)
    older = driver.host.discover()  # the scrape's, before the spawn
    driver._refresher.reading._taken = None  # (taken whole)
    host.spawn()
    [(instance, [mdev])] = host.bound.items()
    real, freed = driver.host.discover, []
    scraper = threading.Thread(target=driver.discover)

    def reading_beside(**kwargs):
        if threading.current_thread() is scraper:
            return older
        if not freed:  # the refresh's reading; the scrape takes its own in
            scraper.start()
            scraper.join(timeout=0.5)  # (done, or waiting for this one)
            freed.append(mdev in driver.free_mdevs())
        return real(**kwargs)

    monkeypatch.setattr(driver.host, "discover", reading_beside)
    driver.discover()
    scraper.join(timeout=10)
    assert not scraper.is_alive()
    assert freed == [False]
    assert mdev not in driver.free_mdevs()
    assert driver.instance_devices()[instance]["in_use"] == [mdev]
