"""An mdev made or removed (#24): the host says which parents changed,
and the reading, the record of mdevs seen, the binder's view and the
plan follow those parents alone. Each must end where reading the whole
host again ends."""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections import Counter

import pytest

from benchmarks.common import dense
from tests.followed_pair import (
    follows_as_whole,
    mdev_changed,
    node_on,
    pair,
)
from tests.helpers import Node
from vgpu_driver.model import usage
from vgpu_driver.model.device import (
    DEVICE_INDEXES,
    MIXED_INDEXES,
)
from vgpu_driver.model.device_view import DeviceView
from vgpu_driver.model.view_follow import follow_parents
from vgpu_driver.records.seen import SeenMdevs
from vgpu_driver.service import refresh, tree_writer, whole_host
from vgpu_driver.service.touched import held_on, parents_to_plan
from vgpu_driver.sim.simulated import SimulatedHost


def _touched(before, after):
    return {
        p.name
        for p in after.parents
        if p != before.parent(p.name)
        or after.mdevs_of(p.name) != before.mdevs_of(p.name)
    }


@pytest.mark.parametrize("seed", range(4))
def test_a_reading_made_from_the_last_is_the_whole_reading(seed):
    rng = random.Random(seed)
    host = SimulatedHost(dense(4, 40, 30))
    made: list = []
    last = host.discover()
    # every index asked for: each carried over to the next reading
    last.mdevs_of("x"), last.mdev_users(), last.absent_in_use()
    last.parent("x"), last.vf_parent_gpus(), last.pci_users()
    for _ in range(30):
        mdev_changed(host, rng, made)
        now = host.discover()
        whole = SimulatedHost(host.description).discover()
        assert now == whole
        assert now.device_changes == (last.generation, _touched(last, now))
        carried = (DEVICE_INDEXES | MIXED_INDEXES) & vars(now).keys()
        assert "_parents_by_name" in carried and "_by_parent" in carried
        for name in sorted(carried):  # as computed afresh
            assert vars(now)[name] == getattr(whole, name), name
        assert now.absent_in_use() == whole.absent_in_use()
        last = now


@pytest.mark.parametrize("seed", range(4))
def test_the_view_follows_the_parents_touched_as_a_whole_reading(seed):
    rng = random.Random(seed)
    host = SimulatedHost(dense(4, 40, 30))
    made: list = []
    for _ in range(30):
        before = host.discover()
        ours = {m.uuid for m in before.mdevs if rng.random() < 0.7}
        view = DeviceView.of(before, ours)
        mdev_changed(host, rng, made)
        now = host.discover()
        # the library's own: the mdev it made this step, if it did
        new = {m.uuid for m in now.mdevs} - {m.uuid for m in before.mdevs}
        ours |= {u for u in new if rng.random() < 0.5}
        follow_parents(view, before, now, now.device_changes[1], ours)
        assert view == DeviceView.of(now, ours)


@pytest.mark.parametrize("seed", range(4))
def test_the_mdevs_seen_follow_as_the_whole_host_noted(seed):
    rng = random.Random(seed)
    host = SimulatedHost(dense(4, 40, 30))
    made: list = []
    follows, whole = SeenMdevs(None), SeenMdevs(None)
    first = host.discover()
    noted = {m.uuid: (m.parent, m.type_id) for m in first.mdevs}
    follows.note(noted, first.mdev_users())
    whole.note(noted, first.mdev_users())
    for _ in range(30):
        before = host.discover()
        mdev_changed(host, rng, made)
        now = host.discover()
        was = {m.uuid: m for m in before.mdevs}
        is_ = {m.uuid: m for m in now.mdevs}
        follows.change(
            {u: (m.parent, m.type_id) for u, m in is_.items() if u not in was},
            [u for u in was if u not in is_],
            now.mdev_users(),
        )
        kept = {
            u: w
            for u, w in whole.snapshot().items()
            if u in now.mdev_users() and u not in is_
        }
        whole.note(
            {**kept, **{u: (m.parent, m.type_id) for u, m in is_.items()}},
            now.mdev_users(),
        )
        assert follows.snapshot() == whole.snapshot()


