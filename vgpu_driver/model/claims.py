"""Claims: which device is given to which instance, and why (pure).

A claim is a JSON object kept in the claims record, keyed by device id:
the device (``kind``, ``id``, ``parent``, ``type_id``, ``created``), the
``instance`` and the ``purpose``:

* ``spawn``: bound, not yet in the guest's domain (it ends when the
  domain is seen with the device);
* ``migration``: reserved for an incoming live migration (it ends at
  success, when it becomes a spawn claim, or at rollback);
* ``release``: being handed back to the host (a VF's type cleared, an
  mdev removed); nobody takes it until that is done. It names its
  carrier (``by``), the process carrying it out
  (:mod:`vgpu_driver.records.carriers`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from vgpu_driver.exception import ClaimConflict
from vgpu_driver.model.binding import BoundDevice

SPAWN, MIGRATION, RELEASE = "spawn", "migration", "release"
# an optional field of a spawn claim: made from Placement after the claims
# were lost (a spawn in flight), on a device that may or may not be the
# one that spawn got; dropped once the instance binds again or its guest
# is defined
IN_FLIGHT = "in_flight"
# an optional field of a release claim: the token of the process carrying
# it out (none in claims written before carriers were recorded)
CARRIER = "by"
PURPOSES = (SPAWN, MIGRATION, RELEASE)
DEVICE_FIELDS = ("kind", "id", "parent", "type_id", "created")
# every field of a claim and its JSON type
CLAIM_FIELDS: dict[str, type] = {
    "kind": str,
    "id": str,
    "parent": str,
    "type_id": str,
    "created": bool,
    "instance": str,
    "purpose": str,
}

Claim = dict[str, Any]
Claims = dict[str, Claim]  # device id -> claim


def claim_of(device: BoundDevice, instance: str, purpose: str) -> Claim:
    return {**device.record(), "instance": instance, "purpose": purpose}


def release_claim(device: BoundDevice, instance: str, carrier: str) -> Claim:
    return {**claim_of(device, instance, RELEASE), CARRIER: carrier}


def in_flight_claim(device: BoundDevice, instance: str) -> Claim:
    return {**claim_of(device, instance, SPAWN), IN_FLIGHT: True}


def in_flight_of(claims: Claims, instance: str) -> list[str]:
    """The device ids held for ``instance`` as a spawn in flight."""
    return [
        device_id
        for device_id, claim in claims.items()
        if claim["instance"] == instance and claim.get(IN_FLIGHT)
    ]


def deal_in_flight(
    in_flight: Mapping[str, Mapping[str, int]],
    free: Mapping[str, list[str]],
) -> dict[str, str]:
    """device id -> consumer: the free devices of each parent dealt to
    the consumers in flight there (``in_flight``: consumer -> parent ->
    units; ``free``: parent -> its free, unclaimed device ids). Which
    free device a spawn in flight got is not known, so every free device
    of such a parent is held: each consumer first gets its units, then
    the rest go round in turn."""
    dealt: dict[str, str] = {}
    parents = sorted({p for units in in_flight.values() for p in units})
    for parent in parents:
        consumers = sorted(c for c in in_flight if in_flight[c].get(parent))
        queue = [c for c in consumers for _ in range(in_flight[c][parent])]
        for i, device_id in enumerate(free.get(parent, [])):
            if i < len(queue):
                dealt[device_id] = queue[i]
            else:
                dealt[device_id] = consumers[i % len(consumers)]
    return dealt


def device_of(claim: Mapping[str, Any]) -> BoundDevice:
    return BoundDevice(**{k: claim[k] for k in DEVICE_FIELDS})


def held_by(claims: Claims, instance: str, purpose: str) -> list[BoundDevice]:
    """The devices ``instance`` holds for ``purpose``."""
    return [
        device_of(c)
        for c in claims.values()
        if c["instance"] == instance and c["purpose"] == purpose
    ]


def ended_by_guests(claims: Claims, used: Mapping[str, str]) -> list[str]:
    """Spawn claims whose guest's domain now has the device (``used``:
    device id -> guest uuid): they end, the domain keeps the device."""
    return [
        device_id
        for device_id, claim in claims.items()
        if claim["purpose"] == SPAWN
        and used.get(device_id) == claim["instance"]
    ]


def check_same_bind(
    instance: str,
    held: list[BoundDevice],
    wanted: Iterable[tuple[str, str, int]],
    any_parent: bool,
    device_of: Callable[[str], str] | None = None,
) -> None:
    """Raise ClaimConflict unless ``held`` is what ``wanted`` asks for.
    ``any_parent``: the parents were picked by room, so only the types
    are compared. ``device_of``: the device a held device's parent
    counts as (a VF parent: its GPU, which ``wanted`` names)."""

    def key(parent: str, type_id: str) -> tuple[str, str]:
        return ("", type_id) if any_parent else (parent, type_id)

    has = Counter(
        key(device_of(d.parent) if device_of else d.parent, d.type_id)
        for d in held
    )
    asks: Counter[tuple[str, str]] = Counter()
    for parent, type_id, units in wanted:
        asks[key(parent, type_id)] += units
    if has != asks:
        raise ClaimConflict(
            instance=instance,
            held=_describe_units(has),
            wanted=_describe_units(asks) or "no device",
        )


def _describe_units(units: Counter[tuple[str, str]]) -> str:
    return ", ".join(
        f"{n} x {type_id}" + (f" on {parent}" if parent else "")
        for (parent, type_id), n in sorted(units.items())
    )
