"""The fast guest parser against the reference one, over every pair of
device elements a domain may hold (libvirt's shapes and odd ones) under
every kind of metadata and in several element orders: the same guest
or the same error each time, and the tree built only where the text is
not libvirt's shape. Then what both read from odd host devices."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vgpu_driver.exception import DeviceXMLInvalid
from vgpu_driver.host import domain_xml
from vgpu_driver.model.binding import BoundDevice

UUID = "11111111-2222-3333-4444-555555555555"
NOVA = "http://openstack.org/xmlns/libvirt/nova/1.1"

# device elements as libvirt formats them (single quotes, no comments)
PLAIN = {
    "mdev": "<hostdev mode='subsystem' type='mdev' managed='no' "
    "model='vfio-pci'><source><address "
    "uuid='AAAAAAAA-0000-0000-0000-000000000001'/></source></hostdev>",
    "vf": "<hostdev mode='subsystem' type='pci' managed='no'><source>"
    "<address domain='0x0000' bus='0x41' slot='0x01' function='0x2'/>"
    "</source></hostdev>",
    "pci": "<hostdev mode='subsystem' type='pci' managed='yes'><source>"
    "<address domain='0x0001' bus='0xc8' slot='0x00' function='0x5'/>"
    "</source><address type='pci' domain='0x0000' bus='0x06' "
    "slot='0x00' function='0x0'/></hostdev>",
    "usb": "<hostdev mode='subsystem' type='usb' managed='no'><source>"
    "<vendor id='0x0951'/><product id='0x1666'/><address bus='1' "
    "device='4'/></source></hostdev>",
    "storage": "<hostdev mode='capabilities' type='storage'><source>"
    "<block>/dev/sdf</block></source></hostdev>",
    # an SR-IOV NIC: a PCI source address, not in a <hostdev>
    "nic": "<interface type='hostdev' managed='yes'><source><address "
    "type='pci' domain='0x0000' bus='0x3b' slot='0x02' function='0x1'/>"
    "</source><mac address='fa:16:3e:11:22:33'/></interface>",
    "disk": "<disk type='file' device='disk'><driver name='qemu' "
    "type='qcow2'/><source file='/var/lib/nova/instances/x/disk'/>"
    "<target dev='vda' bus='virtio'/></disk>",
}
# what makes the fast reader decline (the tree reads them)
ODD = {
    "comment": "<!-- " + PLAIN["mdev"].replace("0001", "0002") + " -->",
    "cdata": "<![CDATA[" + PLAIN["vf"] + "]]>",
    "double": PLAIN["mdev"].replace("'vfio-pci'", '"vfio-pci"'),
    "entity": PLAIN["mdev"].replace("AAAAAAAA", "&#65;AAAAAAA"),
    "no-address": "<hostdev mode='subsystem' type='mdev' managed='no'>"
    "<source/></hostdev>",
    "no-uuid": "<hostdev mode='subsystem' type='mdev' managed='no'>"
    "<source><address/></source></hostdev>",
    "bad-pci": PLAIN["vf"].replace("0x41", "0xzz"),
    # closed by itself: no </hostdev> follows (the NIC's source after it
    # is not its own)
    "self-closed": "<hostdev mode='subsystem' type='pci' managed='no'/>",
}
METADATA = {
    "none": "",
    "empty": "<metadata/>",
    "nova": f'<metadata><nova:instance xmlns:nova="{NOVA}"><nova:name>'
    'a "quoted" &amp; name</nova:name></nova:instance></metadata>',
    "other-prefix": f'<metadata><n:instance xmlns:n="{NOVA}"/></metadata>',
    "nova-ports": f'<metadata><nova:ports xmlns:nova="{NOVA}"/></metadata>',
    "devices-inside": '<metadata><app xmlns="urn:x"><devices>'
    + PLAIN["mdev"].replace("0001", "0003")
    + "</devices></app></metadata>",
    "nested": '<metadata><app xmlns="urn:x"><metadata>x</metadata>'
    "<devices>" + PLAIN["vf"] + "</devices></app></metadata>",
    "other-instance": '<metadata><app:instance xmlns:app="urn:x"/></metadata>',
}
# whether Nova defined the domain, by its metadata
NOVA_MADE = {"nova": True, "other-prefix": True}


def _domain(name: str, metadata: str, devices: str, order: str) -> str:
    head = {
        "libvirt": f"<name>{name}</name><uuid>{UUID}</uuid>{metadata}",
        "metadata-first": f"{metadata}<name>{name}</name><uuid>{UUID}</uuid>",
        "uuid-after": f"<name>{name}</name>{metadata}<uuid>{UUID}</uuid>",
        "no-uuid": f"<name>{name}</name>{metadata}",
    }[order]
    return (
        f"<domain type='kvm' id='3'>{head}<memory unit='KiB'>1024"
        f"</memory><devices>{devices}</devices><seclabel type='dynamic' "
        "model='dac'/></domain>"
    )


def _read(parse, text):
    try:
        return parse(text)
    except DeviceXMLInvalid as exc:
        return type(exc)


def _cases():
    pieces = {**PLAIN, **ODD}
    for first, second in itertools.product(pieces, repeat=2):
        for meta, order in itertools.product(
            METADATA, ("libvirt", "metadata-first", "uuid-after")
        ):
            yield first, second, meta, order
    for meta in METADATA:
        yield "mdev", "vf", meta, "no-uuid"
    # the NIC's PCI source after a hostdev closed by itself
    yield "self-closed", "nic", "nova", "libvirt"


def test_the_fast_reader_reads_every_shape_as_the_tree_does(monkeypatch):
    """Over every pair of device elements, each kind of metadata and
    each order: the same guest, or the same error, as the reference; a
    domain of libvirt's shape alone (its elements in libvirt's order,
    no odd device, a metadata of its own) never builds a tree."""
    reference = domain_xml.parse_guest_tree
    trees = []

    def counted(text):
        trees.append(text)
        return reference(text)

    monkeypatch.setattr(domain_xml, "parse_guest_tree", counted)
    checked = fast = 0
    for first, second, meta, order in _cases():
        for name in ("instance-00000001", "a &amp; b"):
            text = _domain(
                name,
                METADATA[meta],
                PLAIN.get(first, "")
                + ODD.get(first, "")
                + PLAIN.get(second, "")
                + ODD.get(second, ""),
                order,
            )
            trees.clear()
            got = _read(domain_xml.parse_guest, text)
            assert got == _read(reference, text), (first, second, meta, order)
            checked += 1
            shaped = (
                order == "libvirt"
                and first in PLAIN
                and second in PLAIN
                # (Nova's namespace without its instance, or under
                # another prefix, is left to the tree: not as Nova
                # writes it)
                and meta not in ("nested", "other-prefix", "nova-ports")
                and "&" not in name
            )
            if shaped:
                assert not trees, (first, second, meta)
                fast += 1
    # every pair of libvirt's devices under five kinds of metadata
    assert checked > 8000 and fast == len(PLAIN) ** 2 * 5


def test_nova_is_told_by_its_instance_element_alone():
    """Only a ``nova:instance`` in Nova's namespace (whatever its prefix)
    says Nova defined the domain: another element of Nova's namespace,
    or an ``instance`` of another's, does not."""
    for meta, metadata in METADATA.items():
        text = _domain("x", metadata, PLAIN["mdev"], "libvirt")
        for parse in (domain_xml.parse_guest, domain_xml.parse_guest_tree):
            assert parse(text).nova is NOVA_MADE.get(meta, False), meta


