"""GPUs whose SR-IOV VFs are given to guests as they are (AMD MxGPU /
Instinct, Intel SR-IOV): one provider per GPU, total = its VFs, a free
VF handed out whole at spawn with ``managed='yes'``. The host is
``amd-mxgpu``: an AMD FirePro S7150 with 16 VFs (1002:692f) under
AMD's ``gim``, from captured lspci and dmesg output."""

from __future__ import annotations

import pytest

from tests.helpers import MXGPU_CONFIG
from vgpu_driver.exception import DeviceCapacityExhausted
from vgpu_driver.host import domain_xml
from vgpu_driver.model.device import Guest

GPU = "pci_0000_61_00_0"


@pytest.fixture
def mx(node):
    return node("amd-mxgpu", config=MXGPU_CONFIG)


def test_one_provider_of_its_vfs_in_the_class_configured(mx):
    plan = mx.update()[GPU]
    assert (plan.total, plan.reserved) == (16, 0)
    assert plan.resource_class == "CUSTOM_MXGPU"
    assert "CUSTOM_VF_1002_692F" in plan.traits
    assert (
        mx.tree.data(f"node1_{GPU}").inventory["CUSTOM_MXGPU"]["total"] == 16
    )


def test_a_bind_hands_out_a_free_vf_whole_and_changes_nothing_on_the_host(
    mx,
):
    before = mx.host.discover()
    [first] = mx.driver.allocate_mdevs(
        "i1", mx.alloc((GPU, 1), rc="CUSTOM_MXGPU")
    )
    [second] = mx.driver.allocate_mdevs(
        "i2", mx.alloc((GPU, 1), rc="CUSTOM_MXGPU")
    )
    assert (first.kind, first.id, first.created) == (
        "pci",
        "0000:61:02.0",
        False,
    )
    assert second.id == "0000:61:02.1"
    assert mx.host.discover() == before  # no sysfs write, no mdev
    [xml] = mx.driver.guest_hostdev_xml([first])
    assert "type='pci' managed='yes'" in xml
    assert "bus='0x61' slot='0x02' function='0x0'" in xml
    assert mx.driver.vf_devices()["0000:61:02.0"] is True


def test_vfs_guests_use_count_and_the_seventeenth_is_refused(mx):
    # a guest already has the first VF (defined before the service)
    mx.host.note_guest(Guest("g0", "instance-0", (), ("0000:61:02.0",)))
    mx.driver.guest_defined("g0")
    for i in range(15):
        [vf] = mx.driver.allocate_mdevs(
            f"i{i}", mx.alloc((GPU, 1), rc="CUSTOM_MXGPU")
        )
        assert vf.id != "0000:61:02.0"
    with pytest.raises(DeviceCapacityExhausted):
        mx.driver.allocate_mdevs("i99", mx.alloc((GPU, 1), rc="CUSTOM_MXGPU"))
    plan = mx.update()[GPU]
    assert plan.total == 16


def test_a_released_vf_is_handed_out_again_and_claims_survive_a_restart(
    mx, node
):
    [vf] = mx.driver.allocate_mdevs(
        "i1", mx.alloc((GPU, 1), rc="CUSTOM_MXGPU")
    )
    again = node("amd-mxgpu", config=MXGPU_CONFIG, host=mx.host)  # restarted
    assert again.driver.instance_devices()["i1"]["claimed"] == [vf.id]
    again.driver.release_mdevs("i1")
    [next_vf] = again.driver.allocate_mdevs(
        "i2", again.alloc((GPU, 1), rc="CUSTOM_MXGPU")
    )
    assert next_vf.id == vf.id


def test_without_the_type_enabled_nothing_is_offered(node):
    assert node("amd-mxgpu").update() == {}


def test_check_config_knows_the_vfs_type(mx):
    from vgpu_driver.model import check

    assert check.host_problems(mx.driver.config, mx.host.discover()) == []


def test_hostdev_of_an_nvidia_vf_stays_unmanaged():
    from vgpu_driver.model.binding import BoundDevice

    nvidia = BoundDevice("vf", "0000:41:00.4", "pci_0000_41_00_0", "nvidia-1")
    assert "managed='no'" in domain_xml.hostdev_xml(nvidia)


def test_only_vfs_given_as_they_are_are_managed_by_libvirt(node):
    """What the Nova integration writes as ``managed``: an AMD VF is
    given as it is (libvirt binds it to vfio-pci), an NVIDIA vGPU VF
    stays on NVIDIA's driver, which typed it."""
    amd = node("amd-mxgpu", config=MXGPU_CONFIG).driver.vf_devices()
    assert amd and all(amd.values())
    nvidia = node("l40-sriov").driver.vf_devices()
    assert nvidia and not any(nvidia.values())