@pytest.mark.parametrize(
    ("host", "seed"),
    [("dense", 7), ("dense", 8), ("dense", 9), ("vf-parents", 7)],
)
def test_a_service_told_which_parents_changed_ends_as_one_that_reads_all(
    make_conf, tmp_path, monkeypatch, host, seed
):
    """Mdevs made and removed by another manager, mdevs made and reused by
    binds, claims ended by guests and released: the plans and the tree
    are those of a service reading the whole host at every pass, and
    most passes planned the parents touched alone."""
    follows, whole = pair(make_conf, tmp_path, host)
    replanned = follows_as_whole(
        monkeypatch,
        (follows, whole),
        seed,
        lambda node, rng, mine: mdev_changed(node.host, rng, mine),
    )
    # most changes were followed parent by parent (a VF parent's never:
    # its GPU's provider stands for its siblings too)
    if host == "dense":
        assert replanned[True] >= 20, replanned


def test_one_mdev_made_plans_and_writes_its_parent_alone(
    make_conf, tmp_path, monkeypatch
):
    """16 parents: an mdev another manager makes, then removes, is
    planned and written on its parent alone; the view and the mdevs seen
    are not made again from the whole host."""
    node = node_on(make_conf, tmp_path / "state", dense(16, 160, 120))
    node.driver.init_host(
        [g.uuid for g in node.host.discover(rescan_guests=True).guests]
    )
    node.update()
    planned, writes, built, noted = [], Counter(), Counter(), Counter()
    real_plan = refresh.replan.__globals__["plan_providers"]
    real_write = tree_writer.TreeWriter.write
    real_of, real_note = DeviceView.of.__func__, SeenMdevs.note

    def plan(nodename, config, inventory, **kwargs):
        planned.append(len(inventory.parents))
        return real_plan(nodename, config, inventory, **kwargs)

    def write(self, *args, **kwargs):
        writes["write"] += 1
        return real_write(self, *args, **kwargs)

    def of(cls, *args, **kwargs):
        built["of"] += 1
        return real_of(cls, *args, **kwargs)

    def note(self, *args, **kwargs):
        noted["note"] += 1
        return real_note(self, *args, **kwargs)

    monkeypatch.setitem(refresh.replan.__globals__, "plan_providers", plan)
    monkeypatch.setattr(whole_host, "plan_providers", plan)
    monkeypatch.setattr(tree_writer.TreeWriter, "write", write)
    monkeypatch.setattr(DeviceView, "of", classmethod(of))
    monkeypatch.setattr(SeenMdevs, "note", note)
    parent = node.host.discover().parents[5]
    mdev = node.host.create_mdev(parent, parent.types[0].id, str(uuid.uuid4()))
    made = node.update()[parent.name]
    node.host.remove_mdev(mdev)
    gone = node.update()[parent.name]
    assert planned == [1, 1]
    assert writes["write"] == 2
    assert not built and not noted
    # another manager's mdev is reserved while it is there, not after
    assert made.reserved == gone.reserved + 1


@pytest.mark.parametrize("seed", range(4))
def test_what_the_parents_touched_hold_is_what_the_whole_host_counts(seed):
    """In use by guests (mdevs there, and mdevs gone whose record says
    there) and claimed: as usage.held_devices counts the whole host."""
    rng = random.Random(seed)
    host = SimulatedHost(dense(4, 40, 30))
    made: list = []
    first = host.discover()
    seen = {m.uuid: (m.parent, m.type_id) for m in first.mdevs}
    for _ in range(30):
        mdev_changed(host, rng, made)
        now = host.discover()
        seen.update({m.uuid: (m.parent, m.type_id) for m in now.mdevs})
        claims = tuple(
            (
                m.uuid if rng.random() < 0.5 else str(uuid.uuid4()),
                m.parent,
                m.type_id,
            )
            for m in now.mdevs
            if rng.random() < 0.1
        )
        touched = now.device_changes[1]
        whole = usage.held_devices(now, seen, claims)
        assert held_on(now, seen.get, claims, touched) == {
            name: whole.get(name, Counter()) for name in touched
        }