def test_a_bound_device_is_given_as_its_kind_is():
    """An NVIDIA vGPU VF stays on NVIDIA's driver (managed='no'); a VF
    given as it is is handed to vfio-pci by libvirt (managed='yes'); an
    mdev by its uuid. Each reads back as the device it gives."""
    given = {
        "vf": "<hostdev mode='subsystem' type='pci' managed='no'>",
        "pci": "<hostdev mode='subsystem' type='pci' managed='yes'>",
        "mdev": "<hostdev mode='subsystem' type='mdev' managed='no' "
        "model='vfio-pci'>",
    }
    ids = {
        "vf": "0000:41:01.2",
        "pci": "0001:c8:00.5",
        "mdev": "aaaaaaaa-0000-0000-0000-000000000001",
    }
    for kind, opening in given.items():
        device = BoundDevice(kind, ids[kind], "parent", "type")
        xml = domain_xml.hostdev_xml(device)
        assert xml.startswith(opening), kind
        guest = domain_xml.parse_guest(_domain("x", "", xml, "libvirt"))
        assert ids[kind] in guest.mdevs + guest.pci_devices


def test_odd_host_devices_are_read_as_nothing():
    """An mdev hostdev with no source address or no uuid in it, and a
    PCI one whose address does not parse, give the guest no device
    (they are not libvirt's shape, but neither reader fails on them);
    a domain with no uuid is named in the error."""
    for piece in ("no-address", "no-uuid", "bad-pci"):
        text = _domain("x", "", ODD[piece] + PLAIN["mdev"], "libvirt")
        for parse in (domain_xml.parse_guest, domain_xml.parse_guest_tree):
            guest = parse(text)
            assert guest.mdevs == ("aaaaaaaa-0000-0000-0000-000000000001",)
            assert guest.pci_devices == ()
    text = _domain("nameless-uuid", "", PLAIN["mdev"], "no-uuid")
    for parse in (domain_xml.parse_guest, domain_xml.parse_guest_tree):
        with pytest.raises(DeviceXMLInvalid, match="nameless-uuid"):
            parse(text)


