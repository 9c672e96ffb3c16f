"""A pass that plans and writes the whole host (the refresher's long
way, when nothing shorter can be proved right; see :mod:`.refresh`).

:class:`WholeHost` holds no state of its own: it reads through the
parts it is given and returns what the pass did (:class:`WholePass`),
which the refresher keeps for the next pass. In order:

1. the reading the plan needs: the guests read when they can change
   the plan (or another manager made a free device), and a parent
   switching type rid of its own free mdevs of the old type first;
2. an older layout (``VGPU`` on the root, a provider per VF) refused
   without the allocations (:class:`~vgpu_driver.exception.
   ReshapeNeeded`), else taken down and its consumers' moves planned;
3. every provider planned (pure, :func:`~vgpu_driver.model.inventory.
   plan_providers`), written, the allocations moved, the providers no
   plan is for removed, and the traits owned saved.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import ReshapeNeeded
from vgpu_driver.model import reshape, usage
from vgpu_driver.model.device import HostInventory
from vgpu_driver.model.foreign import foreign_free, outside_nova
from vgpu_driver.model.inventory import ProviderPlan, plan_providers
from vgpu_driver.model.usage import Allocations
from vgpu_driver.records.seen import SeenMdevs
from vgpu_driver.records.traits import OwnedTraits
from vgpu_driver.service.binder import DeviceBinder
from vgpu_driver.service.fingerprint import Claimed
from vgpu_driver.service.named import NamedInstances
from vgpu_driver.service.other_writers import OtherWriters
from vgpu_driver.service.reading import HostReading
from vgpu_driver.service.settings import Settings
from vgpu_driver.service.tree_writer import Placed, TreeWriter

LOG = logging.getLogger(__name__)
# consumer -> the devices its allocations move to
Moves = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class WholePass:
    """What a whole pass planned and wrote, and what it read."""

    inventory: HostInventory  # the reading planned
    claims: Claimed  # the claims counted
    owned: frozenset[str] | None  # the devices the library made
    failing: frozenset[str]  # the parents taking no new devices
    plans: list[ProviderPlan]
    placed: list[Placed]  # each plan's provider, as written


@dataclasses.dataclass(frozen=True)
class _Read:
    inventory: HostInventory
    claims: Claimed
    owned: frozenset[str] | None
    foreign: dict[str, dict[str, int]]


class WholeHost:
    def __init__(
        self,
        settings: Settings,
        reading: HostReading,
        binder: DeviceBinder,
        seen: SeenMdevs,
        traits: OwnedTraits,
        writer: TreeWriter,
        other_writers: OtherWriters,
        named: NamedInstances,
    ) -> None:
        self.settings = settings
        self.reading = reading
        self.binder = binder
        self.seen = seen
        self.traits = traits
        self.writer = writer
        self.other_writers = other_writers
        self.named = named

    def plan(
        self,
        tree: Any,
        nodename: str,
        inventory: HostInventory,
        claims: Claimed,
        allocations: Allocations | None,
    ) -> WholePass:
        """Plan and write every provider of ``nodename`` from
        ``inventory`` (read without guests if they were never needed),
        the caller holding the refresher's lock."""
        config = self.settings.config
        classes = self.settings.managed_classes()
        root = tree.data(nodename)
        traits = self.writer.configured(
            self.settings.conf.devices.owner_trait, config
        )
        under = reshape.providers_under(tree, root.uuid)
        mine = reshape.device_providers(under, root.uuid, nodename, classes)
        read = self._read(nodename, inventory, claims, mine, allocations)
        inventory = read.inventory
        self.other_writers.check(mine, nodename, traits.config)
        moves, mine = self._lay_out(
            tree, root, nodename, inventory, under, mine, allocations
        )
        failing = frozenset(self.binder.unschedulable)
        plans = plan_providers(
            nodename,
            config,
            inventory,
            held=usage.held_devices(
                inventory, self.seen.snapshot(), read.claims
            ),
            allocated=reshape.by_provider_name(tree, allocations),
            existing={n: list(d.inventory) for n, d in mine.items()},
            existing_traits={n: d.traits for n, d in mine.items()},
            unschedulable=failing,
            owner_trait=traits.owner,
            foreign=read.foreign,
            outside=outside_nova(inventory, self.named),
        )
        saved = self.traits.saved()
        placed = self.writer.write_all(
            tree, root.uuid, plans, inventory, traits, mine
        )
        if moves:
            assert allocations is not None
            reshape.move_allocations(
                tree, nodename, moves, allocations, classes
            )
            for consumer, devices in sorted(moves.items()):
                LOG.info(
                    "Reshape moves the devices of consumer %s to %s",
                    consumer,
                    ", ".join(sorted(devices)),
                )
        self.writer.remove_gone(tree, mine, plans)
        self.traits.save_or_retry(saved)
        self.other_writers.wrote(plans, traits.config)
        return WholePass(
            inventory,
            read.claims,
            read.owned,
            failing,
            plans,
            placed,
        )

    def _read(
        self,
        nodename: str,
        inventory: HostInventory,
        claims: Claimed,
        mine: dict[str, Any],
        allocations: Allocations | None,
    ) -> _Read:
        """The reading the plan needs: the guests read if another manager
        made a free device or they can change the plan, and a parent
        switching type rid of its own free mdevs of the old type (its
        provider planned with the room they gave back, not dropped for a
        pass when they held every room)."""
        config = self.settings.config
        owned = self.binder.owned()
        foreign = _foreign(inventory, owned, claims)
        if not inventory.guests_known and (
            foreign
            or usage.guests_matter(
                config,
                self.seen.snapshot(),
                mine,
                nodename,
                inventory,
                allocations,
            )
        ):
            inventory = self.reading.discover()
            # the guests read may have ended spawn claims
            claims = tuple(self.binder.claimed_devices())
            foreign = _foreign(inventory, owned, claims)
        if inventory.guests_known and self.binder.remove_stale_free_mdevs(
            usage.configured_types(config, inventory)
        ):
            inventory = self.reading.discover()
            owned = self.binder.owned()
            foreign = _foreign(inventory, owned, claims)
        return _Read(inventory, claims, owned, foreign)

    def _lay_out(
        self,
        tree: Any,
        root: Any,
        nodename: str,
        inventory: HostInventory,
        under: list[Any],
        mine: dict[str, Any],
        allocations: Allocations | None,
    ) -> tuple[Moves, dict[str, Any]]:
        """An older layout of the node (its devices' units on the root, or
        a provider per VF) taken down, and the moves of its consumers'
        allocations (none without one); with the device providers left.
        Without the allocations: :class:`ReshapeNeeded` (Nova's
        handshake calls again with them)."""
        classes = self.settings.managed_classes()
        old = reshape.old_layout(under, root, nodename, inventory, classes)
        if not old:
            return {}, mine
        if allocations is None:
            raise ReshapeNeeded(nodename=nodename)
        moves = reshape.plan_moves(
            tree,
            old,
            allocations,
            inventory,
            classes,
            self.seen.snapshot(),
            self.settings.config,
        )
        for vf_provider in old[1:]:
            tree.remove(vf_provider)
        if old[0]:
            kept = {
                rc: rec
                for rc, rec in root.inventory.items()
                if rc not in classes
            }
            tree.update_inventory(nodename, kept)
        under = reshape.providers_under(tree, root.uuid)
        mine = reshape.device_providers(under, root.uuid, nodename, classes)
        return moves, mine


def _foreign(
    inventory: HostInventory,
    owned: frozenset[str] | None,
    claims: Claimed,
) -> dict[str, dict[str, int]]:
    """Free devices another manager made, per device and type (none
    known before the library's first start took stock)."""
    if owned is None:
        return {}
    return foreign_free(inventory, owned, {d for d, _, _ in claims})