def test_a_vf_a_guest_has_counts_against_max_instances(node):
    n = node("amd-mxgpu", config=MXGPU_CONFIG + "max_instances = 1\n")
    n.host.note_guest(Guest("g0", "instance-0", (), ("0000:61:03.7",)))
    n.driver.guest_defined("g0")
    plan = n.update()[GPU]
    assert (plan.total, plan.reserved) == (1, 1)
    assert "max_instances is reached" in plan.reason


def test_a_gpu_full_below_max_instances_blames_no_cap(node):
    """Every VF in use, the cap of 20 not reached: the GPU is full, and
    its provider does not say that max_instances is (an operator would
    raise the cap for nothing)."""
    n = node("amd-mxgpu", config=MXGPU_CONFIG + "max_instances = 20\n")
    n.update()
    for i in range(16):
        n.driver.allocate_mdevs(f"i{i}", n.alloc((GPU, 1), rc="CUSTOM_MXGPU"))
    plan = n.update()[GPU]
    assert (plan.total, plan.reserved, plan.reason) == (16, 0, None)


def test_the_scan_follows_vfs_enabled_and_disabled(tmp_path):
    """sysfs as rendered from the host file: the PF under bus/pci/drivers/
    gim; its VFs disabled (sriov_numvfs 0) offer nothing, enabled again
    are read from its virtfn links; a device of that driver that is no
    GPU is never a PF."""
    from tests import helpers
    from vgpu_driver.host.plain_sriov import PlainSriovScan

    _uri, sysfs = helpers.hostdesc.materialize(
        helpers.load("amd-mxgpu"), tmp_path
    )
    pf = sysfs / "bus/pci/devices/0000:61:00.0"
    scan = PlainSriovScan(str(sysfs))
    [gpu] = scan.gpus()
    assert (gpu.type_id, len(gpu.vfs), gpu.vfs[0]) == (
        "vf-1002-692f",
        16,
        "0000:61:02.0",
    )
    (pf / "sriov_numvfs").write_text("0\n")
    assert scan.gpus() == []
    (pf / "sriov_numvfs").write_text("16\n")
    assert scan.gpus() == [gpu]
    nic = sysfs / "devices/pci0000:00/0000:62:00.0"
    nic.mkdir(parents=True)
    (nic / "class").write_text("0x020000\n")
    (nic / "sriov_numvfs").write_text("8\n")
    (sysfs / "bus/pci/drivers/gim/0000:62:00.0").symlink_to(nic)
    assert scan.gpus() == [gpu]


def test_a_driver_loaded_later_is_found_within_a_minute(tmp_path):
    """A driver not loaded is not looked for at every refresh (four
    failed listings each), but again a minute later."""
    from tests import helpers
    from vgpu_driver.host.plain_sriov import PlainSriovScan

    _uri, sysfs = helpers.hostdesc.materialize(
        helpers.load("amd-mxgpu"), tmp_path
    )
    drivers = sysfs / "bus/pci/drivers"
    (drivers / "gim").rename(tmp_path / "gim-unloaded")
    now = [1000.0]
    scan = PlainSriovScan(str(sysfs), clock=lambda: now[0])
    assert scan.gpus() == []
    (tmp_path / "gim-unloaded").rename(drivers / "gim")  # modprobe gim
    now[0] += 30
    assert scan.gpus() == []
    now[0] += 31
    [gpu] = scan.gpus()
    assert gpu.driver == "gim" and len(gpu.vfs) == 16


def test_a_gpu_found_no_pf_is_probed_again(tmp_path):
    """A GPU bound to the driver before its SR-IOV was set up (no
    ``sriov_numvfs`` yet) is probed again five minutes later; one moved
    to another of the drivers is probed at once."""
    from tests import helpers
    from vgpu_driver.host.plain_sriov import PlainSriovScan

    _uri, sysfs = helpers.hostdesc.materialize(
        helpers.load("amd-mxgpu"), tmp_path
    )
    pf = sysfs / "bus/pci/devices/0000:61:00.0"
    numvfs = (pf / "sriov_numvfs").read_text()
    (pf / "sriov_numvfs").unlink()
    now = [1000.0]
    scan = PlainSriovScan(str(sysfs), clock=lambda: now[0])
    assert scan.gpus() == []
    (pf / "sriov_numvfs").write_text(numvfs)  # SR-IOV set up
    now[0] += 200
    assert scan.gpus() == []  # not probed at every refresh
    now[0] += 101
    [gpu] = scan.gpus()
    assert gpu.driver == "gim" and len(gpu.vfs) == 16
    # found no PF under gim, then bound to amdgpu with its VFs enabled
    drivers = sysfs / "bus/pci/drivers"
    (drivers / "amdgpu").mkdir(exist_ok=True)  # loaded, nothing bound
    (pf / "sriov_numvfs").unlink()
    scan = PlainSriovScan(str(sysfs), clock=lambda: now[0])
    assert scan.gpus() == []
    (pf / "sriov_numvfs").write_text(numvfs)
    (drivers / "gim/0000:61:00.0").unlink()
    (drivers / "amdgpu/0000:61:00.0").symlink_to(pf.resolve())
    [gpu] = scan.gpus()
    assert gpu.driver == "amdgpu"


