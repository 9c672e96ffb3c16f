"""The instances the caller (Nova) names as its own on this host.

A guest whose domain carries Nova's ``nova:instance`` metadata is
Nova's. One without it is outside Nova (its devices have no allocation
in Placement: they are reserved) unless the caller named it: Nova's own
test doubles write no metadata, nor did domains defined by hand for
instances Nova adopted. The caller names its instances at start
(``init_host``), and each one it binds devices for, defines a guest
for or moves here.
"""

from __future__ import annotations

from collections.abc import Iterable

from vgpu_driver.model.device import HostInventory


class NamedInstances:
    def __init__(self) -> None:
        self.uuids: set[str] = set()
        # an instance named whose guest was read without metadata: the
        # plan made before counted it outside Nova (plan the whole host)
        self.stale = False

    def __contains__(self, uuid: object) -> bool:
        return uuid in self.uuids

    def name(
        self, uuids: Iterable[str], reading: HostInventory | None
    ) -> None:
        """``uuids`` are the caller's; ``reading``: the one last planned."""
        new = set(uuids) - self.uuids
        if not new:
            return
        self.uuids |= new
        if reading is not None and any(
            guest.uuid in new for guest in reading.unmarked_guests()
        ):
            self.stale = True
