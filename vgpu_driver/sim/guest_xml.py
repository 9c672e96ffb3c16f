"""A simulated guest's domain XML, in the shape Nova's libvirt driver
defines and libvirt returns it.

A real guest is not a ``<name>``, a ``<uuid>`` and its host devices: a
domain Nova made carries ``<metadata>`` with its ``nova:instance``
(package, flavor, owner, image, ports), written by libxml2 with double
quotes, a ``sysinfo`` block and a dozen devices beside the ``<hostdev>``
(about 4.5 KB). Readers of guests are measured and tested on that. The
shape follows public captures: the ``nova:instance`` block of a Nova
guest in RedHatInsights/insights-core issue #1717 (``virsh dumpxml`` of
an instance), libvirt's formatting of metadata with double quotes in
``virsh dumpxml`` output quoted in ClusterLabs/fence-agents issue #506
and kubevirt/kubevirt pull request #1814, and the mdev ``<hostdev>``
libvirt documents (commit ec783d7c, "conf: Introduce new hostdev device
type mdev"). Values (names, sizes, addresses) are made up per guest.
"""

from __future__ import annotations

import zlib
from typing import Any
from xml.sax.saxutils import escape

from vgpu_driver.sim.specs import GuestSpec


def render_guest(guest: GuestSpec) -> str:
    """The guest as libvirt's test driver is given it (``type='test'``)."""
    seed = zlib.crc32(guest.uuid.encode())
    mac = ":".join(f"{(seed >> s) & 0xFF:02x}" for s in (0, 8, 16))
    base = f"/var/lib/nova/instances/{guest.uuid}"
    devices = [
        "<emulator>/usr/bin/qemu-system-x86_64</emulator>",
        "<disk type='file' device='disk'>"
        "<driver name='qemu' type='qcow2' cache='none'/>"
        f"<source file='{base}/disk'/><target dev='vda' bus='virtio'/>"
        "</disk>",
        "<controller type='usb' index='0' model='piix3-uhci'/>",
        "<controller type='pci' index='0' model='pcie-root'/>",
        "<interface type='bridge'>"
        f"<mac address='fa:16:3e:{mac}'/>"
        f"<source bridge='qbr{guest.uuid[:11]}'/>"
        f"<target dev='tap{guest.uuid[:11]}'/>"
        "<model type='virtio'/><mtu size='1450'/></interface>",
        "<serial type='pty'>"
        f"<log file='{base}/console.log' append='off'/>"
        "<target type='isa-serial' port='0'><model name='isa-serial'/>"
        "</target></serial>",
        "<console type='pty'>"
        f"<log file='{base}/console.log' append='off'/>"
        "<target type='serial' port='0'/></console>",
        "<input type='tablet' bus='usb'/>",
        "<graphics type='vnc' port='-1' autoport='yes' listen='0.0.0.0'>"
        "<listen type='address' address='0.0.0.0'/></graphics>",
        "<video><model type='virtio' heads='1' primary='yes'/></video>",
        *(_mdev(uuid) for uuid in guest.mdevs),
        *(_pci(address) for address in guest.pci),
        "<memballoon model='virtio'><stats period='10'/></memballoon>",
        "<rng model='virtio'><backend model='random'>/dev/urandom"
        "</backend></rng>",
    ]
    return (
        "  <domain type='test'>\n"
        f"    <name>{escape(guest.name)}</name>\n"
        f"    <uuid>{guest.uuid}</uuid>\n"
        f"{_metadata(guest, seed) if guest.nova else ''}"
        "    <memory unit='KiB'>16777216</memory>\n"
        "    <currentMemory unit='KiB'>16777216</currentMemory>\n"
        "    <vcpu placement='static'>8</vcpu>\n"
        "    <cputune><shares>8192</shares></cputune>\n"
        "    <sysinfo type='smbios'><system>"
        "<entry name='manufacturer'>OpenStack Foundation</entry>"
        "<entry name='product'>OpenStack Nova</entry>"
        f"<entry name='serial'>{guest.uuid}</entry>"
        f"<entry name='uuid'>{guest.uuid}</entry>"
        "<entry name='family'>Virtual Machine</entry>"
        "</system></sysinfo>\n"
        "    <os><type arch='x86_64' machine='pc-q35-8.2'>hvm</type>"
        "<boot dev='hd'/><smbios mode='sysinfo'/></os>\n"
        "    <features><acpi/><apic/></features>\n"
        "    <clock offset='utc'><timer name='pit' tickpolicy='delay'/>"
        "<timer name='rtc' tickpolicy='catchup'/>"
        "<timer name='hpet' present='no'/></clock>\n"
        "    <on_poweroff>destroy</on_poweroff>\n"
        "    <on_reboot>restart</on_reboot>\n"
        "    <on_crash>destroy</on_crash>\n"
        "    <devices>\n      " + "\n      ".join(devices) + "\n"
        "    </devices>\n"
        "  </domain>"
    )


def _metadata(guest: GuestSpec, seed: int) -> str:
    """Nova's ``nova:instance``, double quotes as libxml2 writes them."""
    user, project = f"{seed:08x}" * 4, f"{seed ^ 0x5A5A5A5A:08x}" * 4
    return (
        "    <metadata>\n"
        '      <nova:instance xmlns:nova="http://openstack.org/xmlns/'
        'libvirt/nova/1.1">\n'
        '        <nova:package version="29.0.1"/>\n'
        f"        <nova:name>{escape(guest.name)}</nova:name>\n"
        "        <nova:creationTime>2026-10-02 14:21:09"
        "</nova:creationTime>\n"
        '        <nova:flavor name="g1.vgpu">\n'
        "          <nova:memory>16384</nova:memory>\n"
        "          <nova:disk>40</nova:disk>\n"
        "          <nova:swap>0</nova:swap>\n"
        "          <nova:ephemeral>0</nova:ephemeral>\n"
        "          <nova:vcpus>8</nova:vcpus>\n"
        "        </nova:flavor>\n"
        "        <nova:owner>\n"
        f'          <nova:user uuid="{user}">alice</nova:user>\n'
        f'          <nova:project uuid="{project}">render</nova:project>\n'
        "        </nova:owner>\n"
        f'        <nova:root type="image" uuid="{guest.uuid}"/>\n'
        "      </nova:instance>\n"
        "    </metadata>\n"
    )


def _mdev(uuid: str) -> str:
    return (
        "<hostdev mode='subsystem' type='mdev' managed='no' "
        f"model='vfio-pci'><source><address uuid='{uuid}'/></source>"
        "</hostdev>"
    )


def _pci(address: str) -> str:
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    return (
        "<hostdev mode='subsystem' type='pci' managed='no'><source>"
        f"<address domain='0x{domain}' bus='0x{bus}' slot='0x{slot}' "
        f"function='0x{function}'/></source></hostdev>"
    )


def delete(domain: Any) -> None:
    """A guest deleted as Nova deletes one: stopped first when it runs,
    then undefined. A running guest undefined alone runs on, transient,
    with its devices (the guests of a test-driver host file run)."""
    if domain.isActive():
        domain.destroy()
    domain.undefine()
