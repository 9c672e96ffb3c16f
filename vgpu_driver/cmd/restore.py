"""``vgpu-driver restore``: re-apply NVIDIA SR-IOV VF vGPU types at boot.

The card forgets a VF's vGPU type at reboot or driver reload; the library
records each type it sets (and each in use) under ``[devices]
state_path``. Run this before the compute service starts (see
``etc/systemd/vgpu-driver-restore.service``).
"""

from __future__ import annotations

from vgpu_driver.cmd.context import Context
from vgpu_driver.driver import VgpuDriver


def run(context: Context) -> int:
    driver = VgpuDriver(context.conf, context.host)
    restored = driver.restore_vf_types()
    recorded = driver.binder.vf_types
    print(
        f"{len(recorded)} VF type(s) recorded, {len(restored)} re-applied"
        + (": " + ", ".join(restored) if restored else "")
    )
    return 0
