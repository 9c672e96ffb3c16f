"""What Placement holds for each provider of a node, kept on disk by
provider generation, so a restarted process re-reads only providers
whose generation moved. :class:`PlacementRecord` is its one owner; it is
a cache: an unreadable one is moved aside and rebuilt from Placement."""

from __future__ import annotations

from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import VgpuDriverError
from vgpu_driver.records.store import StateStore, expect

LOG = logging.getLogger(__name__)
PLACEMENT_RECORD = "placement"


class PlacementRecord:
    def __init__(self, store: StateStore | None, nodename: str) -> None:
        self.store = store
        self.nodename = nodename

    def load(self) -> dict[str, dict[str, Any]]:
        """Provider uuid -> {name, parent_uuid, generation, inventory,
        traits} for this node."""
        if self.store is None:
            return {}
        record = self.store.load_or_rebuild(
            PLACEMENT_RECORD, {}, _validate_placement
        )
        return dict(record.get(self.nodename, {}))

    def save(self, mine: dict[str, dict[str, Any]]) -> None:
        """Write this node's providers (another syncer of the node may
        have written a newer generation: the newer one wins). A failure
        is logged: the record only saves reads."""
        if self.store is None:
            return

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
