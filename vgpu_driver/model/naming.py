"""Names: PCI addresses, resource classes and traits."""

from __future__ import annotations

import functools
import hashlib
import re
import string
import uuid as uuidlib

import os_resource_classes as orc
import os_traits

PCI_ADDRESS_RE = re.compile(
    r"^(?P<domain>[0-9a-fA-F]{4}):(?P<bus>[0-9a-fA-F]{2}):"
    r"(?P<slot>[0-9a-fA-F]{2})\.(?P<function>[0-7])$"
)
DEVICE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
CLASS_VALUE_RE = re.compile(r"^[A-Za-z0-9_]+$")
# what Nova's own [mdev_<type>] mdev_class option accepts
NOVA_CLASS_RE = re.compile(r"^(VGPU|CUSTOM_[A-Z0-9_]+)$")
CUSTOM_NAME_RE = re.compile(r"^CUSTOM_[A-Z0-9_]+$")
MAX_NAME_LENGTH = 255


def pci_address(domain: int, bus: int, slot: int, function: int) -> str:
    return f"{domain:04x}:{bus:02x}:{slot:02x}.{function:x}"


def split_pci_address(address: str) -> tuple[str, str, str, str]:
    """``0000:41:00.4`` as its hexadecimal fields: domain, bus, slot,
    function."""
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    return domain, bus, slot, function


def libvirt_pci_name(address: str) -> str:
    """libvirt's node-device name for a PCI address: ``0000:41:00.0``
    gives ``pci_0000_41_00_0``."""
    return "pci_" + address.replace(":", "_").replace(".", "_")


def mdev_parent_name(name: str) -> str:
    """The PCI parent of an mdev named as libvirt >= 7.3 names them
    (``mdev_<uuid>_<parent address>``), or ``""``."""
    tail = name[len("mdev_") + 36 :]
    return "pci_" + tail[1:] if tail.startswith("_") else ""


def normalize_pci_address(value: str) -> str | None:
    """``0000:84:00.0`` in lower case, or None if it is not one."""
    match = PCI_ADDRESS_RE.match(value.strip())
    if not match:
        return None
    return value.strip().lower()


SRIOV_TYPE_PREFIX = "nvidia-"


def sriov_type_id(number: int) -> str:
    """How this library names the vGPU type a VF takes by number in
    ``current_vgpu_type`` / ``creatable_vgpu_types``: ``nvidia-<n>``."""
    return f"{SRIOV_TYPE_PREFIX}{number}"


def sriov_type_number(type_id: str) -> int:
    """The number of an SR-IOV vGPU type id (``nvidia-1145`` -> 1145)."""
    return int(type_id.removeprefix(SRIOV_TYPE_PREFIX))


PLAIN_VF_TYPE_PREFIX = "vf-"


def plain_vf_type_id(vendor_id: str | None, product_id: str | None) -> str:
    """How this library names the one "type" of a GPU whose SR-IOV VFs
    are given as they are (AMD MxGPU, Intel SR-IOV): its VFs' PCI ids,
    ``vf-1002-692f``."""

    def bare(value: str | None) -> str:
        return (value or "").lower().removeprefix("0x") or "unknown"

    return f"{PLAIN_VF_TYPE_PREFIX}{bare(vendor_id)}-{bare(product_id)}"


LIBVIRT_PCI_NAME_RE = re.compile(
    r"^pci_(?P<domain>[0-9a-fA-F]{4})_(?P<bus>[0-9a-fA-F]{2})_"
    r"(?P<slot>[0-9a-fA-F]{2})_(?P<function>[0-7])$"
)


def canonical_device(value: str) -> str | None:
    """How ``device_addresses`` names a parent, one way only: a PCI
    address in lower case (also for libvirt's ``pci_0000_84_00_0``), or
    a non-PCI parent's name; None if it is neither."""
    value = value.strip()
    address = normalize_pci_address(value)
    if address is not None:
        return address
    match = LIBVIRT_PCI_NAME_RE.match(value)
    if match:
        return "{domain}:{bus}:{slot}.{function}".format(
            **match.groupdict()
        ).lower()
    return value if is_device_name(value) else None


def canonical_pci_address(name: str) -> str | None:
    """The PCI address of a libvirt ``pci_0000_84_00_0`` name, else None."""
    found = canonical_device(name)
    return found if found and normalize_pci_address(found) else None


def is_device_name(value: str) -> bool:
    """A non-PCI parent's name, such as ``mtty`` or ``css_0_0_0023``."""
    return ":" not in value and bool(DEVICE_NAME_RE.match(value))


