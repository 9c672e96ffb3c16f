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
    assert stress.errors == []


def bound(stress: Any, instance: str, devices: list[str]) -> None:
    """The instance is live with ``devices`` (under ``stress.lock``): an
    error of the stress if another live instance has one of them."""
    for other, theirs in stress.live.items():
        if set(theirs) & set(devices):
            stress.errors.append(f"{devices} bound to {other} and {instance}")
    stress.live[instance] = devices
