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


# The fast readers below read the shapes libvirt formats node devices
# in, each by one pattern matched against the whole text, without
# building a tree (a first discovery reads every parent and mdev). A
# text of any other shape (an element a later libvirt adds, a comment,
# CDATA) does not match and goes to the reference tree parser. So that
# a text they read is read as XML reads it, their patterns take XML's
# whitespace only (not Unicode's), attributes in libvirt's fixed form,
# and texts with neither markup nor what XML rewrites (references;
# carriage returns, read as newlines) or refuses (control characters).
_NOT_PLAIN = "&\r\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff"


def _shape(pattern: str) -> re.Pattern[str]:
    """A shape's pattern: ``\\s`` (outside brackets) is XML's
    whitespace, and a text (``[^<...]``) or attribute value
    (``[^'<...]``) has only plain characters."""
    return re.compile(
        pattern.replace(r"\s", "[ \t\n]")
        .replace("[^<", "[^<" + _NOT_PLAIN)
        .replace("[^'<", "[^'<" + _NOT_PLAIN)
    )


_MDEV = _shape(
    r"\s*<device>\s*<name>([^<]*)</name>\s*"
    r"(?:<path>[^<]*</path>\s*)?"
    r"(?:<devnode type='\w+'>[^<]*</devnode>\s*)*"
    r"<parent>([^<]*)</parent>\s*"
    r"(?:<driver>\s*<name>[^<]*</name>\s*</driver>\s*)?"
    r"<capability type='mdev'>\s*<type id='([^'< \t\n]+)'/>\s*"
    r"(?:<uuid>([^<]*)</uuid>\s*)?"
    r"(?:<parent_addr>[^<]*</parent_addr>\s*)?"
    r"(?:<iommuGroup number='(0|[1-9][0-9]*)'/>\s*)?"
    r"(?:<attr name='[^'<]*' value='[^'<]*'/>\s*)*"
    r"</capability>\s*</device>\s*"
)
# A PCI parent: the nested capabilities of an SR-IOV function or a header
# type, the mdev types, the IOMMU group, NUMA node and PCIe links. (A VPD
# block, for one, is left to the reference.)
_HEX = "0x[0-9a-fA-F]+"
_ADDRESSES = (
    rf"(?:\s*<address domain='{_HEX}' bus='{_HEX}' slot='{_HEX}' "
    rf"function='{_HEX}'/>)*\s*"
)
_PCI_PARENT = _shape(
    r"\s*<device>\s*<name>(?P<name>[^<]*)</name>\s*"
    r"(?:<path>(?P<path>[^<]*)</path>\s*)?"
    r"(?:<devnode type='\w+'>[^<]*</devnode>\s*)*"
    r"(?:<parent>[^<]*</parent>\s*)?"
    r"(?:<driver>\s*<name>(?P<driver>[^<]*)</name>\s*</driver>\s*)?"
    r"<capability type='pci'>\s*"
    r"(?:<class>[^<]*</class>\s*)?"
    r"<domain>(?P<domain>[0-9]+)</domain>\s*<bus>(?P<bus>[0-9]+)</bus>\s*"
    r"<slot>(?P<slot>[0-9]+)</slot>\s*"
    r"<function>(?P<function>[0-9]+)</function>\s*"
    r"(?:<product id='(?P<product_id>[^'< \t\n]*)'\s*"
    r"(?:/>|>(?P<product>[^<]*)</product>)\s*)?"
    r"(?:<vendor id='(?P<vendor_id>[^'< \t\n]*)'\s*"
    r"(?:/>|>(?P<vendor>[^<]*)</vendor>)\s*)?"
    r"(?:<capability type='phys_function'>\s*<address "
    rf"domain='(?P<pf_domain>{_HEX})' bus='(?P<pf_bus>{_HEX})' "
    rf"slot='(?P<pf_slot>{_HEX})' function='(?P<pf_function>{_HEX})'/>"
    r"\s*</capability>\s*"
    r"|<capability type='(?:phys_function|virt_functions)'"
    r"(?: maxCount='[0-9]+')?\s*(?:/>|>" + _ADDRESSES + r"</capability>)\s*"
    r"|<capability type='[\w-]+'\s*/>\s*)*"
    r"<capability type='mdev_types'>(?P<types>(?:\s*<type id='[^'< \t\n]+'>"
    r"\s*(?:<name>[^<]*</name>\s*)?<deviceAPI>[^<]*</deviceAPI>\s*"
    r"<availableInstances>[0-9]+</availableInstances>\s*</type>)*)\s*"
    r"</capability>\s*"
    r"(?:<iommuGroup number='[0-9]+'>" + _ADDRESSES + r"</iommuGroup>\s*)?"
    r"(?:<numa node='(?P<numa>-?[0-9]+)'/>\s*)?"
    r"(?:<pci-express>(?:\s*<link validity='(?:cap|sta)'(?: port='[0-9]+')?"
    r"(?: speed='[0-9.]+')?(?: width='[0-9]+')?/>)*\s*</pci-express>\s*)?"
    r"</capability>\s*</device>\s*"
)
_MDEV_TYPE = _shape(
    r"\s*<type id='([^'< \t\n]+)'>\s*(?:<name>([^<]*)</name>\s*)?"
    r"<deviceAPI>([^<]*)</deviceAPI>\s*"
    r"<availableInstances>([0-9]+)</availableInstances>\s*</type>"
)


