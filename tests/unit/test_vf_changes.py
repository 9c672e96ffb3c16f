"""A VF of an NVIDIA SR-IOV card typed or cleared (#24): the host says
which card changed, and the reading, the binder's view and the plan
follow that card alone. Each must end where reading the whole host
again ends."""

from __future__ import annotations

import contextlib
import random
import uuid
from collections import Counter

import pytest

from benchmarks.common import sriov
from tests.followed_pair import (
    follows_as_whole,
    mdev_changed,
    pair,
    tree_of,
)
from tests.helpers import load
from vgpu_driver.exception import DeviceNoRoom
from vgpu_driver.model.device import Guest
from vgpu_driver.model.device_view import DeviceView
from vgpu_driver.service import refresh, whole_host

HOSTS = {
    # three L40s (kernel >= 6.8), 8 VFs of each in use
    "l40": lambda: sriov(3, used_per_card=8),
    # one card serving two types, each with its provider (mixed size)
    "mixed": lambda: load("rtx6000-mixed"),
    # mdev parents beside an SR-IOV card
    "demo": lambda: load("demo"),
}


def _vf_change(host, rng, theirs):
    """Another manager types a free VF (a type it can create) or clears
    one it typed."""
    if theirs and rng.random() < 0.45:
        host.set_vf_type(theirs.pop(rng.randrange(len(theirs))), 0)
        return
    reading = host.discover()
    pf = rng.choice(reading.pfs)
    used = reading.pci_users()
    free = [
        vf
        for vf in pf.vfs
        if not vf.current_type and vf.creatable and vf.address not in used
    ]
    if not free:
        return
    vf = rng.choice(free)
    with contextlib.suppress(DeviceNoRoom):
        host.set_vf_type(vf.address, rng.choice(vf.creatable).id)
        theirs.append(vf.address)


@pytest.mark.parametrize(
    ("host", "seed"),
    [("l40", 1), ("l40", 2), ("mixed", 1), ("mixed", 2), ("demo", 1)],
)
def test_a_service_told_which_cards_changed_ends_as_one_that_reads_all(
    make_conf, tmp_path, monkeypatch, host, seed
):
    """VFs typed and cleared by another manager, VFs typed by binds (and
    mdevs made, on a host with both), guests given them, releases: the
    plans, the tree and the binds are those of a service reading the
    whole host at every pass, its view of the cards is the one a whole
    reading builds, and most passes planned the devices touched alone."""
    follows, whole = pair(make_conf, tmp_path, HOSTS[host])

    def change(node, rng, mine):
        if not mine:
            mine.extend(([], []))  # the mdevs and the VFs they made
        if node.host.discover().parents and rng.random() < 0.3:
            mdev_changed(node.host, rng, mine[0])
        else:
            _vf_change(node.host, rng, mine[1])

    def check(follows, step):
        ledger = follows.driver.binder.ledger
        reading = follows.host.discover()
        built = DeviceView.of(reading, ledger.record.made)
        assert ledger.view.pfs == built.pfs, step
        assert ledger.view.foreign == built.foreign, step

    replanned = follows_as_whole(
        monkeypatch, (follows, whole), seed, change, check
    )
    assert replanned[True] >= 15, replanned


def test_a_vf_typed_by_another_manager_plans_and_writes_its_card_alone(
    make_conf, tmp_path, monkeypatch
):
    """One VF typed on one card of three: that card's provider alone is
    planned (its free VF reserved: another manager's) and written; a
    full pass then changes nothing."""
    from tests.dense_service import counting

    follows, _whole = pair(make_conf, tmp_path, HOSTS["l40"])
    follows.update()
    reading = follows.host.discover()
    pf = reading.pfs[1]
    vf = next(v for v in pf.vfs if not v.current_type and v.creatable)
    before = {p.device: p for p in follows.driver.last_plans}
    planned: list[list[str]] = []
    real = refresh.replan

    def seen(*args, **kwargs):
        alone = args[3]
        planned.append(sorted(p.name for p in alone.pfs))
        return real(*args, **kwargs)

    monkeypatch.setattr(refresh, "replan", seen)
    plans: Counter[str] = Counter()
    counting(monkeypatch, whole_host, "plan_providers", plans)
    follows.host.set_vf_type(vf.address, vf.creatable[0].id)
    after = follows.update()
    assert planned == [[pf.name]]
    assert plans == Counter()  # the whole host was not planned
    assert after[pf.name].reserved == before[pf.name].reserved + 1
    assert {d: p for d, p in after.items() if d != pf.name} == {
        d: p for d, p in before.items() if d != pf.name
    }
    tree = tree_of(follows)
    follows.driver._refresher._fingerprint = None  # plan the whole host
    follows.update()
    assert tree_of(follows) == tree


