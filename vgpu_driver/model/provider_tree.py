"""A provider tree: pure data, no I/O.

It has the interface of Nova's ``nova.compute.provider_tree.ProviderTree``
that a virt driver's ``update_provider_tree`` uses, so the driver facade
works the same on this tree and on a Nova-style tree handed in by the
caller. Reads return immutable :class:`ProviderData` snapshots; commands
say whether they changed anything. All methods are thread-safe.
"""

from __future__ import annotations

import threading
import uuid as uuidlib
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

Inventory = Mapping[str, Mapping[str, Any]]
# The fields of an inventory record, as Placement has them.
INVENTORY_FIELDS = (
    "total",
    "reserved",
    "min_unit",
    "max_unit",
    "step_size",
    "allocation_ratio",
)


class ProviderData(NamedTuple):
    uuid: str
    name: str
    generation: int | None
    parent_uuid: str | None
    inventory: dict[str, dict[str, Any]]
    traits: frozenset[str]
    aggregates: frozenset[str]


class _Provider:
    def __init__(
        self,
        name: str,
        uuid: str,
        parent_uuid: str | None,
        generation: int | None,
    ) -> None:
        self.name = name
        self.uuid = uuid
        self.parent_uuid = parent_uuid
        self.generation = generation
        self.inventory: dict[str, dict[str, Any]] = {}
        self.traits: set[str] = set()
        self.aggregates: set[str] = set()
        self.children: dict[str, _Provider] = {}

    def snapshot(self) -> ProviderData:
        return ProviderData(
            self.uuid,
            self.name,
            self.generation,
            self.parent_uuid,
            {rc: dict(rec) for rc, rec in self.inventory.items()},
            frozenset(self.traits),
            frozenset(self.aggregates),
        )


class ProviderTree:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._by_uuid: dict[str, _Provider] = {}
        self._by_name: dict[str, _Provider] = {}  # names are unique
        self._roots: dict[str, _Provider] = {}

    # -- lookups -------------------------------------------------------

    def _find(self, name_or_uuid: str) -> _Provider | None:
        found = self._by_uuid.get(name_or_uuid)
        if found is not None:
            return found
        return self._by_name.get(name_or_uuid)

    def _get(self, name_or_uuid: str) -> _Provider:
        found = self._find(name_or_uuid)
        if found is None:
            raise ValueError(f"No such provider {name_or_uuid}")
        return found

    def exists(self, name_or_uuid: str) -> bool:
        with self._lock:
            return self._find(name_or_uuid) is not None

    def data(self, name_or_uuid: str) -> ProviderData:
        with self._lock:
            return self._get(name_or_uuid).snapshot()

    def roots(self) -> list[ProviderData]:
        with self._lock:
            return [r.snapshot() for r in self._roots.values()]

    def get_provider_uuids(self, name_or_uuid: str | None = None) -> list[str]:
        """UUIDs of a subtree (all trees by default), parents first."""
        with self._lock:
            starts = (
                list(self._roots.values())
                if name_or_uuid is None
                else [self._get(name_or_uuid)]
            )
            found: list[str] = []
            queue = list(starts)
            while queue:
                provider = queue.pop(0)
                found.append(provider.uuid)
                queue.extend(provider.children.values())
            return found

    def get_provider_uuids_in_tree(self, name_or_uuid: str) -> list[str]:
        with self._lock:
            provider = self._get(name_or_uuid)
            while provider.parent_uuid is not None:
                provider = self._by_uuid[provider.parent_uuid]
            return self.get_provider_uuids(provider.uuid)

    # -- structure -----------------------------------------------------

    def new_root(
        self, name: str, uuid: str, generation: int | None = None
    ) -> str:
        with self._lock:
            if self._find(uuid) or self._find(name):
                raise ValueError(f"Provider {name} ({uuid}) already exists")
            provider = _Provider(name, uuid, None, generation)
            self._by_uuid[uuid] = provider
            self._by_name[name] = provider
            self._roots[uuid] = provider
            return uuid

    def new_child(
        self,
        name: str,
        parent: str,
        uuid: str | None = None,
        generation: int | None = None,
    ) -> str:
        with self._lock:
            parent_node = self._get(parent)
            uuid = uuid or str(uuidlib.uuid4())
            if self._find(uuid) or self._find(name):
                raise ValueError(f"Provider {name} ({uuid}) already exists")
            provider = _Provider(name, uuid, parent_node.uuid, generation)
            self._by_uuid[uuid] = provider
            self._by_name[name] = provider
            parent_node.children[uuid] = provider
            return uuid

    def remove(self, name_or_uuid: str) -> None:
        with self._lock:
            provider = self._get(name_or_uuid)
            for child_uuid in self.get_provider_uuids(provider.uuid):
                gone = self._by_uuid.pop(child_uuid, None)
                if gone is not None:
                    self._by_name.pop(gone.name, None)
            if provider.parent_uuid is None:
                self._roots.pop(provider.uuid, None)
            else:
                parent = self._by_uuid[provider.parent_uuid]
                parent.children.pop(provider.uuid, None)

    # -- inventory and traits ------------------------------------------

    def has_inventory_changed(
        self, name_or_uuid: str, inventory: Inventory
    ) -> bool:
        with self._lock:
            # mappings compare by their items, whatever their type
            return self._get(name_or_uuid).inventory != inventory

    def update_inventory(
        self,
        name_or_uuid: str,
        inventory: Inventory,
        generation: int | None = None,
    ) -> bool:
        with self._lock:
            provider = self._get(name_or_uuid)
            changed = self.has_inventory_changed(name_or_uuid, inventory)
            if changed:
                provider.inventory = {
                    rc: dict(rec) for rc, rec in inventory.items()
                }
            if generation is not None:
                provider.generation = generation
            return changed

    def have_traits_changed(
        self, name_or_uuid: str, traits: Iterable[str]
    ) -> bool:
        with self._lock:
            return self._get(name_or_uuid).traits != set(traits)

    def has_traits(self, name_or_uuid: str, traits: Iterable[str]) -> bool:
        with self._lock:
            return set(traits) <= self._get(name_or_uuid).traits

    def update_traits(
        self,
        name_or_uuid: str,
        traits: Iterable[str],
        generation: int | None = None,
    ) -> bool:
        with self._lock:
            provider = self._get(name_or_uuid)
            new = set(traits)
            changed = provider.traits != new
            provider.traits = new
            if generation is not None:
                provider.generation = generation
            return changed

    def add_traits(self, name_or_uuid: str, *traits: str) -> None:
        with self._lock:
            self._get(name_or_uuid).traits.update(traits)

    def remove_traits(self, name_or_uuid: str, *traits: str) -> None:
        with self._lock:
            self._get(name_or_uuid).traits.difference_update(traits)

    def update_aggregates(
        self,
        name_or_uuid: str,
        aggregates: Iterable[str],
        generation: int | None = None,
    ) -> bool:
        with self._lock:
            provider = self._get(name_or_uuid)
            new = set(aggregates)
            changed = provider.aggregates != new
            provider.aggregates = new
            if generation is not None:
                provider.generation = generation
            return changed
