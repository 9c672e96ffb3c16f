"""The libvirt adapter takes a new reading as soon as one part of what it
holds changed, even when libvirt and the mdevs say the same: NVML's
answer (a card with rows to remap while the service runs), the VFs of a
GPU given as it is (enabled or disabled)."""

from __future__ import annotations

from tests import helpers
from vgpu_driver.model import health

RTX = "pci_0001_c8_00_0"


def test_a_card_nvml_finds_faulty_while_the_service_runs_is_read(tmp_path):
    """Only NVML changes (sysfs and libvirt say the same): the next
    discovery says so, and again once the fault clears."""
    description = helpers.load("rtx6000-nvml")
    host = helpers.libvirt_host(description, tmp_path)
    first = host.discover()
    assert first.nvml is not None and health.unhealthy(first) == {}
    description.pfs[0].fault = "rows_failed"
    faulty = host.discover()
    assert faulty is not first
    assert "failed to remap" in health.unhealthy(faulty)[RTX]
    description.pfs[0].fault = None
    assert health.unhealthy(host.discover()) == {}


def test_vfs_enabled_on_a_gpu_given_as_it_is_are_read(tmp_path):
    """An AMD MxGPU card's VFs disabled, then enabled again (sriov_numvfs)
    while the service runs."""
    host = helpers.libvirt_host(helpers.load("amd-mxgpu"), tmp_path)
    numvfs = tmp_path / "sys/bus/pci/devices/0000:61:00.0/sriov_numvfs"
    [gpu] = host.discover().plain_gpus
    assert len(gpu.vfs) == 16
    numvfs.write_text("0\n")
    assert host.discover().plain_gpus == ()
    numvfs.write_text("16\n")
    assert host.discover().plain_gpus == (gpu,)


def test_guests_read_on_a_host_without_any_are_known_read(tmp_path):
    """A first reading without the guests, then one that reads them on
    a host that has none: the same devices and no guest either way, but
    only the second knows there is none."""
    host = helpers.libvirt_host(helpers.load("gvtg"), tmp_path)
    lazy = host.discover(guests=False)
    assert not lazy.guests_known and lazy.guests == ()
    read = host.discover()
    assert read.guests_known and read.guests == ()
    assert read.generation > lazy.generation
