"""SR-IOV vGPUs through the integration with Nova's real CONF: an
NVIDIA VF and an AMD VF reach Nova's guest config (the AMD one managed
by libvirt), suspend detaches the VF and resume finds it again, and a
live migration of an SR-IOV vGPU is refused at the source (run by
tools/nova-functional; skipped where Nova cannot be imported)."""

from __future__ import annotations

import uuid

import pytest

provider_tree = pytest.importorskip(
    "nova.compute.provider_tree",
    reason="needs Nova with its dependencies: run tools/nova-functional",
)
nova_conf = pytest.importorskip("nova.conf")

from nova import exception as nova_exception  # noqa: E402

from tests.nova.nova_host import (  # noqa: E402
    NODE,
)


def test_an_sriov_vgpu_reaches_nova_s_guest_config_as_a_vf(sriov):
    from nova.virt.libvirt import config as vconfig

    driver, adapter, tree = sriov
    rp = tree.data(f"{NODE}_pci_0000_41_00_0").uuid
    instance = str(uuid.uuid4())
    [vf] = adapter.allocate(instance, {rp: {"resources": {"VGPU": 1}}})
    assert vf.startswith("0000:41:") and vf != "0000:41:00.4"  # in use
    guest = vconfig.LibvirtConfigGuest()
    driver._guest_add_mdevs(guest, [vf])  # as Nova's _get_guest_config
    [hostdev] = guest.devices
    assert isinstance(hostdev, vconfig.LibvirtConfigGuestHostdevPCI)
    xml = hostdev.to_xml()
    assert 'type="pci"' in xml or "type='pci'" in xml
    assert 'managed="no"' in xml or "managed='no'" in xml
    bus, function = vf.split(":")[1], vf.split(".")[1]
    assert f'bus="0x{bus}"' in xml and f'function="0x{function}"' in xml
    # a hard reboot, a rescue or a revert finds it again, and Nova's own
    # PCI devices are never taken for it
    assert driver._get_all_assigned_mediated_devices(
        type("I", (), {"uuid": instance})
    ) == {vf: instance}
    in_use = "cf2c2652-0777-5ada-aed9-f00b6c76566b"  # has 0000:41:00.4
    assert adapter.vfs_of(in_use) == ["0000:41:00.4"]


def test_an_amd_vf_reaches_nova_s_guest_config_managed_by_libvirt(mxgpu):
    """A VF given as it is: libvirt binds it to vfio-pci (managed)."""
    from nova.virt.libvirt import config as vconfig

    driver, adapter, tree = mxgpu
    rp = tree.data(f"{NODE}_pci_0000_61_00_0").uuid
    instance = str(uuid.uuid4())
    [vf] = adapter.allocate(instance, {rp: {"resources": {"VGPU": 1}}})
    assert vf == "0000:61:02.0"
    guest = vconfig.LibvirtConfigGuest()
    driver._guest_add_mdevs(guest, [vf])
    [hostdev] = guest.devices
    xml = hostdev.to_xml()
    assert 'managed="yes"' in xml or "managed='yes'" in xml
    assert driver._get_all_assigned_mediated_devices(
        type("I", (), {"uuid": instance})
    ) == {vf: instance}


def test_suspend_detaches_the_vf_and_resume_finds_it_again(sriov):
    from nova.virt.libvirt import config as vconfig

    driver, _adapter, _tree = sriov
    guest_config = vconfig.LibvirtConfigGuest()
    guest_config.virt_type, guest_config.memory, guest_config.vcpus = (
        "kvm",
        1024,
        1,
    )
    guest_config.name = "instance-00000051"
    guest_config.uuid = "cf2c2652-0777-5ada-aed9-f00b6c76566b"
    guest_config.os_type = "hvm"
    driver._guest_add_mdevs(guest_config, ["0000:41:00.4"])
    nova_pci = vconfig.LibvirtConfigGuestHostdevPCI()
    nova_pci.domain, nova_pci.bus, nova_pci.slot, nova_pci.function = (
        "0000",
        "81",
        "00",
        "1",
    )  # a NIC VF of Nova's [pci] passthrough
    guest_config.add_device(nova_pci)
    xml = guest_config.to_xml()

    class Guest:
        detached = []

        def get_all_devices(self, devtype=None):
            return [d for d in guest_config.devices if isinstance(d, devtype)]

        def detach_device(self, device, live=False):
            self.detached.append((device.bus, live))

    guest = Guest()
    driver._detach_mediated_devices(guest)
    assert guest.detached == [("41", True)]  # the vGPU VF, not Nova's NIC
    again = driver._get_mdevs_from_guest_config(xml)
    assert [(d.bus, d.function) for d in again] == [("0x41", "0x4")]


def test_live_migration_of_an_sriov_vgpu_is_refused_at_the_source(sriov):
    driver, _adapter, _tree = sriov
    instance = type("I", (), {"uuid": "cf2c2652-0777-5ada-aed9-f00b6c76566b"})
    with pytest.raises(nova_exception.MigrationPreCheckError) as caught:
        driver.check_can_live_migrate_source(None, instance, object())
    assert "0000:41:00.4" in str(caught.value)
