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
        "types": [{"id": "nvidia-35", "name": "GRID M10-2B",
                   "device_api": "vfio-pci", "capacity": 8,
                   "description": "num_heads=4, ..."}]   # name optional
      }],
      "mdevs": [{"uuid": "...", "parent": "0000:84:00.0",
                 "type": "nvidia-35", "legacy_name": false}],
      "guests": [{"uuid": "...", "name": "vm1",
                  "mdevs": ["<uuid>"], "pci": ["0000:41:00.4"]}],
      "sriov": [{"address": "0000:41:00.0", "vendor_id": "0x10de",
                 "product_id": "0x26b5",
                 "driver": "nvidia",   # the default (vGPUs need it)
                 "numa_node": 0, "vf_count": 32,
                 "types": [{"id": 1155, "name": "NVIDIA L40-1B",
                            "capacity": 32}],
                 "vf_types": {"0000:41:00.4": 1155}}]
    }

Parents are named as libvirt names them (``pci_0000_84_00_0``,
``css_0_0_0023``, ``ap_matrix``); a virtual parent keeps its sysfs name.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import uuid as uuidlib
from importlib import resources
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from vgpu_driver.exception import HostDescriptionInvalid
from vgpu_driver.host.sysfs import NVIDIA_DRIVER
from vgpu_driver.model import naming
from vgpu_driver.sim import kernel

PARENT_KINDS = ("pci", "css", "ap_matrix", "virtual")
SHIPPED_PACKAGE = "vgpu_driver.sim"
DEFAULT_HOST = "demo"


@dataclasses.dataclass
class TypeSpec:
    id: str
    capacity: int
    name: str | None = None
    device_api: str = "vfio-pci"
    description: str | None = None


@dataclasses.dataclass
class ParentSpec:
    kind: str
    name: str
    address: str | None
    types: list[TypeSpec]
    vendor_id: str | None = None
    vendor: str | None = None
    product_id: str | None = None
    product: str | None = None
    driver: str | None = None
    numa_node: int | None = None
    iommu_group: int | None = None
    homogeneous: bool = True

    @property
    def sysfs_path(self) -> str:
        """Path below the sysfs root, as libvirt's ``<path>`` has it."""
        if self.kind == "pci":
            return f"devices/pci0000:00/{self.address}"
        if self.kind == "css":
            return f"devices/css0/{css_bus_id(self.name)}"
        if self.kind == "ap_matrix":
            return "devices/vfio_ap/matrix"
        return f"devices/virtual/{self.name}/{self.name}"

    def type(self, type_id: str) -> TypeSpec | None:
        return next((t for t in self.types if t.id == type_id), None)


@dataclasses.dataclass
class MdevSpec:
    uuid: str
    parent: str  # parent name
    type: str
    legacy_name: bool = False
    iommu_group: int | None = None
    active: bool = True  # False: defined in libvirt, not created

    @property
    def libvirt_name(self) -> str:
        """``mdev_<uuid>`` before libvirt 7.7, ``mdev_<uuid>_<parent>``."""
        base = "mdev_" + self.uuid.replace("-", "_")
        if self.legacy_name:
            return base
        parent = self.parent.removeprefix("pci_")
        return f"{base}_{parent}"


@dataclasses.dataclass
class GuestSpec:
    uuid: str
    name: str
    mdevs: list[str] = dataclasses.field(default_factory=list)
    pci: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class SriovTypeSpec:
    id: int
    name: str
    capacity: int


@dataclasses.dataclass
class PfSpec:
    address: str
    vf_count: int
    types: list[SriovTypeSpec]
    vendor_id: str | None = None
    product_id: str | None = None
    driver: str | None = None
    numa_node: int | None = None
    vf_types: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return naming.libvirt_pci_name(self.address)

    @property
    def vf_addresses(self) -> list[str]:
        """VFs follow their PF: functions 4-7 of the PF's slot, then on."""
        domain, bus, rest = self.address.split(":")
        slot = int(rest.split(".")[0], 16)
        first = slot * 8 + 4
        return [
            f"{domain}:{bus}:{(first + i) // 8:02x}.{(first + i) % 8}"
            for i in range(self.vf_count)
        ]

    def capacities(self) -> dict[int, int]:
        return {t.id: min(t.capacity, self.vf_count) for t in self.types}

    def creatable(self, vf: str) -> list[SriovTypeSpec]:
        ids = kernel.creatable_types(
            self.vf_types.get(vf, 0),
            self.vf_types.values(),
            self.capacities(),
        )
        by_id = {t.id: t for t in self.types}
        return [by_id[i] for i in ids]


