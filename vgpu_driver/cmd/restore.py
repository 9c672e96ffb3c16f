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

from vgpu_driver.cmd.context import Context
from vgpu_driver.driver import VgpuDriver


def run(context: Context) -> int:
    driver = VgpuDriver(context.conf, context.host)
    for moved in driver.binder.repair_records():
        print(f"Moved an unreadable record aside: {moved}")
    failed: list[str] = []
    restored = driver.restore_vf_types(failed)
    recorded = driver.binder.vf_types
    print(
        f"{len(recorded)} VF type(s) recorded, {len(restored)} re-applied"
        + (": " + ", ".join(restored) if restored else "")
    )
    for failure in failed:
        print(f"ERROR: VF {failure}", file=sys.stderr)
    return 1 if failed else 0
