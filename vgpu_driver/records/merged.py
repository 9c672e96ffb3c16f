"""Records that are caches of what the host or Placement showed (the
mdevs seen, the traits this library owns): several processes add their
own entries, so a save merges its changes into what is on disk now, and
one that cannot be read is moved aside and rebuilt (it only helps)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from oslo_log import log as logging

from vgpu_driver.records.store import StateStore, StateStoreError, Validator

LOG = logging.getLogger(__name__)


class MergedRecord:
    def __init__(
        self, state: StateStore | None, key: str, validate: Validator
    ) -> None:
        self.state = state
        self.key = key
        self.validate = validate

    def load(self) -> dict[str, Any]:
        """The record (an unreadable one is moved aside: empty)."""
        if self.state is None:
            return {}
        return dict(self.state.load_or_rebuild(self.key, {}, self.validate))

    def merge(
        self, changed: Mapping[str, Any], removed: set[str]
    ) -> dict[str, Any]:
        """Apply our changes to the record as it is on disk now (another
        process may have written other entries): returns the merged
        record. Raises StateStoreError if it cannot be written."""
        if self.state is None:
            return dict(changed)

        def merge(current: dict[str, Any]) -> dict[str, Any]:
            kept = {k: v for k, v in current.items() if k not in removed}
            return {**kept, **changed}

        return dict(self.state.update(self.key, merge, {}, self.validate))


def keep(what: str, save: Callable[[], object]) -> bool:
    """Save a record that only helps: one that cannot be written now (a
    full ``state_path``) is logged and written by a later pass; the
    caller goes on. Returns whether it was written."""
    try:
        save()
    except StateStoreError as exc:
        LOG.warning("Could not record %s; trying again later: %s", what, exc)
        return False
    return True


def is_string_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)
