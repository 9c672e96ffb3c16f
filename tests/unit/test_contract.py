"""Contract: libvirt's real test driver and the simulated host agree.

For every shipped host description, discovery through libvirt's test
driver (plus the rendered sysfs tree) and through the in-process
simulated host report identical results; and they keep agreeing after
the simulated host has changed state like a kernel.
"""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import helpers
from vgpu_driver.exception import DeviceOperationFailed
from vgpu_driver.sim.simulated import SimulatedHost


@pytest.mark.parametrize("name", helpers.ALL_HOSTS)
def test_libvirt_and_simulation_report_the_same(tmp_path, name):
    description = helpers.load(name)
    through_libvirt = helpers.libvirt_host(description, tmp_path).discover()
    simulated = SimulatedHost(description).discover()
    assert through_libvirt == simulated
    # something was read (a host of GPUs the library does not drive
    # only has them, for discover and doctor)
    assert (
        through_libvirt.parents
        or through_libvirt.pfs
        or (description.other_gpus)
    )


def test_a_guest_outside_nova_is_told_by_both(tmp_path):
    """A guest described as defined outside Nova: rendered without Nova's
    metadata for libvirt, and read so by both."""
    m10 = helpers.load("m10")
    first, *rest = m10.guests
    outside = dataclasses.replace(
        m10, guests=[dataclasses.replace(first, nova=False), *rest]
    )
    through_libvirt = helpers.libvirt_host(outside, tmp_path).discover()
    assert through_libvirt == SimulatedHost(outside).discover()
    nova = {g.uuid: g.nova for g in through_libvirt.guests}
    assert nova[first.uuid] is False and all(nova[g.uuid] for g in rest)


def test_an_sriov_card_not_bound_to_nvidia_is_reported_by_neither(tmp_path):
    l40 = helpers.load("l40-sriov")
    unbound = dataclasses.replace(
        l40,
        pfs=[dataclasses.replace(pf, driver="vfio-pci") for pf in l40.pfs],
    )
    through_libvirt = helpers.libvirt_host(unbound, tmp_path).discover()
    assert through_libvirt == SimulatedHost(unbound).discover()
    assert through_libvirt.pfs == ()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    data=st.data(),
    name=st.sampled_from(["m10", "demo", "l40-sriov", "mtty", "gvtg"]),
)
def test_agreement_survives_kernel_changes(tmp_path_factory, data, name):
    host = SimulatedHost(helpers.load(name))
    for _step in range(data.draw(st.integers(0, 6))):
        inventory = host.discover()
        choice = data.draw(st.sampled_from(["create", "remove", "vf"]))
        try:
            if choice == "create" and inventory.parents:
                parent = data.draw(st.sampled_from(inventory.parents))
                mdev_type = data.draw(st.sampled_from(parent.types))
                host.create_mdev(parent, mdev_type.id, str(uuid.uuid4()))
            elif choice == "remove" and inventory.mdevs:
                host.remove_mdev(data.draw(st.sampled_from(inventory.mdevs)))
            elif choice == "vf" and inventory.pfs:
                vf = data.draw(st.sampled_from(inventory.pfs[0].vfs))
                options = [0] + [t.id for t in vf.creatable]
                host.set_vf_type(
                    vf.address, data.draw(st.sampled_from(options))
                )
        except DeviceOperationFailed:
            pass  # the kernel said no; state must be unchanged
    directory = tmp_path_factory.mktemp("host")
    through_libvirt = helpers.libvirt_host(host.description, directory)
    assert through_libvirt.discover() == host.discover()
    # an mdev looked for alone (restore's check before it makes one)
    for mdev in host.discover().mdevs:
        assert host.has_mdev(mdev.uuid) == mdev.active
        assert through_libvirt.has_mdev(mdev.uuid) == mdev.active
    assert not through_libvirt.has_mdev(str(uuid.uuid4()))
    # a VF's type read alone (restore's check before it types one)
    for pf in host.discover().pfs:
        for vf in pf.vfs:
            assert host.vf_type(vf.address) == vf.current_type
            assert through_libvirt.vf_type(vf.address) == vf.current_type


