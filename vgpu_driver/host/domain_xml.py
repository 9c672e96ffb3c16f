"""Parser of the host devices in a libvirt domain's XML (pure)."""

from __future__ import annotations

from vgpu_driver.exception import DeviceXMLInvalid
from vgpu_driver.host.nodedev_xml import parse_xml
from vgpu_driver.model import naming
from vgpu_driver.model.device import Guest


def parse_guest(text: str) -> Guest:
    root = parse_xml(text, "domain")
    uuid = (root.findtext("uuid") or "").strip().lower()
    name = (root.findtext("name") or "").strip()
    if not uuid:
        raise DeviceXMLInvalid(what=f"domain {name!r}", reason="no <uuid>")
    mdevs: list[str] = []
    pci: list[str] = []
    for hostdev in root.findall("devices/hostdev[@mode='subsystem']"):
        address = hostdev.find("source/address")
        if address is None:
            continue
        kind = hostdev.get("type")
        if kind == "mdev" and address.get("uuid"):
            mdevs.append(str(address.get("uuid")).lower())
        elif kind == "pci":
            try:
                fields = [
                    int(address.get(f) or "", 0)
                    for f in ("domain", "bus", "slot", "function")
                ]
            except ValueError:
                continue
            pci.append(naming.pci_address(*fields))
    return Guest(
        uuid=uuid, name=name, mdevs=tuple(mdevs), pci_devices=tuple(pci)
    )


def hostdev_xml_for_mdev(uuid: str) -> str:
    return (
        "<hostdev mode='subsystem' type='mdev' managed='no' "
        "model='vfio-pci'>\n"
        f"  <source>\n    <address uuid='{uuid}'/>\n  </source>\n"
        "</hostdev>"
    )


def hostdev_xml_for_pci(address: str) -> str:
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    return (
        "<hostdev mode='subsystem' type='pci' managed='no'>\n"
        "  <source>\n"
        f"    <address domain='0x{domain}' bus='0x{bus}' slot='0x{slot}' "
        f"function='0x{function}'/>\n"
        "  </source>\n"
        "</hostdev>"
    )