@dataclasses.dataclass
class HostDescription:
    source: str
    parents: list[ParentSpec]
    mdevs: list[MdevSpec]
    guests: list[GuestSpec]
    pfs: list[PfSpec]
    summary: str = ""
    hostname: str = "compute1"
    config: str = ""

    def parent(self, name: str) -> ParentSpec:
        return next(p for p in self.parents if p.name == name)

    def available(self, parent: ParentSpec, type_id: str) -> int:
        spec = parent.type(type_id)
        if spec is None:
            return 0
        used = [
            m.type for m in self.mdevs if m.parent == parent.name and m.active
        ]
        return kernel.available_instances(
            type_id, spec.capacity, used, parent.homogeneous
        )

    def copy(self) -> HostDescription:
        return copy.deepcopy(self)


def css_bus_id(name: str) -> str:
    """``css_0_0_0023`` is sysfs ``0.0.0023``."""
    return ".".join(name.split("_")[1:])


# -- loading -----------------------------------------------------------


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
    _check_names(raw, bad)

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
        types = [
            TypeSpec(
                id=t["id"],
                capacity=int(t["capacity"]),
                name=t.get("name"),
                device_api=t.get("device_api", "vfio-pci"),
                description=t.get("description"),
            )
            for t in p["types"]
        ]
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
                SriovTypeSpec(int(t["id"]), t["name"], int(t["capacity"]))
                for t in s["types"]
            ],
            vendor_id=s.get("vendor_id"),
            product_id=s.get("product_id"),
            driver=s.get("driver", NVIDIA_DRIVER),
            numa_node=s.get("numa_node"),
            vf_types={
                k.lower(): int(v) for k, v in s.get("vf_types", {}).items()
            },
        )
        for s in raw.get("sriov", [])
    ]
    guests = [
        GuestSpec(
            uuid=g["uuid"].lower(),
            name=g["name"],
            mdevs=[u.lower() for u in g.get("mdevs", [])],
            pci=[a.lower() for a in g.get("pci", [])],
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
    )
    _check_over_capacity(description, bad)
    return description


# Bounds that keep a description to what a host can have (and keep a
# rendering small): NVIDIA cards expose at most 32 VFs per GPU, SR-IOV
# itself allows more, so the bound is generous.
MAX_VFS = 256
MAX_CAPACITY = 65535  # vfio_ap reports this many
MAX_NUMA_NODE = 1023  # the kernel's largest NODES_SHIFT gives 1024 nodes
_PCI_ID = re.compile(r"0x[0-9a-fA-F]{4}")


def _check_names(raw: dict[str, Any], bad: Any) -> None:
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
        for j, t in enumerate(p["types"]):
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
        count(f"sriov[{i}].vf_count", sriov["vf_count"], 1, MAX_VFS)
        if naming.normalize_pci_address(str(sriov["address"])) is None:
            raise bad(
                f"sriov[{i}].address {sriov['address']!r} is not a PCI address"
            )
        text(f"sriov[{i}].driver", sriov.get("driver"))
        numa(f"sriov[{i}].numa_node", sriov.get("numa_node"))
        for j, t in enumerate(sriov["types"]):
            text(f"sriov[{i}].types[{j}].name", t.get("name"))
            count(
                f"sriov[{i}].types[{j}].capacity",
                t["capacity"],
                0,
                MAX_CAPACITY,
            )


def _check_over_capacity(description: HostDescription, bad: Any) -> None:
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


# -- rendering ---------------------------------------------------------

SYSTEM_UUID = "3a2bc4a0-6e8f-4a8e-9c1c-1c8bfa0d1e11"


def render_libvirt_xml(description: HostDescription) -> str:
    """The host as libvirt's test driver reads it."""
    out = ["<node>"]
    out.append(
        "  <device>\n    <name>computer</name>\n"
        "    <capability type='system'><hardware>"
        f"<uuid>{SYSTEM_UUID}</uuid></hardware></capability>\n"
        "  </device>"
    )
    for parent in description.parents:
        out.append(_render_parent(description, parent))
    for mdev in description.mdevs:
        # libvirt has no node device for a virtual parent: it names the
        # mdev's parent "computer" (the adapter finds the real one in sysfs)
        parent_name = mdev.parent
        if description.parent(mdev.parent).kind == "virtual":
            parent_name = "computer"
        out.append(
            "  <device>\n"
            f"    <name>{mdev.libvirt_name}</name>\n"
            f"    <parent>{escape(parent_name)}</parent>\n"
            "    <capability type='mdev'>\n"
            f"      <type id={quoteattr(mdev.type)}/>\n"
            + ("" if mdev.legacy_name else f"      <uuid>{mdev.uuid}</uuid>\n")
            + f"      <iommuGroup number='{mdev.iommu_group}'/>\n"
            "    </capability>\n"
            "  </device>"
        )
    for guest in description.guests:
        out.append(_render_guest(guest))
    out.append("</node>")
    return "\n".join(out) + "\n"


def _render_types(description: HostDescription, parent: ParentSpec) -> str:
    rows = ["<capability type='mdev_types'>"]
    for spec in parent.types:
        rows.append(f"<type id={quoteattr(spec.id)}>")
        if spec.name is not None:
            rows.append(f"<name>{escape(spec.name)}</name>")
        rows.append(f"<deviceAPI>{escape(spec.device_api)}</deviceAPI>")
        rows.append(
            "<availableInstances>"
            f"{description.available(parent, spec.id)}"
            "</availableInstances>"
        )
        rows.append("</type>")
    rows.append("</capability>")
    return "\n".join(rows)


def _render_parent(description: HostDescription, parent: ParentSpec) -> str:
    types = _render_types(description, parent)
    head = (
        f"  <device>\n    <name>{escape(parent.name)}</name>\n"
        f"    <path>/sys/{parent.sysfs_path}</path>\n"
        "    <parent>computer</parent>\n"
    )
    if parent.driver:
        head += f"    <driver><name>{escape(parent.driver)}</name></driver>\n"
    if parent.kind == "pci":
        assert parent.address is not None
        domain, bus, rest = parent.address.split(":")
        slot, function = rest.split(".")
        body = (
            "<capability type='pci'>\n<class>0x030000</class>\n"
            f"<domain>{int(domain, 16)}</domain><bus>{int(bus, 16)}</bus>"
            f"<slot>{int(slot, 16)}</slot>"
            f"<function>{int(function, 16)}</function>\n"
        )
        if parent.product_id:
            body += (
                f"<product id={quoteattr(parent.product_id)}>"
                f"{escape(parent.product or '')}</product>\n"
            )
        if parent.vendor_id:
            body += (
                f"<vendor id={quoteattr(parent.vendor_id)}>"
                f"{escape(parent.vendor or '')}</vendor>\n"
            )
        body += types + "\n"
        body += (
            f"<iommuGroup number='{parent.iommu_group}'>"
            f"<address domain='0x{domain}' bus='0x{bus}' slot='0x{slot}' "
            f"function='0x{function}'/></iommuGroup>\n"
        )
        if parent.numa_node is not None:
            body += f"<numa node='{parent.numa_node}'/>\n"
        body += "</capability>"
    elif parent.kind == "css":
        cssid, ssid, devno = css_bus_id(parent.name).split(".")
        body = (
            "<capability type='css'>\n"
            f"<cssid>0x{cssid}</cssid><ssid>0x{ssid}</ssid>"
            f"<devno>0x{devno}</devno>\n{types}\n</capability>"
        )
    elif parent.kind == "ap_matrix":
        body = f"<capability type='ap_matrix'>\n{types}\n</capability>"
    else:
        # libvirt has no node device for a virtual parent such as mtty:
        # it is found in sysfs (class/mdev_bus) only.
        return "  <!-- virtual parent " + escape(parent.name) + " -->"
    return head + body + "\n  </device>"


def _render_guest(guest: GuestSpec) -> str:
    devices = []
    for uuid in guest.mdevs:
        devices.append(
            "<hostdev mode='subsystem' type='mdev' managed='no' "
            f"model='vfio-pci'><source><address uuid='{uuid}'/></source>"
            "</hostdev>"
        )
    for address in guest.pci:
        domain, bus, rest = address.split(":")
        slot, function = rest.split(".")
        devices.append(
            "<hostdev mode='subsystem' type='pci' managed='no'><source>"
            f"<address domain='0x{domain}' bus='0x{bus}' slot='0x{slot}' "
            f"function='0x{function}'/></source></hostdev>"
        )
    return (
        "  <domain type='test'>\n"
        f"    <name>{escape(guest.name)}</name>\n"
        f"    <uuid>{guest.uuid}</uuid>\n"
        "    <memory>65536</memory>\n"
        "    <os><type>hvm</type></os>\n"
        "    <devices>\n      " + "\n      ".join(devices) + "\n"
        "    </devices>\n"
        "  </domain>"
    )


def render_sysfs(description: HostDescription, root: Path) -> None:
    """Write the fake sysfs tree of the host below ``root``."""
    for parent in description.parents:
        base = root / parent.sysfs_path
        base.mkdir(parents=True, exist_ok=True)
        _link(root / "class/mdev_bus" / base.name, base)
        if parent.kind == "pci":
            _link(root / "bus/pci/devices" / base.name, base)
            _write(base / "vendor", parent.vendor_id or "")
            _write(base / "device", parent.product_id or "")
            numa = -1 if parent.numa_node is None else parent.numa_node
            _write(base / "numa_node", str(numa))
        if parent.driver:
            _bind(base, root / "bus" / _bus_of(parent), parent.driver)
        for spec in parent.types:
            tdir = base / "mdev_supported_types" / spec.id
            tdir.mkdir(parents=True, exist_ok=True)
            if spec.name is not None:
                _write(tdir / "name", spec.name)
            _write(tdir / "device_api", spec.device_api)
            available = description.available(parent, spec.id)
            _write(tdir / "available_instances", str(available))
            if spec.description is not None:
                _write(tdir / "description", spec.description)
            _write(tdir / "create", "")
    for mdev in description.mdevs:
        parent = description.parent(mdev.parent)
        mdir = root / parent.sysfs_path / mdev.uuid
        mdir.mkdir(parents=True, exist_ok=True)
        _link(
            mdir / "mdev_type",
            root / parent.sysfs_path / "mdev_supported_types" / mdev.type,
        )
        _write(mdir / "remove", "")
        _link(root / "bus/mdev/devices" / mdev.uuid, mdir)
    for pf in description.pfs:
        _render_pf(pf, root)


def _bus_of(parent: ParentSpec) -> str:
    return {"pci": "pci", "css": "css", "ap_matrix": "ap"}.get(
        parent.kind, "virtual"
    )


def _render_pf(pf: PfSpec, root: Path) -> None:
    base = root / "devices/pci0000:00"
    pf_dir = base / pf.address
    pf_dir.mkdir(parents=True, exist_ok=True)
    _link(root / "bus/pci/devices" / pf.address, pf_dir)
    _write(pf_dir / "vendor", pf.vendor_id or "")
    _write(pf_dir / "device", pf.product_id or "")
    _write(
        pf_dir / "numa_node", str(-1 if pf.numa_node is None else pf.numa_node)
    )
    _write(pf_dir / "sriov_numvfs", str(pf.vf_count))
    if pf.driver:
        _bind(pf_dir, root / "bus/pci", pf.driver)
    for index, vf in enumerate(pf.vf_addresses):
        vf_dir = base / vf
        (vf_dir / "nvidia").mkdir(parents=True, exist_ok=True)
        _link(pf_dir / f"virtfn{index}", vf_dir)
        _link(vf_dir / "physfn", pf_dir)
        _link(root / "bus/pci/devices" / vf, vf_dir)
        write_vf_state(vf_dir, pf, vf)


def write_vf_state(vf_dir: Path, pf: PfSpec, vf: str) -> None:
    """The two files NVIDIA's driver shows in ``<VF>/nvidia``."""
    lines = [f"{t.id:<6}: {t.name}" for t in pf.creatable(vf)]
    text = "ID    : vGPU Name\n" + "".join(line + "\n" for line in lines)
    _write(vf_dir / "nvidia/creatable_vgpu_types", text if lines else "")
    _write(vf_dir / "nvidia/current_vgpu_type", str(pf.vf_types.get(vf, 0)))


def _bind(device: Path, bus: Path, driver_name: str) -> None:
    """A device bound to a driver: linked both ways, as the kernel does."""
    driver = bus / "drivers" / driver_name
    driver.mkdir(parents=True, exist_ok=True)
    _link(device / "driver", driver)
    _link(driver / device.name, device)


def _write(path: Path, text: str) -> None:
    path.write_text(text if text.endswith("\n") or not text else text + "\n")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))


