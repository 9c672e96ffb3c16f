"""Upgrades from older layouts (pure): VGPU units on the compute node's
own provider (Nova's first vGPU code) or on one provider per VF (an
NVIDIA SR-IOV card's VFs, or VFs that are mdev parents) move to one
provider per pGPU, following the devices the guests have.

The functions read and write a provider tree through its public
interface (this library's :class:`~vgpu_driver.model.provider_tree.
ProviderTree` or Nova's) and the allocations Nova passes; they never
touch the host.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Set
from typing import Any

import os_resource_classes as orc

from vgpu_driver.exception import ReshapeFailed
from vgpu_driver.model import naming
from vgpu_driver.model.config import DeviceConfig, config_traits
from vgpu_driver.model.device import HostInventory
from vgpu_driver.model.usage import Allocations

# consumer -> device name -> resource class -> units to move
Moves = dict[str, dict[str, Counter[str]]]


def old_layout(
    under: list[Any],
    root: Any,
    nodename: str,
    inventory: HostInventory,
    classes: Set[str],
) -> list[str]:
    """[root-has-units flag ("" or root name), per-VF provider names...]
    or [] when the tree already has this library's layout."""
    on_root = nodename if set(root.inventory) & classes else ""
    vf_names = {
        f"{nodename}_{vf.address}" for pf in inventory.pfs for vf in pf.vfs
    }
    # VF parents (Ampere before kernel 6.8) were a provider each; their
    # GPU is one now
    vf_names.update(
        naming.provider_name(nodename, p.name)
        for p in inventory.parents
        if p.physical_function
    )
    per_vf = sorted(
        p.name
        for p in under
        if p.name in vf_names and set(p.inventory) & classes
    )
    if not on_root and not per_vf:
        return []
    return [on_root, *per_vf]


def plan_moves(
    tree: Any,
    old: list[str],
    allocations: Allocations,
    inventory: HostInventory,
    classes: Set[str],
    seen: Mapping[str, tuple[str, str]],
    config: DeviceConfig,
) -> Moves:
    """The units to move, found from the guests' devices. Raises
    ReshapeFailed, having changed nothing, when a consumer cannot be
    matched."""
    old_uuids = {tree.data(name).uuid for name in old if name}
    guests = {g.uuid: g for g in inventory.guests}
    vf_pf = {vf.address: pf.name for pf in inventory.pfs for vf in pf.vfs}
    moves: Moves = {}
    for consumer, record in allocations.items():
        wanted: Counter[str] = Counter()
        for rp_uuid, alloc in record.get("allocations", {}).items():
            held = {
                rc: n
                for rc, n in alloc.get("resources", {}).items()
                if rc in classes and n
            }
            if rp_uuid in old_uuids:
                wanted.update({rc: int(n) for rc, n in held.items()})
            elif held and tree.exists(rp_uuid):
                # Nova's own sanity check: before a reshape, device units
                # are on the old providers only
                raise ReshapeFailed(
                    nodename=nodename_of(tree, old_uuids),
                    reason=f"consumer {consumer} holds {held} on provider "
                    f"{tree.data(rp_uuid).name}, which is not one the "
                    "reshape moves units from; heal that allocation "
                    "(or remove the provider), then restart",
                )
        if not wanted:
            continue
        guest = guests.get(consumer)
        if guest is None:
            raise ReshapeFailed(
                nodename=nodename_of(tree, old_uuids),
                reason=f"consumer {consumer} holds "
                f"{dict(wanted)} but no guest of that uuid is on the "
                "host, so its devices cannot be placed on a pGPU. "
                "Delete or heal that allocation, then restart",
            )
        devices: list[tuple[str, str]] = []
        for uuid in guest.mdevs:
            if uuid in seen:
                parent, type_id = seen[uuid]
                type_cfg = config.get(type_id)
                rc = type_cfg.resource_class if type_cfg else str(orc.VGPU)
                devices.append((inventory.device_of(parent), rc))
        for address in guest.pci_devices:
            if address in vf_pf:
                devices.append((vf_pf[address], str(orc.VGPU)))
        placed: dict[str, Counter[str]] = {}
        for rc, amount in wanted.items():
            matching = [d for d, c in devices if c == rc]
            if len(matching) != amount:
                raise ReshapeFailed(
                    nodename=guest.name,
                    reason=f"consumer {consumer} holds {amount} {rc} but "
                    f"its guest {guest.name} has {len(matching)} such "
                    "device(s) on the host",
                )
            for device in matching:
                placed.setdefault(device, Counter())[rc] += 1
        moves[consumer] = placed
    return moves


def nodename_of(tree: Any, old_uuids: Set[str]) -> str:
    return str(tree.data(sorted(old_uuids)[0]).name)


def move_allocations(
    tree: Any,
    nodename: str,
    moves: Moves,
    allocations: Mapping[str, Any],
    classes: Set[str],
) -> None:
    """Rewrite ``allocations`` in place (Nova's contract): the moved units
    leave the old providers and land on the per-pGPU ones."""
    for consumer, placed in moves.items():
        current = allocations[consumer]["allocations"]
        for rp_uuid in list(current):
            resources = current[rp_uuid].get("resources", {})
            for rc in list(resources):
                if rc in classes:
                    del resources[rc]
            if not resources:
                del current[rp_uuid]
        for device, counts in placed.items():
            rp = tree.data(naming.provider_name(nodename, device)).uuid
            entry = current.setdefault(rp, {"resources": {}})
            for rc, amount in counts.items():
                entry["resources"][rc] = entry["resources"].get(rc, 0) + amount


def providers_under(tree: Any, root_uuid: str) -> list[Any]:
    """Every provider of the root's tree, each read once, parents first."""
    return [tree.data(uuid) for uuid in tree.get_provider_uuids(root_uuid)]


def device_providers(
    under: list[Any], root_uuid: str, nodename: str, classes: Set[str]
) -> dict[str, Any]:
    """The root's children that are device providers of this library (or
    of Nova's vGPU code, which named them the same way), and the
    providers of a card's other types under its provider: those of the
    ``classes`` configured, and those whose class is configured no
    longer (a type dropped, or given another class) that a configuration
    of this library wrote (its trait on them): kept in their class while
    in use, else removed, never left offering what nobody binds."""
    found = {}
    parents = {root_uuid}
    for data in under:  # parents first
        if data.parent_uuid not in parents:
            continue
        if not data.name.startswith(f"{nodename}_"):
            continue
        if set(data.inventory) <= classes or config_traits(data.traits):
            found[data.name] = data
            if data.parent_uuid == root_uuid:
                parents.add(data.uuid)
    return found


def by_provider_name(
    tree: Any, allocations: Allocations | None
) -> dict[str, dict[str, int]]:
    """Nova's allocations, summed per provider name and resource class."""
    used: dict[str, Counter[str]] = {}
    for consumer in (allocations or {}).values():
        for rp_uuid, alloc in consumer.get("allocations", {}).items():
            if not tree.exists(rp_uuid):
                continue
            name = tree.data(rp_uuid).name
            for rc, amount in alloc.get("resources", {}).items():
                used.setdefault(name, Counter())[rc] += int(amount)
    return {name: dict(counts) for name, counts in used.items()}
