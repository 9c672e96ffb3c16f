"""The refresh after another process wrote the records: ``restore`` and
``audit --fix`` run beside the compute service on the same
``[devices] state_path`` and write the records under their lock. The
service then reads every guest again once, under that lock (what the
other wrote may be newer than any reading it has), and its refreshes
after that one are idle again. Before 0db15be every refresh after such a
write read every guest, for as long as nothing else changed.

A row of :mod:`benchmarks.churn`: the change, made outside the timing,
is another process's write of the records as they are; the host does
not change.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.changes import extras, guest_host, nova_idle, pairs


def records_churn(
    shape: tuple[int, int, int],
    tmp: Path,
    remote: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """``remote``: served by a daemon, at the URI it gives."""
    uri, service, _guest_change = guest_host(shape, tmp, remote)
    # another process: its own objects on the same records and host
    ledger = service._new()[0].binder.ledger

    def written(_step: int) -> None:
        with ledger.locked(view=False):
            ledger.save()

    try:
        changed, idle = pairs(written, service.idle)
    finally:
        ledger.carrier.let_go()
    more = extras(remote is not None)
    return {"changed": changed, "idle": idle, "nova": nova_idle(uri), **more}
