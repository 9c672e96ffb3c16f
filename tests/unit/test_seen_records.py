"""When the record of the mdevs seen is written (#24's structural figures
for the records): a free mdev made or gone writes nothing, a bound mdev
is on disk before its spawn claim ends, a guest found on a free mdev or
a typed VF puts it on disk, and a spawn claim stays while its mdev
cannot be recorded."""

from __future__ import annotations

import uuid

import pytest

from benchmarks.common import conf_for, dense
from tests import helpers, records_helpers
from vgpu_driver.driver import VgpuDriver


def seen_on_disk(driver):
    state = driver._refresher.seen.file.state
    return records_helpers.seen_on_disk(state.directory)


def simulated(tmp_path, pgpus=1):
    """A service on the in-process simulated host (which makes mdevs)."""
    from vgpu_driver.sim.simulated import SimulatedHost

    description = dense(pgpus, 18, 16)
    host = SimulatedHost(description)
    driver = VgpuDriver(conf_for(description.config, tmp_path), host)
    tree = helpers.new_tree("n")
    driver.init_host([g.uuid for g in description.guests])
    driver.update_provider_tree(tree, "n")
    return host, driver, tree


def test_a_free_mdev_made_or_gone_writes_no_record(tmp_path, monkeypatch):
    """Another manager makes a free mdev, then removes it: the refresh
    after each knows it (reserved as another's, then gone) and writes
    nothing durable; what guests use is on disk as before."""
    host, driver, tree = simulated(tmp_path)
    on_disk = seen_on_disk(driver)
    order = records_helpers.saves_in_order(monkeypatch)
    parent = host.discover().parents[0]
    made = host.create_mdev(parent, parent.types[0].id, str(uuid.uuid4()))
    [plan] = driver.update_provider_tree(tree, "n")
    assert made.uuid in driver.seen_mdevs()
    assert plan.reserved == 1  # another manager's free mdev
    host.remove_mdev(made)
    [plan] = driver.update_provider_tree(tree, "n")
    assert made.uuid not in driver.seen_mdevs()
    assert (order, plan.reserved) == ([], 0)
    assert seen_on_disk(driver) == on_disk


@pytest.mark.parametrize("told", ["guest_defined", "refresh"])
def test_a_bound_mdev_is_on_disk_before_its_spawn_claim_ends(
    tmp_path, monkeypatch, told
):
    """The mdev a bind made is free at the next refresh (nothing
    written); once its guest is defined (told by the caller, or found
    by a refresh), where it is goes on disk, then its spawn claim ends:
    a crash between the two leaves it known."""
    from vgpu_driver.model.device import Guest

    host, driver, tree = simulated(tmp_path)
    for _ in range(3):  # a free mdev first, taken by the next guests
        plan = driver.update_provider_tree(tree, "n")[0]
        [device] = driver.allocate_mdevs(
            str(uuid.uuid4()),
            {tree.data(plan.name).uuid: {"resources": {"VGPU": 1}}},
        )
    instance = driver.instance_devices()
    [(instance, _)] = [
        (i, d) for i, d in instance.items() if d["claimed"] == [device.id]
    ]
    order = records_helpers.saves_in_order(monkeypatch)
    driver.update_provider_tree(tree, "n")
    assert device.created and device.id in driver.seen_mdevs()
    assert device.id not in seen_on_disk(driver) and order == []
    host.note_guest(Guest(instance, "spawned", (device.id,), ()))
    if told == "guest_defined":
        driver.guest_defined(instance)
    else:
        driver.update_provider_tree(tree, "n")
    assert order[:2] == ["mdev-parents", "claims"]
    assert seen_on_disk(driver)[device.id] == (device.parent, device.type_id)
    assert driver.instance_devices()[instance]["claimed"] == []