def test_only_hostdevs_of_a_subsystem_give_devices():
    """A USB or storage hostdev, an SR-IOV NIC's PCI source and a disk
    are no vGPU: only the mdev and the PCI hostdevs are the guest's
    devices, in order."""
    text = _domain("x", "", "".join(PLAIN.values()), "libvirt")
    for parse in (domain_xml.parse_guest, domain_xml.parse_guest_tree):
        guest = parse(text)
        assert guest.mdevs == ("aaaaaaaa-0000-0000-0000-000000000001",)
        assert guest.pci_devices == ("0000:41:01.2", "0001:c8:00.5")


# an mdev's <hostdev> as libvirt formats it, defined and running: the
# attributes and the guest's PCI address as in libvirt's own
# tests/qemuxml2xmloutdata/hostdev-mdev-display-ramfb.x86_64-latest.xml,
# and a running domain's alias before that address
MDEV_SHAPES = [
    "<hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci'>"
    "\n  <source>\n    <address uuid='{u}'/>\n  </source>\n</hostdev>",
    "<hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci' "
    "display='on' ramfb='on'>\n      <source>\n        <address "
    "uuid='{u}'/>\n      </source>\n      <address type='pci' "
    "domain='0x0000' bus='0x00' slot='0x03' function='0x0'/>\n    "
    "</hostdev>",
    "<hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci' "
    "display='off'><source><address uuid='{u}'/></source><alias "
    "name='hostdev0'/><address type='pci' domain='0x0000' bus='0x06' "
    "slot='0x00' function='0x0'/></hostdev>",
]


def test_an_mdev_hostdev_of_libvirts_shape_is_read_by_one_match(
    monkeypatch,
):
    """Every mdev ``<hostdev>`` libvirt writes, defined or running, is
    read by one pattern (not attribute by attribute), its uuid in lower
    case as the tree reads it; one the pattern does not know (another
    attribute) is read the long way, to the same guest."""
    long_way = []
    real = domain_xml._hostdev_text

    def counted(fragment, mdevs, pci):
        long_way.append(fragment)
        real(fragment, mdevs, pci)

    monkeypatch.setattr(domain_xml, "_hostdev_text", counted)
    uuid = "53764D0E-85A0-42B4-AF5C-2046B460B1DC"
    for shape in MDEV_SHAPES:
        text = _domain("x", METADATA["nova"], shape.format(u=uuid), "libvirt")
        guest = domain_xml.parse_guest(text)
        assert guest == domain_xml.parse_guest_tree(text)
        assert guest.mdevs == (uuid.lower(),)
        assert not long_way, shape
    odd = MDEV_SHAPES[0].format(u=uuid).replace("'vfio-pci'", "'vfio-ap'")
    odd = odd.replace("managed='no'", "managed='no' extra='1'")
    text = _domain("x", "", odd, "libvirt")
    assert domain_xml.parse_guest(text) == domain_xml.parse_guest_tree(text)
    assert long_way


def test_a_bang_in_a_value_keeps_the_fast_reader(monkeypatch):
    """A "!" among the devices (a disk's path) is no comment or CDATA:
    the domain is read without a tree, as the tree reads it."""
    trees = []
    reference = domain_xml.parse_guest_tree
    monkeypatch.setattr(
        domain_xml,
        "parse_guest_tree",
        lambda text: trees.append(text) or reference(text),
    )
    disk = PLAIN["disk"].replace("/instances/x/", "/instances/x!/")
    text = _domain("x", METADATA["nova"], disk + PLAIN["mdev"], "libvirt")
    assert domain_xml.parse_guest(text) == reference(text)
    assert not trees


_SAMPLE = _domain(
    "instance-00000001",
    METADATA["nova"],
    PLAIN["disk"] + PLAIN["mdev"] + PLAIN["nic"] + PLAIN["vf"],
    "libvirt",
)


def _cut(text: str) -> st.SearchStrategy[tuple[int, int]]:
    ends = st.integers(0, len(text))
    return st.tuples(ends, ends).map(lambda ab: (min(ab), max(ab)))


@settings(max_examples=500, deadline=None)
@given(
    st.builds(
        lambda ab, fill: _SAMPLE[: ab[0]] + fill + _SAMPLE[ab[1] :],
        _cut(_SAMPLE),
        st.one_of(
            st.just(""),
            _cut(_SAMPLE).map(lambda ab: _SAMPLE[ab[0] : ab[1]]),
            st.sampled_from(
                ["/>", "<", ">", "'", '"', "&amp;", "<!-- x -->", "<hostdev>"]
            ),
        ),
    )
)
def test_a_domain_cut_anywhere_is_read_as_the_tree_reads_it(text):
    """A Nova domain with any slice of it removed, repeated elsewhere or
    replaced by markup: where the tree reads it, the fast reader gives
    the same guest. (Text that is not XML at all, which libvirt never
    gives, the fast reader may read without checking it.)"""
    reference = _read(domain_xml.parse_guest_tree, text)
    if reference is not DeviceXMLInvalid:
        assert domain_xml.parse_guest(text) == reference
