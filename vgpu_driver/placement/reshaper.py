"""Nova's reshape against Placement: every allocation of the node's
consumers read, then the reshaped tree and the moved allocations sent
in one atomic ``POST /reshaper`` (Placement applies all of it or
none)."""

from __future__ import annotations

from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import PlacementError
from vgpu_driver.placement.remote import (
    RemoteView,
    SyncReport,
    full_inventory,
    summary,
)
from vgpu_driver.placement.writer import ProviderWriter

LOG = logging.getLogger(__name__)


def allocations_for_tree(view: RemoteView) -> dict[str, Any]:
    """Every allocation of every consumer of the node's providers, as
    Nova hands them to update_provider_tree for a reshape."""
    client = view.client
    consumers: set[str] = set()
    for uuid in list(view.providers):
        body = client.request(
            "GET", f"/resource_providers/{uuid}/allocations"
        ).body
        consumers.update(body["allocations"])
    found = {}
    for consumer in sorted(consumers):
        body = client.request("GET", f"/allocations/{consumer}").body
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


def reshape(
    writer: ProviderWriter, tree: Any, allocations: dict[str, Any]
) -> SyncReport:
    """Send a reshaped tree and its moved allocations at once."""
    view = writer.view
    client = view.client
    report = SyncReport()
    before = client.request_count
    try:
        wanted = [tree.data(u) for u in tree.get_provider_uuids(view.nodename)]
        uuid_map: dict[str, str] = {}
        for data in wanted:  # the reshaper moves, it does not create
            parent = uuid_map.get(data.parent_uuid, data.parent_uuid)
            uuid_map[data.uuid] = writer.ensure_provider(
                data.uuid, data.name, parent, report
            )
            for rc in data.inventory:
                client.ensure_resource_class(rc)
        body = {
            "inventories": {
                uuid_map[d.uuid]: {
                    "resource_provider_generation": view.providers[
                        uuid_map[d.uuid]
                    ].generation,
                    "inventories": full_inventory(d.inventory),
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
        for remote in view.providers.values():
            if remote.uuid not in body["inventories"]:
                body["inventories"][remote.uuid] = {
                    "resource_provider_generation": remote.generation,
                    "inventories": {},
                }
        client.request("POST", "/reshaper", body=body, ok=(204,))
        report.updated.extend(d.name for d in wanted)
        LOG.info(
            "Reshaped %s: %d providers, %d consumers moved atomically",
            view.nodename,
            len(wanted),
            len(allocations),
        )
    finally:
        view.invalidate()
        report.requests = client.request_count - before
    return report


# Placement's reshaper replaces each listed provider's inventory twice
# (an interim union, then the final one) and bumps its generation each
# time, once when the new inventory is empty (placement/objects/
# reshaper.py). The answer carries no generations: the cache follows
# this rule, and a later write that finds it wrong gets 409 and re-reads.
_RESHAPER_BUMPS = (1, 2)


def batch_inventories(
    writer: ProviderWriter,
    changes: list[tuple[str, str, dict[str, dict[str, Any]]]],
    report: SyncReport,
) -> bool:
    """Several providers' new inventories in one ``POST /reshaper`` with
    no allocation moved (Placement applies all of them or none). False
    when not sent (fewer than two, or Placement refused: a generation
    moved under us, or a policy without the reshaper): the caller then
    writes them one by one, each guarded by its generation."""
    if len(changes) < 2 or not writer.batching:
        return False
    view = writer.view
    client = view.client
    wanted = {
        uuid: full_inventory(inventory) for uuid, _name, inventory in changes
    }
    try:
        for inventory in wanted.values():
            for rc in inventory:
                client.ensure_resource_class(rc)
        response = client.request(
            "POST",
            "/reshaper",
            body={
                "inventories": {
                    uuid: {
                        "resource_provider_generation": view.providers[
                            uuid
                        ].generation,
                        "inventories": inventory,
                    }
                    for uuid, inventory in wanted.items()
                },
                "allocations": {},
            },
            ok=(204,),
            allow=(409,),
        )
    except PlacementError as exc:
        LOG.warning(
            "Placement refused inventories in one request (%s); writing "
            "them one by one from now on",
            exc,
        )
        writer.batching = False
        return False
    if response.status == 409:
        return False
    for uuid, name, _inventory in changes:
        remote = view.providers[uuid]
        LOG.info(
            "Provider %s inventory: %s -> %s",
            name,
            summary(remote.inventory),
            summary(wanted[uuid]),
        )
        remote.generation += _RESHAPER_BUMPS[bool(wanted[uuid])]
        remote.inventory = wanted[uuid]
        report.note_updated(name)
    return True
