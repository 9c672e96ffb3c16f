"""Parsers of libvirt node-device XML (pure: text in, model out).

Unknown elements are ignored. Text that is not XML, or a device without
a field the model needs, raises :class:`DeviceXMLInvalid` and nothing
else.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from vgpu_driver.exception import DeviceXMLInvalid
from vgpu_driver.model import naming
from vgpu_driver.model.device import Mdev, MdevType, Parent

UUID_RE = re.compile(
    r"[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_]"
    r"[0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}"
)


def parse_xml(text: str, what: str) -> ET.Element:
    try:
        return ET.fromstring(text)
    except (ET.ParseError, ValueError, TypeError) as exc:
        raise DeviceXMLInvalid(what=what, reason=str(exc)) from exc


def _text(element: ET.Element | None) -> str | None:
    if element is None or element.text is None:
        return None
    return element.text.strip() or None


def _int(value: str | None, what: str, field: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value, 0)
    except ValueError as exc:
        raise DeviceXMLInvalid(
            what=what, reason=f"{field} is not a number: {value!r}"
        ) from exc


def _required(value: str | None, what: str, field: str) -> str:
    if value is None:
        raise DeviceXMLInvalid(what=what, reason=f"it has no {field}")
    return value


def device_path(text: str) -> str | None:
    """The sysfs path libvirt gives for a device, if any."""
    return _text(parse_xml(text, "node device").find("path"))


def parse_parent(text: str) -> Parent | None:
    """A parent from a node device's XML; None without ``mdev_types``."""
    return read_parent(text)[0]


def read_parent(text: str) -> tuple[Parent | None, str | None]:
    """A parent (None without ``mdev_types``) and the sysfs path libvirt
    gives for it: the text parsed once (a first discovery reads every
    parent; plain iteration, no ElementPath predicates)."""
    root = parse_xml(text, "node device")
    path = _text(root.find("path"))
    name = _required(_text(root.find("name")), "node device", "<name>")
    what = f"node device {name}"
    types_caps = [
        cap
        for cap in root.iter("capability")
        if cap.get("type") == "mdev_types"
    ]
    if not types_caps:
        return None, path
    types: list[MdevType] = []
    for cap in types_caps:
        for element in cap.iterfind("type"):
            type_id = _required(element.get("id"), what, "type id")
            available = _int(
                _text(element.find("availableInstances")),
                what,
                "availableInstances",
            )
            types.append(
                MdevType(
                    id=type_id,
                    name=_text(element.find("name")),
                    device_api=_required(
                        _text(element.find("deviceAPI")), what, "deviceAPI"
                    ),
                    available=_required_int(available, what),
                )
            )
    address = None
    vendor_id = vendor = product_id = product = None
    numa_node = None
    pci = next(
        (c for c in root.iterfind("capability") if c.get("type") == "pci"),
        None,
    )
    if pci is not None:
        fields = [
            _int(_text(pci.find(f)), what, f)
            for f in ("domain", "bus", "slot", "function")
        ]
        if any(f is None for f in fields):
            raise DeviceXMLInvalid(
                what=what, reason="its PCI address is incomplete"
            )
        domain, bus, slot, function = (int(f or 0) for f in fields)
        address = naming.pci_address(domain, bus, slot, function)
        vendor_el, product_el = pci.find("vendor"), pci.find("product")
        if vendor_el is not None:
            vendor_id, vendor = vendor_el.get("id"), _text(vendor_el)
        if product_el is not None:
            product_id, product = product_el.get("id"), _text(product_el)
        numa = pci.find("numa")
        if numa is not None:
            numa_node = _int(numa.get("node"), what, "numa node")
    driver = root.find("driver")
    return (
        Parent(
            name=name,
            address=address,
            vendor_id=vendor_id,
            vendor=vendor,
            product_id=product_id,
            product=product,
            driver=_text(driver.find("name")) if driver is not None else None,
            numa_node=numa_node,
            types=tuple(types),
        ),
        path,
    )


def _required_int(value: int | None, what: str) -> int:
    if value is None:
        raise DeviceXMLInvalid(what=what, reason="no availableInstances")
    return value


def mdev_uuid_from_name(name: str) -> str | None:
    """The uuid in ``mdev_<uuid>`` or (libvirt >= 7.7)
    ``mdev_<uuid>_<parent>``."""
    match = UUID_RE.search(name)
    if not match or not name.startswith("mdev_"):
        return None
    return match.group(0).replace("_", "-").lower()


def between(text: str, start: str, end: str, pos: int = 0) -> str | None:
    """The text between the first ``start`` at or after ``pos`` and the
    next ``end``, or None."""
    i = text.find(start, pos)
    if i < 0:
        return None
    i += len(start)
    j = text.find(end, i)
    return None if j < 0 else text[i:j]


def _parse_mdev_shape(text: str) -> Mdev | None:
    """The shape libvirt formats an mdev in, read without building a
    tree (a dense host lists thousands of mdevs on a first discovery).
    None if the text is not that shape (or has any entity, comment,
    CDATA or carriage return): :func:`parse_mdev_tree` is the
    reference."""
    if "&" in text or "<!" in text or "<?" in text or "\r" in text:
        return None
    find = text.find
    cap = find("<capability type='mdev'>")
    a, b = find("<name>"), find("</name>")
    c, d = find("<parent>"), find("</parent>")
    e = find("<type id='", cap)
    end = find("</capability>", cap)
    if min(cap, a, b, c, d, e, end) < 0 or e > end:
        return None
    name, parent = text[a + 6 : b].strip(), text[c + 8 : d].strip()
    type_id = text[e + 10 : find("'", e + 10)]
    u = find("<uuid>", cap, end)
    uuid = (
        text[u + 6 : find("</uuid>", u)].strip()
        if u >= 0
        else mdev_uuid_from_name(name)
    )
    g = find("<iommuGroup number='", cap, end)
    group = text[g + 20 : find("'", g + 20)] if g >= 0 else None
    if not (name and parent and type_id and uuid) or (
        group is not None and not group.isdigit()
    ):
        return None
    return Mdev(
        uuid=uuid.lower(),
        type_id=type_id,
        parent=parent,
        name=name,
        iommu_group=int(group) if group is not None else None,
    )


def parse_mdev(text: str) -> Mdev:
    fast = _parse_mdev_shape(text)
    return fast if fast is not None else parse_mdev_tree(text)


def parse_mdev_tree(text: str) -> Mdev:
    """The reference parser (a full XML tree)."""
    root = parse_xml(text, "node device")
    name = _required(_text(root.find("name")), "node device", "<name>")
    what = f"node device {name}"
    cap = root.find("capability[@type='mdev']")
    if cap is None:
        raise DeviceXMLInvalid(what=what, reason="it is not an mdev")
    type_el = cap.find("type")
    type_id = type_el.get("id") if type_el is not None else None
    uuid = _text(cap.find("uuid")) or mdev_uuid_from_name(name)
    group = cap.find("iommuGroup")
    return Mdev(
        uuid=_required(uuid, what, "uuid").lower(),
        type_id=_required(type_id, what, "type"),
        parent=_required(_text(root.find("parent")), what, "<parent>"),
        name=name,
        iommu_group=_int(
            group.get("number") if group is not None else None,
            what,
            "iommuGroup",
        ),
    )