@pytest.mark.parametrize("host", ["l40", "mixed", "demo"])
def test_what_the_cards_touched_hold_is_what_the_whole_host_counts(host):
    """Typed VFs guests use and VFs claimed, on the cards a change
    touched: as usage.held_devices counts the whole host."""
    from vgpu_driver.model import usage
    from vgpu_driver.service.touched import held_on
    from vgpu_driver.sim.simulated import SimulatedHost

    rng = random.Random(3)
    sim = SimulatedHost(HOSTS[host]())
    theirs: list[str] = []
    checked = 0
    for _ in range(30):
        _vf_change(sim, rng, theirs)
        now = sim.discover()
        if now.device_changes is None or not now.device_changes[1]:
            continue
        typed = [
            (vf.address, pf.name, vf.current_type)
            for pf in now.pfs
            for vf in pf.vfs
            if vf.current_type
        ]
        for address, _pf, _type in rng.sample(typed, min(3, len(typed))):
            sim.note_guest(  # a guest given a typed VF
                Guest(str(uuid.uuid4()), "g", pci_devices=(address,))
            )
        now = sim.discover()
        claims = tuple(
            (address, pf, f"nvidia-{type_number}")
            for address, pf, type_number in typed
            if address not in now.pci_users() and rng.random() < 0.3
        )
        touched = {pf.name for pf in now.pfs}
        whole = usage.held_devices(now, {}, claims)
        assert held_on(now, {}.get, claims, touched) == {
            name: whole.get(name, Counter()) for name in touched
        }
        checked += sum(map(len, whole.values()))
    assert checked


def test_a_vf_a_guest_has_typed_by_another_is_recorded(make_conf, tmp_path):
    """A guest defined with a VF not typed yet, the VF typed by another
    manager afterwards: the card changed alone, and the VF's type is
    recorded as a whole reading records it (kept across reboots)."""
    follows, _whole = pair(make_conf, tmp_path, HOSTS["l40"])
    follows.update()
    reading = follows.host.discover()
    pf = reading.pfs[0]
    vf = next(v for v in pf.vfs if not v.current_type and v.creatable)
    guest = str(uuid.uuid4())
    follows.host.note_guest(Guest(guest, "by-hand", pci_devices=(vf.address,)))
    follows.driver.domain_event(guest, True)
    follows.update()
    ledger = follows.driver.binder.ledger
    assert vf.address not in ledger.vf_types
    follows.host.set_vf_type(vf.address, vf.creatable[0].id)
    assert follows.host.discover().device_changes[1] == {pf.name}
    follows.update()
    assert ledger.vf_types[vf.address] == vf.creatable[0].id


def test_a_vf_the_library_made_elsewhere_plans_the_whole_host():
    """The devices the library made changed on a card the host did not
    say changed (its records, not the host): the pass plans the whole
    host."""
    from vgpu_driver.service.touched import _made_on
    from vgpu_driver.sim.simulated import SimulatedHost

    now = SimulatedHost(HOSTS["l40"]()).discover()
    first, second = now.pfs[0], now.pfs[1]
    seen = {"an-mdev": ("pci_0000_10_00_0", "nvidia-35")}.get
    assert _made_on({first.vfs[0].address}, {first.name}, now, seen)
    assert not _made_on({second.vfs[0].address}, {first.name}, now, seen)
    assert not _made_on({"an-mdev"}, {first.name}, now, seen)
    assert _made_on({"never-seen"}, {first.name}, now, seen)


def test_a_card_touched_keeps_what_a_guest_outside_nova_uses_reserved(
    make_conf, tmp_path
):
    """A guest outside Nova has a typed VF of a card; another manager
    types one more VF there: planned alone, the card's provider still
    reserves the guest's VF, as a whole pass does."""
    follows, _whole = pair(make_conf, tmp_path, HOSTS["l40"])
    follows.update()
    pf = follows.host.discover().pfs[2]
    free = [v for v in pf.vfs if not v.current_type and v.creatable]
    before = {p.device: p for p in follows.driver.last_plans}[pf.name]
    follows.host.set_vf_type(free[0].address, free[0].creatable[0].id)
    guest = str(uuid.uuid4())
    follows.host.note_guest(
        Guest(guest, "by-hand", pci_devices=(free[0].address,), nova=False)
    )
    follows.driver.domain_event(guest, True)
    assert follows.update()[pf.name].reserved == before.reserved + 1
    follows.host.set_vf_type(free[1].address, free[1].creatable[0].id)
    assert follows.host.discover().device_changes[1] == {pf.name}
    plans = follows.update()
    assert plans[pf.name].reserved == before.reserved + 2
    follows.driver._refresher._fingerprint = None  # plan the whole host
    assert follows.update() == plans


def test_libvirt_s_adapter_says_which_card_a_vf_change_touched(tmp_path):
    """Through libvirt's adapter (the VFs read from sysfs): a VF typed in
    sysfs by another manager, then cleared, reads as the card touched
    alone, and each reading is what a new adapter reading the whole
    host finds."""
    from pathlib import Path

    from tests.modelled_libvirt import modelled_host
    from vgpu_driver.host.libvirt_host import LibvirtHost

    host, conn = modelled_host(tmp_path, "l40-sriov")
    before = host.discover(rescan_guests=True)
    [pf] = before.pfs
    vf = next(v for v in pf.vfs if not v.current_type and v.creatable)
    path = (
        Path(host.sysfs.root)
        / "bus/pci/devices"
        / vf.address
        / "nvidia/current_vgpu_type"
    )
    for value in (vf.creatable[0].id, 0):
        last = host.discover()
        path.write_text(f"{value}\n")
        now = host.discover()
        assert now.device_changes == (last.generation, {pf.name})
        [card] = now.pfs
        assert {v.address: v.current_type for v in card.vfs}[vf.address] == (
            value
        )
        afresh = LibvirtHost(host.uri, host.sysfs.root, connection=conn)
        assert now == afresh.discover(rescan_guests=True)