def test_an_intel_igpu_s_vfs_bound_to_i915_are_one_provider(tmp_path):
    """Alder Lake-N (captured lspci): the PF and its 7 VFs share the id
    8086:46d3 and i915 binds the VFs in the host; read through libvirt
    and sysfs, the VFs are no PFs of their own and the GPU offers 7."""
    from tests import helpers
    from tests.capacity_helpers import enabled
    from vgpu_driver.model.inventory import plan_providers

    description = helpers.load("intel-igpu-sriov")
    host = helpers.libvirt_host(description, tmp_path)
    inventory = host.discover()
    [gpu] = inventory.plain_gpus
    assert (gpu.name, gpu.driver, gpu.type_id) == (
        "pci_0000_00_02_0",
        "i915",
        "vf-8086-46d3",
    )
    assert gpu.vfs == tuple(f"0000:00:02.{i}" for i in range(1, 8))
    config = enabled("vf-8086-46d3", addresses=("0000:00:02.0",))
    [plan] = plan_providers("cn", config, inventory, held={})
    assert (plan.total, plan.device) == (7, "pci_0000_00_02_0")


def test_the_vf_links_are_read_when_their_count_changes(tmp_path, monkeypatch):
    """A steady scan reads no ``virtfn`` link; a listing read while VFs
    are being enabled (a link not there yet) is not kept; NUMA node 0 is
    node 0 (-1: none); one VF enabled names its product."""
    import os

    from tests import helpers
    from vgpu_driver.host.plain_sriov import PlainSriovScan

    _uri, sysfs = helpers.hostdesc.materialize(
        helpers.load("amd-mxgpu"), tmp_path
    )
    pf = sysfs / "bus/pci/devices/0000:61:00.0"
    (pf / "numa_node").write_text("0\n")
    link = pf / "virtfn5"
    target = link.readlink()
    link.unlink()  # the kernel has not made it yet
    reads = []
    real = os.readlink

    def counted(path, *args, **kwargs):
        reads.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "readlink", counted)
    scan = PlainSriovScan(str(sysfs))
    [gpu] = scan.gpus()
    assert (len(gpu.vfs), gpu.numa_node) == (15, 0)
    link.symlink_to(target)
    [gpu] = scan.gpus()  # the same count: read again, not kept
    assert len(gpu.vfs) == 16
    reads.clear()
    assert scan.gpus() == [gpu] and reads == []
    (pf / "sriov_numvfs").write_text("1\n")
    (pf / "numa_node").write_text("-1\n")
    [one] = scan.gpus()
    assert (one.vfs, one.vf_product_id, one.numa_node) == (
        ("0000:61:02.0",),
        "0x692f",
        None,
    )


def test_a_vf_whose_claim_ended_when_its_guest_was_seen_is_released(mx):
    """Once a refresh sees the guest, the spawn claim ends and the view
    alone knows the VF is the instance's: deleting the instance (the
    guest undefined, then the release) still hands that VF back, and
    the next bind gets it."""
    [vf] = mx.driver.allocate_mdevs(
        "i1", mx.alloc((GPU, 1), rc="CUSTOM_MXGPU")
    )
    mx.host.note_guest(Guest("i1", "instance-1", (), (vf.id,)))
    mx.driver.guest_defined("i1")
    mx.update()
    assert mx.driver.instance_devices()["i1"] == {
        "in_use": [vf.id],
        "claimed": [],
    }
    mx.host.forget_guest("i1")
    assert mx.driver.release_mdevs("i1") == [vf.id]
    [again] = mx.driver.allocate_mdevs(
        "i2", mx.alloc((GPU, 1), rc="CUSTOM_MXGPU")
    )
    assert again.id == vf.id
