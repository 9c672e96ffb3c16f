"""``vgpu-driver inventory``: the provider tree the host would report."""

from __future__ import annotations

import uuid
from typing import Any

from vgpu_driver.cmd import output
from vgpu_driver.cmd.context import Context
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.model.provider_tree import INVENTORY_FIELDS, ProviderTree

ROOT_NAMESPACE = uuid.UUID("5d0e7bd4-2d2f-4f4e-8d68-4a9b1c5b3e10")


def build_tree(driver: VgpuDriver, nodename: str) -> ProviderTree:
    tree = ProviderTree()
    tree.new_root(nodename, str(uuid.uuid5(ROOT_NAMESPACE, nodename)))
    driver.update_provider_tree(tree, nodename)
    return tree


def tree_report(tree: Any, nodename: str) -> dict[str, Any]:
    """The JSON shape: providers, the root first, then by name."""
    names = {}
    providers = []
    uuids = tree.get_provider_uuids(nodename)
    datas = [tree.data(u) for u in uuids]
    for data in datas:
        names[data.uuid] = data.name
    root, children = datas[0], sorted(datas[1:], key=lambda d: d.name)
    for data in [root, *children]:
        providers.append(
            {
                "name": data.name,
                "parent": names.get(data.parent_uuid),
                "inventories": {
                    rc: {k: record[k] for k in INVENTORY_FIELDS}
                    for rc, record in sorted(data.inventory.items())
                },
                "traits": sorted(data.traits),
            }
        )
    return {"providers": providers}


def print_table(report: dict[str, Any]) -> None:
    """One row per inventory; a provider under another device provider
    (a mixed-size card's other types) is shown indented under it, and one
    with no inventory (a full card's own, holding them) with none."""
    root = report["providers"][0]["name"]
    rows = []
    for provider in report["providers"][1:]:
        named = [
            t
            for t in provider["traits"]
            if not t.startswith("HW_GPU_RESOLUTION_")
        ]
        resolutions = len(provider["traits"]) - len(named)
        if resolutions:
            named.append(f"+{resolutions} HW_GPU_RESOLUTION_*")
        name = provider["name"]
        if provider["parent"] not in (None, root):
            name = f"  └ {name}"
        records = provider["inventories"].items() or [
            ("-", {"total": 0, "reserved": 0})
        ]
        for rc, record in records:
            rows.append([name, rc, record["total"], record["reserved"], named])
    print(f"Compute node: {root}")
    output.table(
        ["Provider", "Resource class", "Total", "Reserved", "Traits"], rows
    )


def notes(driver: VgpuDriver) -> list[dict[str, str]]:
    """Why a provider offers less than the host lists, or nothing new."""
    found = []
    for plan in driver.last_plans:
        if plan.limit:
            found.append({"provider": plan.name, "note": plan.limit})
        if plan.reason:
            found.append({"provider": plan.name, "note": plan.reason})
    return found


def run(context: Context) -> int:
    driver = VgpuDriver(context.conf, context.host, persist=False)
    nodename = context.conf.host
    report = tree_report(build_tree(driver, nodename), nodename)
    report["notes"] = notes(driver)
    if context.conf.command.format == "json":
        output.dump_json(report)
    else:
        print_table(report)
        for note in report["notes"]:
            print(f"NOTE: {note['provider']}: {note['note']}")
    return 0