def test_a_guest_found_on_a_free_mdev_puts_it_on_disk(tmp_path, monkeypatch):
    """Another manager's free mdev (in memory only), then a guest
    defined on it outside any bind: the refresh that finds the guest
    writes where the mdev is (no spawn claim tells it)."""
    from vgpu_driver.model.device import Guest

    host, driver, tree = simulated(tmp_path)
    parent = host.discover().parents[0]
    made = host.create_mdev(parent, parent.types[0].id, str(uuid.uuid4()))
    driver.update_provider_tree(tree, "n")
    assert made.uuid not in seen_on_disk(driver)
    order = records_helpers.saves_in_order(monkeypatch)
    host.note_guest(Guest(str(uuid.uuid4()), "by-hand", (made.uuid,), ()))
    driver.update_provider_tree(tree, "n")
    assert order == ["mdev-parents"]
    assert seen_on_disk(driver)[made.uuid] == (made.parent, made.type_id)


def test_a_spawn_claim_stays_while_its_mdev_cannot_be_recorded(
    tmp_path, monkeypatch
):
    """The mdevs seen cannot be written (a full disk): the guest is
    defined, but its spawn claim stays (it still says where the mdev
    is); once the record can be written, the next refresh ends it."""
    from vgpu_driver.model.device import Guest
    from vgpu_driver.records.seen import SeenMdevs
    from vgpu_driver.records.store import StateStoreError

    host, driver, tree = simulated(tmp_path)
    for _ in range(3):  # the third makes a new mdev
        plan = driver.update_provider_tree(tree, "n")[0]
        [device] = driver.allocate_mdevs(
            str(uuid.uuid4()),
            {tree.data(plan.name).uuid: {"resources": {"VGPU": 1}}},
        )
    [instance] = [
        i
        for i, d in driver.instance_devices().items()
        if d["claimed"] == [device.id]
    ]
    real_save = SeenMdevs.save

    def full(self, new):
        raise StateStoreError(
            action="write", path="mdev-parents", reason="full"
        )

    monkeypatch.setattr(SeenMdevs, "save", full)
    host.note_guest(Guest(instance, "spawned", (device.id,), ()))
    driver.guest_defined(instance)
    assert driver.instance_devices()[instance]["claimed"] == [device.id]
    monkeypatch.setattr(SeenMdevs, "save", real_save)
    driver.update_provider_tree(tree, "n")
    assert driver.instance_devices()[instance]["claimed"] == []
    assert seen_on_disk(driver)[device.id] == (device.parent, device.type_id)


def test_a_guest_found_on_a_typed_vf_records_its_type(tmp_path):
    """A VF another manager typed, then a guest defined on it outside any
    bind: the refresh that finds the guest records the VF's type (so a
    restore gives it back after a reboot), on disk."""
    from vgpu_driver.model.device import Guest
    from vgpu_driver.sim.simulated import SimulatedHost

    description = helpers.load("l40-sriov")
    host = SimulatedHost(description)
    driver = VgpuDriver(conf_for(description.config, tmp_path), host)
    tree = helpers.new_tree("n")
    driver.init_host([g.uuid for g in description.guests])
    driver.update_provider_tree(tree, "n")
    [pf] = host.discover().pfs
    vf = next(v.address for v in pf.vfs if not v.current_type)
    host.set_vf_type(vf, 1150)
    driver.update_provider_tree(tree, "n")
    assert vf not in driver.binder.vf_types  # another's, not a guest's
    host.note_guest(Guest(str(uuid.uuid4()), "by-hand", (), (vf,)))
    driver.update_provider_tree(tree, "n")
    again = VgpuDriver(driver.conf, host)  # the records, as on disk
    assert again.binder.vf_types[vf] == 1150


def test_a_guest_s_mdev_made_again_elsewhere_is_on_disk_so(tmp_path):
    """A guest's mdev removed, then made again under its uuid on another
    pGPU (by another manager, as after a reboot): the refresh that reads
    it writes where it is now, so a restart counts it there, not where
    it was."""
    host, driver, tree = simulated(tmp_path, pgpus=2)
    reading = host.discover()
    guest = next(g for g in reading.guests if g.mdevs)
    [old] = [m for m in reading.mdevs if m.uuid == guest.mdevs[0]]
    other = next(p for p in reading.parents if p.name != old.parent)
    host.remove_mdev(old)
    driver.update_provider_tree(tree, "n")
    assert seen_on_disk(driver)[old.uuid] == (old.parent, old.type_id)
    host.create_mdev(other, old.type_id, old.uuid)
    driver.update_provider_tree(tree, "n")
    assert seen_on_disk(driver)[old.uuid] == (other.name, old.type_id)
