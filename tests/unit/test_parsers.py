"""Node-device and domain XML parsers, on captured and arbitrary XML."""

from __future__ import annotations

import contextlib
import re
import uuid

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from vgpu_driver.exception import DeviceXMLInvalid
from vgpu_driver.host import domain_xml, nodedev_xml

M10_PARENT = """
<device>
  <name>pci_0000_84_00_0</name>
  <path>/sys/devices/pci0000:80/0000:80:01.0/0000:84:00.0</path>
  <parent>pci_0000_80_01_0</parent>
  <driver><name>nvidia</name></driver>
  <capability type='pci'>
    <class>0x030000</class>
    <domain>0</domain><bus>132</bus><slot>0</slot><function>0</function>
    <product id='0x13bd'>GM107GL [Tesla M10]</product>
    <vendor id='0x10de'>NVIDIA Corporation</vendor>
    <capability type='mdev_types'>
      <type id='nvidia-35'>
        <name>GRID M10-2B</name>
        <deviceAPI>vfio-pci</deviceAPI>
        <availableInstances>4</availableInstances>
      </type>
      <type id='i915-GVTg_V5_4'>
        <deviceAPI>vfio-pci</deviceAPI>
        <availableInstances>7</availableInstances>
      </type>
    </capability>
    <iommuGroup number='40'/>
    <numa node='1'/>
    <pci-express><link validity='cap' port='0' speed='8' width='16'/></pci-express>
  </capability>
  <future-element/>
</device>
"""

# As libvirt formats a PCI parent with everything its fast reader takes:
# an SR-IOV physical function, a header type, an IOMMU group, a NUMA node
# and PCIe links.
SRIOV_PARENT = """<device>
  <name>pci_0000_41_00_0</name>
  <path>/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0</path>
  <parent>pci_0000_40_01_1</parent>
  <driver>
    <name>nvidia</name>
  </driver>
  <capability type='pci'>
    <class>0x030200</class>
    <domain>0</domain>
    <bus>65</bus>
    <slot>0</slot>
    <function>0</function>
    <product id='0x26b5' />
    <vendor id='0x10de'>NVIDIA Corporation</vendor>
    <capability type='virt_functions' maxCount='32'>
      <address domain='0x0000' bus='0x41' slot='0x00' function='0x4'/>
      <address domain='0x0000' bus='0x41' slot='0x00' function='0x5'/>
    </capability>
    <capability type='mdev_types'>
      <type id='nvidia-1155'>
        <name>NVIDIA L40-1B</name>
        <deviceAPI>vfio-pci</deviceAPI>
        <availableInstances>32</availableInstances>
      </type>
      <type id='nvidia-1156'>
        <deviceAPI>vfio-pci</deviceAPI>
        <availableInstances>16</availableInstances>
      </type>
    </capability>
    <iommuGroup number='21'>
      <address domain='0x0000' bus='0x41' slot='0x00' function='0x0'/>
    </iommuGroup>
    <numa node='1'/>
    <pci-express>
      <link validity='cap' port='0' speed='16' width='16'/>
      <link validity='sta' speed='16' width='16'/>
    </pci-express>
  </capability>
</device>
"""

MDEV_77 = """
<device>
  <name>mdev_4b20d080_1b54_4048_85b3_a6a62d165c01_0000_84_00_0</name>
  <path>/sys/devices/pci0000:80/0000:84:00.0/4b20d080-1b54-4048-85b3-a6a62d165c01</path>
  <parent>pci_0000_84_00_0</parent>
  <driver><name>vfio_mdev</name></driver>
  <capability type='mdev'>
    <type id='nvidia-35'/>
    <uuid>4b20d080-1b54-4048-85b3-a6a62d165c01</uuid>
    <parent_addr>0000:84:00.0</parent_addr>
    <iommuGroup number='12'/>
  </capability>
</device>
"""


def test_pci_parent_address_comes_from_the_capability_not_the_name():
    xml = M10_PARENT.replace("<name>pci_0000_84_00_0", "<name>renamed")
    parent = nodedev_xml.parse_parent(xml)
    assert parent.name == "renamed"
    assert parent.address == "0000:84:00.0"
    assert (parent.vendor_id, parent.product_id) == ("0x10de", "0x13bd")
    assert parent.vendor == "NVIDIA Corporation"
    assert parent.driver == "nvidia" and parent.numa_node == 1
    assert parent.type("nvidia-35").name == "GRID M10-2B"
    assert parent.type("nvidia-35").available == 4
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
                "<availableInstances>4", "<availableInstances>x"
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


def test_domain_hostdevs_mdev_and_pci():
    xml = """
    <domain type='kvm'><name>vm1</name>
      <uuid>11111111-2222-3333-4444-555555555555</uuid>
      <devices>
        <hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci'>
          <source><address uuid='4B20D080-1B54-4048-85B3-A6A62D165C01'/></source>
        </hostdev>
        <hostdev mode='subsystem' type='pci' managed='no'>
          <source><address domain='0x0000' bus='0x41' slot='0x00'
            function='0x4'/></source>
        </hostdev>
        <interface type='network'/>
      </devices>
    </domain>"""
    guest = domain_xml.parse_guest(xml)
    assert guest.uuid == "11111111-2222-3333-4444-555555555555"
    assert guest.mdevs == ("4b20d080-1b54-4048-85b3-a6a62d165c01",)
    assert guest.pci_devices == ("0000:41:00.4",)


