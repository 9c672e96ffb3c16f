"""The host devices in a libvirt domain's XML (pure): parsed from a
domain, and rendered for a bound device."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping

from vgpu_driver.exception import DeviceXMLInvalid
from vgpu_driver.host.nodedev_xml import between, parse_xml
from vgpu_driver.model import naming
from vgpu_driver.model.binding import BoundDevice
from vgpu_driver.model.device import Guest

_ATTRIBUTE = re.compile(r"([\w:-]+)='([^'<&]*)'")
# what libvirt never writes in a <hostdev>: an entity, a bracket within
# an attribute's value (it writes &lt; and &gt;), an element closed by
# itself (the end tag found next is another hostdev's)
_NOT_LIBVIRTS = re.compile(r"&|='[^']*[<>]|^<hostdev[^>]*/>")
# a mediated device's <hostdev> exactly as libvirt formats it (its
# attributes in libvirt's order; then, in a running domain, the alias and
# the guest's PCI address): read by one match, as most of a host's are
_MDEV_HOSTDEV = re.compile(
    r"<hostdev mode='subsystem' type='mdev'(?: managed='(?:yes|no)')?"
    r"(?: model='[\w-]+')?(?: display='(?:on|off)')?(?: ramfb='(?:on|off)')?>"
    r"\s*<source>\s*<address uuid='([0-9a-fA-F-]{36})'/>\s*</source>"
    r"(?:\s*<alias name='[\w.-]+'/>)?"
    r"(?:\s*<address type='pci' domain='0x[0-9a-fA-F]+' bus='0x[0-9a-fA-F]+'"
    r" slot='0x[0-9a-fA-F]+' function='0x[0-9a-fA-F]+'/>)?\s*"
)
# the namespace of the metadata Nova writes in every instance's domain
# (``nova:instance``; 1.0, 1.1 ... as its format moved)
NOVA_NS = "http://openstack.org/xmlns/libvirt/nova/"
_NOVA_INSTANCE = '<nova:instance xmlns:nova="' + NOVA_NS  # as Nova writes it


def parse_guest(text: str) -> Guest:
    """A domain's uuid, name and host devices, and whether Nova made it
    (its ``<metadata>`` has a ``nova:instance``), read without building a
    tree when the text has the shape libvirt formats (a first discovery
    reads every domain); otherwise :func:`parse_guest_tree`, the
    reference.

    Only the ``<name>``, the ``<uuid>`` and the ``<hostdev>`` elements
    of ``<devices>`` are read, so what else a domain holds does not send
    it to the tree: a Nova guest's ``<metadata>`` (its ``nova:instance``,
    written with double quotes) is passed over whole. Declined: an entity
    or markup in the name or uuid, an entity or a bracket in an
    attribute of a ``<hostdev>``, a ``<hostdev/>`` closed by itself, a
    comment, CDATA or a double quote among the devices, a ``metadata``
    element within the metadata, and elements out of libvirt's order."""
    name = between(text, "<name>", "</name>")
    uuid = between(text, "<uuid>", "</uuid>")
    first = text.find("<uuid>")
    head = text.find("<metadata")
    tail = text.find("</metadata>", head) if head >= 0 else -1
    devices = text.find("<devices>", max(tail, first))
    end = text.rfind("</devices>")
    if (
        name is None
        or uuid is None
        or devices < 0
        or end < devices
        # the metadata after the name and uuid, and closed by its own
        # end tag (no metadata element within it)
        or (
            head >= 0
            and (
                text.find("<name>") > head
                or first > head
                or text.find("<metadata", head + 1, max(tail, head)) >= 0
            )
        )
        # an entity, a comment or CDATA in the name or uuid
        or "&" in name
        or "&" in uuid
        or "<" in name
        or "<" in uuid
        # a double quote, a comment or CDATA among the devices
        or text.find('"', devices, end) >= 0
        # (a "!" is rare: the two-character search only where one is)
        or (
            text.find("!", devices, end) >= 0
            and text.find("<!", devices, end) >= 0
        )
    ):
        return parse_guest_tree(text)
    nova = head >= 0 and text.find(NOVA_NS, head, tail) >= 0
    if nova and text.find(_NOVA_INSTANCE, head, tail) < 0:
        return parse_guest_tree(text)  # not as Nova writes it
    mdevs: list[str] = []
    pci: list[str] = []
    start = text.find("<hostdev", devices, end)
    while start >= 0:
        stop = text.find("</hostdev>", start, end)
        if stop < 0:
            return parse_guest_tree(text)
        mdev = _MDEV_HOSTDEV.fullmatch(text, start, stop)
        if mdev is not None:
            mdevs.append(mdev.group(1).lower())
        else:
            fragment = text[start:stop]
            if _NOT_LIBVIRTS.search(fragment):
                return parse_guest_tree(text)
            _hostdev_text(fragment, mdevs, pci)
        start = text.find("<hostdev", stop, end)
    return Guest(
        uuid=uuid.strip().lower(),
        name=name.strip(),
        mdevs=tuple(mdevs),
        pci_devices=tuple(pci),
        nova=nova,
    )


