"""The allocations on a node's device providers, read from Placement
(for ``audit`` and for ``restore``, which have no compute service to ask).
"""

from __future__ import annotations

from collections.abc import Set

from oslo_config import cfg

from vgpu_driver.model import naming
from vgpu_driver.placement.client import client_from_conf
from vgpu_driver.placement.sync import PlacementSync


def device_allocations(
    conf: cfg.ConfigOpts, nodename: str, classes: Set[str]
) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """(provider uuid -> device name, consumer -> provider uuid -> units
    of ``classes``) of the node's device providers. Raises the library's
    Placement errors when ``[placement]`` is missing or unreachable."""
    syncer = PlacementSync(client_from_conf(conf), nodename)
    tree = syncer.read_tree()
    prefix = f"{nodename}_"
    device_of = {
        uuid: naming.provider_device(
            tree.data(uuid).name.removeprefix(prefix)
        )[0]
        for uuid in tree.get_provider_uuids(nodename)
        if tree.data(uuid).name.startswith(prefix)
    }
    allocations: dict[str, dict[str, int]] = {}
    for consumer, record in syncer.allocations_for_tree().items():
        for rp, alloc in record["allocations"].items():
            units = sum(
                int(n)
                for rc, n in alloc.get("resources", {}).items()
                if rc in classes
            )
            if rp in device_of and units:
                allocations.setdefault(consumer, {})[rp] = units
    return device_of, allocations


def in_flight_candidates(
    conf: cfg.ConfigOpts, nodename: str, classes: Set[str]
) -> dict[str, dict[str, int]]:
    """consumer -> device name -> units, for
    :meth:`~vgpu_driver.driver.VgpuDriver.hold_in_flight` (which keeps
    only the consumers without a guest or claims)."""
    device_of, allocations = device_allocations(conf, nodename, classes)
    return {
        consumer: {device_of[rp]: units for rp, units in by_rp.items()}
        for consumer, by_rp in allocations.items()
    }
