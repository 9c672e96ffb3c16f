"""A refresh: the host read, the providers planned and written.

:class:`Refresher` owns what one pass hands the next: the compute nodes'
own providers seen (units allocated there are pre-reshape allocations),
the last reading of the host, the plans last written, and the
:class:`RefreshFingerprint` of what the last pass depended on and left
in the tree. A steady pass is: discover (P calls; the reading taken in
by :class:`~vgpu_driver.service.reading.HostReading`) -> the claims read
once (one lock, no host I/O) -> nothing changed and the tree still holds
what was written? return -> the host said which parents changed, and
they alone can have? plan and write those (:mod:`.touched`) -> else the
whole host planned and written (:mod:`.whole_host`), and what that pass
read and wrote kept for the next.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable
from typing import Any

from vgpu_driver.host.base import Host
from vgpu_driver.model import usage
from vgpu_driver.model.binding import Target
from vgpu_driver.model.device import HostInventory
from vgpu_driver.model.device_changes import parents_alone
from vgpu_driver.model.inventory import ProviderPlan
from vgpu_driver.model.usage import Allocations
from vgpu_driver.records.seen import SeenMdevs
from vgpu_driver.records.traits import OwnedTraits
from vgpu_driver.records.writers import Writers
from vgpu_driver.service.binder import DeviceBinder
from vgpu_driver.service.fingerprint import (
    Claimed,
    RefreshFingerprint,
    same_but_guests,
    tree_holds,
)
from vgpu_driver.service.named import NamedInstances
from vgpu_driver.service.other_writers import OtherWriters
from vgpu_driver.service.reading import HostReading
from vgpu_driver.service.settings import Settings
from vgpu_driver.service.touched import (
    held_on,
    parents_to_plan,
    replan,
    write_changed,
)
from vgpu_driver.service.tree_writer import (
    Placed,
    TreeWriter,
)
from vgpu_driver.service.whole_host import WholeHost


class Refresher:
    def __init__(
        self,
        settings: Settings,
        host: Host,
        binder: DeviceBinder,
        seen: SeenMdevs,
        traits: OwnedTraits,
        writers: Writers,
    ) -> None:
        self.settings = settings
        self.writers = writers
        self.other_writers = OtherWriters(settings, writers)
        self.host = host
        self.binder = binder
        self.seen = seen
        self.traits = traits
        self.writer = TreeWriter(traits)
        self.lock = threading.RLock()
        self.roots: set[str] = set()
        self.last_plans: list[ProviderPlan] = []
        self.targets: dict[str, Target] = {}
        self._fingerprint: RefreshFingerprint | None = None
        self._uuids: dict[str, str] = {}  # provider name -> uuid, as written
        self.named = NamedInstances()
        self.reading = HostReading(
            settings, host, binder, seen, self.lock, lambda: self.targets
        )
        self.whole_host = WholeHost(
            settings,
            self.reading,
            binder,
            seen,
            traits,
            self.writer,
            self.other_writers,
            self.named,
        )
        # read the host and take the reading in
        self.discover = self.reading.discover

    def name_instances(self, uuids: Iterable[str]) -> None:
        """The caller's instances (see :mod:`.named`)."""
        self.named.name(uuids)

    def forget_instance(self, uuid: str) -> None:
        """The caller released the instance's devices (see :mod:`.named`)."""
        self.named.forget(uuid)

    def update_provider_tree(
        self, tree: Any, nodename: str, allocations: Allocations | None
    ) -> list[ProviderPlan]:
        # the pass reads the records once (a look, not a lock: whatever it
        # changes is compared and acted on under the lock)
        with self.binder.ledger.one_look():
            return self._update(tree, nodename, allocations)

    def _update(
        self, tree: Any, nodename: str, allocations: Allocations | None
    ) -> list[ProviderPlan]:
        inventory = self.discover(guests=False)
        conf = self.settings.conf
        self.binder.retry_failed(conf.devices.failed_device_retry_interval)
        with self.lock:
            config = self.settings.config
            # the claims are read once a pass (on disk, under the records'
            # lock): what the plan counts is what the pass remembers
            claims = tuple(self.binder.claimed_devices())
            mark = self.named.mark()
            last = self._fingerprint
            if last is not None and self.named.crossed(
                last.inventory, inventory
            ):
                self._fingerprint = None  # a guest named or forgotten
            if allocations is None and self._unchanged(
                tree, nodename, inventory, claims
            ):
                self.named.judged(mark)
                return self.last_plans
            if allocations is None:
                touched = self._plan_touched(tree, nodename, inventory, claims)
                if touched is not None:
                    self.named.judged(mark)
                    return touched
            # units allocated on the node's own provider are pre-reshape
            # allocations (known even when the pass stops for a reshape)
            self.roots.add(tree.data(nodename).uuid)
            done = self.whole_host.plan(
                tree, nodename, inventory, claims, allocations
            )
            plans, placed = done.plans, done.placed
            self.targets = {
                p.uuid: Target(plan.device, plan.type_id, plan.resource_class)
                for p, plan in zip(placed, plans, strict=True)
            }
            self.binder.set_targets(self.targets)
            self._uuids = {
                plan.name: p.uuid
                for p, plan in zip(placed, plans, strict=True)
            }
            self.last_plans = plans
            self._fingerprint = RefreshFingerprint(
                nodename,
                done.inventory,
                config,
                done.claims,
                {p.uuid: (p.inventory, p.traits) for p in placed},
                frozenset(tree.get_provider_uuids(nodename)),
                done.failing,
                frozenset(p.name for p in plans),
                done.owned,
            )
            self.named.judged(mark)
            return plans

    def _plan_touched(
        self,
        tree: Any,
        nodename: str,
        inventory: HostInventory,
        claims: Claimed,
    ) -> list[ProviderPlan] | None:
        """The parents the host says changed, planned and written alone
        (see :mod:`.touched`); None: plan the whole host."""
        last = self._fingerprint
        config = self.settings.config
        if last is None or self.traits.on_disk is not None:
            return None
        owned = self.binder.owned()
        seen = self.seen.get
        touched = parents_to_plan(
            last,
            nodename,
            inventory,
            config,
            claims,
            owned,
            seen,
            frozenset(self.binder.unschedulable),
        )
        if touched is None or not tree_holds(tree, nodename, last):
            return None
        assert owned is not None
        conf = self.settings.conf
        traits = self.writer.configured(conf.devices.owner_trait, config)
        alone = parents_alone(inventory, touched)
        done = replan(
            nodename,
            config,
            inventory,
            alone,
            last_plans=self.last_plans,
            uuids=self._uuids,
            tree=tree,
            held=held_on(inventory, seen, claims, touched),
            owned=owned,
            claims=claims,
            failing=last.failing,
            owner_trait=traits.owner,
            named=self.named,
        )
        if done is None:
            return None
        plans, changed = done
        saved = self.traits.saved()
        written = write_changed(
            self.writer, tree, nodename, changed, inventory, traits
        )
        self.binder.remove_stale_free_mdevs(
            usage.configured_types(config, alone)
        )
        self.traits.save_or_retry(saved)
        self.last_plans = plans
        self._fingerprint = dataclasses.replace(
            last,
            inventory=inventory,
            claims=claims,
            written={**last.written, **written},
            owned=owned,
            guests_free=None,
        )
        return plans

    def _unchanged(
        self,
        tree: Any,
        nodename: str,
        inventory: HostInventory,
        claims: Claimed,
    ) -> bool:
        """Nothing the pass depends on changed since the last one but
        what guests use (when that cannot change the plan), and the tree
        still holds what it wrote: the pass would change nothing (its
        cost is then independent of the number of mdevs and guests).
        The fingerprint takes in the guests' change."""
        last = self._fingerprint
        if last is None or self.traits.on_disk is not None:
            return False
        if frozenset(self.binder.unschedulable) != last.failing:
            return False  # a parent failed, or is offered again
        if (
            last.nodename != nodename
            or last.config is not self.settings.config
        ):
            return False
        # asked at every pass (a look the claims' read already took): a
        # device the records now say this library made, with nothing else
        # changed, is no longer another manager's to reserve
        owned = self.binder.owned()
        now = same_but_guests(
            last,
            inventory,
            claims,
            owned,
            self.seen.snapshot,
            (self.named.then(), self.named),
        )
        if now is None or not tree_holds(tree, nodename, last):
            return False
        self._fingerprint = now
        return True


__all__ = ["Placed", "RefreshFingerprint", "Refresher"]