def _stripped(text: str | None) -> str | None:
    return (text.strip() or None) if text is not None else None


def _read_pci_parent_shape(text: str) -> tuple[Parent, str | None] | None:
    """A PCI parent in the shape libvirt formats it, read by one pattern
    without building a tree (a first discovery reads every parent). None
    if the text is not exactly that shape, or is one the reference
    parser would refuse: :func:`read_parent_tree` is the reference."""
    match = _PCI_PARENT.fullmatch(text)
    if match is None:
        return None
    fields = match.groupdict()
    name = _stripped(fields["name"])
    try:
        types = tuple(
            MdevType(
                id=type_id,
                name=_stripped(type_name),
                device_api=api.strip(),
                available=int(available, 0),
            )
            for type_id, type_name, api, available in _MDEV_TYPE.findall(
                fields["types"]
            )
        )
        address = naming.pci_address(
            *(int(fields[f], 0) for f in ("domain", "bus", "slot", "function"))
        )
        numa = fields["numa"]
        numa_node = int(numa, 0) if numa is not None else None
        physical_function = None
        if fields["pf_domain"] is not None:
            physical_function = naming.pci_address(
                *(
                    int(fields[f"pf_{f}"], 16)
                    for f in ("domain", "bus", "slot", "function")
                )
            )
    except ValueError:
        return None  # a number XML reads but Python's int() does not
    if name is None or not all(t.device_api for t in types):
        return None
    return (
        Parent(
            name=name,
            address=address,
            vendor_id=fields["vendor_id"],
            vendor=_stripped(fields["vendor"]),
            product_id=fields["product_id"],
            product=_stripped(fields["product"]),
            driver=_stripped(fields["driver"]),
            numa_node=numa_node,
            types=types,
            physical_function=physical_function,
        ),
        _stripped(fields["path"]),
    )


def read_parent(text: str) -> tuple[Parent | None, str | None]:
    """A parent (None without ``mdev_types``) and the sysfs path libvirt
    gives for it."""
    fast = _read_pci_parent_shape(text)
    return fast if fast is not None else read_parent_tree(text)


def read_parent_tree(text: str) -> tuple[Parent | None, str | None]:
    """The reference parser of :func:`read_parent` (a full XML tree,
    parsed once; plain iteration, no ElementPath predicates)."""
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
    address = physical_function = None
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
        physical_function = _physical_function(pci, what)
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
            physical_function=physical_function,
        ),
        path,
    )


def _physical_function(pci: ET.Element, what: str) -> str | None:
    """The PF address of a VF (``<capability type='phys_function'>``)."""
    for cap in pci.iterfind("capability"):
        if cap.get("type") != "phys_function":
            continue
        element = cap.find("address")
        if element is None:
            return None
        parts = [
            _int(element.get(f), what, f"phys_function {f}")
            for f in ("domain", "bus", "slot", "function")
        ]
        if any(p is None for p in parts):
            raise DeviceXMLInvalid(
                what=what, reason="its phys_function address is incomplete"
            )
        return naming.pci_address(*(int(p or 0) for p in parts))
    return None


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
    """An mdev in the shape libvirt formats it, read by one pattern
    without building a tree (a dense host lists thousands of mdevs on a
    first discovery). None if the text is not exactly that shape:
    :func:`parse_mdev_tree` is the reference."""
    match = _MDEV.fullmatch(text)
    if match is None:
        return None
    name, parent, type_id, uuid, group = match.groups()
    name, parent = name.strip(), parent.strip()
    uuid = (uuid or "").strip() or mdev_uuid_from_name(name)
    if not (name and parent and uuid):
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
