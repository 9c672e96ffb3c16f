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
    assert faulty.generation > first.generation
    assert "failed to remap" in health.unhealthy(faulty)[RTX]
    description.pfs[0].fault = None
    cleared = host.discover()
    assert health.unhealthy(cleared) == {}
    assert cleared.generation > faulty.generation


def test_vfs_enabled_on_a_gpu_given_as_it_is_are_read(tmp_path):
    """An AMD MxGPU card's VFs disabled, then enabled again (sriov_numvfs)
    while the service runs."""
    host = helpers.libvirt_host(helpers.load("amd-mxgpu"), tmp_path)
    numvfs = tmp_path / "sys/bus/pci/devices/0000:61:00.0/sriov_numvfs"
    first = host.discover()
    [gpu] = first.plain_gpus
    assert len(gpu.vfs) == 16
    numvfs.write_text("0\n")
    disabled = host.discover()
    assert disabled.plain_gpus == ()
    numvfs.write_text("16\n")
    enabled = host.discover()
    assert enabled.plain_gpus == (gpu,)
    assert first.generation < disabled.generation < enabled.generation


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


def test_a_reading_taken_whole_after_one_followed_is_newer(tmp_path):
    """A guest defined (its event passed on: the reading follows that
    guest alone), then NVML's answer changed (the host read whole): each
    reading under a generation above the last."""
    description = helpers.load("rtx6000-nvml")
    host = helpers.libvirt_host(description, tmp_path)
    first = host.discover()
    host.connection().defineXML(
        "<domain type='test'><name>late</name>"
        "<uuid>77777777-0000-0000-0000-000000000021</uuid>"
        "<memory>65536</memory><os><type>hvm</type></os><devices/></domain>"
    )
    host.domain_event("77777777-0000-0000-0000-000000000021", True)
    followed = host.discover()
    assert followed.guest_changes is not None
    assert "late" in {g.name for g in followed.guests}
    description.pfs[0].fault = "rows_failed"
    whole = host.discover()
    assert whole.guest_changes is None and whole.device_changes is None
    assert RTX in health.unhealthy(whole)
    assert first.generation < followed.generation < whole.generation


def _read_again(tmp_path):
    """A dense host's adapter, read once, and what it read, as the next
    discovery hands it over with nothing changed."""
    from benchmarks.common import dense
    from vgpu_driver.host.readings import Devices
    from vgpu_driver.sim import description as hostdesc

    uri, sysfs = hostdesc.materialize(dense(2, 8, 6), tmp_path)
    host = helpers.LibvirtHost(uri, sysfs)
    last = host.discover(rescan_guests=True)
    found = Devices(
        list(last.parents),
        list(last.mdevs),
        list(last.pfs),
        list(last.plain_gpus),
        last.nvml,
    )
    return host.readings, last, found


def test_node_devices_said_changed_that_did_not_with_a_guest_gone(tmp_path):
    """The adapter says its mdevs changed (made and removed again since
    the last reading, say) and a guest went: a reading without that
    guest, saying so; with no guest gone, the same reading."""
    from vgpu_driver.host.readings import KnownGuests

    readings, last, found = _read_again(tmp_path)
    gone = last.guests[0]
    rest = last.guests[1:]
    diff = ((gone.uuid, gone, None),)
    reading = readings.take(
        found, False, ((), ()), KnownGuests(True, rest, diff)
    )
    assert reading.guests == rest
    assert reading.generation == last.generation + 1
    assert reading.guest_changes == (last.generation, diff)
    same = readings.take(found, False, ((), ()), KnownGuests(True, rest, ()))
    assert same is reading


def test_a_guest_change_that_does_not_match_reads_the_guests_whole(
    tmp_path,
):
    """A guest change the last reading cannot take (the guest it says
    was there is another) beside an mdev made: every guest is taken as
    the adapter has them, sorted."""
    import dataclasses

    from vgpu_driver.host.readings import KnownGuests

    readings, last, found = _read_again(tmp_path)
    first, *rest = last.guests
    made = dataclasses.replace(
        last.mdevs[0], uuid="f" * 8 + last.mdevs[0].uuid[8:]
    )
    found.mdevs.append(made)
    wrong = dataclasses.replace(first, name="not-as-read")
    diff = ((first.uuid, wrong, None),)
    reading = readings.take(
        found,
        False,
        ((made,), ()),
        KnownGuests(True, list(reversed(rest)), diff),
    )
    assert reading.guests == tuple(rest)
    assert made in reading.mdevs
    assert reading.guest_changes is None and reading.device_changes is None
