"""``vgpu-driver discover``: what the host has and who uses it."""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from typing import Any

from vgpu_driver import exception
from vgpu_driver.cmd import output
from vgpu_driver.cmd.context import Context
from vgpu_driver.conf import devices, loader
from vgpu_driver.host.pci_scan import scan_gpus
from vgpu_driver.model import check, gpus, naming, nvml, trait
from vgpu_driver.model.device import HostInventory, MdevType
from vgpu_driver.records.claims import made_on_disk
from vgpu_driver.records.store import StateStore


def _details(mdev_type: MdevType) -> dict[str, Any]:
    caps = trait.capabilities_of(mdev_type)
    return {
        "framebuffer_mb": caps.framebuffer_mb,
        "heads": caps.heads,
        "max_resolution": (
            "{}x{}".format(*caps.max_resolution)
            if caps.max_resolution
            else None
        ),
    }


def _details_text(entry: dict[str, Any]) -> str:
    parts = []
    if entry["framebuffer_mb"]:
        parts.append(f"{entry['framebuffer_mb']} MB")
    if entry["heads"]:
        parts.append(f"{entry['heads']} heads")
    if entry["max_resolution"]:
        parts.append(entry["max_resolution"])
    return ", ".join(parts) or "-"


def _made(conf: Any) -> frozenset[str] | None:
    """The devices the library made on this host, as its records say
    (None: no record yet, or it cannot be read)."""
    try:
        return made_on_disk(StateStore(devices.records_path(conf)))
    except exception.VgpuDriverError:
        return None


def _made_by(device_id: str, made: frozenset[str] | None) -> str | None:
    if made is None:
        return None
    return "vgpu-driver" if device_id in made else "another manager"


def report(
    inventory: HostInventory, made: frozenset[str] | None = None
) -> dict[str, Any]:
    """``made``: the devices the library made (None: unknown)."""
    users = inventory.mdev_users()
    pci_users = inventory.pci_users()
    names = {g.uuid: g.name for g in inventory.guests}
    used = Counter((m.parent, m.type_id) for m in inventory.mdevs)
    parents = []
    for parent in inventory.parents:
        entry = dataclasses.asdict(parent)
        # as device_addresses spells it: the PCI address, or the name
        entry["config_name"] = parent.address or parent.name
        for type_entry, mdev_type in zip(
            entry["types"], parent.types, strict=True
        ):
            type_entry["used"] = used[(parent.name, type_entry["id"])]
            type_entry.update(_details(mdev_type))
        parents.append(entry)
    mdevs = []
    for mdev in inventory.mdevs:
        entry = dataclasses.asdict(mdev)
        guest = users.get(mdev.uuid)
        entry["guest"] = (
            {"uuid": guest, "name": names.get(guest)} if guest else None
        )
        entry["made_by"] = _made_by(mdev.uuid, made)
        mdevs.append(entry)
    sriov = []
    said = inventory.nvml
    for pf in inventory.pfs:
        entry = dataclasses.asdict(pf)
        gpu = said.gpu(pf.address) if said else None
        entry["nvml"] = (
            {
                "mig": gpu.mig,
                "mixed_size": gpu.mixed_size,
                "free_instances": dict(gpu.free_instances),
                "fault": gpu.fault,
                "migration": gpu.migration,
            }
            if gpu
            else None
        )
        for vf_entry in entry["vfs"]:
            vf_entry["guest"] = pci_users.get(vf_entry["address"])
            vf_entry["made_by"] = (
                _made_by(vf_entry["address"], made)
                if vf_entry["current_type"]
                else None
            )
        sriov.append(entry)
    return {
        "parents": parents,
        "mdevs": mdevs,
        "sriov": sriov,
        "guests": [dataclasses.asdict(g) for g in inventory.guests],
        "nvml": (
            {
                "driver_version": said.driver_version,
                "heterogeneous": said.heterogeneous,
            }
            if said
            else None
        ),
    }


def _nvml_text(said: dict[str, Any] | None) -> str:
    """What NVML says of a card, in a table cell."""
    if said is None:
        return "-"
    if said["fault"]:
        return str(said["fault"])
    if said["mig"]:
        free = nvml.free_instances_text(said["free_instances"].items())
        return f"MIG on, free GPU instances {free}"
    if said["mixed_size"] is not None:
        return "mixed-size mode" if said["mixed_size"] else "equal-size mode"
    return "healthy"


