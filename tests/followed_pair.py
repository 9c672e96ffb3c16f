"""Two services on two like hosts, one told which parents (and cards)
changed and one reading the whole host, driven through the same random
steps: each must end where the other does (the reading, the binds, the
plans and the trees). The mdev and VF change tests share them."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import uuid
from collections import Counter

from benchmarks.common import dense
from tests.helpers import Node, load
from vgpu_driver.exception import DeviceCapacityExhausted, DeviceNoRoom
from vgpu_driver.model import binding
from vgpu_driver.model.device import (
    Guest,
)
from vgpu_driver.service import refresh
from vgpu_driver.sim.simulated import SimulatedHost


def mdev_changed(host, rng, made):
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


HOSTS = {
    "dense": lambda: dense(4, 40, 40),
    # an Ampere GPU's VFs as parents (kernel < 6.8): one provider for all
    "vf-parents": lambda: load("a2-vf-parents"),
}


def pair(make_conf, tmp_path, host="dense"):
    """Two services on two like hosts: one follows the parents (and
    cards) the host says changed, the other is never told (it reads the
    whole host). ``host``: a name in HOSTS, or what makes the host's
    description."""
    described = HOSTS[host] if isinstance(host, str) else host
    nodes = []
    for name in ("follows", "whole"):
        nodes.append(node_on(make_conf, tmp_path / name, described()))
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


def follows_as_whole(monkeypatch, nodes, seed, change, check=None):
    """60 random steps on two nodes alike (one told which devices
    changed, one not: see :func:`pair`): ``change(node, rng, mine)`` of
    the host by another manager, binds on a provider of the last plans
    (their guests defined at times: the claim ends), releases. What is
    bound where, the plans and the trees must be the same after each
    step (and ``check(follows, step)`` hold). Returns the replans
    counted."""
    follows, whole = nodes
    replanned, current = replans_counted_binds_named(monkeypatch)
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
                device = bind_one(node, instance, plans[step % len(plans)])
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
        assert tree_of(follows) == tree_of(whole), step
        if check is not None:
            check(follows, step)
    return replanned


def bind_one(node, instance, plan):
    """One unit bound on ``plan``'s provider (None: no room)."""
    provider = node.tree.data(plan.name).uuid
    wanted = {provider: {"resources": {plan.resource_class: 1}}}
    try:
        [device] = node.driver.allocate_mdevs(instance, wanted)
    except DeviceCapacityExhausted:
        return None
    return device


def replans_counted_binds_named(monkeypatch):
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


def node_on(make_conf, state, description):
    return Node(
        make_conf,
        state,
        config=description.config,
        host=SimulatedHost(description),
    )


def tree_of(node):
    found = {}
    for name in sorted(node.tree.get_provider_uuids("node1")):
        data = node.tree.data(name)
        found[data.name] = (data.inventory, data.traits)
    return found
