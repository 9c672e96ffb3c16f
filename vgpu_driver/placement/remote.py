"""What Placement holds for a node's providers, as last read or written.

:class:`RemoteView` owns that picture: each provider with its generation,
inventory and traits, the root's uuid, and when the node was last read
whole. It is re-read only after ``refresh_interval`` seconds (to notice
outside changes, each host waiting its own extra fraction so hosts
started together do not read at the same moment) or after a failure;
a restarted process re-reads only providers whose generation moved
(:class:`~vgpu_driver.records.placement.PlacementRecord`).
"""

from __future__ import annotations

import dataclasses
import random
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from vgpu_driver.model.provider_tree import INVENTORY_FIELDS, ProviderTree
from vgpu_driver.placement.client import PlacementClient
from vgpu_driver.records.placement import PlacementRecord

NAMESPACE = uuidlib.UUID("9a4e5bb2-6a3c-4a0f-8d5e-1f2c3b4a5d6e")


def root_uuid_for(nodename: str) -> str:
    return str(uuidlib.uuid5(NAMESPACE, nodename))


@dataclasses.dataclass
class Remote:
    """What Placement holds for one provider, as last seen."""

    uuid: str
    name: str
    parent_uuid: str | None
    generation: int
    inventory: dict[str, dict[str, Any]]
    traits: frozenset[str]


@dataclasses.dataclass
class SyncReport:
    created: list[str] = dataclasses.field(default_factory=list)
    updated: list[str] = dataclasses.field(default_factory=list)
    removed: list[str] = dataclasses.field(default_factory=list)
    kept_in_use: list[str] = dataclasses.field(default_factory=list)
    requests: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.removed)

    def note_updated(self, name: str) -> None:
        if name not in self.updated:
            self.updated.append(name)


