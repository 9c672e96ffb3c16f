"""Who wrote with which configuration: configuration trait -> a
description of its source (the program and its configuration files).

Two writers of one node with different configurations (a compute service
and a ``sync`` run with another file) would flip the providers at every
pass; each marks the providers it writes with its configuration's trait
(:func:`~vgpu_driver.model.config.config_trait`) and records here where
that configuration comes from, so the other can name it.
:class:`Writers` is the one owner of that record (a cache: an
unreadable one is moved aside and rebuilt).
"""

from __future__ import annotations

from vgpu_driver.records.merged import MergedRecord, keep
from vgpu_driver.records.store import StateStore, validate_str_map

WRITERS_RECORD = "writers"


class Writers:
    def __init__(self, state: StateStore | None) -> None:
        self._record = MergedRecord(state, WRITERS_RECORD, _validate)
        self._known: dict[str, str] = {}

    def source(self, trait: str) -> str | None:
        """Where the configuration of ``trait`` comes from, if known."""
        if trait not in self._known:
            self._known = {
                k: str(v) for k, v in self._record.load().items()
            } | self._known
        return self._known.get(trait)

    def note(self, trait: str, source: str) -> None:
        """This process writes with ``trait`` from ``source`` (kept if it
        can be, else tried again at the next pass). A record that says so
        already (a restart) is read, not written: no lock."""
        if self.source(trait) == source:
            return
        if keep(
            "which configuration wrote the providers",
            lambda: self._record.merge({trait: source}, set()),
        ):
            self._known[trait] = source


_validate = validate_str_map(
    lambda v: isinstance(v, str), "a description of a configuration"
)
