"""The devices guests use: device id -> the guest using it, with each
guest's devices beside, so that what one guest uses is found without
looking at every device in use (a guest undefined or released on a host
of thousands of mdevs asks for its own few).

A dict, whose reads are the dict's own (a refresh asks it once per mdev
of a parent it follows), built as a dict is; the guests' side is built
when first asked, then kept in step by the writes, which go through
``[]=``, ``del``, ``pop`` and ``update`` (the other ways a dict changes
are refused).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NoReturn


class Users(dict[str, str]):
    def __init__(
        self, pairs: Mapping[str, str] | Iterable[tuple[str, str]] = ()
    ) -> None:
        super().__init__(pairs)
        # guest -> its devices: built when first asked (a view is built
        # whole at every full reading, a guest's devices asked rarely)
        self._devices_of: dict[str, set[str]] | None = None

    def of_guest(self, guest: str) -> frozenset[str]:
        """The devices ``guest`` uses."""
        return frozenset(self._index().get(guest, ()))

    def _index(self) -> dict[str, set[str]]:
        found = self._devices_of
        if found is None:
            found = self._devices_of = {}
            for device_id, guest in dict.items(self):
                devices = found.get(guest)
                if devices is None:
                    found[guest] = {device_id}
                else:
                    devices.add(device_id)
        return found

    def __setitem__(self, device_id: str, guest: str) -> None:
        before = dict.get(self, device_id)
        if before == guest:
            return
        if before is not None:
            self._forget(device_id, before)
        super().__setitem__(device_id, guest)
        if self._devices_of is not None:
            self._devices_of.setdefault(guest, set()).add(device_id)

    def __delitem__(self, device_id: str) -> None:
        guest = self[device_id]
        super().__delitem__(device_id)
        self._forget(device_id, guest)

    def pop(self, device_id: str, *default: Any) -> Any:
        if device_id not in self:
            return super().pop(device_id, *default)
        guest = self[device_id]
        del self[device_id]
        return guest

    def update(  # type: ignore[override]
        self, pairs: Mapping[str, str] | Iterable[tuple[str, str]] = ()
    ) -> None:
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        for device_id, guest in items:
            self[device_id] = guest

    def _forget(self, device_id: str, guest: str) -> None:
        index = self._devices_of
        if index is None:
            return
        devices = index[guest]
        devices.discard(device_id)
        if not devices:
            del index[guest]

    def _refused(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        raise TypeError(
            "the devices in use change by [] =, del, pop and update: "
            "each guest's devices follow"
        )

    setdefault = popitem = clear = __ior__ = _refused

    def copy(self) -> Users:
        return Users(self)
