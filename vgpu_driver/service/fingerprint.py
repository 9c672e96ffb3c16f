"""What a refresh depended on and what it left in the tree, and whether
the next pass would change anything (pure but for reading the tree).

A pass changes nothing when the reading is the same (same generation),
and so are the configuration, the claims, the parents failing and what
the tree holds. A reading whose devices are the same and whose guests
alone changed (a guest defined or gone, a spawn claim ended) changes
nothing either when guests cannot change the plan: no type with
``max_instances`` or ``card_share``, no device of a type its parent
does not serve, no provider kept only for devices in use, no device
another manager made
(:func:`~vgpu_driver.model.usage.guests_matter`), and no guest outside
Nova among those changed (what it uses is reserved). Then a guest's event
costs what an idle pass costs, however many mdevs and guests there are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Container, Mapping
from typing import Any

from vgpu_driver.model import usage
from vgpu_driver.model.config import DeviceConfig
from vgpu_driver.model.copies import replaced
from vgpu_driver.model.device import HostInventory
from vgpu_driver.model.foreign import foreign_devices, outside_changed
from vgpu_driver.model.made import changed

Claimed = tuple[tuple[str, str, str], ...]  # (device id, parent, type id)


@dataclasses.dataclass(frozen=True)
class RefreshFingerprint:
    """What a pass depended on and what it left in the tree."""

    nodename: str
    inventory: HostInventory  # the reading (same generation: unchanged)
    config: Any  # the DeviceConfig in force (same object: not reloaded)
    claims: Claimed
    # provider uuid -> (inventory, traits) written (by uuid: Nova's tree
    # finds a child of the root by uuid at once, by name only by walking)
    written: dict[str, tuple[Any, frozenset[str]]]
    providers: frozenset[str]  # every provider uuid under the node
    failing: frozenset[str]  # the parents marked failing, as planned
    names: frozenset[str] = frozenset()  # the device providers' names
    owned: frozenset[str] | None = None  # the devices the library made
    # guests and claims cannot change the plan of these devices (None:
    # not asked yet; kept while only guests change)
    guests_free: bool | None = None


def same_but_guests(
    last: RefreshFingerprint,
    inventory: HostInventory,
    claims: Claimed,
    owned: frozenset[str] | None,
    seen: Callable[[], Mapping[str, tuple[str, str]]],
    named: tuple[Container[str], Container[str]],
) -> RefreshFingerprint | None:
    """``last`` taking in ``inventory`` and ``claims`` when they differ
    from its own in what guests use alone, and that cannot change the
    plan (see the module's doc); None otherwise. Whether guests matter
    is asked once per reading of the devices, not once per change
    (``seen``: gives the mdevs seen, asked for then alone; ``named``:
    the caller's instances when ``last`` was judged, and now)."""
    if (
        last.inventory.generation == inventory.generation
        and last.claims == claims
        and _same_made(owned, last.owned)
    ):
        return last
    if not inventory.guests_known or not inventory.same_devices(
        last.inventory
    ):
        return None
    if owned is None or not _same_made(owned, last.owned):
        return None
    if outside_changed(last.inventory, inventory, *named):
        return None  # what a guest outside Nova uses is reserved
    free = last.guests_free
    if free is None:
        config: DeviceConfig = last.config
        free = not foreign_devices(inventory, owned) and not (
            usage.guests_matter(
                config, seen(), last.names, last.nodename, inventory, None
            )
        )
    if not free:
        return None
    return replaced(last, inventory=inventory, claims=claims, guests_free=True)


def _same_made(
    now: frozenset[str] | None, last: frozenset[str] | None
) -> bool:
    """The same devices made (two sets compare element by element even
    when they are one object, and the devices made are asked at every
    pass: compared by what changed between them where it is known)."""
    if now is None or last is None:
        return now is last
    return not changed(now, last)


def tree_holds(tree: Any, nodename: str, last: RefreshFingerprint) -> bool:
    """The tree still holds what the last pass wrote."""
    if set(tree.get_provider_uuids(nodename)) != last.providers:
        return False  # a provider came or went under the node
    try:
        return not any(
            tree.has_inventory_changed(uuid, inv)
            or tree.have_traits_changed(uuid, traits)
            for uuid, (inv, traits) in last.written.items()
        )
    except ValueError:  # a provider of ours is gone (both trees say so)
        return False
