"""Make Placement match a provider tree, with as few requests as possible.

:class:`PlacementSync` keeps what it last read from or wrote to Placement
(providers with their generations, inventories and traits). A sync is:

1. :meth:`PlacementSync.read_tree`: a provider tree mirroring Placement,
   from that cache; Placement is re-read only after ``refresh_interval``
   seconds (to notice outside changes) or after a failure;
2. the driver's ``update_provider_tree`` on it;
3. :meth:`PlacementSync.flush`: only the differences are sent, so a sync
   where nothing changed makes no request at all.

Writes carry the provider generation. On ``placement.concurrent_update``
the provider is re-read and the change re-applied on top of what is there
now: inventories of device providers are this library's to set, while
trait changes are merged (what we added or removed), so an operator's
traits written in between survive. Attempts are bounded. A provider that
cannot be deleted because it has allocations is left in place and
reported, never forced.

Provider uuids are derived from the node and provider names, so two
syncers of one host, racing to create the same provider, converge on
one.
"""

from __future__ import annotations

import dataclasses
import random
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import (
    PlacementError,
    PlacementUnavailable,
    VgpuDriverError,
)
from vgpu_driver.model.provider_tree import INVENTORY_FIELDS, ProviderTree
from vgpu_driver.placement.client import (
    CONCURRENT_UPDATE,
    IN_USE,
    PlacementClient,
    PlacementNameUnknown,
)
from vgpu_driver.records.store import StateStore, expect

LOG = logging.getLogger(__name__)
PLACEMENT_RECORD = "placement"
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


