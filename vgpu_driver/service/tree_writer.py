"""Writing planned providers into the caller's provider tree.

:class:`TreeWriter` writes one :class:`~vgpu_driver.model.inventory.
ProviderPlan` at a time: the child provider (made if new), its inventory,
and its traits: the plan's, and any other trait already there that this
library does not manage (an operator's). It owns why each provider last
took no new guests (logged once per change), and records the traits it
sets in :class:`~vgpu_driver.records.traits.OwnedTraits`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from oslo_log import log as logging

from vgpu_driver.model import naming, trait
from vgpu_driver.model.config import (
    DeviceConfig,
    config_trait,
    config_traits,
)
from vgpu_driver.model.device import HostInventory
from vgpu_driver.model.inventory import ProviderPlan
from vgpu_driver.records.traits import OwnedTraits

LOG = logging.getLogger(__name__)


class Placed(NamedTuple):
    """A provider as a pass left it."""

    uuid: str
    inventory: dict[str, dict[str, int | float]]
    traits: frozenset[str]  # the plan's and the operator's


class ConfiguredTraits(NamedTuple):
    owner: str  # [devices] owner_trait
    names: frozenset[str]  # it, the enabled types' and their extra traits
    config: str  # the trait saying which configuration wrote a provider


def configured_traits(owner: str, config: DeviceConfig) -> ConfiguredTraits:
    """The traits the configuration names (read once per pass, not once
    per provider)."""
    names = {owner}
    for type_cfg in config.types:
        names.add(naming.type_trait(type_cfg.type_id))
        names.update(type_cfg.traits)
    return ConfiguredTraits(
        owner, frozenset(names), config_trait(config, owner)
    )


class TreeWriter:
    def __init__(self, traits: OwnedTraits) -> None:
        self.traits = traits
        # provider name -> why it takes no new guests (None: it does)
        self._reasons: dict[str, str | None] = {}
        # provider name -> why it offers less than the host lists
        self._limits: dict[str, str | None] = {}
        # the traits of the configuration in force, with what they were
        # computed from (the configuration object: the same until reloaded)
        self._configured: tuple[str, DeviceConfig, ConfiguredTraits] | None
        self._configured = None

    def configured(self, owner: str, config: DeviceConfig) -> ConfiguredTraits:
        """:func:`configured_traits`, computed again only when the
        configuration is reloaded or the owner trait changes."""
        last = self._configured
        if last is None or last[0] != owner or last[1] is not config:
            last = (owner, config, configured_traits(owner, config))
            self._configured = last
        return last[2]

    def write_all(
        self,
        tree: Any,
        root_uuid: str,
        plans: list[ProviderPlan],
        inventory: HostInventory,
        configured: ConfiguredTraits,
        mine: Mapping[str, Any],
    ) -> list[Placed]:
        """Write every plan (see :meth:`write`); ``mine``: the device
        providers under the node as read at the start of the pass, by
        name. Plans are in name order: a card's provider comes before
        its other types', which are its children."""
        uuids: dict[str, str] = {}
        placed = []
        for plan in plans:
            placed.append(
                self.write(
                    tree,
                    root_uuid,
                    plan,
                    inventory,
                    configured,
                    mine.get(plan.name),
                    uuids.get(plan.parent or ""),
                )
            )
            uuids[plan.name] = placed[-1].uuid
        return placed

    def remove_gone(
        self, tree: Any, mine: Mapping[str, Any], plans: list[ProviderPlan]
    ) -> None:
        """Remove the providers of ``mine`` no plan is for, children
        first (a card's other types' providers)."""
        gone = set(mine) - {p.name for p in plans}
        for name in sorted(gone, reverse=True):
            LOG.info(
                "Removing provider %s: its device has nothing to offer "
                "and nothing in use",
                name,
            )
            tree.remove(name)
            self.forget(name)

    def forget(self, name: str) -> None:
        """Provider ``name`` was removed from the tree."""
        self.traits.forget(name)
        self._reasons.pop(name, None)
        self._limits.pop(name, None)

    def _managed(
        self,
        plan: ProviderPlan,
        inventory: HostInventory,
        configured: ConfiguredTraits,
    ) -> set[str]:
        """Traits this library may add or remove; any other trait on the
        provider (an operator's) is left alone."""
        managed = set(configured.names)
        parents = inventory.vf_parents(plan.device)[:1] or (
            inventory.parent(plan.device),
        )
        for parent in parents:
            if parent is not None:
                managed.update(naming.type_trait(t) for t in parent.type_ids)
        # (a plan's own type is planned with its trait, or is configured:
        # its trait is among those above)
        managed.update(self.traits.managed(plan.name))
        return managed

    def write(
        self,
        tree: Any,
        root_uuid: str,
        plan: ProviderPlan,
        inventory: HostInventory,
        configured: ConfiguredTraits,
        data: Any | None,
        parent_uuid: str | None = None,
    ) -> Placed:
        """Write one plan; returns what its provider holds now. ``data``:
        its provider as read at the start of the pass, if it is one of
        ours (found by name otherwise). ``parent_uuid``: its parent's
        provider, written before it (the compute node's: ``root_uuid``)."""
        current: set[str]
        if data is None and tree.exists(plan.name):
            data = tree.data(plan.name)
        if data is not None:
            uuid, current = str(data.uuid), set(data.traits)
        else:
            uuid = naming.child_provider_uuid(root_uuid, plan.name)
            current = set()
            tree.new_child(plan.name, parent_uuid or root_uuid, uuid=uuid)
            LOG.info(
                "New provider %s: %s x%d of type %s",
                plan.name,
                plan.resource_class,
                plan.total,
                plan.type_id,
            )
        managed = self._managed(plan, inventory, configured)
        # configuration traits (ours of before, or another writer's):
        # each pass sets its own alone
        managed |= config_traits(current)
        kept = {
            t for t in current - managed if not trait.is_capability_trait(t)
        }
        planned = plan.traits | {configured.config}
        placed = Placed(uuid, plan.inventory(), frozenset(kept | planned))
        # by uuid: Nova's tree finds a name by walking the tree. (The tree
        # gets its own inventory: what a pass remembers is not shared.)
        tree.update_inventory(uuid, plan.inventory())
        tree.update_traits(uuid, placed.traits)
        self.traits.plan(plan.name, frozenset(planned))
        self._tell_reason(plan)
        self._tell_limit(plan)
        return placed

    def _tell_reason(self, plan: ProviderPlan) -> None:
        if self._reasons.get(plan.name) == plan.reason:
            return
        if plan.reason:
            LOG.warning(
                "Provider %s takes no new guests (reserved %d of %d): %s",
                plan.name,
                plan.reserved,
                plan.total,
                plan.reason,
            )
        elif plan.name in self._reasons:
            LOG.info("Provider %s takes guests again", plan.name)
        self._reasons[plan.name] = plan.reason

    def _tell_limit(self, plan: ProviderPlan) -> None:
        """Once per change: a total kept below what the host lists (what
        the card really holds is not known) is a warning with the fix."""
        if self._limits.get(plan.name) == plan.limit:
            return
        if plan.limit:
            LOG.warning(
                "Provider %s offers %d %s (what it can prove): %s",
                plan.name,
                plan.total,
                plan.type_id,
                plan.limit,
            )
        self._limits[plan.name] = plan.limit
