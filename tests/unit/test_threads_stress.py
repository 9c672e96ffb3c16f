"""Spawns and deletes in several threads beside the periodic refresh, as
nova-compute runs them: no thread waits on another for ever, no mdev is
handed to two live instances, and once all is quiet the view has each
guest use what its domain names (read from libvirt itself) and a plan of
the whole host is the plan the refreshes kept; no refresh reports a
total above what the pGPU holds. Each failure it found
(a lock-order hang, an older reading undoing a delete, a claim raising a
total past the card, two readings taken in at once) has a deterministic
test of its own; this one is the net for the next."""

from __future__ import annotations

import functools
import random
import threading

import pytest

from tests.domains import hand_made_domain_xml
from tests.random_host import RandomHost, in_use, tree_figures, view_in_use
from tests.stress import Threads, auditing, run, spawned
from vgpu_driver.sim import guest_xml
from vgpu_driver.sim.mdev_devices import (
    ExistingMdev,
    ModelledMdev,
    ModelledParent,
)
from vgpu_driver.sim.mdev_libvirt import MdevConnection

WORKERS, ROUNDS = 3, 120


class Stress(Threads):
    rounds = ROUNDS

    def __init__(self, host: RandomHost, seed: int) -> None:
        super().__init__(seed)
        self.host = host
        self.driver, self.tree = host.driver, host.service.tree
        self.providers = {
            p.name: self.tree.data(p.name).uuid for p in self.driver.last_plans
        }
        # what each pGPU holds of its one type: its mdevs and its room
        reading = self.driver.discover()
        self.holds = {
            parent.name: len(reading.mdevs_of(parent.name))
            + sum(t.available for t in parent.types)
            for parent in reading.parents
        }

    def refresher(self) -> None:
        """The periodic refresh; no total it reports is above what the
        pGPU holds."""
        with self.failing():
            while not self.stop.is_set():
                self.driver.update_provider_tree(self.tree, "bench")
                for plan in self.driver.last_plans:
                    if plan.total > self.holds[plan.device]:
                        self.errors.append(f"{plan} above the card")

    def spawn(self, rng: random.Random, mine: list[str]) -> None:
        # (asked past what Placement would allocate, at times)
        found = spawned(self, rng)
        if found is None:
            return
        instance, given = found
        devices = [d.id for d in given]
        mine.append(instance)
        xml = hand_made_domain_xml(instance, instance[:8], devices, nova=True)
        self.host.conn.defineXML(xml)
        self.driver.domain_event(instance, True)
        self.driver.guest_defined(instance)

    def delete(self, instance: str) -> None:
        with self.lock:  # its devices may go to another from here on
            del self.live[instance]
        guest_xml.delete(self.host.conn.lookupByUUIDString(instance))
        self.driver.domain_event(instance, False)
        self.driver.guest_undefined(instance)
        self.driver.release_mdevs(instance)
        with self.lock:
            self.allocated.discard(instance)


def _thread_safe_model(monkeypatch) -> None:
    """libvirt answers calls from many threads; the model of its mdev
    calls (:mod:`vgpu_driver.sim.mdev_libvirt`) does so under one lock."""
    lock = threading.RLock()

    def locked(call):
        @functools.wraps(call)
        def under_lock(*args, **kwargs):
            with lock:
                return call(*args, **kwargs)

        return under_lock

    for cls in (MdevConnection, ModelledMdev, ExistingMdev, ModelledParent):
        for name, member in list(vars(cls).items()):
            if callable(member) and (
                not name.startswith("__") or name == "__getattr__"
            ):
                monkeypatch.setattr(cls, name, locked(member))


def _restoring(stress: Stress) -> None:
    """``vgpu-driver restore`` run again and again beside the service
    (another process on the same records and host)."""
    host = stress.host
    with stress.failing():
        while not stress.stop.is_set():
            tool = host.service._new(None, host.conn)[0]
            reading = tool.discover(rescan_guests=True)
            done = tool.binder.recover(reading, tool.seen_mdevs())
            tool.binder.ledger.carrier.let_go()
            if done["failed"]:
                stress.errors.append(f"restore failed: {done}")


def _scraping(stress: Stress) -> None:
    """A metrics scrape (``vgpu-driver metrics`` in the service's
    process) run again and again beside it all: readings of the host
    taken in beside the refresh's."""
    driver = stress.driver
    with stress.failing():
        while not stress.stop.is_set():
            driver.held_devices(driver.discover(guests=True))


def _syncing(stress: Stress) -> None:
    """``vgpu-driver sync --periodic`` beside it all (another process
    reporting the same host from the same records, started again every
    tenth pass): no total it reports is above what the pGPU holds."""
    host = stress.host
    with stress.failing():
        tool, tree = host.service._new(None, host.conn)
        passes = 0
        while not stress.stop.is_set():
            if passes and passes % 10 == 0:  # (the process started again)
                tool.binder.ledger.carrier.let_go()
                tool, tree = host.service._new(None, host.conn)
            tool.update_provider_tree(tree, "bench")
            passes += 1
            for plan in tool.last_plans:
                if plan.total > stress.holds[plan.device]:
                    stress.errors.append(
                        f"sync: {plan.name} total {plan.total} above the"
                        f" card ({stress.holds[plan.device]})"
                    )
        tool.binder.ledger.carrier.let_go()


def _auditing(stress: Stress, once: bool = False) -> None:
    """``vgpu-driver audit --fix`` beside the service (see
    :func:`tests.stress.auditing`)."""
    host = stress.host
    auditing(stress, lambda: host.service._new(None, host.conn)[0], once)


@pytest.mark.parametrize(
    ("seed", "making", "beside", "described"),
    [(s, False, None, True) for s in range(6)]
    + [(s, True, None, True) for s in range(4)]
    + [(s, False, _restoring, True) for s in range(6)]
    + [
        (s, making, _auditing, True)
        for s in range(3)
        for making in (False, True)
    ]
    + [(s, False, _scraping, True) for s in range(4)]
    + [
        (s, making, _syncing, described)
        for s in range(2)
        for making in (False, True)
        for described in (True, False)
    ],
)
def test_spawns_and_deletes_in_threads_beside_the_refresh(
    tmp_path, monkeypatch, seed, making, beside, described
):
    """``making``: no free mdev; each bind makes its mdev, each release
    removes it. ``beside``: a tool run again and again beside it all
    (``restore``; ``audit --fix``, with one spawn in ten dying after its
    bind: their claims must all be dropped, none of a live one; a
    metrics scrape; ``sync --periodic``). ``described`` False: nothing
    says how many its type a pGPU holds (no ``max_instance`` to cap a
    total at), as on Intel GVT-g."""
    _thread_safe_model(monkeypatch)
    host = RandomHost(
        random.Random(seed), tmp_path, making, described=described
    )
    stress = Stress(host, seed)
    tools = []
    if beside is not None:
        if beside is _auditing:
            stress.dying = 0.1
        tools.append(functools.partial(beside, stress))
    run(stress, [*tools, stress.refresher], WORKERS)
    driver, tree = stress.driver, stress.tree
    driver.update_provider_tree(tree, "bench")
    assert view_in_use(driver) == in_use(host)
    plans, providers = list(driver.last_plans), tree_figures(tree)
    driver._refresher._fingerprint = None  # plan the whole host
    driver.update_provider_tree(tree, "bench")
    assert driver.last_plans == plans
    assert tree_figures(tree) == providers
    if beside is _auditing:  # the claims of spawns that died, dropped
        _auditing(stress, once=True)
        driver.update_provider_tree(tree, "bench")
        assert driver.binder.claims() == {}