def _hostdev_text(fragment: str, mdevs: list[str], pci: list[str]) -> None:
    """:func:`_hostdev` on one ``<hostdev ...>...`` of libvirt's shape."""
    opening = dict(_ATTRIBUTE.findall(fragment[: fragment.find(">")]))
    source = between(fragment, "<source", "</source>")
    tag = None if source is None else between(source, "<address ", ">")
    address = None if tag is None else dict(_ATTRIBUTE.findall(tag))
    _add(opening, address, mdevs, pci)


def parse_guest_tree(text: str) -> Guest:
    """The reference parser (a full XML tree)."""
    root = parse_xml(text, "domain")
    uuid = (root.findtext("uuid") or "").strip().lower()
    name = (root.findtext("name") or "").strip()
    if not uuid:
        raise DeviceXMLInvalid(what=f"domain {name!r}", reason="no <uuid>")
    mdevs: list[str] = []
    pci: list[str] = []
    for hostdev in root.findall("devices/hostdev"):
        _hostdev(hostdev, mdevs, pci)
    nova = any(
        element.tag.startswith("{" + NOVA_NS)
        and element.tag.endswith("}instance")
        for metadata in root.findall("metadata")
        for element in metadata.iter()
    )
    return Guest(
        uuid=uuid,
        name=name,
        mdevs=tuple(mdevs),
        pci_devices=tuple(pci),
        nova=nova,
    )


def _hostdev(hostdev: ET.Element, mdevs: list[str], pci: list[str]) -> None:
    address = hostdev.find("source/address")
    _add(
        hostdev.attrib,
        None if address is None else address.attrib,
        mdevs,
        pci,
    )


def _add(
    hostdev: Mapping[str, str],
    address: Mapping[str, str] | None,
    mdevs: list[str],
    pci: list[str],
) -> None:
    """One ``<hostdev>``'s attributes and its source address'."""
    if hostdev.get("mode") != "subsystem" or address is None:
        return
    kind = hostdev.get("type")
    if kind == "mdev" and address.get("uuid"):
        mdevs.append(str(address["uuid"]).lower())
    elif kind == "pci":
        try:
            fields = [
                int(address.get(f) or "", 0)
                for f in ("domain", "bus", "slot", "function")
            ]
        except ValueError:
            return
        pci.append(naming.pci_address(*fields))


def hostdev_xml_for_mdev(uuid: str) -> str:
    return (
        "<hostdev mode='subsystem' type='mdev' managed='no' "
        "model='vfio-pci'>\n"
        f"  <source>\n    <address uuid='{uuid}'/>\n  </source>\n"
        "</hostdev>"
    )


def hostdev_xml_for_pci(address: str, managed: bool = False) -> str:
    """``managed``: libvirt detaches the VF from its host driver and
    binds it to vfio-pci (a VF given as it is); not for an NVIDIA vGPU
    VF, which stays bound to NVIDIA's driver."""
    domain, bus, slot, function = naming.split_pci_address(address)
    return (
        "<hostdev mode='subsystem' type='pci' "
        f"managed='{'yes' if managed else 'no'}'>\n"
        "  <source>\n"
        f"    <address domain='0x{domain}' bus='0x{bus}' slot='0x{slot}' "
        f"function='0x{function}'/>\n"
        "  </source>\n"
        "</hostdev>"
    )


def hostdev_xml(device: BoundDevice) -> str:
    """The ``<hostdev>`` element that gives ``device`` to a guest."""
    if device.kind == "vf":
        return hostdev_xml_for_pci(device.id)
    if device.kind == "pci":  # libvirt binds it to vfio-pci
        return hostdev_xml_for_pci(device.id, managed=True)
    return hostdev_xml_for_mdev(device.id)