def test_creating_an_mdev_lowers_available_and_blocks_other_types():
    host = helpers.simulated_host("m10")
    parent = host.discover().parent("pci_0000_87_00_0")
    assert parent.type("nvidia-35").available == 16
    assert parent.type("nvidia-36").available == 16
    host.create_mdev(parent, "nvidia-35", str(uuid.uuid4()))
    after = host.discover().parent("pci_0000_87_00_0")
    assert after.type("nvidia-35").available == 15
    assert after.type("nvidia-36").available == 0  # one type per pGPU
    with pytest.raises(DeviceOperationFailed, match="no available"):
        host.create_mdev(after, "nvidia-36", str(uuid.uuid4()))


def test_setting_a_vf_type_narrows_its_siblings():
    host = helpers.simulated_host("l40-sriov")
    [pf] = host.discover().pfs
    free = [vf for vf in pf.vfs if vf.current_type == 0]
    # beside L40S-4Q: the types of its size (4Q, 4A), no other size
    assert {t.id for t in free[0].creatable} == {1150, 1160}
    host.set_vf_type(free[0].address, 1150)
    [pf] = host.discover().pfs
    by_address = {vf.address: vf for vf in pf.vfs}
    assert by_address[free[0].address].creatable == ()
    assert by_address[free[0].address].current_type == 1150
    with pytest.raises(DeviceOperationFailed, match="not creatable"):
        host.set_vf_type(free[1].address, 1145)
    for vf in free[1:]:
        host.set_vf_type(vf.address, 0)
    # 3 of 12 L40S-4Q in use and an L40S-4A: 8 more VFs can take
    # 4Q, then none (12 vGPUs of 4 GB fill the 48 GB)
    host.set_vf_type(free[1].address, 1160)
    taken = 4
    for vf in free[2:]:
        try:
            host.set_vf_type(vf.address, 1150)
            taken += 1
        except DeviceOperationFailed:
            break
    assert taken == 12


@pytest.mark.parametrize("kind", ["simulated", "libvirt"])
def test_a_reading_s_generation_changes_iff_its_content_does(kind, tmp_path):
    """The Host protocol's promise, kept by both adapters: the same
    content keeps its generation (a guest reported again as it was), a
    change gives a new one."""
    description = helpers.load("m10")
    if kind == "simulated":
        host = SimulatedHost(description)
    else:
        host = helpers.libvirt_host(description, tmp_path)
    first = host.discover()
    assert host.discover().generation == first.generation
    guest = first.guests[0]
    host.note_guest(guest)  # told again, unchanged
    assert host.discover().generation == first.generation
    host.forget_guest(guest.uuid)
    changed = host.discover()
    assert changed.generation != first.generation
    assert changed != first
    host.note_guest(guest)
    back = host.discover()
    assert back == first and back.generation != changed.generation


def test_an_mdev_only_defined_is_not_on_the_host(tmp_path):
    """An mdev libvirt keeps defined but that is not made (a reboot
    without autostart) is not on the host to either adapter: made, it
    is."""
    host = helpers.simulated_host("m10")
    parent = host.discover().parent("pci_0000_87_00_0")
    made = host.create_mdev(parent, "nvidia-35", str(uuid.uuid4()))
    host.reboot(autostart=False)
    [defined] = [m for m in host.discover().mdevs if m.uuid == made.uuid]
    assert not defined.active
    through_libvirt = helpers.libvirt_host(host.description, tmp_path)
    assert not host.has_mdev(made.uuid)
    assert not through_libvirt.has_mdev(made.uuid)
    host.start_mdev(defined)
    assert host.has_mdev(made.uuid)
    again = helpers.libvirt_host(host.description, tmp_path / "again")
    assert again.has_mdev(made.uuid)
