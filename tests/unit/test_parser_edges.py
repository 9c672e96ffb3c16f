"""Node-device XML at the edges the shipped samples do not reach: a
parent libvirt writes without a NUMA node (a one-socket host) or without
vendor and product, a type without ``availableInstances``, a VF parent's
physical function (whole, empty or cut short), an mdev name that is not
an mdev's, and the text cutter the guest reader is built on."""

from __future__ import annotations

import pytest

from tests.nodedev_samples import M10_PARENT, SRIOV_PARENT
from vgpu_driver.exception import DeviceXMLInvalid
from vgpu_driver.host import nodedev_xml

UUID = "4b20d080-1b54-4048-85b3-a6a62d165c01"


def test_a_parent_without_numa_vendor_or_product_leaves_them_unknown():
    text = (
        M10_PARENT.replace("<numa node='1'/>", "")
        .replace("<vendor id='0x10de'>NVIDIA Corporation</vendor>", "")
        .replace("<product id='0x13bd'>GM107GL [Tesla M10]</product>", "")
    )
    parent = nodedev_xml.parse_parent(text)
    assert parent is not None and parent.address == "0000:84:00.0"
    assert (parent.numa_node, parent.vendor_id, parent.product_id) == (
        None,
        None,
        None,
    )
    assert parent.type("nvidia-35").available == 16


def test_a_type_without_available_instances_is_refused_by_name():
    text = M10_PARENT.replace(
        "<availableInstances>16</availableInstances>", ""
    )
    with pytest.raises(DeviceXMLInvalid, match="no availableInstances"):
        nodedev_xml.parse_parent(text)


def _vf(address: str) -> str:
    """:data:`SRIOV_PARENT` as libvirt writes a VF of the PF at
    ``address`` (an element, or none)."""
    return SRIOV_PARENT.replace(
        "<capability type='virt_functions' maxCount='32'>",
        f"<capability type='phys_function'>{address}</capability>"
        "<capability type='virt_functions' maxCount='32'>",
    )


def test_a_vf_parent_names_its_physical_function():
    """By the pattern reader and by the reference one alike."""
    whole = "<address domain='0x0000' bus='0x08' slot='0x00' function='0x0'/>"
    for read in (nodedev_xml.read_parent, nodedev_xml.read_parent_tree):
        parent, _path = read(_vf(whole))
        assert parent is not None
        assert parent.physical_function == "0000:08:00.0"
        empty, _path = read(_vf(""))
        assert empty is not None and empty.physical_function is None
    cut = whole.replace(" bus='0x08'", "")
    with pytest.raises(DeviceXMLInvalid, match="phys_function address"):
        nodedev_xml.parse_parent(_vf(cut))


@pytest.mark.parametrize(
    ("name", "uuid"),
    [
        (f"mdev_{UUID.replace('-', '_')}", UUID),
        (f"mdev_{UUID.replace('-', '_').upper()}_0000_84_00_0", UUID),
        (f"pci_{UUID.replace('-', '_')}", None),
        ("mdev_4b20d080", None),
    ],
)
def test_an_uuid_is_read_from_an_mdev_name_alone(name, uuid):
    assert nodedev_xml.mdev_uuid_from_name(name) == uuid


def test_between_cuts_the_first_text_between_two_marks():
    between = nodedev_xml.between
    text = "<x>1</x><x>2</x>"
    assert between(text, "<x>", "</x>") == "1"  # a mark at the very start
    assert between(text, "<x>", "</x>", 1) == "2"
    assert between(text, "<y>", "</x>") is None
    assert between("<x>1", "<x>", "</x>") is None
    assert between("<x></x>", "<x>", "</x>") == ""
