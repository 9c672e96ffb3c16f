"""What is in use, what is configured, and whether a pass must know which
guest uses what (pure)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

from vgpu_driver.model import naming
from vgpu_driver.model.config import DeviceConfig
from vgpu_driver.model.counting import tally
from vgpu_driver.model.device import HostInventory

Allocations = Mapping[str, Mapping[str, Any]]


def configured_types(
    config: DeviceConfig, inventory: HostInventory
) -> dict[str, str]:
    """Parent name -> the type the configuration gives it."""
    configured = {}
    for parent in inventory.parents:
        type_cfg = config.type_for_parent(parent.keys, parent.type_ids)
        if type_cfg is not None:
            configured[parent.name] = type_cfg.type_id
    return configured


def held_devices(
    inventory: HostInventory,
    seen: Mapping[str, tuple[str, str]],
    claims: Sequence[tuple[str, str, str]],
) -> dict[str, Counter[str]]:
    """Device name (a VF parent counts as its GPU: see
    HostInventory.device_of) -> type id -> devices of that type that
    guests use or that are claimed (bound, not yet in a guest; or
    reserved for an incoming live migration). ``seen``: mdev uuid ->
    (parent, type) of every mdev seen; ``claims``: (device id, parent,
    type id)."""
    held: dict[str, Counter[str]] = defaultdict(Counter)
    users = inventory.mdev_users()
    where = tally(map(seen.get, users))  # looked up once per mdev
    for known, n in where.items():
        if known is not None:  # an mdev never seen: counted nowhere
            held[known[0]][known[1]] += n
    pci_users = inventory.pci_users()
    absent = [seen[u] for u in inventory.absent_in_use() if u in seen]
    for parent, type_id in claims_holding(
        inventory, claims, users, pci_users, absent
    ):
        held[parent][type_id] += 1
    if inventory.has_vf_parents:  # regrouped once per parent
        grouped: dict[str, Counter[str]] = defaultdict(Counter)
        for parent, counts in held.items():
            grouped[inventory.device_of(parent)].update(counts)
        held = grouped
    vf_owner = {
        vf.address: (pf.name, vf.current_type)
        for pf in inventory.pfs
        for vf in pf.vfs
    }
    plain = inventory.plain_vf_owner()
    for address in pci_users:
        if address in vf_owner and vf_owner[address][1]:
            pf_name, type_number = vf_owner[address]
            held[pf_name][naming.sriov_type_id(type_number)] += 1
        elif address in plain:
            held[plain[address].name][plain[address].type_id] += 1
    return dict(held)


def claims_holding(
    inventory: HostInventory,
    claims: Iterable[tuple[str, str, str]],
    users: Container[str],
    pci_users: Container[str],
    absent: Iterable[tuple[str, str]] = (),
) -> list[tuple[str, str]]:
    """(parent, type id) of each claim that holds a unit: one whose
    device no guest uses yet, and that is a device of the host or an
    mdev its parent still has room for (a bind's claim is recorded
    before its mdev is made). A claim past that room is a bind whose
    mdev cannot be made (its view was behind another manager's mdevs):
    it holds nothing, so no total is raised above what the card holds
    while it lasts. ``absent``: (parent, type id) of each mdev a guest
    uses that the host does not have (gone in a reboot, made again when
    the guest starts): counted in use, it takes its room first."""
    holding = []
    making = tally(absent)
    present: dict[str, set[str]] = {}  # parent -> its mdevs' uuids

    def made(parent: str, uuid: str) -> bool:
        if parent not in present:
            present[parent] = {m.uuid for m in inventory.mdevs_of(parent)}
        return uuid in present[parent]

    for device_id, parent, type_id in claims:
        if device_id in users or device_id in pci_users:
            continue
        found = inventory.parent(parent)
        if found is not None and not made(parent, device_id):
            known = found.type(type_id)
            room = known.available if known is not None else 0
            if making[parent, type_id] >= room:
                continue
            making[parent, type_id] += 1
        holding.append((parent, type_id))
    return holding


def guests_matter(
    config: DeviceConfig,
    seen: Iterable[str],
    providers: Iterable[str],
    nodename: str,
    inventory: HostInventory,
    allocations: Allocations | None,
) -> bool:
    """Whether knowing which guest uses what could change the plan (if
    not, a service's first pass need not read every guest: their devices
    are all of the types their parents serve, so in use or not they count
    the same). True when a reshape needs them, a type has max_instances
    (in-use devices count first) or a card_share (what another type's
    share reserves depends on what is in use), a device is of a type its
    parent does not serve (kept only while in use), an mdev seen before
    is gone (still counted while a guest names it), or a device provider
    (``providers``: their names) has no parent serving an enabled type.
    """
    if allocations is not None:
        return True
    if any(t.max_instances or t.card_share for t in config.types):
        return True
    present = {m.uuid for m in inventory.mdevs}
    if any(uuid not in present for uuid in seen):
        return True
    configured = configured_types(config, inventory)
    for mdev in inventory.mdevs:
        if configured.get(mdev.parent) != mdev.type_id:
            return True
    for pf in inventory.pfs:
        current = [
            naming.sriov_type_id(v.current_type)
            for v in pf.vfs
            if v.current_type
        ]
        supported = [t.type_id for t in pf.known_types()]
        type_cfg = config.type_for_parent(
            pf.keys, tuple(dict.fromkeys([*supported, *current]))
        )
        if any(type_cfg is None or t != type_cfg.type_id for t in current):
            return True
    serving = {
        naming.provider_name(nodename, device)
        for device in (
            *{inventory.device_of(parent) for parent in configured},
            *(pf.name for pf in inventory.pfs),
            *(gpu.name for gpu in inventory.plain_gpus),
        )
    }
    return any(name not in serving for name in providers)
