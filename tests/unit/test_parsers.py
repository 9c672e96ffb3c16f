"""Node-device and domain XML parsers, on captured and arbitrary XML."""

from __future__ import annotations

import contextlib
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.helpers import xml_of_shipped_hosts
from tests.nodedev_samples import M10_PARENT, MDEV_77, SRIOV_PARENT
from vgpu_driver.exception import DeviceXMLInvalid
from vgpu_driver.host import domain_xml, nodedev_xml


def test_pci_parent_address_comes_from_the_capability_not_the_name():
    xml = M10_PARENT.replace("<name>pci_0000_84_00_0", "<name>renamed")
    parent = nodedev_xml.parse_parent(xml)
    assert parent.name == "renamed"
    assert parent.address == "0000:84:00.0"
    assert (parent.vendor_id, parent.product_id) == ("0x10de", "0x13bd")
    assert parent.vendor == "NVIDIA Corporation"
    assert parent.driver == "nvidia" and parent.numa_node == 1
    assert parent.type("nvidia-35").name == "GRID M10-0B"
    assert parent.type("nvidia-35").available == 16
    assert parent.type("i915-GVTg_V5_4").name is None  # i915 has no name


def test_device_without_mdev_types_is_not_a_parent():
    xml = M10_PARENT.split("<capability type='mdev_types'>")[0]
    xml += "</capability></device>"
    assert nodedev_xml.parse_parent(xml) is None


def test_mdev_with_new_style_name_and_uuid_element():
    mdev = nodedev_xml.parse_mdev(MDEV_77)
    assert mdev.uuid == "4b20d080-1b54-4048-85b3-a6a62d165c01"
    assert (mdev.type_id, mdev.parent, mdev.iommu_group) == (
        "nvidia-35",
        "pci_0000_84_00_0",
        12,
    )


def test_mdev_with_legacy_name_and_no_uuid_element():
    xml = MDEV_77.replace("_0000_84_00_0</name>", "</name>").replace(
        "<uuid>4b20d080-1b54-4048-85b3-a6a62d165c01</uuid>", ""
    )
    assert nodedev_xml.parse_mdev(xml).uuid == (
        "4b20d080-1b54-4048-85b3-a6a62d165c01"
    )


@pytest.mark.parametrize(
    ("xml", "fragment"),
    [
        (
            M10_PARENT.replace("<deviceAPI>vfio-pci</deviceAPI>", "", 1),
            "deviceAPI",
        ),
        (
            M10_PARENT.replace(
                "<availableInstances>16", "<availableInstances>x"
            ),
            "availableInstances",
        ),
        (M10_PARENT.replace("<bus>132</bus>", ""), "PCI address"),
        (MDEV_77.replace("<type id='nvidia-35'/>", ""), "type"),
    ],
)
def test_missing_required_field_names_the_device(xml, fragment):
    with pytest.raises(DeviceXMLInvalid) as caught:
        if "mdev_types" in xml:
            nodedev_xml.parse_parent(xml)
        else:
            nodedev_xml.parse_mdev(xml)
    assert fragment in str(caught.value)
    assert "node device" in str(caught.value)


def _prefixes(text: str) -> st.SearchStrategy[str]:
    return st.integers(0, len(text)).map(lambda n: text[:n])


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=300),
        _prefixes(M10_PARENT),
        _prefixes(MDEV_77),
        st.builds(
            lambda a, b, c: M10_PARENT[:a] + c + M10_PARENT[b:],
            st.integers(0, len(M10_PARENT)),
            st.integers(0, len(M10_PARENT)),
            st.text(max_size=20),
        ),
    )
)
def test_parsers_raise_only_their_own_error(text):
    for parse in (
        nodedev_xml.parse_parent,
        nodedev_xml.parse_mdev,
        domain_xml.parse_guest,
    ):
        with contextlib.suppress(DeviceXMLInvalid):
            parse(text)


