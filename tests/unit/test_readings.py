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


def _made(last):
    """An mdev like the reading's first, under a uuid of its own."""
    import dataclasses

    mdev = last.mdevs[0]
    return dataclasses.replace(mdev, uuid="f" * 8 + mdev.uuid[8:])


def test_an_mdev_made_alone_is_said_under_the_next_generation(tmp_path):
    """An mdev made (no guest changed): the reading says so, from the
    last one's generation, under the next; the guests' change after it
    under the one after that (never one a reading had)."""
    from vgpu_driver.host.readings import KnownGuests

    readings, last, found = _read_again(tmp_path)
    made = _made(last)
    found.mdevs.append(made)
    reading = readings.take(
        found, False, ((made,), ()), KnownGuests(True, last.guests, ())
    )
    assert made in reading.mdevs
    assert reading.generation == last.generation + 1
    assert reading.device_changes is not None
    assert reading.device_changes[0] == last.generation
    gone, *rest = reading.guests
    diff = ((gone.uuid, gone, None),)
    after = readings.take(found, True, ((), ()), KnownGuests(True, rest, diff))
    assert after.generation == reading.generation + 1
    assert after.guests_known and after.guests == tuple(rest)


def test_an_mdev_made_with_a_guest_gone_says_both(tmp_path):
    """A delete whose mdev another manager's came beside: the reading
    knows its guests, and says the guest's change from the last
    generation."""
    from vgpu_driver.host.readings import KnownGuests

    readings, last, found = _read_again(tmp_path)
    made = _made(last)
    found.mdevs.append(made)
    gone, *rest = last.guests
    diff = ((gone.uuid, gone, None),)
    reading = readings.take(
        found, False, ((made,), ()), KnownGuests(True, rest, diff)
    )
    assert made in reading.mdevs and reading.guests == tuple(rest)
    assert reading.guests_known
    assert reading.guest_changes == (last.generation, diff)
    assert gone.mdevs and not set(gone.mdevs) & set(reading.mdev_users())


def test_every_guest_read_again_beside_an_mdev_made_is_taken_as_read(
    tmp_path,
):
    """The guests read again whole (a rescan: no change said) in the
    pass an mdev came: the reading has the guests as read, not as the
    last reading had them."""
    from vgpu_driver.host.readings import KnownGuests

    readings, last, found = _read_again(tmp_path)
    made = _made(last)
    found.mdevs.append(made)
    _gone, *rest = last.guests
    reading = readings.take(
        found, False, ((made,), ()), KnownGuests(True, rest, None)
    )
    assert reading.guests == tuple(rest) and made in reading.mdevs
    assert reading.generation == last.generation + 1


def test_every_guest_read_again_and_nothing_changed_is_the_same_reading(
    tmp_path,
):
    """A rescan that finds every guest and device as they were: the very
    same reading, under the same generation (nothing downstream takes
    it in again)."""
    from vgpu_driver.host.readings import KnownGuests

    readings, last, found = _read_again(tmp_path)
    reading = readings.take(
        found, False, ((), ()), KnownGuests(True, list(last.guests), None)
    )
    assert reading is last


def test_a_guest_change_that_does_not_match_counts_who_uses_what_anew(
    tmp_path,
):
    """The guests alone changed, but not as said (the guest said gone
    was read with no device): who uses which mdev is counted from the
    guests as they are, not carried from the last reading by the
    change."""
    import dataclasses

    from vgpu_driver.host.readings import KnownGuests
    from vgpu_driver.model.device import HostInventory

    readings, last, found = _read_again(tmp_path)
    first, *rest = last.guests
    assert first.mdevs and last.mdev_users()  # built, as a refresh does
    wrong = dataclasses.replace(first, mdevs=())
    diff = ((first.uuid, wrong, None),)
    reading = readings.take(
        found, True, ((), ()), KnownGuests(True, rest, diff)
    )
    assert reading.guests == tuple(rest)
    fresh = HostInventory(guests=tuple(rest), mdevs=last.mdevs)
    assert reading.mdev_users() == fresh.mdev_users()
    assert not set(first.mdevs) & set(reading.mdev_users())