class RemoteView:
    def __init__(
        self,
        client: PlacementClient,
        nodename: str,
        record: PlacementRecord,
        *,
        refresh_interval: float,
        clock: Callable[[], float],
    ) -> None:
        self.client = client
        self.nodename = nodename
        self.record = record
        self.refresh_interval = refresh_interval
        self.clock = clock
        self.providers: dict[str, Remote] = {}  # by uuid
        self.known_root: str | None = None
        self._read_at: float | None = None
        # Hosts started together must not all re-read Placement at the
        # same moment: each waits its own fraction of the interval more.
        self._spread = random.uniform(0.0, 0.25)

    @property
    def root_uuid(self) -> str:
        return self.known_root or root_uuid_for(self.nodename)

    def stale(self) -> bool:
        interval = self.refresh_interval * (1 + self._spread)
        return self._read_at is None or (
            self.clock() - self._read_at >= interval
        )

    def invalidate(self) -> None:
        self._read_at = None

    def refresh(self) -> None:
        """Re-read the node's whole tree from Placement."""
        self.client.forget_known()
        found = self.client.request(
            "GET", f"/resource_providers?name={self.nodename}"
        ).body["resource_providers"]
        self.providers = {}
        if not found:
            self.known_root = None
        else:
            self.known_root = str(found[0]["uuid"])
            tree = self.client.request(
                "GET", f"/resource_providers?in_tree={self.known_root}"
            ).body["resource_providers"]
            known = {
                uuid: _remote_of(uuid, entry)
                for uuid, entry in self.record.load().items()
            }
            for provider in tree:
                remote = known.get(provider["uuid"])
                if remote is None or remote.generation != int(
                    provider["generation"]
                ):
                    remote = self.read_provider(provider)
                self.providers[provider["uuid"]] = remote
        self._read_at = self.clock()
        self.save()

    def adopt_new_root(self, uuid: str, generation: int) -> None:
        """The node's root was just created here: a new provider has no
        children, so the tree is known without reading it."""
        self.providers = {
            uuid: Remote(
                uuid=uuid,
                name=self.nodename,
                parent_uuid=None,
                generation=generation,
                inventory={},
                traits=frozenset(),
            )
        }
        self.known_root = uuid
        self._read_at = self.clock()
        self.save()

    def save(self) -> None:
        self.record.save(
            {
                r.uuid: {
                    "name": r.name,
                    "parent_uuid": r.parent_uuid,
                    "generation": r.generation,
                    "inventory": r.inventory,
                    "traits": sorted(r.traits),
                }
                for r in self.providers.values()
            }
        )

    def read_provider(self, provider: dict[str, Any]) -> Remote:
        uuid = provider["uuid"]
        inventories = self.client.request(
            "GET", f"/resource_providers/{uuid}/inventories"
        ).body
        traits = self.client.request(
            "GET", f"/resource_providers/{uuid}/traits"
        ).body
        return Remote(
            uuid=uuid,
            name=provider["name"],
            parent_uuid=provider.get("parent_provider_uuid"),
            generation=int(traits["resource_provider_generation"]),
            inventory=dict(inventories["inventories"]),
            traits=frozenset(traits["traits"]),
        )

    def reread(self, uuid: str) -> Remote | None:
        response = self.client.request(
            "GET", f"/resource_providers/{uuid}", allow=(404,)
        )
        if response.status == 404:
            self.providers.pop(uuid, None)
            return None
        remote = self.read_provider(response.body)
        self.providers[uuid] = remote
        return remote

    def find_by_name(self, name: str) -> Remote | None:
        found = self.client.request(
            "GET", f"/resource_providers?name={name}"
        ).body["resource_providers"]
        if not found:
            return None
        remote = self.read_provider(found[0])
        self.providers[remote.uuid] = remote
        return remote

    def depth(self, remote: Remote) -> int:
        depth, parent = 0, remote.parent_uuid
        while parent and parent in self.providers and depth < 16:
            depth += 1
            parent = self.providers[parent].parent_uuid
        return depth

    def tree(self) -> ProviderTree:
        """A provider tree as Placement holds it (re-read first if stale);
        the root exists even before Placement has it."""
        if self.stale():
            self.refresh()
        tree = ProviderTree()
        root = self.providers.get(self.root_uuid)
        tree.new_root(
            self.nodename,
            self.root_uuid,
            root.generation if root else None,
        )
        if root:
            tree.update_inventory(self.root_uuid, root.inventory)
            tree.update_traits(self.root_uuid, root.traits)
        pending = [
            r for r in self.providers.values() if r.uuid != self.root_uuid
        ]
        while pending:
            progressed = False
            for remote in list(pending):
                if remote.parent_uuid and tree.exists(remote.parent_uuid):
                    tree.new_child(
                        remote.name,
                        remote.parent_uuid,
                        remote.uuid,
                        remote.generation,
                    )
                    tree.update_inventory(remote.uuid, remote.inventory)
                    tree.update_traits(remote.uuid, remote.traits)
                    pending.remove(remote)
                    progressed = True
            if not progressed:
                break
        return tree


def _remote_of(uuid: str, entry: dict[str, Any]) -> Remote:
    return Remote(
        uuid=uuid,
        name=entry["name"],
        parent_uuid=entry["parent_uuid"],
        generation=int(entry["generation"]),
        inventory=dict(entry["inventory"]),
        traits=frozenset(entry["traits"]),
    )


INVENTORY_DEFAULTS = {
    "reserved": 0,
    "min_unit": 1,
    "step_size": 1,
    "allocation_ratio": 1.0,
}


def full_inventory(
    inventory: dict[str, dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Every record of an inventory with Placement's defaults filled in
    (so two inventories compare as Placement would hold them)."""
    return {rc: full_record(record) for rc, record in inventory.items()}


def full_record(record: dict[str, Any]) -> dict[str, Any]:
    """An inventory record with Placement's defaults filled in."""
    full = {**INVENTORY_DEFAULTS, "max_unit": record.get("total"), **record}
    return {
        key: (
            float(full[key]) if key == "allocation_ratio" else int(full[key])
        )
        for key in INVENTORY_FIELDS
    }


def summary(inventory: dict[str, dict[str, Any]]) -> str:
    """``VGPU 4 (1 reserved)``, or ``none``."""
    parts = []
    for rc, record in sorted(inventory.items()):
        text = f"{rc} {record.get('total')}"
        if record.get("reserved"):
            text += f" ({record['reserved']} reserved)"
        parts.append(text)
    return ", ".join(parts) or "none"
