"""Make Placement match a provider tree, with as few requests as possible.

A sync is:

1. :meth:`PlacementSync.read_tree`: a provider tree mirroring Placement,
   from what :class:`~vgpu_driver.placement.remote.RemoteView` last read
   or wrote; Placement is re-read only after ``refresh_interval`` seconds
   (to notice outside changes) or after a failure;
2. the driver's ``update_provider_tree`` on it;
3. :meth:`PlacementSync.flush`: only the differences are sent (by
   :class:`~vgpu_driver.placement.writer.ProviderWriter`, each write
   guarded by the provider's generation), so a sync where nothing changed
   makes no request at all.

Provider uuids are derived from the node and provider names, so two
syncers of one host, racing to create the same provider, converge on
one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import PlacementError, PlacementUnavailable
from vgpu_driver.model.provider_tree import ProviderTree
from vgpu_driver.placement import reshaper
from vgpu_driver.placement.client import PlacementClient
from vgpu_driver.placement.remote import (
    Remote,
    RemoteView,
    SyncReport,
    root_uuid_for,
)
from vgpu_driver.placement.writer import ProviderWriter
from vgpu_driver.records.placement import PlacementRecord
from vgpu_driver.records.store import StateStore

__all__ = ["PlacementSync", "Remote", "SyncReport", "root_uuid_for"]

LOG = logging.getLogger(__name__)


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
        self.view = RemoteView(
            client,
            nodename,
            PlacementRecord(store, nodename),
            refresh_interval=refresh_interval,
            clock=clock,
        )
        self.writer = ProviderWriter(self.view)
        # requests of the client already reported (by sync_placement)
        self.reported_requests = 0

    @property
    def refresh_interval(self) -> float:
        return self.view.refresh_interval

    @refresh_interval.setter
    def refresh_interval(self, seconds: float) -> None:
        self.view.refresh_interval = seconds

    @property
    def root_uuid(self) -> str:
        return self.view.root_uuid

    def invalidate(self) -> None:
        self.view.invalidate()

    def refresh(self) -> None:
        """Re-read the node's whole tree from Placement."""
        self.view.refresh()

    def claim_root(self) -> str | None:
        """Before the first read of a node this process keeps no record
        of: create its root at once, one request instead of a lookup
        then a create. Returns its name if created; if it exists already
        (Nova's, another syncer's: 409) nothing is changed and the tree
        is read as usual. Only a sync calls it (a reader such as
        ``audit`` never creates anything)."""
        view = self.view
        if not view.stale() or view.providers or view.record.load():
            return None
        uuid = root_uuid_for(self.nodename)
        response = self.client.request(
            "POST",
            "/resource_providers",
            body={"name": self.nodename, "uuid": uuid},
            allow=(409,),
        )
        if response.status == 409:
            return None
        view.adopt_new_root(uuid, int(response.body["generation"]))
        LOG.info("Created resource provider %s (%s)", self.nodename, uuid)
        return self.nodename

    def read_tree(self) -> ProviderTree:
        """A provider tree as Placement holds it (from the cache when it
        is fresh); the root exists even before Placement has it."""
        return self.view.tree()

    def allocations_for_tree(self) -> dict[str, Any]:
        return reshaper.allocations_for_tree(self.view)

    def reshape(self, tree: Any, allocations: dict[str, Any]) -> SyncReport:
        return reshaper.reshape(self.writer, tree, allocations)

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
            self.view.save()
        return report

    def _flush(self, tree: Any, report: SyncReport) -> None:
        writer = self.writer
        wanted = [tree.data(u) for u in tree.get_provider_uuids(self.nodename)]
        uuid_map: dict[str, str] = {}
        for data in wanted:
            parent = uuid_map.get(data.parent_uuid, data.parent_uuid)
            uuid = writer.ensure_provider(data.uuid, data.name, parent, report)
            uuid_map[data.uuid] = uuid
            writer.set_traits(uuid, data.name, set(data.traits), report)
        # inventories last: several at once go in one request
        changes = [
            (uuid_map[d.uuid], d.name, d.inventory)
            for d in wanted
            if writer.inventory_differs(uuid_map[d.uuid], d.inventory)
        ]
        if not reshaper.batch_inventories(writer, changes, report):
            for uuid, name, inventory in changes:
                writer.set_inventory(uuid, name, inventory, report)
        keep = set(uuid_map.values())
        gone = [
            r
            for r in self.view.providers.values()
            if r.uuid not in keep and r.uuid != self.view.root_uuid
        ]
        # children before their parents
        depth = {r.uuid: self.view.depth(r) for r in gone}
        for remote in sorted(gone, key=lambda r: -depth[r.uuid]):
            writer.delete(remote, report)
