"""Claims: which device is given to which instance, and why (pure).

A claim is a JSON object kept in the claims record, keyed by device id:
the device (``kind``, ``id``, ``parent``, ``type_id``, ``created``), the
``instance`` and the ``purpose``:

* ``spawn``: bound, not yet in the guest's domain (it ends when the
  domain is seen with the device);
* ``migration``: reserved for an incoming live migration (it ends at
  success, when it becomes a spawn claim, or at rollback);
* ``release``: being handed back to the host (a VF's type cleared, an
  mdev removed); nobody takes it until that is done.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from vgpu_driver.exception import ClaimConflict
from vgpu_driver.model.binding import BoundDevice

SPAWN, MIGRATION, RELEASE = "spawn", "migration", "release"
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
) -> None:
    """Raise ClaimConflict unless ``held`` is what ``wanted`` asks for.
    ``any_parent``: the parents were picked by room, so only the types
    are compared."""

    def key(parent: str, type_id: str) -> tuple[str, str]:
        return ("", type_id) if any_parent else (parent, type_id)

    has = Counter(key(d.parent, d.type_id) for d in held)
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
