"""``vgpu-driver restore``: re-apply NVIDIA SR-IOV VF vGPU types at boot.

The card forgets a VF's vGPU type at reboot or driver reload; the library
records each type it sets (and each in use) under ``[devices]
state_path``. Run this before the compute service starts (see
``etc/systemd/vgpu-driver-restore.service``). It also moves unreadable
records aside (they are kept, with a timestamp) so the compute service
can rebuild them from the guests.

Exit code: 0 when every recorded type is in place, 1 when a VF refused
its type (each is named; the others are still restored).
"""

from __future__ import annotations

import sys

from vgpu_driver.cmd import output
from vgpu_driver.cmd.context import Context
from vgpu_driver.driver import VgpuDriver


def run(context: Context) -> int:
    driver = VgpuDriver(context.conf, context.host)
    moved = driver.binder.repair_records()
    failed: list[str] = []
    restored = driver.restore_vf_types(failed)
    recorded = driver.binder.vf_types
    if context.conf.command.format == "json":
        output.dump_json(
            {
                "records_moved_aside": moved,
                "recorded": recorded,
                "restored": restored,
                "failed": failed,
            }
        )
        return 1 if failed else 0
    for path in moved:
        print(f"Moved an unreadable record aside: {path}")
    print(
        f"{len(recorded)} VF type(s) recorded, {len(restored)} re-applied"
        + (": " + ", ".join(restored) if restored else "")
    )
    for failure in failed:
        print(f"ERROR: VF {failure}", file=sys.stderr)
    return 1 if failed else 0