def test_a_claim_or_a_device_made_elsewhere_plans_the_whole_host(
    make_conf, tmp_path
):
    """The parents touched alone are planned only when the claims and the
    devices the library made changed there alone (if at all)."""
    node = node_on(make_conf, tmp_path / "state", dense(4, 40, 40))
    refresher = node.driver._refresher
    last = refresher._fingerprint
    config = refresher.settings.config
    reading = node.host.discover()
    there, elsewhere = reading.parents[1], reading.parents[2]
    mdev = node.host.create_mdev(there, there.types[0].id, str(uuid.uuid4()))
    now = node.host.discover()
    on = {m.parent: m.uuid for m in now.mdevs}
    seen = {m.uuid: (m.parent, m.type_id) for m in now.mdevs}.get

    def touched(claims=last.claims, owned=last.owned, config=config):
        then = dataclasses.replace(last, config=config)
        return parents_to_plan(
            then, "node1", now, config, claims, owned, seen, last.failing
        )

    assert touched() == {there.name}
    claim = (str(uuid.uuid4()), there.name, "nvidia-35")
    assert touched(claims=(*last.claims, claim)) == {there.name}
    claim = (str(uuid.uuid4()), elsewhere.name, "nvidia-35")
    assert touched(claims=(*last.claims, claim)) is None
    assert touched(owned=last.owned | {mdev.uuid}) == {there.name}
    assert touched(owned=last.owned - {on[elsewhere.name]}) is None
    # claims changed there and elsewhere at once: the whole host
    both = (
        *last.claims,
        (str(uuid.uuid4()), there.name, "nvidia-35"),
        (str(uuid.uuid4()), elsewhere.name, "nvidia-35"),
    )
    assert touched(claims=both) is None
    # one type of two with a cap, shared by the parents: the whole host
    capped = dataclasses.replace(
        config.types[0],
        type_id="nvidia-36",
        group="mdev_nvidia-36",
        is_default=False,
        max_instances=50,
    )
    two = dataclasses.replace(config, types=(*config.types, capped))
    assert touched(config=two) is None
    # a cap shared by the parents: the whole host
    config = dataclasses.replace(
        config,
        types=tuple(
            dataclasses.replace(t, max_instances=50) for t in config.types
        ),
    )
    assert touched(config=config) is None


def test_another_type_made_on_a_parent_takes_its_provider_away(
    make_conf, tmp_path
):
    """An M10 pGPU runs one type at a time: another manager's nvidia-36
    mdev on a parent serving nvidia-35 leaves it nothing to offer, and
    nothing of it in use: its provider goes (the parent's providers are
    not the same ones: the whole host is planned), and comes back once
    that mdev is removed."""
    node = Node(make_conf, tmp_path / "state")
    name = "pci_0000_85_00_0"
    assert node.update()[name].total == 16
    parent = node.host.discover().parent(name)
    theirs = node.host.create_mdev(parent, "nvidia-36", str(uuid.uuid4()))
    assert name not in node.update()
    assert not node.tree.exists(f"node1_{name}")
    node.host.remove_mdev(theirs)
    assert node.update()[name].total == 16
    assert node.tree.exists(f"node1_{name}")


def test_a_pass_given_the_allocations_plans_the_whole_host(
    make_conf, tmp_path
):
    """Nova hands a pass the allocations (a reshape) right after another
    manager made an mdev: the parent touched is planned with them, as
    the whole host is, not alone without them: its total never drops
    below the units Placement has allocated there (Placement would
    refuse the inventory)."""
    node = Node(make_conf, tmp_path / "state")
    name = "pci_0000_84_00_0"  # m10: nvidia-35, 16 of them at most
    assert node.update()[name].total == 16
    parent = node.host.discover().parent(name)
    node.host.create_mdev(parent, "nvidia-35", str(uuid.uuid4()))
    units = {node.rp(name): {"resources": {"VGPU": 17}}}
    plans = node.driver.update_provider_tree(
        node.tree, "node1", allocations={"c1": {"allocations": units}}
    )
    [plan] = [p for p in plans if p.device == name]
    assert (plan.total, plan.reserved) == (17, 1)