def _mutants(text: str) -> st.SearchStrategy[str]:
    """``text`` with a slice replaced: by nothing, by another slice of
    it, or by arbitrary text (markup, references, other whitespace)."""
    cut = st.tuples(st.integers(0, len(text)), st.integers(0, len(text))).map(
        sorted
    )
    filler = st.one_of(
        st.just(""),
        cut.map(lambda ab: text[ab[0] : ab[1]]),
        st.sampled_from(
            [
                "<",
                ">",
                "'",
                '"',
                "&amp;",
                "<!-- x -->",
                "\r",
                "\t",
                "\xa0",
                "\x01",
                " ",
                "-",
                "0",
                "09",
                "0x1",
                "<a/>",
                "</capability>",
            ]
        ),
        st.text(max_size=8),
    )
    numbers = [m.span() for m in re.finditer(r"[0-9]+", text)]
    return st.one_of(
        st.builds(
            lambda ab, fill: text[: ab[0]] + fill + text[ab[1] :],
            cut,
            filler,
        ),
        # a number libvirt writes, written otherwise
        st.builds(
            lambda ab, fill: text[: ab[0]] + fill + text[ab[1] :],
            st.sampled_from(numbers),
            st.sampled_from(["09", "007", "0x1f", "-1", "", " 3 ", "1.5"]),
        ),
    )


def _reference(parse, text):
    try:
        return parse(text)
    except DeviceXMLInvalid:
        return DeviceXMLInvalid


@settings(max_examples=600, deadline=None)
@given(st.one_of(_mutants(SRIOV_PARENT), _mutants(M10_PARENT)))
# a type whose deviceAPI is empty: the tree parser refuses the parent
@example(SRIOV_PARENT.replace("<deviceAPI>vfio-pci</", "<deviceAPI></", 1))
@example(SRIOV_PARENT.replace("<deviceAPI>vfio-pci</", "<deviceAPI> </", 1))
def test_the_fast_parent_reader_reads_as_xml_does_or_declines(text):
    """Whatever the text, the pattern reader either declines it or reads
    exactly what the tree parser reads (and never reads a text the tree
    parser refuses)."""
    fast = nodedev_xml._read_pci_parent_shape(text)
    if fast is not None:
        assert fast == _reference(nodedev_xml.read_parent_tree, text)


def _rooms_rewritten(text: str) -> st.SearchStrategy[str]:
    """``text`` with its types' ``availableInstances`` written anew: as
    an mdev made or removed leaves them, or as libvirt never writes."""
    spans = [
        m.span(1) for m in re.finditer(r"<availableInstances>([^<]*)<", text)
    ]
    number = st.one_of(
        st.integers(0, 64).map(str),
        st.sampled_from(
            ["09", "007", "0x1f", "-1", "", " 3 ", "1.5", "٣", "²"]
        ),
    )

    def written(numbers: list[str]) -> str:
        out, at = [], 0
        for (start, end), n in zip(spans, numbers, strict=True):
            out += [text[at:start], n]
            at = end
        return "".join([*out, text[at:]])

    return st.lists(number, min_size=len(spans), max_size=len(spans)).map(
        written
    )


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from([M10_PARENT, SRIOV_PARENT]).flatmap(
        lambda first: st.tuples(
            st.just(first),
            st.one_of(_rooms_rewritten(first), _mutants(first)),
        )
    )
)
def test_a_parent_whose_rooms_alone_changed_reads_as_a_first_reading(pair):
    """A parent read before, whose XML comes back with other rooms (an
    mdev made or removed) is not parsed again: the same parent with the
    new rooms. Whatever the new text, the reading is the one a reader
    that never saw the parent makes."""
    from vgpu_driver.host.parents import ParentReader
    from vgpu_driver.host.sysfs import SysfsTree

    first, text = pair
    sysfs = SysfsTree("/nonexistent-sysfs")
    seen = ParentReader(sysfs)
    name = re.search(r"<name>([^<]*)</name>", first).group(1)
    before = seen.read(name, first, None)
    assert before is not None
    now = _reference(lambda t: seen.read(name, t, None), text)
    assert now == _reference(
        lambda t: ParentReader(sysfs).read(name, t, None), text
    )


def test_a_parent_whose_rooms_alone_changed_is_not_parsed_again(
    monkeypatch,
):
    from vgpu_driver.host.parents import ParentReader
    from vgpu_driver.host.sysfs import SysfsTree

    seen = ParentReader(SysfsTree("/nonexistent-sysfs"))
    before = seen.read("pci_0000_84_00_0", M10_PARENT, None)
    parsed = []
    monkeypatch.setattr(
        nodedev_xml, "read_parent", lambda text: parsed.append(text)
    )
    text = M10_PARENT.replace(">16</available", ">15</available")
    now = seen.read("pci_0000_84_00_0", text, None)
    assert not parsed
    assert [t.available for t in now.types] == [15, 7]
    assert now.types[1] is before.types[1]  # the type unchanged is kept


