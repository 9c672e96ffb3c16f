"""The devices guests use: device id -> the guest using it, with each
guest's devices beside, so that what one guest uses is found without
looking at every device in use (a guest undefined or released on a host
of thousands of mdevs asks for its own few).

A mapping as a dict is, whose reads go to a dict at C speed; only its
writes keep the guest's side in step.
"""

from __future__ import annotations

from collections.abc import (
    ItemsView,
    Iterable,
    Iterator,
    KeysView,
    Mapping,
    MutableMapping,
    ValuesView,
)


class Users(MutableMapping[str, str]):
    __slots__ = ("_devices_of", "_guest_of")

    def __init__(
        self, pairs: Mapping[str, str] | Iterable[tuple[str, str]] = ()
    ) -> None:
        self._guest_of: dict[str, str] = {}
        self._devices_of: dict[str, set[str]] = {}
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        for device_id, guest in items:
            self[device_id] = guest

    def of_guest(self, guest: str) -> frozenset[str]:
        """The devices ``guest`` uses."""
        return frozenset(self._devices_of.get(guest, ()))

    def __getitem__(self, device_id: str) -> str:
        return self._guest_of[device_id]

    def __setitem__(self, device_id: str, guest: str) -> None:
        before = self._guest_of.get(device_id)
        if before == guest:
            return
        if before is not None:
            self._forget(device_id, before)
        self._guest_of[device_id] = guest
        self._devices_of.setdefault(guest, set()).add(device_id)

    def __delitem__(self, device_id: str) -> None:
        self._forget(device_id, self._guest_of.pop(device_id))

    def _forget(self, device_id: str, guest: str) -> None:
        devices = self._devices_of[guest]
        devices.discard(device_id)
        if not devices:
            del self._devices_of[guest]

    # reads: the dict's own
    def __contains__(self, device_id: object) -> bool:
        return device_id in self._guest_of

    def __iter__(self) -> Iterator[str]:
        return iter(self._guest_of)

    def __len__(self) -> int:
        return len(self._guest_of)

    def keys(self) -> KeysView[str]:
        return self._guest_of.keys()

    def items(self) -> ItemsView[str, str]:
        return self._guest_of.items()

    def values(self) -> ValuesView[str]:
        return self._guest_of.values()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Users):
            return self._guest_of == other._guest_of
        return self._guest_of == other

    def __repr__(self) -> str:
        return f"Users({self._guest_of!r})"
