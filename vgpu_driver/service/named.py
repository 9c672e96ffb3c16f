"""The instances the caller (Nova) names as its own on this host.

A guest whose domain carries Nova's ``nova:instance`` metadata is
Nova's. One without it is outside Nova (its devices have no allocation
in Placement: they are reserved) unless the caller named it: Nova's own
test doubles write no metadata, nor did domains defined by hand for
instances Nova adopted. The caller names its instances at start
(``init_host``), and each one it binds devices for, defines a guest
for or moves here. A name is forgotten when the caller releases the
instance's devices (it left the host, or never came): a guest of that
uuid still read without metadata is outside Nova from then on, and the
set holds no more than the instances on the host.
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
        self._plan_again_if_read(new, reading)

    def forget(self, uuid: str, reading: HostInventory | None) -> None:
        """``uuid`` is no longer the caller's (its devices released)."""
        if uuid in self.uuids:
            self.uuids.discard(uuid)
            self._plan_again_if_read({uuid}, reading)

    def _plan_again_if_read(
        self, uuids: set[str], reading: HostInventory | None
    ) -> None:
        """A guest among ``uuids`` without metadata, in the reading last
        planned, was counted on the other side of the line: the plan is
        stale."""
        if reading is not None and any(
            guest.uuid in uuids for guest in reading.unmarked_guests()
        ):
            self.stale = True
