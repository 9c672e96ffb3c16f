"""An mdev made or removed (#24): the host says which parents changed,
and the reading, the record of mdevs seen, the binder's view and the
plan follow those parents alone. Each must end where reading the whole
host again ends."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import uuid
from collections import Counter

import pytest

from benchmarks.common import dense
from tests.helpers import Node, load
from vgpu_driver.exception import DeviceCapacityExhausted, DeviceNoRoom
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.model import binding, naming, usage
from vgpu_driver.model.device import (
    DEVICE_INDEXES,
    MIXED_INDEXES,
    Guest,
    HostInventory,
)
from vgpu_driver.model.device_changes import parents_alone, with_devices
from vgpu_driver.model.device_view import DeviceView, follow_parents
from vgpu_driver.records.seen import SeenMdevs
from vgpu_driver.service import refresh, tree_writer, whole_host
from vgpu_driver.service.touched import held_on, parents_to_plan
from vgpu_driver.sim import guest_xml
from vgpu_driver.sim.mdev_libvirt import mdev_xml, no_device
from vgpu_driver.sim.simulated import SimulatedHost


def _change(host, rng, made):
    """One mdev made on a random parent (at times a guest's, made again),
    or one removed (a guest's, at times: its parent lost it)."""
    reading = host.discover()
    if made and rng.random() < 0.45:
        host.remove_mdev(made.pop(rng.randrange(len(made))))
        return
    if rng.random() < 0.1:
        gone = rng.choice(reading.mdevs)
        host.remove_mdev(gone)
        made[:] = [m for m in made if m.uuid != gone.uuid]
        return
    parent = rng.choice(reading.parents)
    name = str(uuid.UUID(int=rng.getrandbits(128)))
    absent = sorted(reading.absent_in_use())
    if absent and rng.random() < 0.5:
        name = rng.choice(absent)  # a guest's mdev made again
    with contextlib.suppress(DeviceNoRoom):
        made.append(host.create_mdev(parent, parent.types[0].id, name))


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
        _change(host, rng, made)
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
        _change(host, rng, made)
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
        _change(host, rng, made)
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


HOSTS = {
    "dense": lambda: dense(4, 40, 40),
    # an Ampere GPU's VFs as parents (kernel < 6.8): one provider for all
    "vf-parents": lambda: load("a2-vf-parents"),
}


def _pair(make_conf, tmp_path, host="dense"):
    """Two services on two like hosts: one follows the parents (and
    cards) the host says changed, the other is never told (it reads the
    whole host). ``host``: a name in HOSTS, or what makes the host's
    description."""
    described = HOSTS[host] if isinstance(host, str) else host
    nodes = []
    for name in ("follows", "whole"):
        nodes.append(_node(make_conf, tmp_path / name, described()))
    whole = nodes[1]
    real, untold = whole.host.discover, {}

    def discover(**kwargs):
        reading = real(**kwargs)
        if reading.device_changes is None:
            return reading
        if reading.generation not in untold:
            untold[reading.generation] = dataclasses.replace(
                reading, device_changes=None
            )
        return untold[reading.generation]

    whole.host.discover = discover
    return nodes


def _follows_as_whole(monkeypatch, nodes, seed, change, check=None):
    """60 random steps on two nodes alike (one told which devices
    changed, one not: see :func:`_pair`): ``change(node, rng, mine)`` of
    the host by another manager, binds on a provider of the last plans
    (their guests defined at times: the claim ends), releases. What is
    bound where, the plans and the trees must be the same after each
    step (and ``check(follows, step)`` hold). Returns the replans
    counted."""
    follows, whole = nodes
    replanned, current = _replans_counted_binds_named(monkeypatch)
    rngs = [random.Random(seed), random.Random(seed)]
    theirs: list[list] = [[], []]
    instances: list[str] = []
    for step in range(60):
        kind = rngs[0].random()
        rngs[1].random()
        instance = str(uuid.UUID(int=step))
        bound = []
        for node, rng, mine in zip(nodes, rngs, theirs, strict=True):
            current[0] = "follows" if node is follows else "whole"
            if kind < 0.5:
                change(node, rng, mine)
            elif kind < 0.8:
                plans = node.driver.last_plans
                device = _bind(node, instance, plans[step % len(plans)])
                bound.append(device)
                if device is None:
                    continue
                if step % 2:  # its guest defined: the claim ends
                    kind_of = {"mdev": "mdevs", "vf": "pci_devices"}
                    node.host.note_guest(
                        Guest(
                            instance,
                            f"i-{step}",
                            **{kind_of[device.kind]: (device.id,)},
                        )
                    )
                    node.driver.guest_defined(instance)
                elif node is follows:
                    instances.append(instance)
            elif instances:
                node.driver.release_mdevs(instances[0])
        if kind >= 0.8 and instances:
            instances.pop(0)
        # the same kind of device on the same provider (which free mdev
        # is reused may differ: a view followed keeps the order of its
        # free lists, one built again sorts them)
        where = [(d.kind, d.parent, d.type_id) if d else None for d in bound]
        assert where == [] or where[0] == where[1], step
        follows.update()
        whole.update()
        assert follows.driver.last_plans == whole.driver.last_plans, step
        assert _tree(follows) == _tree(whole), step
        if check is not None:
            check(follows, step)
    return replanned


def _bind(node, instance, plan):
    """One unit bound on ``plan``'s provider (None: no room)."""
    provider = node.tree.data(plan.name).uuid
    wanted = {provider: {"resources": {plan.resource_class: 1}}}
    try:
        [device] = node.driver.allocate_mdevs(instance, wanted)
    except DeviceCapacityExhausted:
        return None
    return device


def _replans_counted_binds_named(monkeypatch):
    """(replans counted by whether they planned the devices touched
    alone, [the node binding now]): the mdevs a bind makes are named
    alike on two nodes (by the count of the node set in the list)."""
    replanned = Counter()
    real = refresh.replan

    def counted(*args, **kwargs):
        done = real(*args, **kwargs)
        replanned[done is not None] += 1
        return done

    monkeypatch.setattr(refresh, "replan", counted)
    named = Counter()
    current = [""]

    def uuid4():
        named[current[0]] += 1
        return uuid.UUID(int=named[current[0]])

    monkeypatch.setattr(binding.uuidlib, "uuid4", uuid4)
    return replanned, current


def _node(make_conf, state, description):
    return Node(
        make_conf,
        state,
        config=description.config,
        host=SimulatedHost(description),
    )


def _tree(node):
    found = {}
    for name in sorted(node.tree.get_provider_uuids("node1")):
        data = node.tree.data(name)
        found[data.name] = (data.inventory, data.traits)
    return found


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
    follows, whole = _pair(make_conf, tmp_path, host)
    replanned = _follows_as_whole(
        monkeypatch,
        (follows, whole),
        seed,
        lambda node, rng, mine: _change(node.host, rng, mine),
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
    node = _node(make_conf, tmp_path / "state", dense(16, 160, 120))
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
        _change(host, rng, made)
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
    node = _node(make_conf, tmp_path / "state", dense(4, 40, 40))
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
    # a cap shared by the parents: the whole host
    config = dataclasses.replace(
        config,
        types=tuple(
            dataclasses.replace(t, max_instances=50) for t in config.types
        ),
    )
    assert touched(config=config) is None


def _made_by_them(conn, parent):
    xml = mdev_xml(parent.name, parent.types[0].id, str(uuid.uuid4()))
    return conn.nodeDeviceCreateXML(xml, 0)


def test_libvirt_s_adapter_follows_a_parent_s_mdevs_through_its_sysfs(
    tmp_path,
):
    """Through libvirt (an mdev another manager makes, then removes, as
    libvirt >= 7.3 and the kernel show them): the parent's sysfs
    directory says which mdev came or went, one lookup reads it, and
    every mdev is not listed again. The reading names the parent, and is
    what a new adapter reading the whole host finds."""
    from tests.unit.test_libvirt_changes import _host

    host, conn = _host(tmp_path)
    before = host.discover(rescan_guests=True)
    parent = next(p for p in before.parents if p.types[0].available)
    listings = len(conn.calls("listAllDevices"))
    theirs = _made_by_them(conn, parent)
    made = host.discover()
    assert made.device_changes == (before.generation, {parent.name})
    assert len(conn.calls("listAllDevices")) == listings  # none
    afresh = LibvirtHost(host.uri, host.sysfs.root, connection=conn)
    assert made == afresh.discover(rescan_guests=True)
    listings = len(conn.calls("listAllDevices"))  # the new adapter's
    assert len(made.mdevs) == len(before.mdevs) + 1
    conn.gone.add(theirs.name())
    gone = host.discover()
    assert gone.device_changes == (made.generation, {parent.name})
    assert gone == before
    assert host.discover() is gone  # nothing more: the same reading
    assert len(conn.calls("listAllDevices")) == listings  # none


def test_an_mdev_libvirt_has_not_seen_yet_is_looked_up_again(tmp_path):
    """The kernel made it (sysfs lists it) before libvirt's node device
    driver learnt of it: the next reading looks again, though the
    parent's room is the same by then."""
    from tests.unit.test_libvirt_changes import _host

    host, conn = _host(tmp_path)
    before = host.discover(rescan_guests=True)
    parent = next(p for p in before.parents if p.types[0].available)
    theirs = _made_by_them(conn, parent)
    lookup, late = conn.nodeDeviceLookupByName, {theirs.name()}

    def not_yet(name):
        if name in late:
            raise no_device(name)
        return lookup(name)

    conn.nodeDeviceLookupByName = not_yet
    first = host.discover()
    assert len(first.mdevs) == len(before.mdevs)
    late.clear()
    second = host.discover()
    assert second.device_changes == (first.generation, {parent.name})
    assert len(second.mdevs) == len(before.mdevs) + 1


def test_a_defined_mdev_stopped_and_started_by_another_is_followed(
    tmp_path,
):
    from tests.unit.test_libvirt_changes import _host

    host, conn = _host(tmp_path)
    before = host.discover(rescan_guests=True)
    mdev = next(
        m for m in before.mdevs if before.parent(m.parent).types[0].available
    )
    conn.inactive.add(mdev.name)  # stopped, still defined
    stopped = host.discover()
    [now] = [m for m in stopped.mdevs if m.uuid == mdev.uuid]
    assert not now.active and now.persistent
    # an mdev made beside it: the stopped one is not asked about again
    asked = len(conn.log or ())
    parent = stopped.parent(mdev.parent)
    theirs = _made_by_them(conn, parent)
    beside = host.discover()
    assert len(beside.mdevs) == len(stopped.mdevs) + 1
    assert [s for _c, s in (conn.log or ())[asked:] if mdev.name in s] == []
    conn.gone.add(theirs.name())
    assert host.discover() == stopped
    conn.inactive.discard(mdev.name)  # started again
    started = host.discover()
    [now] = [m for m in started.mdevs if m.uuid == mdev.uuid]
    assert now.active
    assert started.device_changes[1] == {mdev.parent}


def test_a_stopped_mdev_undefined_by_another_is_gone_at_the_next_rescan(
    tmp_path,
):
    """A defined, stopped mdev undefined by another manager leaves no
    trace in sysfs nor in a parent's rooms: a reading asked to rescan (a
    service's start, the audit, another process's claims changed) lists
    every node device again and finds it gone."""
    from tests.unit.test_libvirt_changes import _host

    host, conn = _host(tmp_path)
    before = host.discover(rescan_guests=True)
    mdev = next(
        m for m in before.mdevs if before.parent(m.parent).types[0].available
    )
    conn.inactive.add(mdev.name)  # stopped, still defined
    assert _the(host.discover(), mdev.uuid).persistent
    conn.gone.add(mdev.name)  # and undefined
    conn.inactive.discard(mdev.name)
    rescanned = host.discover(rescan_guests=True)
    assert mdev.uuid not in {m.uuid for m in rescanned.mdevs}


def _the(reading, mdev_uuid):
    [mdev] = [m for m in reading.mdevs if m.uuid == mdev_uuid]
    return mdev


def _theirs_of_two_types(tmp_path):
    """(host, conn, mdev made by another manager, its parent's first
    type, another): on a parent offering two types, with no other mdev
    (one type at a time runs on an NVIDIA pGPU)."""
    from tests.unit.test_libvirt_changes import _host

    host, conn = _host(tmp_path)
    before = host.discover(rescan_guests=True)
    parent = next(
        p
        for p in before.parents
        if len(p.types) > 1 and all(t.available for t in p.types)
    )
    first, other = parent.types[0].id, parent.types[1].id
    xml = mdev_xml(parent.name, first, str(uuid.uuid4()))
    return host, conn, conn.nodeDeviceCreateXML(xml, 0), first, other


def test_an_mdev_made_again_under_its_uuid_is_read_again(tmp_path):
    """Another manager removes an mdev and makes it again under the same
    uuid (so under the same libvirt name), of another type, between two
    readings: its sysfs directory is a new one (kernfs numbers it anew),
    so the reading has the new type, as a new adapter reads it."""
    host, conn, theirs, first, other = _theirs_of_two_types(tmp_path)
    assert _the(host.discover(), theirs.uuid).type_id == first
    conn.gone.add(theirs.name())
    conn.nodeDeviceCreateXML(mdev_xml(theirs.parent, other, theirs.uuid), 0)
    again = host.discover()
    assert _the(again, theirs.uuid).type_id == other
    afresh = LibvirtHost(host.uri, host.sysfs.root, connection=conn)
    assert again == afresh.discover(rescan_guests=True)


def test_a_defined_mdev_changed_while_stopped_is_read_again(tmp_path):
    """Its definition changed while it was stopped (``mdevctl modify``):
    started, it is read again."""
    host, conn, theirs, first, other = _theirs_of_two_types(tmp_path)
    conn.nodeDeviceDefineXML(mdev_xml(theirs.parent, first, theirs.uuid), 0)
    assert _the(host.discover(), theirs.uuid).type_id == first
    theirs.destroy()
    assert not _the(host.discover(), theirs.uuid).active
    theirs.xml = theirs.xml.replace(first, other)  # as mdevctl modify
    theirs.type_id = other
    theirs.create()
    started = _the(host.discover(), theirs.uuid)
    assert (started.active, started.type_id) == (True, other)


@pytest.mark.parametrize("seed", range(4))
def test_any_one_change_of_another_manager_reads_as_a_new_adapter_does(
    tmp_path, seed
):
    """Another manager makes (and maybe defines), removes, stops,
    starts, undefines mdevs, or makes one again under its uuid, one
    change between two readings, the kernel refusing those its parent
    has no room for: each reading is what a new adapter reading the
    whole host finds. (A change that leaves no trace in sysfs or in a
    parent's rooms, a defined-only mdev undefined, waits for the next
    full listing: not made here.)"""
    import libvirt

    from tests.unit.test_libvirt_changes import _host

    rng = random.Random(seed)
    host, conn = _host(tmp_path / "host")
    last = host.discover(rescan_guests=True)
    parents = last.parents
    theirs = {}
    done = Counter()

    def make(parent, mdev_uuid):
        xml = mdev_xml(parent.name, rng.choice(parent.types).id, mdev_uuid)
        try:
            made = conn.nodeDeviceCreateXML(xml, 0)
        except libvirt.libvirtError:
            done["refused"] += 1  # no room: nothing changed
            return
        if rng.random() < 0.5:
            conn.nodeDeviceDefineXML(xml, 0)
        theirs[made.uuid] = made
        done["made"] += 1

    for _step in range(30):
        running = [d for d in theirs.values() if conn.running(d.name())]
        stopped = [d for d in theirs.values() if d.name() in conn.inactive]
        change = rng.choice(["make", "gone", "stop", "start", "again"])
        if change == "make" or not running:
            make(rng.choice(parents), str(uuid.UUID(int=rng.getrandbits(128))))
        elif change == "start" and stopped:
            try:
                rng.choice(stopped).create()
            except libvirt.libvirtError:
                done["refused"] += 1
        else:
            mdev = rng.choice(running)
            if change == "stop":
                mdev.destroy()  # stopped if defined, else gone
            elif change == "again":
                conn.gone.add(mdev.name())
                make(
                    next(p for p in parents if p.name == mdev.parent),
                    mdev.uuid,
                )
            elif rng.random() < 0.5:
                mdev.undefine()  # its definition alone
            else:
                conn.gone.add(mdev.name())
        afresh = LibvirtHost(host.uri, host.sysfs.root, connection=conn)
        now = host.discover()
        assert now == afresh.discover(rescan_guests=True)
        if now is not last:  # a new reading: a generation never seen
            assert now.generation > last.generation
            if now.device_changes is not None:  # followed from the last
                assert now.device_changes[0] == last.generation
        last = now
    assert done["made"] > 5 and done["refused"]


def test_an_mdev_swapped_in_unseen_is_found_by_the_guest_using_it(
    tmp_path,
):
    """Another manager removes an mdev and makes another of its type on
    the same parent between two readings: the parent's rooms are the
    same, so nothing says so. A guest defined with the new one (told by
    a domain event) takes up an mdev sysfs has and the adapter never
    read: every mdev is listed again."""
    from tests.unit.test_binding import hand_made_domain_xml
    from tests.unit.test_libvirt_changes import _host

    host, conn = _host(tmp_path)
    before = host.discover(rescan_guests=True)
    parent = next(p for p in before.parents if p.types[0].available)
    old = _made_by_them(conn, parent)
    host.discover()
    conn.gone.add(old.name())
    new = _made_by_them(conn, parent)
    unseen = host.discover()
    # what no reading can tell (the rooms are the same): kept as it was
    assert old.uuid in {m.uuid for m in unseen.mdevs}
    guest = str(uuid.uuid4())
    conn.defineXML(hand_made_domain_xml(guest, "theirs", [new.uuid]))
    host.domain_event(guest, True)
    listings = len(conn.calls("listAllDevices"))
    seen = host.discover()
    assert len(conn.calls("listAllDevices")) > listings
    assert {new.uuid} <= {m.uuid for m in seen.mdevs} - {old.uuid}
    afresh = LibvirtHost(host.uri, host.sysfs.root, connection=conn)
    assert seen == afresh.discover(rescan_guests=True)
    # a guest using a known mdev lists nothing
    other = str(uuid.uuid4())
    conn.defineXML(hand_made_domain_xml(other, "theirs-too", [new.uuid]))
    host.domain_event(other, True)
    listings = len(conn.calls("listAllDevices"))
    host.discover()
    assert len(conn.calls("listAllDevices")) == listings


def test_an_mdev_made_or_gone_touches_its_parent_whose_room_is_the_same():
    """A defined-only mdev takes no room: its parent's reading is the
    same, yet its mdevs changed."""
    reading = SimulatedHost(dense(2, 8, 4)).discover()
    reading = dataclasses.replace(reading, generation=1)
    [gone, *_] = reading.mdevs_of(reading.parents[1].name)
    inactive = dataclasses.replace(gone, active=False, persistent=True)
    without = with_devices(reading, reading.parents, (), (gone,), 2)
    assert without.device_changes == (1, {gone.parent})
    back = with_devices(without, reading.parents, (inactive,), (), 3)
    assert back.device_changes == (2, {gone.parent})
    assert back.mdevs_of(gone.parent) == tuple(
        sorted(
            (*without.mdevs_of(gone.parent), inactive), key=lambda m: m.uuid
        )
    )


def test_other_parents_are_never_followed_as_a_change():
    """A parent gone, or one gone and another come in its place: not a
    change of the same parents, so None (the reading is built whole),
    never the new one taken as the old one changed."""
    reading = SimulatedHost(dense(3, 6, 3)).discover()
    first, second, third = reading.parents
    other = dataclasses.replace(third, name="pci_0000_ff_00_0")
    for parents in [(first, second), (first, second, other)]:
        assert with_devices(reading, parents, (), (), 2) is None
    assert with_devices(reading, reading.parents, (), (), 2) is not None


def test_mdevs_that_do_not_match_the_last_reading_are_never_followed():
    """An mdev gone that the last reading does not hold (or holds as
    another), or one made whose uuid it holds: None, never the wrong
    mdev dropped or a uuid twice."""
    reading = SimulatedHost(dense(2, 8, 4)).discover()
    held = reading.mdevs[0]
    unknown = dataclasses.replace(held, uuid=str(uuid.uuid4()))
    moved = dataclasses.replace(held, type_id="nvidia-999")
    parents = reading.parents
    for gone in (unknown, moved):
        assert with_devices(reading, parents, (), (gone,), 2) is None
    assert with_devices(reading, parents, (moved,), (), 2) is None
    assert with_devices(reading, parents, (unknown,), (), 2) is not None


@pytest.mark.parametrize("seed", range(3))
def test_parents_alone_are_a_reading_of_their_own(seed):
    """What the plan of the parents touched is handed: as a reading of
    those parents alone, built whole, its indexes included."""
    rng = random.Random(seed)
    now = SimulatedHost(dense(6, 60, 30)).discover()
    names = {p.name for p in now.parents if rng.random() < 0.5}
    alone = parents_alone(now, names)
    whole = HostInventory(
        parents=tuple(p for p in now.parents if p.name in names),
        mdevs=tuple(m for m in now.mdevs if m.parent in names),
        driver_versions=now.driver_versions,
        modules=now.modules,
        nvml=now.nvml,
    )
    assert alone == whole
    for name in DEVICE_INDEXES & vars(alone).keys():
        assert vars(alone)[name] == getattr(whole, name), name


def test_an_mdev_made_alone_reads_no_module_and_other_changes_do(
    tmp_path, monkeypatch
):
    """An mdev made or gone is no driver event: the kernel's modules and
    the drivers' versions are those last read. With any other change
    (here a guest gone at the same time) they are read again, and a
    module unloaded meanwhile is seen (its parents then take nothing)."""
    from tests.unit.test_libvirt_changes import _host

    host, conn = _host(tmp_path)
    before = host.discover(rescan_guests=True)
    reads = []
    modules = host.sysfs.modules

    def counted():
        reads.append("modules")
        return modules()

    monkeypatch.setattr(host.sysfs, "modules", counted)
    parent = next(p for p in before.parents if p.types[0].available)
    theirs = _made_by_them(conn, parent)
    made = host.discover()
    assert made.device_changes == (before.generation, {parent.name})
    assert not reads
    assert made.modules == before.modules and "nvidia_vgpu_vfio" in (
        made.modules
    )
    (tmp_path / "sys/module/nvidia_vgpu_vfio").rename(tmp_path / "unloaded")
    conn.gone.add(theirs.name())
    host.discover()  # an mdev alone again: as last read
    assert not reads
    _made_by_them(conn, parent)
    guest = conn.listAllDomains()[0]
    guest_xml.delete(guest)
    host.forget_guest(guest.UUIDString())
    now = host.discover(rescan_guests=True)
    assert len(reads) == 1
    assert "nvidia_vgpu_vfio" not in now.modules
    afresh = LibvirtHost(host.uri, host.sysfs.root, connection=conn)
    assert now == afresh.discover(rescan_guests=True)


def test_a_parent_bound_to_another_driver_reads_the_versions_again(
    tmp_path, monkeypatch
):
    """The drivers changed with the parents' XML alone (every pGPU bound
    to vfio-pci, say, with no mdev made or gone): the drivers' versions
    are read again, not kept as for an mdev."""
    from tests.unit.test_libvirt_changes import _host
    from vgpu_driver.sim.mdev_libvirt import ModelledParent

    host, _conn = _host(tmp_path)
    before = host.discover(rescan_guests=True)
    assert dict(before.driver_versions).get("nvidia")
    xml = ModelledParent.XMLDesc

    def rebound(self, flags=0):
        # (the test driver names no driver: sysfs does, read once)
        return xml(self, flags).replace(
            "</parent>", "</parent><driver><name>vfio-pci</name></driver>"
        )

    monkeypatch.setattr(ModelledParent, "XMLDesc", rebound)
    now = host.discover()
    assert {p.driver for p in now.parents} == {"vfio-pci"}
    assert "nvidia" not in dict(now.driver_versions)


def test_anything_but_node_devices_changed_is_read_whole():
    """What a reader read, the guests the same: made from the last
    reading while its node devices alone changed; NVML's word, the plain
    SR-IOV GPUs, the modules or the drivers' versions changed, None (the
    reading is built whole)."""
    from vgpu_driver.model.device_changes import node_devices_changed

    last = SimulatedHost(load("rtx6000-nvml")).discover()
    last = dataclasses.replace(last, generation=1)
    assert last.nvml is not None

    def read(**changed):
        parts = {
            "nvml": last.nvml,
            "plain": last.plain_gpus,
            "versions": last.driver_versions,
            "modules": last.modules,
            **changed,
        }
        return node_devices_changed(
            last,
            (
                last.parents,
                ((), ()),
                last.pfs,
                parts["nvml"],
                parts["plain"],
                parts["versions"],
                parts["modules"],
            ),
            2,
        )

    assert read() is not None
    for changed in [
        {"nvml": None},
        {"plain": SimulatedHost(load("amd-mxgpu")).discover().plain_gpus},
        {"versions": (("nvidia", "0.0"),)},
        {"modules": frozenset({"nvidia"})},
    ]:
        assert read(**changed) is None, changed


def test_a_parent_gone_with_its_mdevs_is_no_longer_offered(node):
    """A pGPU falls off the bus (its node device and its mdevs gone, the
    rest of the host as it was): the free mdev the library made on it is
    no longer handed out, and its provider, which a guest's allocation
    still holds, takes nothing more and says why."""
    n = node()
    n.driver.init_host([])
    parent = "pci_0000_84_00_0"
    spare = n.driver.create_free_mdev(parent)
    assert spare in n.driver.free_mdevs()
    n.host.unplug(parent)
    plan = n.update()[parent]
    assert plan.reserved == plan.total
    assert "no longer on the host" in (plan.reason or "")
    # it keeps the type its guest's mdev has (and that type's trait)
    assert plan.type_id == "nvidia-35"
    assert naming.type_trait("nvidia-35") in plan.traits
    assert spare not in n.driver.free_mdevs()
    assert not n.driver.free_mdevs(parent)


def test_a_full_reading_forgets_gone_mdevs_no_guest_uses(node):
    """The mdevs seen keep where a guest's mdev was while it is gone (a
    restart recreates it from that), and forget a gone free one."""
    from tests.helpers import M10_FREE_ON_86

    n = node()
    [used] = [g.mdevs[0] for g in n.host.discover().guests if g.mdevs][:1]
    assert {used, M10_FREE_ON_86} <= set(n.driver.seen_mdevs())
    inventory = n.host.discover()
    [free] = [m for m in inventory.mdevs if m.uuid == M10_FREE_ON_86]
    n.host.remove_mdev(free)
    [where] = [m.parent for m in inventory.mdevs if m.uuid == used]
    n.host.unplug(where)
    n.driver.discover(rescan_guests=True)
    seen = n.driver.seen_mdevs()
    assert used in seen and M10_FREE_ON_86 not in seen
