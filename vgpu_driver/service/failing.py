"""Parents whose device failed: their providers take no new guests.

:class:`FailedParents` is the one owner of that state, with its own
lock: a bind or a release that fails on a parent's device (not one that
is merely full, nor a libvirtd restarting) marks it; an operation that
works on it, or the retry interval passing, clears it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator

from oslo_log import log as logging

LOG = logging.getLogger(__name__)


class FailedParents:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}  # parent -> time.monotonic()

    def mark(self, parent: str, why: object = None) -> None:
        """``parent``'s device failed (``why``: logged the first time)."""
        with self._lock:
            if why is not None and parent not in self._since:
                LOG.error(
                    "Parent %s failed (%s); its provider takes no new "
                    "guests until it works again",
                    parent,
                    why,
                )
            self._since[parent] = time.monotonic()

    def worked(self, parents: Iterable[str]) -> None:
        """An operation on each of ``parents`` worked."""
        with self._lock:
            for parent in parents:
                self._since.pop(parent, None)

    def retry_due(self, interval: float) -> list[str]:
        """Offer failed parents again once ``interval`` seconds passed."""
        with self._lock:
            now = time.monotonic()
            due = [n for n, s in self._since.items() if now - s >= interval]
            for name in due:
                del self._since[name]
                LOG.info("Offering %s again after its failure", name)
            return due

    def __contains__(self, parent: object) -> bool:
        with self._lock:
            return parent in self._since

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(sorted(self._since))

    def __len__(self) -> int:
        with self._lock:
            return len(self._since)
