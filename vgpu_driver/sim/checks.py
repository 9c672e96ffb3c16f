"""What a host description must be to be believed: names, numbers and
capacities checked before anything is built from it."""

from __future__ import annotations

import re
import uuid as uuidlib
from typing import Any

from vgpu_driver.model import naming
from vgpu_driver.sim.specs import HostDescription

MAX_VFS = 256
MAX_CAPACITY = 65535  # vfio_ap reports this many
MAX_NUMA_NODE = 1023  # the kernel's largest NODES_SHIFT gives 1024 nodes
_PCI_ID = re.compile(r"0x[0-9a-fA-F]{4}")


def check_names(raw: dict[str, Any], bad: Any) -> None:
    """Names become file names in the rendered sysfs tree and XML: they
    must be plain names, and counts must be of a real host's size."""

    def plain(where: str, value: Any) -> None:
        if not isinstance(value, str) or not naming.is_device_name(value):
            raise bad(
                f"{where} {value!r} must be a plain name (letters, digits, "
                "'_', '.', '-'; no '/' and not starting with '.')"
            )

    def count(where: str, value: Any, low: int, high: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad(f"{where} {value!r} must be a whole number")
        if not low <= value <= high:
            raise bad(f"{where} {value} must be between {low} and {high}")

    def uuid(where: str, value: Any) -> None:
        try:
            uuidlib.UUID(str(value))
        except ValueError:
            raise bad(f"{where} {value!r} is not a UUID") from None

    def text(where: str, value: Any) -> None:
        if value is not None and not isinstance(value, str):
            raise bad(f"{where} {value!r} must be a string")

    def pci_id(where: str, value: Any) -> None:
        if not isinstance(value, str) or not _PCI_ID.fullmatch(value):
            raise bad(
                f"{where} {value!r} must be a PCI id such as '0x10de' "
                "(lspci -n shows it)"
            )

    def numa(where: str, value: Any) -> None:
        if value is not None:
            count(where, value, -1, MAX_NUMA_NODE)

    for i, p in enumerate(raw.get("parents", [])):
        if p.get("kind", "pci") != "pci":
            plain(f"parents[{i}].name", p["name"])
        else:
            pci_id(f"parents[{i}].vendor_id", p.get("vendor_id"))
            pci_id(f"parents[{i}].product_id", p.get("product_id"))
        for field in ("vendor", "product", "driver"):
            text(f"parents[{i}].{field}", p.get(field))
        numa(f"parents[{i}].numa_node", p.get("numa_node"))
        if "type_capacity" in p:
            count(
                f"parents[{i}].type_capacity",
                p["type_capacity"],
                0,
                MAX_CAPACITY,
            )
        for j, t in enumerate(p.get("types", [])):
            plain(f"parents[{i}].types[{j}].id", t["id"])
            for field in ("name", "description", "device_api"):
                text(f"parents[{i}].types[{j}].{field}", t.get(field))
            count(
                f"parents[{i}].types[{j}].capacity",
                t["capacity"],
                0,
                MAX_CAPACITY,
            )
    for i, m in enumerate(raw.get("mdevs", [])):
        uuid(f"mdevs[{i}].uuid", m["uuid"])
    given: dict[str, str] = {}  # device -> the guest that has it
    for i, g in enumerate(raw.get("guests", [])):
        uuid(f"guests[{i}].uuid", g["uuid"])
        for j, u in enumerate(g.get("mdevs", [])):
            uuid(f"guests[{i}].mdevs[{j}]", u)
        for field in ("mdevs", "pci"):
            for j, device in enumerate(g.get(field, [])):
                key = str(device).lower()
                if key in given:
                    raise bad(
                        f"guests[{i}].{field}[{j}] {device!r} is already "
                        f"the hostdev of {given[key]}: a device has one "
                        "guest, once"
                    )
                given[key] = f"guests[{i}]"
    for i, sriov in enumerate(raw.get("sriov", [])):
        count(f"sriov[{i}].vf_count", sriov["vf_count"], 0, MAX_VFS)
        if naming.normalize_pci_address(str(sriov["address"])) is None:
            raise bad(
                f"sriov[{i}].address {sriov['address']!r} is not a PCI address"
            )
        text(f"sriov[{i}].driver", sriov.get("driver"))
        numa(f"sriov[{i}].numa_node", sriov.get("numa_node"))
        mixed = bool(sriov.get("mixed_size", False))
        if mixed:
            count(
                f"sriov[{i}].framebuffer_gb",
                sriov.get("framebuffer_gb"),
                1,
                1024,
            )
        for j, t in enumerate(sriov["types"]):
            text(f"sriov[{i}].types[{j}].name", t.get("name"))
            if mixed:  # what fits is counted in framebuffer
                where = f"sriov[{i}].types[{j}].framebuffer_gb"
                count(where, t.get("framebuffer_gb"), 1, 1024)
            count(
                f"sriov[{i}].types[{j}].capacity",
                t["capacity"],
                0,
                MAX_CAPACITY,
            )


def check_over_capacity(description: HostDescription, bad: Any) -> None:
    for parent in description.parents:
        for spec in parent.types:
            used = sum(
                1
                for m in description.mdevs
                if m.parent == parent.name and m.type == spec.id
            )
            if used > spec.capacity:
                raise bad(
                    f"{parent.name} has {used} {spec.id} mdevs but "
                    f"room for {spec.capacity}"
                )
