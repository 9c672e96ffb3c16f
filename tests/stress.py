"""What the threaded stresses share: their state, each worker thread's
spawns and deletes, the threads run."""

from __future__ import annotations

import contextlib
import random
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from tests.races import audit_read
from vgpu_driver.cmd.audit import fix
from vgpu_driver.exception import DeviceCapacityExhausted


class Threads:
    """A stress's shared state: live instances and their devices, the
    errors its threads met, the event that stops the threads beside the
    workers. A subclass gives ``driver``, ``providers`` (provider name ->
    uuid), ``spawn(rng, mine)`` and ``delete(instance)``."""

    rounds = 100

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.lock = threading.Lock()
        self.live: dict[str, list[str]] = {}  # instance -> its devices
        self.errors: list[str] = []
        self.stop = threading.Event()
        # the instances Placement has allocations of: from before their
        # bind to after their release (see audit_fix)
        self.allocated: set[str] = set()
        self.dying = 0.0  # how often a spawn dies after its bind

    @contextlib.contextmanager
    def failing(self) -> Iterator[None]:
        """A thread's error is the test's."""
        try:
            yield
        except Exception:
            self.errors.append(traceback.format_exc())

    def worker(self, k: int) -> None:
        spawn_and_delete(self, k, self.rounds)


def spawn_and_delete(stress: Any, k: int, rounds: int) -> None:
    """Worker ``k`` of ``stress``: ``rounds`` steps, each deleting one of
    its own live instances (nearly half the time) or spawning one
    (``stress.spawn(rng, mine)``, ``stress.delete(instance)``), its
    error the stress's (``stress.failing()``)."""
    rng = random.Random(stress.seed * 100 + k)
    mine: list[str] = []
    with stress.failing():
        for _round in range(rounds):
            if mine and rng.random() < 0.45:
                stress.delete(mine.pop(rng.randrange(len(mine))))
            else:
                stress.spawn(rng, mine)


def a_spawn(
    stress: Any, rng: random.Random
) -> tuple[str, dict[str, Any]] | None:
    """An instance and what Placement would allocate it: one unit on a
    provider of the last plans with room (None: none has)."""
    plans = [p for p in stress.driver.last_plans if p.total > p.reserved]
    if not plans:
        return None
    plan = rng.choice(plans)
    instance = str(uuid.UUID(int=rng.getrandbits(128)))
    resources = {plan.resource_class: 1}
    return instance, {stress.providers[plan.name]: {"resources": resources}}


def run(stress: Any, beside: list[Callable[[], None]], workers: int) -> None:
    """``beside`` (the refresh, a tool...) each in a thread of its own,
    then ``workers`` threads of ``stress.worker``; once the workers are
    done the others are stopped. Nothing may hang, no thread fail."""
    others = [threading.Thread(target=fn, daemon=True) for fn in beside]
    threads = [
        threading.Thread(target=stress.worker, args=(k,), daemon=True)
        for k in range(workers)
    ]
    for thread in [*others, *threads]:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    stress.stop.set()
    for thread in others:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in [*others, *threads]), "hung"
    assert stress.errors == [], "\n".join(map(str, stress.errors[:3]))


def spawned(stress: Any, rng: random.Random) -> tuple[str, list[Any]] | None:
    """A spawn (:func:`a_spawn`) bound as Placement allocated it
    (:func:`allocated_bind`): the instance and its devices. None: no
    provider had room, the host had none, or the spawn died."""
    chosen = a_spawn(stress, rng)
    if chosen is None:
        return None
    instance, wanted = chosen
    devices = allocated_bind(stress, rng, instance, wanted)
    return None if devices is None else (instance, devices)


def allocated_bind(
    stress: Any, rng: random.Random, instance: str, wanted: dict[str, Any]
) -> list[Any] | None:
    """The bind of a spawn Placement allocated ``wanted`` (the instance
    in ``stress.allocated`` from before it), its devices live for it.
    None: the host had no room (the allocation given back), or the
    spawn died after its bind (``stress.dying`` of them) and Nova
    deleted the instance, its allocation gone and nothing released."""
    with stress.lock:
        stress.allocated.add(instance)
    try:
        devices = stress.driver.allocate_mdevs(instance, wanted)
    except DeviceCapacityExhausted:
        with stress.lock:
            stress.allocated.discard(instance)
        return None
    with stress.lock:
        bound(stress, instance, [d.id for d in devices])
        if rng.random() < stress.dying:
            del stress.live[instance]
            stress.allocated.discard(instance)
            return None
    return list(devices)


def bound(stress: Any, instance: str, devices: list[str]) -> None:
    """The instance is live with ``devices`` (under ``stress.lock``): an
    error of the stress if another live instance has one of them."""
    for other, theirs in stress.live.items():
        if set(theirs) & set(devices):
            stress.errors.append(f"{devices} bound to {other} and {instance}")
    stress.live[instance] = devices


def auditing(
    stress: Any, new_tool: Callable[[], Any], once: bool = False
) -> None:
    """``vgpu-driver audit --fix`` run again and again beside the
    service (``once``: one run), each by a new tool (``new_tool()``),
    with Placement's allocations as the stress has them: it drops the
    claims of spawns that died."""
    with stress.failing():
        while once or not stress.stop.is_set():
            audit_fix(stress, new_tool())
            if once:
                return


def audit_fix(stress: Any, tool: Any) -> list[str]:
    """One ``vgpu-driver audit --fix`` by ``tool`` (another process on
    the service's records and host), in the tool's order: the host, the
    claims, then Placement's allocations (as ``stress.allocated`` has
    them). Returns what it fixed."""

    def allocations() -> dict[str, Any]:
        with stress.lock:
            return {i: {} for i in stress.allocated}

    inventory, claims, findings = audit_read(tool, allocations)
    done = fix(tool, inventory, findings, claims)
    tool.binder.ledger.carrier.let_go()
    return done
