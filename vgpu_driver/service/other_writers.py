"""Other writers of this node's providers: a writer with another
configuration that wrote over what this process wrote (an operator's
``sync`` with another file, a second compute service on the node)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import WriterConflict
from vgpu_driver.model.config import config_traits
from vgpu_driver.model.inventory import ProviderPlan
from vgpu_driver.records.writers import Writers
from vgpu_driver.service.settings import Settings

LOG = logging.getLogger(__name__)


class OtherWriters:
    def __init__(self, settings: Settings, writers: Writers) -> None:
        self.settings = settings
        self.writers = writers
        # provider name -> the configuration trait this process last
        # wrote on it; and the other writers already warned of
        self._wrote: dict[str, str] = {}
        self._warned: set[str] = set()

    def wrote(self, plans: Iterable[ProviderPlan], ours: str) -> None:
        """This process wrote ``plans`` with its configuration trait."""
        self.writers.note(ours, self.settings.source)
        self._wrote = {p.name: ours for p in plans}

    def check(self, mine: dict[str, Any], nodename: str, ours: str) -> None:
        """A provider this process wrote, carrying another configuration's
        trait now: another writer with another configuration wrote it
        since. A writer that yields raises WriterConflict before writing
        anything; a compute service warns (once per other writer) and
        writes on."""
        for name, data in sorted(mine.items()):
            theirs = sorted(config_traits(data.traits) - {ours})
            if not theirs or self._wrote.get(name) != ours:
                continue
            conflict = WriterConflict(
                provider=name,
                theirs=theirs[0],
                their_source=self.writers.source(theirs[0])
                or "a writer whose records are kept elsewhere",
                ours=ours,
                our_source=self.settings.source,
                nodename=nodename,
            )
            if self.settings.yields:
                raise conflict
            if theirs[0] not in self._warned:
                self._warned.add(theirs[0])
                LOG.warning(
                    "%s (This writer is the compute service: it writes on.)",
                    str(conflict).replace("Nothing was written; s", "S"),
                )