def test_a_parent_whose_driver_left_the_xml_has_none(tmp_path):
    """libvirt's driver is read from each XML (an unbound device's XML
    names none); sysfs is asked, once, only where the XML names none."""
    from vgpu_driver.host.parents import ParentReader
    from vgpu_driver.host.sysfs import SysfsTree

    seen = ParentReader(SysfsTree(str(tmp_path)))
    name = "pci_0000_84_00_0"
    assert seen.read(name, M10_PARENT, None).driver == "nvidia"
    unbound = M10_PARENT.replace("<driver><name>nvidia</name></driver>", "")
    assert unbound != M10_PARENT
    assert seen.read(name, unbound, None).driver is None
    assert seen.read(name, M10_PARENT, None).driver == "nvidia"


@settings(max_examples=600, deadline=None)
@given(_mutants(MDEV_77))
# an empty parent, or name and uuid element (the tree parser refuses them)
@example(MDEV_77.replace(">pci_0000_84_00_0</parent>", "> </parent>"))
@example(re.sub(r"<name>mdev_\w+</name>|<uuid>[-\w]+</uuid>", "", MDEV_77))
def test_the_fast_mdev_reader_reads_as_xml_does_or_declines(text):
    fast = nodedev_xml._parse_mdev_shape(text)
    if fast is not None:
        assert fast == _reference(nodedev_xml.parse_mdev_tree, text)


def test_the_fast_readers_take_libvirts_shapes():
    """What libvirt formats is read by the patterns (or the speed of a
    first discovery is lost without a test noticing), as the tree
    parser reads it; an element they do not know sends the text to the
    tree parser."""
    parent = nodedev_xml._read_pci_parent_shape(SRIOV_PARENT)
    assert parent is not None
    assert parent == nodedev_xml.read_parent_tree(SRIOV_PARENT)
    assert parent[0].driver == "nvidia" and parent[0].product is None
    assert [t.available for t in parent[0].types] == [32, 16]
    assert nodedev_xml._parse_mdev_shape(MDEV_77) is not None
    assert "<future-element/>" in M10_PARENT
    assert nodedev_xml._read_pci_parent_shape(M10_PARENT) is None
    assert nodedev_xml.read_parent(M10_PARENT)[0].types


def test_the_fast_parsers_read_what_the_reference_parsers_read(tmp_path):
    parents, mdevs, domains = xml_of_shipped_hosts(tmp_path)
    assert parents and mdevs and domains
    for text in [M10_PARENT, SRIOV_PARENT, *parents]:
        if "<capability type='pci'>" in text:
            assert nodedev_xml._read_pci_parent_shape(text) or (
                text == M10_PARENT
            )
        assert nodedev_xml.read_parent(text) == (
            nodedev_xml.read_parent_tree(text)
        )
        # one parse gives both the parent and its sysfs path
        parent, path = nodedev_xml.read_parent(text)
        assert parent is not None and parent.types
        assert parent == nodedev_xml.parse_parent(text)
        assert path is not None and path == nodedev_xml.device_path(text)
    for text in mdevs:
        assert nodedev_xml._parse_mdev_shape(text) is not None  # fast path
        assert nodedev_xml.parse_mdev(text) == nodedev_xml.parse_mdev_tree(
            text
        )
    for text in domains:
        assert domain_xml.parse_guest(text) == domain_xml.parse_guest_tree(
            text
        )


@pytest.mark.parametrize(
    "text",
    [
        MDEV_77.replace("<parent>", "<!-- x --><parent>"),
        MDEV_77.replace("\n", "\r\n"),
        "<?xml version='1.0'?>" + MDEV_77,
        MDEV_77.replace("nvidia-35", "nvidia&#45;35"),
    ],
)
def test_the_fast_mdev_reader_leaves_what_xml_rewrites_to_the_reference(
    text,
):
    """Comments, carriage returns (XML reads them as newlines), XML
    declarations and references: the fast reader declines them."""
    assert nodedev_xml._parse_mdev_shape(text) is None
    assert nodedev_xml.parse_mdev(text) == nodedev_xml.parse_mdev(MDEV_77)
