"""The simulated host the NVML tests read (``rtx6000-nvml``: an RTX
6000 Ada whose figures NVML answers), and the same host emptied of its
VF types and guests."""

from __future__ import annotations

from tests import helpers
from vgpu_driver.sim.simulated import SimulatedHost


def rtx_host() -> SimulatedHost:
    return SimulatedHost(helpers.load("rtx6000-nvml"))


def emptied(host: SimulatedHost) -> SimulatedHost:
    for pf in host._state.pfs:
        pf.vf_types.clear()
    host._state.guests.clear()
    return host
