"""What disagrees between Placement, the claims, the guests and the host:
pure rules over one reading of each.

Findings, each naming its subject and what to do:

``allocation_without_guest``
    A consumer holds units on a device provider of this host, but no
    guest of that uuid is defined and nothing is claimed for it.
``guest_device_without_allocation``
    A guest uses more devices of a provider than its consumer holds there.
``guest_outside_nova``
    A guest whose domain has no Nova metadata (defined by hand or by
    another tool), neither claimed for nor a consumer in Placement, uses
    devices: Placement has no allocation for them; they are reserved on
    their provider.
``claim_of_gone_instance``
    A claim whose instance has no guest and no allocation here (a spawn
    that died half way). Fixable: the claim is dropped.
``orphaned_free_mdev``
    An mdev no guest uses and nobody claims, of a type its parent no
    longer serves. Fixable: it is removed.
``vf_type_unrecorded``
    A VF a guest uses carries a vGPU type the library has not recorded
    (it would not be restored after a reboot). Fixable: it is recorded.
``guest_device_gone``
    A guest's domain names an mdev that is not on the host (the GPU fell
    off the bus, or its mdev could not be recreated): the guest has lost
    its vGPU.
``device_unhealthy``
    A device whose driver is down (NVIDIA's vGPU manager not loaded): its
    provider takes no new guest until it is back.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any

from vgpu_driver.model import health
from vgpu_driver.model.device import Guest, HostInventory


@dataclasses.dataclass(frozen=True)
class Finding:
    kind: str
    subject: str  # a consumer, device or VF
    detail: str
    fixable: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def audit(
    inventory: HostInventory,
    *,
    claims: Mapping[str, Mapping[str, Any]],
    vf_types: Mapping[str, int],
    configured: Mapping[str, str],
    device_of: Mapping[str, str],
    parent_of: Mapping[str, str],
    allocations: Mapping[str, Mapping[str, int]] | None,
    ours: Collection[str] | None = None,
) -> list[Finding]:
    """``configured``: parent -> the type it serves. ``device_of``:
    provider uuid -> device (parent or PF) name. ``parent_of``: device id
    (mdev uuid, VF address) -> the parent or PF it is on.
    ``allocations``: consumer -> provider uuid -> units of device
    classes, or None when Placement could not be read (those checks are
    then skipped). ``ours``: the devices the library made (None: all);
    another manager's free mdevs are no finding: they are left alone."""
    guests = {g.uuid: g for g in inventory.guests}
    used = {**inventory.mdev_users(), **inventory.pci_users()}
    findings: list[Finding] = []
    if allocations is not None:
        findings += _allocations_unmatched(
            guests, claims, allocations, device_of, parent_of
        )
    findings += _orphaned_free_mdevs(inventory, used, claims, configured, ours)
    findings += _vf_types_unrecorded(inventory, used, vf_types)
    named = {c["instance"] for c in claims.values()} | set(allocations or {})
    findings += _outside_nova(inventory, named)
    findings += _gone_and_down(inventory)
    return findings


def _allocations_unmatched(
    guests: Mapping[str, Guest],
    claims: Mapping[str, Mapping[str, Any]],
    allocations: Mapping[str, Mapping[str, int]],
    device_of: Mapping[str, str],
    parent_of: Mapping[str, str],
) -> list[Finding]:
    """Placement's allocations against the guests and the claims: an
    allocation with neither, a guest using more than it holds, a claim
    whose instance has neither guest nor allocation."""
    findings: list[Finding] = []
    claimed_for = {c["instance"] for c in claims.values()}
    for consumer, held in sorted(allocations.items()):
        units = sum(held.values())
        if consumer not in guests and consumer not in claimed_for:
            findings.append(
                Finding(
                    "allocation_without_guest",
                    consumer,
                    f"holds {units} device(s) on "
                    + ", ".join(sorted(device_of.get(r, r) for r in held))
                    + " but no guest of that uuid is defined and "
                    "nothing is claimed for it; heal or delete the "
                    "allocation (nova-manage placement audit)",
                )
            )
    for uuid, guest in sorted(guests.items()):
        if not guest.nova and uuid not in allocations:
            continue  # no allocation to heal (see _outside_nova)
        on_device: Counter[str] = Counter(
            parent_of[d]
            for d in (*guest.mdevs, *guest.pci_devices)
            if d in parent_of
        )
        held_here: Counter[str] = Counter()
        for rp, units in allocations.get(uuid, {}).items():
            held_here[device_of.get(rp, rp)] += units
        for device, count in sorted(on_device.items()):
            if held_here[device] < count:
                findings.append(
                    Finding(
                        "guest_device_without_allocation",
                        uuid,
                        f"guest {guest.name} uses {count} device(s) on "
                        f"{device} but its consumer holds "
                        f"{held_here[device]} there; heal its allocation "
                        "(nova-manage placement heal_allocations)",
                    )
                )
    for device_id, claim in sorted(claims.items()):
        instance = claim["instance"]
        if instance not in guests and instance not in allocations:
            findings.append(
                Finding(
                    "claim_of_gone_instance",
                    device_id,
                    f"claimed for instance {instance} "
                    f"({claim['purpose']}), which has no guest and no "
                    "allocation on this host",
                    fixable=True,
                )
            )
    return findings


