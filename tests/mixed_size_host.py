"""The RTX PRO 6000 host of the mixed-size tests (``rtx6000-nvml`` in
mixed-size mode, two types enabled on the card) and the plans a pass
gives it."""

from __future__ import annotations

from tests import helpers
from vgpu_driver.sim.simulated import SimulatedHost

CARD = "pci_0001_c8_00_0"
SECOND = f"{CARD}__nvidia-1540"
CONFIG = """
[devices]
enabled_mdev_types = nvidia-1521, nvidia-1540
[mdev_nvidia-1521]
device_addresses = 0001:c8:00.0
[mdev_nvidia-1540]
device_addresses = 0001:c8:00.0
mdev_class = CUSTOM_DC_48Q
"""


def mixed_host():
    """The RTX PRO 6000 host in mixed-size mode, no vGPU placed."""
    host = SimulatedHost(helpers.load("rtx6000-nvml"))
    for pf in host._state.pfs:
        pf.vf_types.clear()
        pf.mixed_size = True  # nvidia-smi vgpu -shm 1
    host._state.guests.clear()
    return host


def mixed_card(make_conf, tmp_path):
    """A node on :func:`mixed_host` with :data:`CONFIG`."""
    return helpers.Node(
        make_conf, tmp_path, "rtx6000-nvml", CONFIG, mixed_host()
    )


def planned(node, *fields):
    """A pass's plans: provider name (without the node's) -> the plan,
    or the tuple of its ``fields``."""
    return {
        p.name.removeprefix("node1_"): (
            tuple(getattr(p, f) for f in fields) if fields else p
        )
        for p in node.driver.update_provider_tree(node.tree, "node1")
    }
