"""Domain XML parsers, on captured and arbitrary XML: a guest's hostdevs
(mdev and PCI) read and written back, the fast guest parser agreeing
with the reference one on unusual domains and whatever the metadata,
and a guest outside Nova told by its metadata."""

from __future__ import annotations

import uuid

import pytest

from tests.helpers import xml_of_shipped_hosts
from vgpu_driver.host import domain_xml

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
    _, _, domains = xml_of_shipped_hosts(tmp_path)
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


def test_a_guest_outside_nova_is_told_by_its_metadata(tmp_path):
    """Nova writes its ``nova:instance`` in every instance's domain; a
    guest without it was defined by someone else (Placement holds no
    allocation for its devices)."""
    from tests.domains import hand_made_domain_xml

    _, _, domains = xml_of_shipped_hosts(tmp_path)
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
