"""Host descriptions: a JSON file that describes a whole host.

A description lists the host's mdev parents and their types (with the
kernel's capacity of each), existing mdevs, guests and the devices they
use, and NVIDIA SR-IOV cards. It is turned into

* a libvirt test-driver XML file (:func:`render_libvirt_xml`), served by
  ``test:///ABSOLUTE/PATH.xml``,
* a fake sysfs tree (:func:`render_sysfs`), for what libvirt does not
  report (SR-IOV VFs, type descriptions, drivers, virtual parents), and
* an in-process simulated host (:mod:`vgpu_driver.sim.simulated`).

Format (every key not marked optional is required)::

    {
      "summary": "...",                      # optional
      "hostname": "compute1",                # optional
      "config": ["[devices]", "..."],        # optional nova.conf lines
      "parents": [{
        "kind": "pci",         # or "css", "ap_matrix", "virtual"
        "address": "0000:84:00.0",           # pci only
        "name": "mtty",                      # non-pci only
        "vendor_id": "0x10de", "vendor": "NVIDIA Corporation",
        "product_id": "0x13bd", "product": "GM107GL [Tesla M10]",
        "driver": "nvidia", "numa_node": 0,  # all optional
        "homogeneous": true,   # one type at a time (default true)
        "types": [{"id": "nvidia-35", "name": "GRID M10-0B",
                   "device_api": "vfio-pci", "capacity": 16,
                   "description": "num_heads=2, ..."}]   # name optional
      }],
      "mdevs": [{"uuid": "...", "parent": "0000:84:00.0",
                 "type": "nvidia-35", "legacy_name": false}],
      "guests": [{"uuid": "...", "name": "vm1",
                  "mdevs": ["<uuid>"], "pci": ["0000:41:00.4"],
                  "nova": true}],   # false: defined outside Nova
      "sriov": [{"address": "0000:41:00.0", "vendor_id": "0x10de",
                 "product_id": "0x26b9",
                 "driver": "nvidia",   # the default (vGPUs need it)
                 "numa_node": 0, "vf_count": 32,
                 "types": [{"id": 1145, "name": "NVIDIA L40S-1B",
                            "capacity": 32}],
                 "vf_types": {"0000:41:00.4": 1145},
                 "mixed_size": false,  # optional; if true, give
                 "framebuffer_gb": 48}]  # it and each type's
    }

An SR-IOV card may also name a shipped capture of a free VF's
``creatable_vgpu_types`` (``"creatable_from":
"l40s-creatable-vgpu-types.txt"``, in ``data/captures``): its types must
then be the capture's, every one, ids and names, in its order. A parent
may take its types from a shipped capture of its
``mdev_supported_types`` instead of ``types`` (``"types_from":
"a2-vf-mdev-supported-types.txt", "type_capacity": 1``): each type's
id, name, description and device_api as the capture has them, with room
for ``type_capacity`` on the parent.

Parents are named as libvirt names them (``pci_0000_84_00_0``,
``css_0_0_0023``, ``ap_matrix``); a virtual parent keeps its sysfs name.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from vgpu_driver.exception import HostDescriptionInvalid
from vgpu_driver.host.sysfs import NVIDIA_DRIVER
from vgpu_driver.model import naming
from vgpu_driver.sim import captures
from vgpu_driver.sim.checks import check_names, check_over_capacity
from vgpu_driver.sim.dense import dense_raw
from vgpu_driver.sim.render import (
    materialize,
    render_libvirt_xml,
    render_sysfs,
    write_vf_state,
)
from vgpu_driver.sim.specs import (
    PARENT_KINDS,
    GuestSpec,
    HostDescription,
    MdevSpec,
    NvmlSpec,
    OtherGpuSpec,
    ParentSpec,
    PfSpec,
    SriovTypeSpec,
    TypeSpec,
    css_bus_id,
)

__all__ = [
    "DEFAULT_HOST",
    "GuestSpec",
    "HostDescription",
    "MdevSpec",
    "ParentSpec",
    "PfSpec",
    "SriovTypeSpec",
    "TypeSpec",
    "css_bus_id",
    "dense_raw",
    "load",
    "materialize",
    "parse",
    "render_libvirt_xml",
    "render_sysfs",
    "shipped_names",
    "write_vf_state",
]

SHIPPED_PACKAGE = "vgpu_driver.sim"
DEFAULT_HOST = "demo"


def shipped_names() -> list[str]:
    data = resources.files(SHIPPED_PACKAGE) / "data"
    return sorted(
        p.name.removesuffix(".json")
        for p in data.iterdir()
        if p.name.endswith(".json")
    )


def load(name_or_path: str) -> HostDescription:
    """A shipped description by name, or a JSON file by path."""
    if os.sep in name_or_path or name_or_path.endswith(".json"):
        path = Path(name_or_path)
        try:
            text = path.read_bytes().decode("utf-8")
        except OSError as exc:
            raise HostDescriptionInvalid(
                source=name_or_path, reason=exc.strerror or str(exc)
            ) from exc
        except UnicodeDecodeError as exc:
            raise HostDescriptionInvalid(
                source=name_or_path,
                reason=f"it is not UTF-8 text (byte {exc.start})",
            ) from exc
        return parse(text, str(path))
    if name_or_path not in shipped_names():
        raise HostDescriptionInvalid(
            source=name_or_path,
            reason="no such shipped host; choose one of "
            + ", ".join(shipped_names()),
        )
    data = resources.files(SHIPPED_PACKAGE) / "data" / f"{name_or_path}.json"
    return parse(data.read_text(), name_or_path)


def parse(text: str, source: str) -> HostDescription:
    try:
        raw = json.loads(text)
        return _build(raw, source)
    except HostDescriptionInvalid:
        raise
    except KeyError as exc:
        reason = f"a required field is missing: {exc}"
        raise HostDescriptionInvalid(source=source, reason=reason) from exc
    except (ValueError, TypeError, AttributeError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
        raise HostDescriptionInvalid(source=source, reason=reason) from exc


def _build(raw: dict[str, Any], source: str) -> HostDescription:
    def bad(reason: str) -> HostDescriptionInvalid:
        return HostDescriptionInvalid(source=source, reason=reason)

    if not isinstance(raw, dict):
        raise bad("the top level must be a JSON object")
    check_names(raw, bad)

    parents: list[ParentSpec] = []
    for index, p in enumerate(raw.get("parents", [])):
        kind = p.get("kind", "pci")
        if kind not in PARENT_KINDS:
            raise bad(
                f"parents[{index}].kind {kind!r} is not one of "
                f"{', '.join(PARENT_KINDS)}"
            )
        address = None
        if kind == "pci":
            address = naming.normalize_pci_address(p["address"])
            if address is None:
                raise bad(
                    f"parents[{index}].address {p['address']!r} is "
                    "not a PCI address"
                )
            name = naming.libvirt_pci_name(address)
        else:
            name = p["name"]
        types = (
            captures.parent_types(p, f"parents[{index}]", bad)
            if "types_from" in p
            else [
                TypeSpec(
                    id=t["id"],
                    capacity=int(t["capacity"]),
                    name=t.get("name"),
                    device_api=t.get("device_api", "vfio-pci"),
                    description=t.get("description"),
                )
                for t in p["types"]
            ]
        )
        parents.append(
            ParentSpec(
                kind=kind,
                name=name,
                address=address,
                types=types,
                vendor_id=p.get("vendor_id"),
                vendor=p.get("vendor"),
                product_id=p.get("product_id"),
                product=p.get("product"),
                driver=p.get("driver"),
                numa_node=p.get("numa_node"),
                iommu_group=p.get("iommu_group", 10 + index),
                homogeneous=bool(p.get("homogeneous", True)),
                physical_function=naming.normalize_pci_address(
                    p.get("physical_function") or ""
                ),
            )
        )
    by_key = {p.name: p for p in parents}
    by_key.update({p.address: p for p in parents if p.address})

    mdevs: list[MdevSpec] = []
    for index, m in enumerate(raw.get("mdevs", [])):
        parent = by_key.get(m["parent"])
        if parent is None:
            raise bad(
                f"mdevs[{index}].parent {m['parent']!r} is not a "
                "parent of this host"
            )
        if parent.type(m["type"]) is None:
            raise bad(
                f"mdevs[{index}].type {m['type']!r} is not a type of "
                f"{parent.name}"
            )
        mdevs.append(
            MdevSpec(
                uuid=m["uuid"].lower(),
                parent=parent.name,
                type=m["type"],
                legacy_name=bool(m.get("legacy_name", False)),
                iommu_group=m.get("iommu_group", 100 + index),
            )
        )
    pfs = [
        PfSpec(
            address=str(naming.normalize_pci_address(s["address"])),
            vf_count=int(s["vf_count"]),
            types=[
                SriovTypeSpec(
                    int(t["id"]),
                    t["name"],
                    int(t["capacity"]),
                    t.get("framebuffer_gb"),
                    t.get("gi_profile"),
                    t.get("nvml_max_instances"),
                )
                for t in s["types"]
            ],
            vendor_id=s.get("vendor_id"),
            product_id=s.get("product_id"),
            driver=s.get("driver", NVIDIA_DRIVER),
            numa_node=s.get("numa_node"),
            vf_types={
                k.lower(): int(v) for k, v in s.get("vf_types", {}).items()
            },
            mixed_size=bool(s.get("mixed_size", False)),
            framebuffer_gb=s.get("framebuffer_gb"),
            mig=s.get("mig"),
            gpu_instances=[
                (int(i), int(p)) for i, p in s.get("gpu_instances", [])
            ],
            virtualization_caps=s.get("virtualization_caps"),
            fault=s.get("fault"),
        )
        for s in raw.get("sriov", [])
    ]
    for pf, entry in zip(pfs, raw.get("sriov", []), strict=True):
        captures.apply(pf, entry, bad)
    guests = [
        GuestSpec(
            uuid=g["uuid"].lower(),
            name=g["name"],
            mdevs=[u.lower() for u in g.get("mdevs", [])],
            pci=[a.lower() for a in g.get("pci", [])],
            nova=bool(g.get("nova", True)),
        )
        for g in raw.get("guests", [])
    ]
    description = HostDescription(
        source=source,
        parents=parents,
        mdevs=mdevs,
        guests=guests,
        pfs=pfs,
        summary=raw.get("summary", ""),
        hostname=raw.get("hostname", "compute1"),
        config="\n".join(raw.get("config", [])) + "\n",
        other_gpus=[
            OtherGpuSpec(
                address=str(naming.normalize_pci_address(g["address"])),
                vendor_id=g["vendor_id"],
                product_id=g["product_id"],
                pci_class=g.get("class", "0x030000"),
                driver=g.get("driver"),
                total_vfs=g.get("total_vfs"),
                vf_addresses=[str(a).lower() for a in g.get("vfs", [])],
                vf_product_id=g.get("vf_product_id"),
                vf_driver=g.get("vf_driver"),
            )
            for g in raw.get("other_gpus", [])
        ],
        modules=raw.get("modules"),
        iommu=bool(raw.get("iommu", True)),
        nvml=(
            NvmlSpec(
                str(raw["nvml"]["driver_version"]),
                bool(raw["nvml"].get("heterogeneous", False)),
            )
            if raw.get("nvml")
            else None
        ),
    )
    check_over_capacity(description, bad)
    return description


# Bounds that keep a description to what a host can have (and keep a
# rendering small): NVIDIA cards expose at most 32 VFs per GPU, SR-IOV
# itself allows more, so the bound is generous.