def _gpu_rows(conf: Any, inventory: HostInventory, config: Any) -> list[Any]:
    """Every GPU on the host, supported or not, and what is done with it."""
    cards = scan_gpus(str(conf.libvirt.sysfs_root))
    return [
        {
            "address": r.gpu.address,
            "vendor": r.gpu.vendor,
            "product_id": r.gpu.product_id,
            "driver": r.gpu.driver,
            "vfs": r.vfs,
            "role": r.role,
            "note": r.note,
            "offered": r.offered,
        }
        for r in gpus.roles(cards, inventory, config)
    ]


def run(context: Context) -> int:
    conf = context.conf
    config = loader.load_device_config(conf)
    inventory = context.host.discover()
    problems = [str(p) for p in check.host_problems(config, inventory)]
    data = report(inventory, _made(conf))
    data["gpus"] = _gpu_rows(conf, inventory, config)
    if conf.command.format == "json":
        output.dump_json({**data, "problems": problems})
        return 0
    print(f"Host: {conf.host} ({context.host.uri})\n")
    _print_parents(data["parents"])
    _print_sriov(data["sriov"])
    _print_gpus(data["gpus"])
    print("\nmdevs")
    if not data["mdevs"]:
        print("none")
    for problem in problems:
        print(f"WARNING: {problem}", file=sys.stderr)
    if data["mdevs"]:
        _print_mdevs(data["mdevs"], data["parents"])
    return 0


def _print_parents(parents: list[dict[str, Any]]) -> None:
    """The mdev parents, a row per type (the parent named on its first)."""
    rows = []
    for parent in parents:
        for index, mdev_type in enumerate(parent["types"]):
            head = (
                [
                    parent["config_name"],
                    parent["product"] or parent["driver"],
                    parent["numa_node"],
                ]
                if index == 0
                else ["", "", ""]
            )
            rows.append(
                [
                    *head,
                    mdev_type["id"],
                    mdev_type["name"],
                    _details_text(mdev_type),
                    mdev_type["available"],
                    mdev_type["used"],
                ]
            )
    print("mdev parents")
    if not rows:
        print("none")
        return
    output.table(
        [
            "Parent",
            "Product",
            "NUMA",
            "Type",
            "Type name",
            "Details",
            "Free",
            "Used",
        ],
        rows,
    )


def _print_sriov(cards: list[dict[str, Any]]) -> None:
    """The NVIDIA SR-IOV cards (nothing when there are none)."""
    if not cards:
        return
    print("\nNVIDIA SR-IOV GPUs (one vGPU per VF)")
    rows = []
    for pf in cards:
        in_use = Counter(
            vf["current_type"] for vf in pf["vfs"] if vf["current_type"]
        )
        creatable = sorted(
            {t["id"] for vf in pf["vfs"] for t in vf["creatable"]}
        )
        rows.append(
            [
                pf["address"],
                pf["numa_node"],
                len(pf["vfs"]),
                [
                    f"{naming.sriov_type_id(t)} x{n}"
                    for t, n in sorted(in_use.items())
                ],
                [naming.sriov_type_id(t) for t in creatable],
                _nvml_text(pf["nvml"]),
            ]
        )
    output.table(
        ["Physical GPU", "NUMA", "VFs", "In use", "Creatable", "NVML"],
        rows,
    )


def _print_gpus(gpus: list[dict[str, Any]]) -> None:
    """Every GPU on the host and what the library does with it."""
    print("\nGPUs on the host")
    if not gpus:
        print("none")
        return
    output.table(
        ["Address", "Vendor", "Device", "Driver", "VFs", "Role", "Note"],
        [
            [
                g["address"],
                g["vendor"],
                g["product_id"],
                g["driver"],
                g["vfs"] or "",
                g["role"],
                g["note"],
            ]
            for g in gpus
        ],
    )


def _print_mdevs(
    mdevs: list[dict[str, Any]], parents: list[dict[str, Any]]
) -> None:
    """Every mdev, its parent as the configuration spells it."""
    spelled = {p["name"]: p["config_name"] for p in parents}
    output.table(
        ["UUID", "Type", "Parent", "State", "Guest", "Made by"],
        [
            [
                m["uuid"],
                m["type_id"],
                spelled.get(m["parent"], m["parent"]),
                "active" if m["active"] else "defined",
                m["guest"]["name"] if m["guest"] else None,
                m["made_by"] or "unknown",
            ]
            for m in mdevs
        ],
    )