def _orphaned_free_mdevs(
    inventory: HostInventory,
    used: Mapping[str, str],
    claims: Mapping[str, Mapping[str, Any]],
    configured: Mapping[str, str],
    ours: Collection[str] | None,
) -> list[Finding]:
    """Free, unclaimed mdevs of the library's of a type their parent no
    longer serves (another manager's are left alone)."""
    findings = []
    for mdev in inventory.mdevs:
        if mdev.uuid in used or mdev.uuid in claims:
            continue
        if ours is not None and mdev.uuid not in ours:
            continue  # another manager's
        serves = configured.get(mdev.parent)
        if serves != mdev.type_id:
            findings.append(
                Finding(
                    "orphaned_free_mdev",
                    mdev.uuid,
                    f"free {mdev.type_id} mdev on {mdev.parent}, which "
                    + (f"now serves {serves}" if serves else "serves no type"),
                    fixable=True,
                )
            )
    return findings


def _vf_types_unrecorded(
    inventory: HostInventory,
    used: Mapping[str, str],
    vf_types: Mapping[str, int],
) -> list[Finding]:
    """Typed VFs guests use whose type the record would not restore
    after a reboot."""
    findings = []
    for pf in inventory.pfs:
        for vf in pf.vfs:
            if (
                vf.current_type
                and vf.address in used
                and vf_types.get(vf.address) != vf.current_type
            ):
                findings.append(
                    Finding(
                        "vf_type_unrecorded",
                        vf.address,
                        f"carries vGPU type {vf.current_type} for guest "
                        f"{used[vf.address]} but the record says "
                        f"{vf_types.get(vf.address, 'nothing')}; it would "
                        "not be restored after a reboot",
                        fixable=True,
                    )
                )
    return findings


def _outside_nova(inventory: HostInventory, named: set[str]) -> list[Finding]:
    return [
        Finding(
            "guest_outside_nova",
            guest.uuid,
            f"guest {guest.name} has no Nova metadata (defined outside "
            f"Nova) and uses {len(guest.mdevs) + len(guest.pci_devices)} "
            "device(s): Placement has no allocation for them, so they are "
            "reserved on their providers; undefine it to give them back",
        )
        for guest in inventory.unmarked_guests()
        if guest.uuid not in named
    ]


def _gone_and_down(inventory: HostInventory) -> list[Finding]:
    findings = []
    present = {m.uuid for m in inventory.mdevs}
    for guest in inventory.guests:
        # mdevs only: a guest's PCI devices may be Nova's own passthrough
        gone = [u for u in guest.mdevs if u not in present]
        for device in gone:
            findings.append(
                Finding(
                    "guest_device_gone",
                    guest.uuid,
                    f"guest {guest.name} uses {device}, which is not on "
                    "the host: it has lost its vGPU; check the GPU "
                    "('vgpu-driver doctor') and restart the compute service "
                    "to recreate it",
                )
            )
    for device, why in sorted(health.unhealthy(inventory).items()):
        findings.append(Finding("device_unhealthy", device, why))
    return findings
