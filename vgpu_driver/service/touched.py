"""A pass after the host said which parents changed (an mdev made or
removed, its parent's room with it) or which NVIDIA SR-IOV cards (a VF
typed or cleared): only their providers are planned again, and only
those whose plan changed are written.

A parent's plan depends on its own reading, its mdevs, what guests and
claims hold there, which of its mdevs another manager made, and the
configuration; never on another parent's, but where ``max_instances``
shares a cap between parents, or a GPU's provider stands for its VF
parents. So the pass plans the parents touched alone when:

* the last pass planned the reading the host's change is from, with the
  same configuration, node, failing parents, and the tree still holds
  what it wrote;
* no type has ``max_instances``, and no parent touched is a VF parent
  (an NVIDIA SR-IOV card whose VFs changed is planned alone, as a
  parent is);
* the claims and the devices the library made differ (if at all) on the
  parents and cards touched alone;
* the guests the host said changed with the devices (a spawn whose bind
  made its mdev, a delete that removed it), if any, use mdevs of the
  parents touched alone;

and keeps that plan when its providers are the same ones, carrying the
same traits (only totals, reservations and their reasons changed).
Otherwise the pass plans the whole host, as it would anyway.
:func:`~vgpu_driver.model.inventory.plan_providers` is the one planner:
the parents touched are handed to it as a reading of their own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Container, Mapping
from typing import Any

from vgpu_driver.model import naming
from vgpu_driver.model.config import DeviceConfig
from vgpu_driver.model.counting import tally
from vgpu_driver.model.device import HostInventory
from vgpu_driver.model.device_changes import touched_parents
from vgpu_driver.model.foreign import Busy, foreign_on, outside_nova
from vgpu_driver.model.inventory import ProviderPlan, plan_providers
from vgpu_driver.model.made import changed
from vgpu_driver.model.usage import claims_holding
from vgpu_driver.service.fingerprint import Claimed, RefreshFingerprint
from vgpu_driver.service.tree_writer import ConfiguredTraits, TreeWriter

Replan = tuple[list[ProviderPlan], list[tuple[str, ProviderPlan]]]


def parents_to_plan(
    last: RefreshFingerprint,
    nodename: str,
    now: HostInventory,
    config: DeviceConfig,
    claims: Claimed,
    owned: frozenset[str] | None,
    seen: Callable[[str], tuple[str, str] | None],
    failing: frozenset[str],
) -> frozenset[str] | None:
    """The parents to plan again, when they alone can have changed
    (see the module's doc); None: plan the whole host."""
    touched = touched_parents(last.inventory, now)
    if (
        touched is None
        or last.nodename != nodename
        or last.config is not config
        or last.failing != failing
        or not now.guests_known
        or owned is None
        or last.owned is None
        or any(t.max_instances for t in config.types)
    ):
        return None
    for name in touched:
        parent = now.parent(name)
        if parent is None and now.pf(name) is None:
            return None
        if parent is not None and parent.physical_function:
            return None
    if now.guest_changes is not None and not _guests_on(
        last.inventory, now, touched
    ):
        return None
    if claims != last.claims and any(
        parent not in touched
        for _device, parent, _type in set(claims) ^ set(last.claims)
    ):
        return None
    if owned is not last.owned and not _made_on(
        changed(owned, last.owned), touched, now, seen
    ):
        return None
    return touched


def _guests_on(
    before: HostInventory, now: HostInventory, touched: Collection[str]
) -> bool:
    """The guests changed with the node devices (a spawn whose bind made
    its mdev, a delete that removed it) use, before and now, mdevs of
    the parents ``touched`` alone: planning those plans what they
    changed."""
    told = now.guest_changes
    assert told is not None  # (said from the reading the devices are)
    mdevs = {m.uuid for name in touched for m in before.mdevs_of(name)} | {
        m.uuid for name in touched for m in now.mdevs_of(name)
    }
    return all(
        not guest.pci_devices and mdevs.issuperset(guest.mdevs)
        for _uuid, *pair in told[1]
        for guest in pair
        if guest is not None
    )


def _made_on(
    changed: Collection[str],
    touched: Collection[str],
    now: HostInventory,
    seen: Callable[[str], tuple[str, str] | None],
) -> bool:
    """Are the devices ``changed`` among those the library made (mdev
    uuids, VF addresses) on the parents and cards ``touched`` alone (an
    mdev never seen counts nowhere)?"""
    card_of: dict[str, str] | None = None
    for device in changed:
        where = seen(device)
        if where is not None:
            if where[0] not in touched:
                return False
            continue
        if card_of is None:  # a VF's card, looked up when one changed
            card_of = {vf.address: pf.name for pf in now.pfs for vf in pf.vfs}
        card = card_of.get(device)
        if card is not None and card not in touched:
            return False
    return True


def replan(
    nodename: str,
    config: DeviceConfig,
    now: HostInventory,
    alone: HostInventory,
    *,
    last_plans: list[ProviderPlan],
    uuids: Mapping[str, str],
    tree: Any,
    held: Mapping[str, Mapping[str, int]],
    owned: frozenset[str],
    claims: Claimed,
    failing: frozenset[str],
    owner_trait: str,
    named: Container[str],
) -> Replan | None:
    """(every plan, the (provider uuid, plan) of those that changed),
    the parents of ``alone`` (:func:`~vgpu_driver.model.device_changes.
    parents_alone` of ``now``) planned again; None when their providers
    would not be the same ones with the same traits."""
    touched = {p.name for p in alone.parents} | {p.name for p in alone.pfs}
    before = [p for p in last_plans if p.device in touched]
    if any(p.name not in uuids for p in before):
        return None
    data = {p.name: tree.data(uuids[p.name]) for p in before}
    claimed = {device for device, _parent, _type in claims}
    foreign = foreign_on(
        alone.mdevs,
        alone.pfs,
        owned,
        Busy((now.mdev_users(), now.pci_users(), claimed)),
    )
    after = plan_providers(
        nodename,
        config,
        alone,
        held=held,
        existing={n: list(d.inventory) for n, d in data.items()},
        existing_traits={n: d.traits for n, d in data.items()},
        unschedulable=failing,
        owner_trait=owner_trait,
        foreign=foreign,
        outside=outside_nova(now, named, alone),
    )
    if [_shape(p) for p in after] != [_shape(p) for p in before]:
        return None
    changed = [
        (uuids[new.name], new)
        for new, old in zip(after, before, strict=True)
        if new != old
    ]
    fresh = {p.name: p for p in after}
    return [fresh.get(p.name, p) for p in last_plans], changed


def held_on(
    now: HostInventory,
    seen: Callable[[str], tuple[str, str] | None],
    claims: Claimed,
    touched: Collection[str],
) -> dict[str, Counter[str]]:
    """What :func:`~vgpu_driver.model.usage.held_devices` says of the
    parents ``touched`` (plain mdev parents) and cards, counted from
    their own mdevs and typed VFs, the mdevs in use the host does not
    have, and the claims."""
    users = now.mdev_users()
    pci_users = now.pci_users()
    held: dict[str, Counter[str]] = {}
    for name in touched:
        held[name] = counts = tally(
            m.type_id for m in now.mdevs_of(name) if m.uuid in users
        )
        pf = now.pf(name)
        if pf is not None:
            for vf in pf.vfs:
                if vf.current_type and vf.address in pci_users:
                    counts[naming.sriov_type_id(vf.current_type)] += 1
    absent = []
    for uuid in now.absent_in_use():
        where = seen(uuid)
        if where is not None and where[0] in held:
            held[where[0]][where[1]] += 1
            absent.append(where)
    here = [c for c in claims if c[1] in held]
    for parent, type_id in claims_holding(now, here, users, pci_users, absent):
        held[parent][type_id] += 1
    return held


def write_changed(
    writer: TreeWriter,
    tree: Any,
    nodename: str,
    changed: list[tuple[str, ProviderPlan]],
    now: HostInventory,
    traits: ConfiguredTraits,
) -> dict[str, tuple[Any, frozenset[str]]]:
    """Write the plans that changed into their providers (which exist);
    returns provider uuid -> (inventory, traits) as written."""
    written = {}
    root = tree.data(nodename).uuid
    for uuid, plan in changed:
        placed = writer.write(tree, root, plan, now, traits, tree.data(uuid))
        written[uuid] = (placed.inventory, placed.traits)
    return written


def _shape(plan: ProviderPlan) -> tuple[Any, ...]:
    """What a provider is, not what it offers."""
    return (
        plan.name,
        plan.device,
        plan.type_id,
        plan.resource_class,
        plan.traits,
        plan.parent,
    )
