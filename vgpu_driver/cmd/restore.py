"""``vgpu-driver restore``: re-apply NVIDIA SR-IOV VF vGPU types at boot.

The card forgets a VF's vGPU type at reboot or driver reload; the library
records each type it sets (and each in use) under ``[devices]
state_path``. Run this before the compute service starts (see
``etc/systemd/vgpu-driver-restore.service``). It also moves unreadable
records aside (they are kept, with a timestamp) so the compute service
can rebuild them from the guests. When the claims record is one of them
and ``[placement]`` is configured, the devices of spawns in flight (a
consumer holding units on a device provider of this host, with no guest
here) are held for them, so no bind hands them out.

Exit code: 0 when every recorded type is in place, 1 when a VF refused
its type (each is named; the others are still restored).
"""

from __future__ import annotations

import sys
from pathlib import Path

from vgpu_driver import exception
from vgpu_driver.cmd import output
from vgpu_driver.cmd.context import Context
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.placement.allocations import in_flight_candidates


def _hold_in_flight(
    driver: VgpuDriver, nodename: str
) -> tuple[dict[str, list[str]], str | None]:
    """(consumer -> devices held, a note when Placement was not read)."""
    try:
        candidates = in_flight_candidates(
            driver.conf, nodename, driver.managed_classes()
        )
    except exception.VgpuDriverError as exc:
        return {}, (
            f"Placement not read ({exc}): the devices of spawns in flight "
            "are not held; run 'vgpu-driver audit' once Placement answers"
        )
    return driver.hold_in_flight(candidates), None


def run(context: Context) -> int:
    driver = VgpuDriver(context.conf, context.host)
    moved = driver.binder.repair_records()
    held: dict[str, list[str]] = {}
    note = None
    if any(Path(p).name.startswith("claims") for p in moved):
        held, note = _hold_in_flight(driver, context.conf.host)
    failed: list[str] = []
    restored = driver.restore_vf_types(failed)
    recorded = driver.binder.vf_types
    if context.conf.command.format == "json":
        output.dump_json(
            {
                "records_moved_aside": moved,
                "held_in_flight": held,
                "note": note,
                "recorded": recorded,
                "restored": restored,
                "failed": failed,
            }
        )
        return 1 if failed else 0
    for path in moved:
        print(f"Moved an unreadable record aside: {path}")
    for consumer, devices in sorted(held.items()):
        print(f"Held for {consumer} (a spawn in flight): {', '.join(devices)}")
    if note:
        print(f"WARNING: {note}", file=sys.stderr)
    print(
        f"{len(recorded)} VF type(s) recorded, {len(restored)} re-applied"
        + (": " + ", ".join(restored) if restored else "")
    )
    for failure in failed:
        print(f"ERROR: VF {failure}", file=sys.stderr)
    return 1 if failed else 0