class PlacementSync:
    def __init__(
        self,
        client: PlacementClient,
        nodename: str,
        *,
        refresh_interval: float = 300,
        clock: Callable[[], float] = time.monotonic,
        store: StateStore | None = None,
    ) -> None:
        """``store``: where to keep what Placement holds, by provider
        generation, so a restarted process re-reads only providers whose
        generation moved."""
        self.client = client
        self.nodename = nodename
        self.refresh_interval = refresh_interval
        self.clock = clock
        self.store = store
        self._cache: dict[str, Remote] = {}
        self._root_uuid: str | None = None
        self._read_at: float | None = None
        # Hosts started together must not all re-read Placement at the
        # same moment: each waits its own fraction of the interval more.
        self._spread = random.uniform(0.0, 0.25)
        # requests of the client already reported (by sync_placement)
        self.reported_requests = 0

    # -- reading -------------------------------------------------------

    @property
    def root_uuid(self) -> str:
        return self._root_uuid or root_uuid_for(self.nodename)

    def _stale(self) -> bool:
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
        self._cache = {}
        if not found:
            self._root_uuid = None
        else:
            self._root_uuid = str(found[0]["uuid"])
            tree = self.client.request(
                "GET", f"/resource_providers?in_tree={self._root_uuid}"
            ).body["resource_providers"]
            known = self._load_disk()
            for provider in tree:
                remote = known.get(provider["uuid"])
                if remote is None or remote.generation != int(
                    provider["generation"]
                ):
                    remote = self._read_provider(provider)
                self._cache[provider["uuid"]] = remote
        self._read_at = self.clock()
        self._save_disk()

    def _read_provider(self, provider: dict[str, Any]) -> Remote:
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

    # -- what Placement holds, kept on disk by generation ----------------

    def _load_disk(self) -> dict[str, Remote]:
        if self.store is None:
            return {}
        record = self.store.load_or_rebuild(
            PLACEMENT_RECORD, {}, _validate_placement
        )
        return {
            uuid: Remote(
                uuid=uuid,
                name=r["name"],
                parent_uuid=r["parent_uuid"],
                generation=int(r["generation"]),
                inventory=dict(r["inventory"]),
                traits=frozenset(r["traits"]),
            )
            for uuid, r in record.get(self.nodename, {}).items()
        }

    def _save_disk(self) -> None:
        """Write this node's providers (another syncer of the node may
        have written a newer generation: the newer one wins)."""
        if self.store is None:
            return
        mine = {
            r.uuid: {
                "name": r.name,
                "parent_uuid": r.parent_uuid,
                "generation": r.generation,
                "inventory": r.inventory,
                "traits": sorted(r.traits),
            }
            for r in self._cache.values()
        }

        def merge(record: dict[str, Any]) -> dict[str, Any]:
            theirs = record.get(self.nodename, {})
            merged = {
                u: max(e, theirs.get(u, e), key=lambda x: x["generation"])
                for u, e in mine.items()
            }
            return {**record, self.nodename: merged}

        try:
            self.store.update(PLACEMENT_RECORD, merge, {}, _validate_placement)
        except VgpuDriverError as exc:
            LOG.warning("Could not keep Placement's state on disk: %s", exc)

    def _reread(self, uuid: str) -> Remote | None:
        response = self.client.request(
            "GET", f"/resource_providers/{uuid}", allow=(404,)
        )
        if response.status == 404:
            self._cache.pop(uuid, None)
            return None
        remote = self._read_provider(response.body)
        self._cache[uuid] = remote
        return remote

    def read_tree(self) -> ProviderTree:
        """A provider tree as Placement holds it (from the cache when it
        is fresh); the root exists even before Placement has it."""
        if self._stale():
            self.refresh()
        tree = ProviderTree()
        root = self._cache.get(self.root_uuid)
        tree.new_root(
            self.nodename,
            self.root_uuid,
            root.generation if root else None,
        )
        if root:
            tree.update_inventory(self.root_uuid, root.inventory)
            tree.update_traits(self.root_uuid, root.traits)
        pending = [r for r in self._cache.values() if r.uuid != self.root_uuid]
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

    # -- reshape -------------------------------------------------------

    def allocations_for_tree(self) -> dict[str, Any]:
        """Every allocation of every consumer of the node's providers, as
        Nova hands them to update_provider_tree for a reshape."""
        consumers: set[str] = set()
        for uuid in list(self._cache):
            body = self.client.request(
                "GET", f"/resource_providers/{uuid}/allocations"
            ).body
            consumers.update(body["allocations"])
        found = {}
        for consumer in sorted(consumers):
            body = self.client.request("GET", f"/allocations/{consumer}").body
            found[consumer] = {
                "allocations": {
                    rp: {"resources": dict(a["resources"])}
                    for rp, a in body["allocations"].items()
                },
                "consumer_generation": body.get("consumer_generation"),
                "project_id": body.get("project_id"),
                "user_id": body.get("user_id"),
            }
        return found

    def reshape(self, tree: Any, allocations: dict[str, Any]) -> SyncReport:
        """Send a reshaped tree and its moved allocations in one atomic
        ``POST /reshaper``: Placement applies all of it or none."""
        report = SyncReport()
        before = self.client.request_count
        try:
            wanted = [
                tree.data(u) for u in tree.get_provider_uuids(self.nodename)
            ]
            uuid_map: dict[str, str] = {}
            for data in wanted:  # the reshaper moves, it does not create
                parent = uuid_map.get(data.parent_uuid, data.parent_uuid)
                uuid_map[data.uuid] = self._ensure_provider(
                    data.uuid, data.name, parent, report
                )
                for rc in data.inventory:
                    self.client.ensure_resource_class(rc)
            body = {
                "inventories": {
                    uuid_map[d.uuid]: {
                        "resource_provider_generation": self._cache[
                            uuid_map[d.uuid]
                        ].generation,
                        "inventories": {
                            rc: _full_record(r)
                            for rc, r in d.inventory.items()
                        },
                    }
                    for d in wanted
                },
                "allocations": {
                    consumer: {
                        **record,
                        "allocations": {
                            uuid_map.get(rp, rp): a
                            for rp, a in record["allocations"].items()
                        },
                    }
                    for consumer, record in allocations.items()
                },
            }
            # providers the tree dropped (Nova's per-VF ones) give up their
            # inventory in the same request; a later flush deletes them
            for remote in self._cache.values():
                if remote.uuid not in body["inventories"]:
                    body["inventories"][remote.uuid] = {
                        "resource_provider_generation": remote.generation,
                        "inventories": {},
                    }
            self.client.request("POST", "/reshaper", body=body, ok=(204,))
            report.updated.extend(d.name for d in wanted)
            LOG.info(
                "Reshaped %s: %d providers, %d consumers moved atomically",
                self.nodename,
                len(wanted),
                len(allocations),
            )
        finally:
            self.invalidate()
            report.requests = self.client.request_count - before
        return report

    # -- writing -------------------------------------------------------

    def flush(self, tree: Any) -> SyncReport:
        """Send what differs between ``tree`` and Placement."""
        report = SyncReport()
        before = self.client.request_count
        try:
            self._flush(tree, report)
        except (PlacementError, PlacementUnavailable):
            # What was written is cached; re-read the rest next time.
            self.invalidate()
            raise
        finally:
            report.requests = self.client.request_count - before
        if report.changed:
            self._save_disk()
        return report

    def _flush(self, tree: Any, report: SyncReport) -> None:
        wanted = [tree.data(u) for u in tree.get_provider_uuids(self.nodename)]
        uuid_map: dict[str, str] = {}
        for data in wanted:
            parent = uuid_map.get(data.parent_uuid, data.parent_uuid)
            uuid = self._ensure_provider(data.uuid, data.name, parent, report)
            uuid_map[data.uuid] = uuid
            self._set_inventory(uuid, data.name, data.inventory, report)
            self._set_traits(uuid, data.name, set(data.traits), report)
        keep = set(uuid_map.values())
        gone = [
            r
            for r in self._cache.values()
            if r.uuid not in keep and r.uuid != self.root_uuid
        ]
        # children before their parents
        depth = {r.uuid: self._depth(r) for r in gone}
        for remote in sorted(gone, key=lambda r: -depth[r.uuid]):
            self._delete(remote, report)

    def _depth(self, remote: Remote) -> int:
        depth, parent = 0, remote.parent_uuid
        while parent and parent in self._cache and depth < 16:
            depth += 1
            parent = self._cache[parent].parent_uuid
        return depth

    def _ensure_provider(
        self,
        local_uuid: str,
        name: str,
        parent_uuid: str | None,
        report: SyncReport,
    ) -> str:
        if local_uuid in self._cache:
            return local_uuid
        existing = next(
            (r for r in self._cache.values() if r.name == name), None
        )
        if existing is not None:
            return existing.uuid
        uuid = local_uuid
        body: dict[str, Any] = {"name": name, "uuid": uuid}
        if parent_uuid:
            body["parent_provider_uuid"] = parent_uuid
        response = self.client.request(
            "POST", "/resource_providers", body=body, allow=(409,)
        )
        if response.status == 409:
            # Someone else created it (another syncer of this host, or
            # Nova before us): adopt it, by uuid or by name.
            remote = self._reread(uuid) or self._find_by_name(name)
            if remote is None:
                raise PlacementError(
                    method="POST",
                    url="/resource_providers",
                    reason=f"{name}: {response.error_code} {response.detail}",
                )
            if parent_uuid is None:
                self._root_uuid = remote.uuid
            return remote.uuid
        created = response.body
        self._cache[created["uuid"]] = Remote(
            uuid=created["uuid"],
            name=name,
            parent_uuid=parent_uuid,
            generation=int(created["generation"]),
            inventory={},
            traits=frozenset(),
        )
        if parent_uuid is None:
            self._root_uuid = created["uuid"]
        report.created.append(name)
        LOG.info("Created resource provider %s (%s)", name, created["uuid"])
        return str(created["uuid"])

    def _find_by_name(self, name: str) -> Remote | None:
        found = self.client.request(
            "GET", f"/resource_providers?name={name}"
        ).body["resource_providers"]
        if not found:
            return None
        remote = self._read_provider(found[0])
        self._cache[remote.uuid] = remote
        return remote

    def _write(
        self,
        uuid: str,
        name: str,
        what: str,
        send: Callable[[Remote], Any],
    ) -> None:
        """Send a generation-guarded write; on a generation conflict
        re-read the provider and send again (``send`` recomputes from the
        fresh state), a bounded number of times."""
        remote = self._cache[uuid]
        renamed = False
        for _attempt in range(self.client.max_attempts):
            try:
                response = send(remote)
            except PlacementNameUnknown:
                if renamed:
                    raise
                renamed = True  # the client forgot its names: send again
                continue
            if response is None:
                return
            if response.status != 409:
                return
            if response.error_code not in (CONCURRENT_UPDATE, None):
                raise PlacementError(
                    method="PUT",
                    url=f"/resource_providers/{uuid}/{what}",
                    reason=f"{response.error_code}: {response.detail}",
                )
            LOG.info(
                "Generation conflict writing %s of %s; re-reading", what, name
            )
            fresh = self._reread(uuid)
            if fresh is None:
                raise PlacementError(
                    method="PUT",
                    url=f"/resource_providers/{uuid}/{what}",
                    reason=f"{name} was deleted meanwhile",
                )
            remote = fresh
        raise PlacementError(
            method="PUT",
            url=f"/resource_providers/{uuid}/{what}",
            reason=f"still conflicting after {self.client.max_attempts} "
            "attempts",
        )

    def _set_inventory(
        self,
        uuid: str,
        name: str,
        inventory: dict[str, dict[str, Any]],
        report: SyncReport,
    ) -> None:
        wanted = {rc: _full_record(rec) for rc, rec in inventory.items()}

        def send(remote: Remote) -> Any:
            if {
                rc: _full_record(r) for rc, r in remote.inventory.items()
            } == wanted:
                return None
            for rc in wanted:
                self.client.ensure_resource_class(rc)
            response = self.client.request(
                "PUT",
                f"/resource_providers/{uuid}/inventories",
                body={
                    "resource_provider_generation": remote.generation,
                    "inventories": wanted,
                },
                allow=(409,),
            )
            if response.status == 200:
                LOG.info(
                    "Provider %s inventory: %s -> %s",
                    name,
                    _summary(remote.inventory),
                    _summary(wanted),
                )
                remote.generation = int(
                    response.body["resource_provider_generation"]
                )
                remote.inventory = dict(response.body["inventories"])
                _note(report.updated, name)
            return response

        self._write(uuid, name, "inventories", send)

    def _set_traits(
        self, uuid: str, name: str, traits: set[str], report: SyncReport
    ) -> None:
        base = set(self._cache[uuid].traits)
        added, removed = traits - base, base - traits

        def send(remote: Remote) -> Any:
            wanted = (set(remote.traits) | added) - removed
            if wanted == set(remote.traits):
                return None
            self.client.ensure_traits(wanted)
            response = self.client.request(
                "PUT",
                f"/resource_providers/{uuid}/traits",
                body={
                    "resource_provider_generation": remote.generation,
                    "traits": sorted(wanted),
                },
                allow=(409,),
            )
            if response.status == 200:
                LOG.info(
                    "Provider %s traits: added %s, removed %s",
                    name,
                    ", ".join(sorted(wanted - remote.traits)) or "none",
                    ", ".join(sorted(remote.traits - wanted)) or "none",
                )
                remote.generation = int(
                    response.body["resource_provider_generation"]
                )
                remote.traits = frozenset(response.body["traits"])
                _note(report.updated, name)
            return response

        self._write(uuid, name, "traits", send)

    def _delete(self, remote: Remote, report: SyncReport) -> None:
        response = self.client.request(
            "DELETE",
            f"/resource_providers/{remote.uuid}",
            ok=(204, 404),
            allow=(409,),
        )
        if response.status == 409:
            LOG.warning(
                "Provider %s (%s) has allocations and cannot be deleted; it "
                "is left in place (%s)",
                remote.name,
                remote.uuid,
                response.error_code or response.detail,
            )
            report.kept_in_use.append(remote.name)
            if response.error_code not in (IN_USE, None):
                LOG.debug("Unexpected delete conflict: %s", response.detail)
            self._reserve_all(remote, report)
            return
        self._cache.pop(remote.uuid, None)
        report.removed.append(remote.name)
        LOG.info("Removed resource provider %s", remote.name)

    def _reserve_all(self, remote: Remote, report: SyncReport) -> None:
        """A provider kept only for its allocations takes nothing new:
        reserved = total for every class."""
        reserved = {
            rc: {**_full_record(rec), "reserved": int(rec["total"])}
            for rc, rec in remote.inventory.items()
        }
        if reserved != {
            rc: _full_record(r) for rc, r in remote.inventory.items()
        }:
            LOG.warning(
                "Provider %s is reserved: its device is gone or serves no "
                "type, but allocations remain on it",
                remote.name,
            )
            self._set_inventory(remote.uuid, remote.name, reserved, report)


