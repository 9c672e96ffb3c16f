"""Which provider each type a device serves is reported on: pure rules.

A device serving one type has one provider, Nova's ``<node>_<device>``,
a child of the compute node. An NVIDIA SR-IOV card in mixed-size mode
serves several types, one provider each: one type on the card's
provider, each other type on ``<node>_<device>__<type>``, a child of the
card's. (A flavor's trait still picks its type: Placement takes a unit
from the provider carrying the trait, not from its child; the
functional test of mixed-size providers in a real Placement shows it.)

Which type keeps which provider follows the units already allocated,
not the enabled order alone: a new order must not count a unit in use
on two providers (the one its allocation is on, and a new one).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from vgpu_driver.model import naming
from vgpu_driver.model.config import TypeConfig


def providers_of(
    nodename: str,
    device: str,
    serves: list[TypeConfig],
    existing: Mapping[str, Iterable[str]],
    existing_traits: Mapping[str, Iterable[str]] | None,
) -> list[tuple[TypeConfig, str, str | None]]:
    """(type, its provider's name, its parent provider's name or None
    for the compute node) for each type a device serves, in their
    enabled order. The device's provider keeps the type whose trait it
    carries; if it carries none of them, the first type with no
    provider of its own takes it. Every other type is on its own
    provider under the device's, the one it has or a new one."""
    card = naming.provider_name(nodename, device)
    carried = set((existing_traits or {}).get(card, ()))
    holder = next(
        (t for t in serves if naming.type_trait(t.type_id) in carried),
        None,
    ) or next(
        (
            t
            for t in serves
            if naming.type_provider_name(nodename, device, t.type_id)
            not in existing
        ),
        None,
    )
    found: list[tuple[TypeConfig, str, str | None]] = []
    for cfg in serves:
        own = naming.type_provider_name(nodename, device, cfg.type_id)
        found.append((cfg, card, None) if cfg is holder else (cfg, own, card))
    return found


__all__ = ["providers_of"]