def test_hostdev_xml_round_trips_through_the_parser():
    xml = (
        "<domain><name>x</name><uuid>u1</uuid><devices>"
        + domain_xml.hostdev_xml_for_mdev(
            "4b20d080-1b54-4048-85b3-a6a62d165c01"
        )
        + domain_xml.hostdev_xml_for_pci("0000:41:01.2")
        + "</devices></domain>"
    )
    guest = domain_xml.parse_guest(xml)
    assert guest.mdevs == ("4b20d080-1b54-4048-85b3-a6a62d165c01",)
    assert guest.pci_devices == ("0000:41:01.2",)


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
    text = M10_PARENT.replace(">4</available", ">3</available")
    now = seen.read("pci_0000_84_00_0", text, None)
    assert not parsed
    assert [t.available for t in now.types] == [3, 7]
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


def _test_driver_xml(tmp_path):
    """Every parent's, mdev's and domain's XML as libvirt's test driver
    formats it, for all shipped hosts."""
    import libvirt

    from tests import helpers
    from vgpu_driver.sim import description as hostdesc

    parents, mdevs, domains = [], [], []
    for i, name in enumerate(helpers.ALL_HOSTS):
        uri, _ = hostdesc.materialize(hostdesc.load(name), tmp_path / str(i))
        conn = libvirt.open(uri)
        flag = libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES
        parents += [d.XMLDesc(0) for d in conn.listAllDevices(flag)]
        flag = libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV
        mdevs += [d.XMLDesc(0) for d in conn.listAllDevices(flag)]
        domains += [d.XMLDesc(0) for d in conn.listAllDomains(0)]
        conn.close()
    return parents, mdevs, domains


def test_the_fast_parsers_read_what_the_reference_parsers_read(tmp_path):
    parents, mdevs, domains = _test_driver_xml(tmp_path)
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


@pytest.mark.parametrize(
    "devices",
    [
        # a commented-out hostdev is not a device
        "<!-- <hostdev mode='subsystem' type='mdev'><source><address "
        "uuid='aaaaaaaa-0000-0000-0000-000000000001'/></source></hostdev> -->",
        # capabilities mode is not a subsystem device
        "<hostdev mode='capabilities' type='storage'><source><block>/dev/sdf"
        "</block></source></hostdev>",
        "<hostdev mode='subsystem' type='pci' managed='yes'><source><address "
        "domain='0x0000' bus='0x84' slot='0x00' function='0x5'/></source>"
        "</hostdev><hostdev mode='subsystem' type='mdev' model='vfio-pci'>"
        "<source><address uuid='AAAAAAAA-0000-0000-0000-000000000002'/>"
        "</source></hostdev>",
    ],
)
@pytest.mark.parametrize("name", ["a &amp; b", "instance-00000001"])
def test_the_fast_guest_parser_agrees_on_unusual_domains(devices, name):
    text = (
        f"<domain type='kvm'><name>{name}</name>"
        "<uuid>11111111-2222-3333-4444-555555555555</uuid>"
        f"<devices>{devices}</devices></domain>"
    )
    assert domain_xml.parse_guest(text) == domain_xml.parse_guest_tree(text)


def test_a_nova_guest_is_read_without_building_a_tree(tmp_path, monkeypatch):
    """Nova's metadata (written with double quotes) and the devices of a
    guest beside its host devices, as libvirt returns them, do not send
    it to the reference parser (which costs about seven times as much
    on a 4.5 KB domain)."""
    _, _, domains = _test_driver_xml(tmp_path)
    assert domains
    assert all('"' in t and "<nova:instance" in t for t in domains)
    expected = [domain_xml.parse_guest_tree(t) for t in domains]
    assert any(g.mdevs for g in expected) and any(
        g.pci_devices for g in expected
    )

    def tree(text):
        raise AssertionError("read with a tree")

    monkeypatch.setattr(domain_xml, "parse_guest_tree", tree)
    assert [domain_xml.parse_guest(t) for t in domains] == expected


NOVA_METADATA = (
    '<metadata><nova:instance xmlns:nova="http://openstack.org/xmlns/'
    'libvirt/nova/1.1"><nova:name>a "quoted" &amp; name</nova:name>'
    "</nova:instance></metadata>"
)
HOSTDEV = (
    "<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source>"
    "<address uuid='aaaaaaaa-0000-0000-0000-000000000003'/></source>"
    "</hostdev>"
)