def _summary(inventory: dict[str, dict[str, Any]]) -> str:
    """``VGPU 4 (1 reserved)``, or ``none``."""
    parts = []
    for rc, record in sorted(inventory.items()):
        text = f"{rc} {record.get('total')}"
        if record.get("reserved"):
            text += f" ({record['reserved']} reserved)"
        parts.append(text)
    return ", ".join(parts) or "none"


def _note(names: list[str], name: str) -> None:
    if name not in names:
        names.append(name)


INVENTORY_DEFAULTS = {
    "reserved": 0,
    "min_unit": 1,
    "step_size": 1,
    "allocation_ratio": 1.0,
}


def _full_record(record: dict[str, Any]) -> dict[str, Any]:
    full = {**INVENTORY_DEFAULTS, "max_unit": record.get("total"), **record}
    return {
        key: (
            float(full[key]) if key == "allocation_ratio" else int(full[key])
        )
        for key in INVENTORY_FIELDS
    }


def _validate_placement(record: Any) -> None:
    expect(isinstance(record, dict), "not a JSON object")
    for node, providers in record.items():
        expect(isinstance(providers, dict), f"{node!r} is not an object")
        for uuid, entry in providers.items():
            expect(
                isinstance(entry, dict)
                and isinstance(entry.get("name"), str)
                and isinstance(entry.get("generation"), int)
                and isinstance(entry.get("inventory"), dict)
                and isinstance(entry.get("traits"), list),
                f"provider {uuid!r} of {node!r} is incomplete",
            )
