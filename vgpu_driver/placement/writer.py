"""Writes to Placement, each guarded by the provider's generation.

:class:`ProviderWriter` creates providers (adopting one another syncer
or Nova made first, by uuid or by name), sets inventories and traits,
and deletes providers. On ``placement.concurrent_update`` the provider
is re-read and the change applied again on top of what is there now:
inventories of device providers are this library's to set, while trait
changes are merged (what we added or removed), so an operator's traits
written in between survive. Attempts are bounded. A provider that
cannot be deleted because it has allocations is left in place, reserved
and reported, never forced. Every write updates the
:class:`~vgpu_driver.placement.remote.RemoteView`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import PlacementError
from vgpu_driver.placement.client import (
    CONCURRENT_UPDATE,
    IN_USE,
    PlacementNameUnknown,
)
from vgpu_driver.placement.remote import (
    Remote,
    RemoteView,
    SyncReport,
    full_inventory,
    full_record,
    summary,
)

LOG = logging.getLogger(__name__)


class ProviderWriter:
    def __init__(self, view: RemoteView) -> None:
        self.view = view
        self.client = view.client
        # several inventories in one POST /reshaper (off once refused)
        self.batching = True

    def ensure_provider(
        self,
        local_uuid: str,
        name: str,
        parent_uuid: str | None,
        report: SyncReport,
    ) -> str:
        """The uuid Placement knows the provider by, created if needed."""
        view = self.view
        if local_uuid in view.providers:
            return local_uuid
        existing = next(
            (r for r in view.providers.values() if r.name == name), None
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
            remote = view.reread(uuid) or view.find_by_name(name)
            if remote is None:
                raise PlacementError(
                    method="POST",
                    url="/resource_providers",
                    reason=f"{name}: {response.error_code} {response.detail}",
                )
            if parent_uuid is None:
                view.known_root = remote.uuid
            return remote.uuid
        created = response.body
        view.providers[created["uuid"]] = Remote(
            uuid=created["uuid"],
            name=name,
            parent_uuid=parent_uuid,
            generation=int(created["generation"]),
            inventory={},
            traits=frozenset(),
        )
        if parent_uuid is None:
            view.known_root = created["uuid"]
        report.created.append(name)
        LOG.info("Created resource provider %s (%s)", name, created["uuid"])
        return str(created["uuid"])

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
        remote = self.view.providers[uuid]
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
            fresh = self.view.reread(uuid)
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

    def inventory_differs(
        self, uuid: str, inventory: dict[str, dict[str, Any]]
    ) -> bool:
        remote = self.view.providers[uuid]
        return full_inventory(remote.inventory) != full_inventory(inventory)

    def set_inventory(
        self,
        uuid: str,
        name: str,
        inventory: dict[str, dict[str, Any]],
        report: SyncReport,
    ) -> None:
        wanted = full_inventory(inventory)

        def send(remote: Remote) -> Any:
            if full_inventory(remote.inventory) == wanted:
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
                    summary(remote.inventory),
                    summary(wanted),
                )
                remote.generation = int(
                    response.body["resource_provider_generation"]
                )
                remote.inventory = dict(response.body["inventories"])
                report.note_updated(name)
            return response

        self._write(uuid, name, "inventories", send)

    def set_traits(
        self, uuid: str, name: str, traits: set[str], report: SyncReport
    ) -> None:
        base = set(self.view.providers[uuid].traits)
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
                report.note_updated(name)
            return response

        self._write(uuid, name, "traits", send)

    def delete(self, remote: Remote, report: SyncReport) -> None:
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
        self.view.providers.pop(remote.uuid, None)
        report.removed.append(remote.name)
        LOG.info("Removed resource provider %s", remote.name)

    def _reserve_all(self, remote: Remote, report: SyncReport) -> None:
        """A provider kept only for its allocations takes nothing new:
        reserved = total for every class."""
        reserved = {
            rc: {**full_record(rec), "reserved": int(rec["total"])}
            for rc, rec in remote.inventory.items()
        }
        if reserved != full_inventory(remote.inventory):
            LOG.warning(
                "Provider %s is reserved: its device is gone or serves no "
                "type, but allocations remain on it",
                remote.name,
            )
            self.set_inventory(remote.uuid, remote.name, reserved, report)
