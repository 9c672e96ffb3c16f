"""``vgpu-driver audit [--fix]``: what disagrees between Placement, the
library's claims, the guests and the devices on the host.

The rules are in :mod:`vgpu_driver.model.audit`. ``--fix`` repairs only
what is safe: it drops claims of instances that are gone (finishes their
releases cut short, leaving those in flight to their process), records the
vGPU types of VFs guests use, and removes free mdevs of a type their
parent no longer serves (each re-checked under the records' lock).
Allocations are only reported: healing them is Nova's job.

Exit code 1 when a finding remains (not fixed), 0 otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_driver import exception
from vgpu_driver.cmd import output
from vgpu_driver.cmd.context import Context
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.model.audit import Finding, audit
from vgpu_driver.model.claims import RELEASE
from vgpu_driver.model.device import HostInventory
from vgpu_driver.model.foreign import foreign_devices
from vgpu_driver.placement.allocations import device_allocations


def device_ids_on(
    driver: VgpuDriver, inventory: HostInventory
) -> dict[str, str]:
    """Device id -> the device whose provider reports it (a VF parent's
    mdev: its GPU's)."""
    found = {uuid: where[0] for uuid, where in driver.seen_mdevs().items()}
    found.update({m.uuid: m.parent for m in inventory.mdevs})
    found = {d: inventory.device_of(p) for d, p in found.items()}
    for pf in inventory.pfs:
        found.update({vf.address: pf.name for vf in pf.vfs})
    return found


def fix(
    driver: VgpuDriver,
    inventory: HostInventory,
    findings: list[Finding],
    claims: Mapping[str, Mapping[str, Any]],
) -> list[str]:
    """Repair the fixable findings, each only if what the audit read
    still holds (re-checked under the records' lock): ``claims`` are the
    claims the findings were made from."""
    by_kind: dict[str, list[str]] = {}
    for finding in findings:
        if finding.fixable:
            by_kind.setdefault(finding.kind, []).append(finding.subject)
    done = []
    gone = [
        d for d in by_kind.get("claim_of_gone_instance", []) if d in claims
    ]
    # a release is finished, not dropped: the host is changed as decided
    # (and one in flight is left to the process carrying it out)
    releases = [d for d in gone if claims[d]["purpose"] == RELEASE]
    for device_id in driver.binder.drop_claims(
        {d: claims[d] for d in gone if d not in releases}
    ):
        done.append(f"dropped the claim on {device_id}")
    if releases:
        for device_id in driver.binder.finish_releases():
            done.append(f"finished the release of {device_id}")
    current = {
        vf.address: vf.current_type for pf in inventory.pfs for vf in pf.vfs
    }
    for address in driver.binder.record_vf_types(
        {a: current[a] for a in by_kind.get("vf_type_unrecorded", [])}
    ):
        done.append(f"recorded the vGPU type of VF {address}")
    for uuid in driver.binder.remove_free_mdevs(
        by_kind.get("orphaned_free_mdev", [])
    ):
        done.append(f"removed free mdev {uuid}")
    return done


def run(context: Context) -> int:
    conf = context.conf
    driver = VgpuDriver(conf, context.host)
    inventory = driver.discover(rescan_guests=True)
    # the claims are read before Placement: a claim made after this
    # reading is not judged, and an instance whose claim is read here
    # already had its allocation (Placement allocates before a bind)
    claims = driver.binder.claims()
    note = None
    device_of: dict[str, str] = {}
    allocations: dict[str, dict[str, int]] | None = None
    try:
        device_of, allocations = device_allocations(
            conf, conf.host, driver.managed_classes()
        )
    except exception.VgpuDriverError as exc:
        note = f"Placement not checked: {exc}"
    owned = driver.binder.owned()
    foreign = (
        sorted(foreign_devices(inventory, owned)) if owned is not None else []
    )
    findings = audit(
        inventory,
        claims=claims,
        vf_types=driver.binder.vf_types,
        configured=driver.configured_types(inventory),
        device_of=device_of,
        parent_of=device_ids_on(driver, inventory),
        allocations=allocations,
        ours=owned,
    )
    fixed = (
        fix(driver, inventory, findings, claims) if conf.command.fix else []
    )
    remaining = (
        [f for f in findings if not f.fixable]
        if conf.command.fix
        else findings
    )
    if conf.command.format == "json":
        report: dict[str, Any] = {
            "host": conf.host,
            "placement_checked": allocations is not None,
            "note": note,
            "findings": [f.as_dict() for f in findings],
            "fixed": fixed,
            "foreign": foreign,
        }
        output.dump_json(report)
    else:
        print(f"Audit of {conf.host}")
        if note:
            print(f"NOTE: {note}")
        if findings:
            output.table(
                ["Finding", "Subject", "Detail", "Fixable"],
                [
                    [f.kind, f.subject, f.detail, "yes" if f.fixable else "no"]
                    for f in findings
                ],
            )
        else:
            print("No mismatch: none")
        for line in fixed:
            print(f"Fixed: {line}")
        if foreign:
            print(
                "Made by another manager (left alone, counted as used): "
                + ", ".join(foreign)
            )
    return 1 if remaining else 0
