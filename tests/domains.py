"""Domains defined by hand for libvirt's test driver, as an operator or
another tool defines them beside Nova."""

from __future__ import annotations


def hand_made_domain_xml(uuid, name, mdevs, nova=False):
    """A domain for libvirt's test driver, defined by hand (``nova``:
    with the metadata Nova writes in an instance's domain)."""
    metadata = (
        '<metadata><nova:instance xmlns:nova="http://openstack.org/xmlns/'
        f'libvirt/nova/1.1"><nova:name>{name}</nova:name></nova:instance>'
        "</metadata>"
        if nova
        else ""
    )
    return (
        f"<domain type='test'><name>{name}</name><uuid>{uuid}</uuid>"
        f"{metadata}"
        "<memory>65536</memory><os><type>hvm</type></os><devices>"
        + "".join(
            "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>"
            f"<source><address uuid='{mdev}'/></source></hostdev>"
            for mdev in mdevs
        )
        + "</devices></domain>"
    )