# -- generated hosts ---------------------------------------------------


def dense_raw(
    parents: int, mdevs: int, guests: int, *, type_id: str = "nvidia-35"
) -> dict[str, Any]:
    """A dense NVIDIA host: ``parents`` pGPUs with ``mdevs`` mdevs spread
    evenly, the first ``guests`` of them each in use by one guest."""
    import uuid as uuidlib

    per_parent = -(-mdevs // parents) if parents else 0
    capacity = max(per_parent + 4, 16)
    addresses = [
        f"0000:{0x10 + i // 4:02x}:{(i % 4) * 2:02x}.0" for i in range(parents)
    ]
    ns = uuidlib.UUID("6c0c8e5a-0a7e-4b9e-9d7a-7d1f2b0c4a11")
    raw_mdevs = []
    for i in range(mdevs):
        raw_mdevs.append(
            {
                "uuid": str(uuidlib.uuid5(ns, f"mdev-{i}")),
                "parent": addresses[i % parents],
                "type": type_id,
            }
        )
    raw_guests = [
        {
            "uuid": str(uuidlib.uuid5(ns, f"guest-{i}")),
            "name": f"instance-{i:08x}",
            "mdevs": [raw_mdevs[i]["uuid"]] if i < mdevs else [],
        }
        for i in range(guests)
    ]
    return {
        "summary": f"Dense host: {parents} pGPUs, {mdevs} mdevs, "
        f"{guests} guests",
        "hostname": "dense1",
        "config": ["[devices]", f"enabled_mdev_types = {type_id}"],
        "parents": [
            {
                "kind": "pci",
                "address": address,
                "vendor_id": "0x10de",
                "vendor": "NVIDIA Corporation",
                "product_id": "0x13bd",
                "product": "GM107GL [Tesla M10]",
                "driver": "nvidia",
                "numa_node": i % 2,
                "types": [
                    {
                        "id": type_id,
                        "name": "GRID M10-1B",
                        "capacity": capacity,
                        "description": "num_heads=4, frl_config=45, "
                        "framebuffer=1024M, max_resolution=5120x2880, "
                        f"max_instance={capacity}",
                    }
                ],
            }
            for i, address in enumerate(addresses)
        ],
        "mdevs": raw_mdevs,
        "guests": raw_guests,
    }


def materialize(
    description: HostDescription, directory: Path
) -> tuple[str, Path]:
    """Write the host's libvirt XML and sysfs tree into ``directory``.

    Returns the libvirt URI (``test:///.../host.xml``) and the sysfs root.
    """
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    xml_path = directory / "host.xml"
    xml_path.write_text(render_libvirt_xml(description))
    sysfs_root = directory / "sys"
    render_sysfs(description, sysfs_root)
    return f"test://{xml_path}", sysfs_root
