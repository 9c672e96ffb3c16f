"""Nova's reshape against Placement: every allocation of the node's
consumers read, then the reshaped tree and the moved allocations sent
in one atomic ``POST /reshaper`` (Placement applies all of it or
none)."""

from __future__ import annotations

from typing import Any

from oslo_log import log as logging

from vgpu_driver.placement.remote import RemoteView, SyncReport, full_record
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
                    "inventories": {
                        rc: full_record(r) for rc, r in d.inventory.items()
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