@pytest.mark.parametrize(
    "metadata, devices",
    [
        # another application's metadata, with elements named as devices
        (
            '<metadata><app xmlns="urn:x"><devices>' + HOSTDEV + "</devices>"
            "</app></metadata>",
            "",
        ),
        # a metadata element within the metadata
        ('<metadata><app xmlns="urn:x"><metadata/></app></metadata>', HOSTDEV),
        (
            '<metadata><app xmlns="urn:x"><metadata>x</metadata><devices>'
            + HOSTDEV
            + "</devices></app></metadata>",
            "",
        ),
        # CDATA among the devices
        (NOVA_METADATA, "<![CDATA[" + HOSTDEV + "]]>"),
        (NOVA_METADATA, HOSTDEV),
        # a double quote, an entity or a comment among the devices
        (
            NOVA_METADATA,
            HOSTDEV.replace("'aaaaaaaa-0000-0000-0000-000000000003'", '"x"'),
        ),
        (NOVA_METADATA, HOSTDEV.replace("aaaaaaaa", "&#97;aaaaaaa")),
        (NOVA_METADATA, "<!-- " + HOSTDEV + " -->"),
        ("<metadata/>", HOSTDEV),
        # Nova's namespace under another prefix, or nested in another's
        (
            NOVA_METADATA.replace("nova:", "n:").replace(
                "xmlns:nova", "xmlns:n"
            ),
            HOSTDEV,
        ),
        (
            '<metadata><app xmlns="urn:x">'
            + NOVA_METADATA[10:-11]
            + "</app></metadata>",
            HOSTDEV,
        ),
        # another namespace of Nova's, no instance
        (
            '<metadata><nova:ports xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1"/></metadata>',
            HOSTDEV,
        ),
    ],
)
def test_the_fast_guest_parser_agrees_whatever_the_metadata(metadata, devices):
    text = (
        "<domain type='kvm'><name>instance-00000001</name>"
        "<uuid>11111111-2222-3333-4444-555555555555</uuid>"
        f"{metadata}<devices>{devices}</devices></domain>"
    )
    assert domain_xml.parse_guest(text) == domain_xml.parse_guest_tree(text)


def test_sysfs_attributes_are_read_whole_or_not_at_all(tmp_path):
    """sysfs values are read with raw descriptor reads: a value longer
    than one read comes back whole; a missing, unreadable or undecodable
    attribute is None, never a partial value or an exception."""
    from vgpu_driver.host import sysfs_files

    long_value = "GRID description line\n" * 4000  # many one-page reads
    (tmp_path / "description").write_text(long_value + "\n")
    (tmp_path / "one_page").write_text("x" * 4096)
    (tmp_path / "latin1").write_bytes(b"caf\xe9")
    (tmp_path / "a_directory").mkdir()
    (tmp_path / "available_instances").write_text("  12\n")

    assert sysfs_files.read(tmp_path / "description") == long_value.strip()
    assert sysfs_files.read(tmp_path / "one_page") == "x" * 4096
    assert sysfs_files.read(str(tmp_path / "available_instances")) == "12"
    assert sysfs_files.read_int(tmp_path / "available_instances") == 12
    for unreadable in ("missing", "latin1", "a_directory"):
        assert sysfs_files.read(tmp_path / unreadable) is None


def test_a_vf_list_read_while_vfs_are_being_enabled_is_not_kept(tmp_path):
    """``sriov_numvfs`` already says 32 while a ``virtfn`` link is not
    there yet: that listing is incomplete, so the next scan reads the
    links again (the count alone has not changed)."""
    from tests.helpers import load
    from vgpu_driver.host.sysfs import SysfsTree
    from vgpu_driver.sim.description import materialize

    _uri, root = materialize(load("l40-sriov"), tmp_path)
    pf_dir = root / "bus/pci/devices/0000:41:00.0"
    link = pf_dir / "virtfn5"
    target = link.readlink()
    link.unlink()  # the kernel has not made it yet
    tree = SysfsTree(root)
    [pf] = tree.sriov_functions()
    complete = len(pf.vfs) + 1
    link.symlink_to(target)
    [pf] = tree.sriov_functions()
    assert len(pf.vfs) == complete


def test_a_guest_outside_nova_is_told_by_its_metadata(tmp_path):
    """Nova writes its ``nova:instance`` in every instance's domain; a
    guest without it was defined by someone else (Placement holds no
    allocation for its devices)."""
    from tests.unit.test_binding import hand_made_domain_xml

    _, _, domains = _test_driver_xml(tmp_path)
    assert all(domain_xml.parse_guest(t).nova for t in domains)
    mdev = "aaaaaaaa-0000-0000-0000-000000000003"
    by_hand = hand_made_domain_xml(str(uuid.uuid4()), "theirs", [mdev])
    for parse in (domain_xml.parse_guest, domain_xml.parse_guest_tree):
        guest = parse(by_hand)
        assert (guest.nova, guest.mdevs) == (False, (mdev,))
    moved = (
        "<domain type='kvm'><name>n</name>"
        "<uuid>11111111-2222-3333-4444-555555555555</uuid>"
        + NOVA_METADATA.replace("nova:", "n:").replace("xmlns:nova", "xmlns:n")
        + "<devices/></domain>"
    )
    assert domain_xml.parse_guest(moved).nova
