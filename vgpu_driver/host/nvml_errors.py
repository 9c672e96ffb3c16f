"""The XID errors NVML reports, per GPU, and how long each keeps its
GPU from new guests (:class:`XidErrors`, used by
:class:`~vgpu_driver.host.nvml.NvmlReader`).

NVML never says an error is over: a GPU that was reset simply reports
no more, so a GPU is held for a while after its last one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

LOG = logging.getLogger(__name__)

# XIDs a guest's own program causes (a bad kernel, a page fault in its
# context), not the GPU: NVIDIA's Kubernetes device plugin skips the
# same ones when it marks GPUs unhealthy
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
# how long a GPU that reported any other XID takes no new guest
ERROR_HOLD = 3600.0


class XidErrors:
    """``call``: the reader's (counted) way to call NVML; ``lib``: pynvml
    or the simulated library; ``hold``: seconds a GPU takes no new guest
    after its last XID error."""

    def __init__(
        self,
        call: Callable[..., Any],
        lib: Any,
        hold: float = ERROR_HOLD,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._call = call
        self._lib = lib
        self.hold = hold
        self.clock = clock
        self._events: Any = None  # NVML's event set, made at first use
        self._last: dict[str, tuple[int, float]] = {}  # address: XID, when

    def watch(self, handle: Any) -> None:
        """Register for the GPU's XID error events (once per GPU)."""
        lib = self._lib
        try:
            if self._events is None:
                self._events = self._call("nvmlEventSetCreate")
            self._call(
                "nvmlDeviceRegisterEvents",
                handle,
                lib.nvmlEventTypeXidCriticalError,
                self._events,
            )
        except lib.NVMLError as error:
            LOG.debug("No XID events from this GPU: %s", error)

    def drain(self) -> None:
        """Take the XID events that came since the last read (no wait)."""
        lib = self._lib
        if self._events is None:
            return
        while True:
            try:
                event = self._call("nvmlEventSetWait_v2", self._events, 0)
                xid = int(event.eventData)
                if xid in APPLICATION_XIDS:
                    continue
                info = self._call("nvmlDeviceGetPciInfo", event.device)
            except lib.NVMLError as error:
                if getattr(error, "value", None) != lib.NVML_ERROR_TIMEOUT:
                    LOG.debug("NVML events: %s", error)
                return
            address = pci_address(info.busId)
            LOG.error(
                "GPU %s reported XID %d: it takes no new guest until %d s "
                "pass without another",
                address,
                xid,
                self.hold,
            )
            self._last[address] = (xid, self.clock())

    def recent(self, address: str) -> str | None:
        found = self._last.get(address)
        if found is None:
            return None
        xid, when = found
        age = self.clock() - when
        if age >= self.hold:
            del self._last[address]
            return None
        return (
            f"reported XID {xid} (a GPU error) {age:.0f} s ago; it is held "
            f"{self.hold:.0f} s after the last one"
        )


def pci_address(bus_id: str | bytes) -> str:
    """NVML's ``00000001:C8:00.0`` as sysfs writes it: ``0001:c8:00.0``."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    domain, rest = text.split(":", 1)
    return f"{int(domain, 16):04x}:{rest.lower()}"
