"""The interface every host adapter offers (libvirt, simulated)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Protocol

from vgpu_driver.model.device import Guest, HostInventory, Mdev, Parent


class Host(Protocol):
    # the mdev types whose descriptions discovery reads (None: all); a
    # service sets its enabled types
    described_types: Callable[[], Collection[str]] | None

    def discover(
        self,
        *,
        rescan_guests: bool = False,
        guests: bool = True,
        again: bool = False,
    ) -> HostInventory:
        """Read the host. Guests are scanned in full only on the first
        call that wants them or when asked; in between the adapter keeps
        them current from :meth:`note_guest` / :meth:`forget_guest` (and
        domain events). ``guests=False``: do not scan them for this call
        if they were never scanned (``guests_known`` is then False).
        ``again``: read right after the last reading, for what the caller
        changed through this adapter since (an adapter may take what it
        did not change as that reading had it).

        The reading's ``generation`` changes when, and only when, its
        content does: a caller that sees the generation it saw last may
        skip the work that depends on the reading alone. Every adapter
        keeps this (a reading equal to the last keeps its generation)."""
        ...

    def note_guest(self, guest: Guest) -> None: ...

    def forget_guest(self, uuid: str) -> None: ...

    def refresh_guest(self, uuid: str) -> Guest | None:
        """Re-read one guest (the caller defined or changed it); None if
        it is not defined."""
        ...

    def known_guest(self, uuid: str) -> Guest | None:
        """The guest as last read, told or re-read, with every domain
        event taken so far applied (no host call); None if it is not
        defined. Only asked once guests were read."""
        ...

    def domain_event(self, uuid: str, defined: bool) -> None:
        """libvirt reported a domain defined or undefined (by anyone):
        applied by the next discovery. Safe from libvirt's event thread."""
        ...

    def guests_changed(self) -> bool:
        """Guests were defined or undefined by someone else (domain
        events), not yet applied."""
        ...

    def take_guest_changes(self) -> list[tuple[str, Guest | None]]:
        """Apply the waiting domain events (the next discovery would):
        (uuid, the guest now or None when undefined) for each."""
        ...

    def create_mdev(self, parent: Parent, type_id: str, uuid: str) -> Mdev: ...

    def start_mdev(self, mdev: Mdev) -> None: ...

    def mdev_exists(self, mdev: Mdev) -> bool: ...

    def remove_mdev(self, mdev: Mdev) -> None: ...

    def set_vf_type(self, vf_address: str, type_id: int) -> None: ...

    def has_mdev(self, uuid: str) -> bool:
        """Is an mdev of this uuid on the host now (made and started),
        read from the host, not from the last discovery?"""
        ...

    def vf_type(self, vf_address: str) -> int | None:
        """An NVIDIA VF's vGPU type now (0: none; None: no such VF), read
        from the host, not from the last discovery."""
        ...