def resource_class_for(value: str) -> str | None:
    """The resource class an ``mdev_class`` value stands for, or None.

    ``VGPU`` (any case) stays ``VGPU``; ``CUSTOM_X`` and a bare ``x`` both
    give ``CUSTOM_X``; any other standard class is refused, as are values
    with characters Placement does not accept.
    """
    value = value.strip()
    if not CLASS_VALUE_RE.match(value):
        return None
    if value.upper() == orc.VGPU:
        return str(orc.VGPU)
    upper = value.upper()
    if upper in orc.STANDARDS:
        return None
    if upper.startswith(orc.CUSTOM_NAMESPACE):
        name = upper
    else:
        name = str(orc.normalize_name(value))
    if name in orc.STANDARDS or len(name) > MAX_NAME_LENGTH:
        return None
    if name == orc.CUSTOM_NAMESPACE:
        return None
    return name


def is_valid_trait(name: str) -> bool:
    if os_traits.is_custom(name):
        return bool(CUSTOM_NAME_RE.match(name)) and len(name) <= 255
    # os-traits names each standard trait as an attribute of its own
    # value (its check_traits lists them all again at every call: about
    # 0.2 ms at each configuration load)
    return not name.startswith("_") and vars(os_traits).get(name) == name


_NAME_CHARACTERS = frozenset(string.ascii_letters + string.digits)


def _underscored(text: str) -> str:
    """``text`` with each run of characters other than ASCII letters and
    digits made one ``_``, as os-traits' normalize_name makes a trait:
    without the regular expression it compiles at its first call in a
    process (about 0.1 ms of a restarted service's first refresh)."""
    out: list[str] = []
    run = False
    for character in text:
        if character in _NAME_CHARACTERS:
            out.append(character)
            run = False
        elif not run:
            out.append("_")
            run = True
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def type_trait(type_id: str) -> str:
    """The trait naming a type: ``nvidia-35`` gives ``CUSTOM_NVIDIA_35``
    (os-traits' normalize_name)."""
    return str(os_traits.CUSTOM_NAMESPACE) + _underscored(type_id).upper()


def child_provider_uuid(root_uuid: str, name: str) -> str:
    """A child provider's uuid, derived from its root and name, so every
    writer of one host's tree picks the same one: ``uuid.uuid5(root,
    name)``, computed without building UUID objects (a third of the cost,
    once per provider on a first refresh)."""
    try:
        raw = bytes.fromhex(root_uuid.replace("-", ""))
    except ValueError:
        raw = b""
    if len(raw) != 16 or len(root_uuid) != 36 or root_uuid.count("-") != 4:
        # not the canonical form: uuid's parser (and its errors)
        return str(uuidlib.uuid5(uuidlib.UUID(root_uuid), name))
    # a name, not a secret: allowed where FIPS mode refuses SHA-1
    sha1 = hashlib.sha1(raw + name.encode(), usedforsecurity=False)
    digest = bytearray(sha1.digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def provider_name(nodename: str, device_name: str) -> str:
    """Nova's name for a parent device's provider: ``<node>_<device>``."""
    return f"{nodename}_{device_name}"


HOST_DRIVER_TRAIT_PREFIX = "CUSTOM_VGPU_HOST_"
# NVML says the GPU's vGPUs can live-migrate (pGPU virtualization caps)
MIGRATION_TRAIT = "CUSTOM_VGPU_LIVE_MIGRATION"


# between a device's name and a type's in the provider of a second type
# one device serves (an NVIDIA SR-IOV card in mixed-size mode)
TYPE_SEPARATOR = "__"


def type_provider_name(nodename: str, device: str, type_id: str) -> str:
    """The provider of a type a device serves beside its first:
    ``<nodename>_<device>__<type id>``."""
    return f"{provider_name(nodename, device)}{TYPE_SEPARATOR}{type_id}"


def provider_device(short_name: str) -> tuple[str, str | None]:
    """(device name, type id or None) of a device provider's name without
    its ``<nodename>_`` prefix."""
    device, _sep, type_id = short_name.partition(TYPE_SEPARATOR)
    return device, type_id or None


@functools.lru_cache(maxsize=64)  # a host has a driver or two
def host_driver_trait(driver: str, version: str) -> str:
    """``CUSTOM_VGPU_HOST_NVIDIA_570_124_03``: the host driver a device
    provider's vGPUs run on (live migration needs the same on both
    ends; a flavor can require it)."""
    text = _underscored(f"{driver}_{version}".upper())
    return HOST_DRIVER_TRAIT_PREFIX + text.strip("_")


def driver_mismatch(source: set[str], destination: set[str]) -> str | None:
    """Why a vGPU cannot live-migrate between hosts whose providers carry
    these traits (their host driver versions), or None. Unknown on
    either side (no such trait) is no reason to refuse."""
    ours = {t for t in source if t.startswith(HOST_DRIVER_TRAIT_PREFIX)}
    theirs = {t for t in destination if t.startswith(HOST_DRIVER_TRAIT_PREFIX)}
    if not ours or not theirs or ours & theirs:
        return None
    return (
        f"the source's vGPU host driver is {', '.join(sorted(ours))} and "
        f"this host's is {', '.join(sorted(theirs))}: a vGPU live-migrates "
        "only between the same driver (require the trait in the flavor "
        "to keep the scheduler to such hosts)"
    )
