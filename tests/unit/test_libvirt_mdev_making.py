"""Making and removing mdevs through libvirt's modelled calls: the
kernel's rooms counted as a host rendered with its mdevs, a create with
no room refused as the kernel refuses it, libvirt from 7.3 making
mdevs and older ones leaving it to sysfs, and what is told when libvirt
cannot define or remove one."""

from __future__ import annotations

import uuid as uuidlib
from pathlib import Path

import libvirt
import pytest

from tests import helpers
from tests.modelled_libvirt import logged_connection, modelled_host
from vgpu_driver.exception import DeviceNoRoom, DeviceOperationFailed
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.sim.mdev_devices import mdev_xml
from vgpu_driver.sim.specs import MdevSpec


def _rooms_read(host):
    """parent -> type -> available, as the library reads them (libvirt's
    XML), and as the parent's sysfs files say."""
    reading = host.discover()
    xml = {
        p.name: {t.id: t.available for t in p.types} for p in reading.parents
    }
    files = {}
    for parent in reading.parents:
        base = host.sysfs.root / "class/mdev_bus" / parent.address
        files[parent.name] = {
            t.id: int(
                (base / "mdev_supported_types" / t.id / "available_instances")
                .read_text()
                .strip()
            )
            for t in parent.types
        }
    return xml, files


class _RefusingDestroy:
    """libvirt's connection, whose node devices' ``destroy`` fails with
    ``code`` (libvirt's words for an mdev it cannot stop)."""

    def __init__(self, real, code):
        self.real, self.code = real, code

    def __getattr__(self, name):
        return getattr(self.real, name)

    def nodeDeviceLookupByName(self, name):
        from vgpu_driver.sim.mdev_devices import libvirt_error

        device, code = self.real.nodeDeviceLookupByName(name), self.code

        class Device:
            def __getattr__(self, attr):
                return getattr(device, attr)

            def destroy(self):
                raise libvirt_error(
                    code, f"Unable to stop mediated device {name}"
                )

        return Device()


def test_the_modelled_kernel_counts_rooms_as_a_host_rendered_with_its_mdevs(
    tmp_path,
):
    """mdevs made and removed through the model leave every parent the
    rooms, in libvirt's XML and in sysfs, that a host described with
    those mdevs from the start has: on an NVIDIA pGPU, one type at a
    time (the model once took room from the type made alone)."""
    description = helpers.load("m10")
    host, conn = modelled_host(tmp_path / "model")
    made = []
    for parent, type_id in [
        ("pci_0000_85_00_0", "nvidia-36"),
        ("pci_0000_85_00_0", "nvidia-36"),
        ("pci_0000_87_00_0", "nvidia-35"),
    ]:
        mdev_uuid = str(uuidlib.uuid4())
        made.append(
            conn.nodeDeviceCreateXML(mdev_xml(parent, type_id, mdev_uuid), 0)
        )
    [gone] = [m for m in description.mdevs if m.parent == "pci_0000_84_00_0"]
    conn.gone.add(gone.libvirt_name)
    described = description.copy()
    described.mdevs = [m for m in described.mdevs if m.uuid != gone.uuid] + [
        MdevSpec(
            uuid=m.uuid, parent=m.parent, type=m.type_id, iommu_group=300 + i
        )
        for i, m in enumerate(made)
    ]
    uri, sysfs = helpers.hostdesc.materialize(
        described, tmp_path / "described"
    )
    xml, files = _rooms_read(host)
    expected, _ = _rooms_read(LibvirtHost(uri, sysfs))
    assert xml == files == expected
    assert xml["pci_0000_85_00_0"] == {"nvidia-35": 0, "nvidia-36": 14}
    assert xml["pci_0000_84_00_0"] == {"nvidia-35": 16, "nvidia-36": 16}


def test_a_create_the_parent_has_no_room_for_is_refused_as_the_kernel_does(
    tmp_path,
):
    """Another type on a pGPU running one (NVIDIA's rule), or past the
    type's room: libvirt passes on mdevctl's EDQUOT, which the library
    tells as no room; nothing is left behind."""
    host, conn = modelled_host(tmp_path)
    parent = host.discover().parent("pci_0000_84_00_0")  # runs nvidia-35
    before = host.discover()
    mdev_uuid = "0b5f4c1e-9a55-4a0f-8d2b-6f1e2a3b4c5d"
    with pytest.raises(DeviceNoRoom) as refused:
        host.create_mdev(parent, "nvidia-36", mdev_uuid)
    assert "pci_0000_84_00_0" in str(refused.value)
    assert len(conn.calls("nodeDeviceCreateXML")) == 1
    # libvirt's refusal is the host's answer: not written to sysfs past it
    types = (
        host.sysfs.root / "class/mdev_bus/0000:84:00.0/mdev_supported_types"
    )
    assert (types / "nvidia-36/create").read_text() == ""
    assert not (host.sysfs.root / "bus/mdev/devices" / mdev_uuid).exists()
    assert host.discover() == before
    room = parent.type("nvidia-35").available
    for _ in range(room):
        host.create_mdev(parent, "nvidia-35", str(uuidlib.uuid4()))
    with pytest.raises(DeviceNoRoom):
        host.create_mdev(parent, "nvidia-35", mdev_uuid)


def test_a_defined_mdev_its_parent_has_no_room_to_start_is_no_room(tmp_path):
    """Started where another type now runs: the kernel's EDQUOT is told
    as no room (the parent is full, not failing), as for a create."""
    host, conn = modelled_host(tmp_path)
    parent = host.discover().parent("pci_0000_87_00_0")
    mine = host.create_mdev(parent, "nvidia-35", str(uuidlib.uuid4()))
    conn.nodeDeviceLookupByName(mine.name).destroy()  # defined, stopped
    host.create_mdev(parent, "nvidia-36", str(uuidlib.uuid4()))
    [stopped] = [m for m in host.discover().mdevs if m.uuid == mine.uuid]
    assert not stopped.active
    with pytest.raises(DeviceNoRoom):
        host.start_mdev(stopped)


def test_a_create_mdevctl_refuses_for_another_reason_is_not_retried_in_sysfs(
    tmp_path,
):
    """libvirt's "Unable to start mediated device" is mdevctl's (so the
    kernel's) answer whatever the reason, here a uuid already active:
    the create fails with libvirt's words, as a failure and not as no
    room, and nothing is written to sysfs behind libvirt's back (which a
    driver that cannot create mdevs at all, the test driver, needs)."""
    host, conn = modelled_host(tmp_path)
    parent = host.discover().parent("pci_0000_87_00_0")
    mine = host.create_mdev(parent, "nvidia-35", str(uuidlib.uuid4()))
    create = (
        host.sysfs.root
        / "class/mdev_bus/0000:87:00.0/mdev_supported_types/nvidia-35/create"
    )
    before = create.read_text()
    with pytest.raises(DeviceOperationFailed) as failed:
        host.create_mdev(parent, "nvidia-35", mine.uuid)
    assert not isinstance(failed.value, DeviceNoRoom)
    assert "already active" in str(failed.value)
    assert len(conn.calls("nodeDeviceCreateXML")) == 2
    assert create.read_text() == before


@pytest.mark.parametrize(
    ("version", "through_libvirt"),
    [(7_003_000, True), (7_002_000, False), (6_000_000, False)],
)
def test_libvirt_from_7_3_makes_mdevs_older_ones_leave_it_to_sysfs(
    tmp_path, version, through_libvirt
):
    """libvirt 7.3.0 is the first to create mdevs (nodeDeviceCreateXML
    through mdevctl); on an older one (Ubuntu 20.04's 6.0) the mdev is
    written to the parent's ``create`` in sysfs."""
    description = helpers.load("m10")
    uri, sysfs = helpers.hostdesc.materialize(description, tmp_path)
    conn = logged_connection(uri, description, True, Path(sysfs))
    conn.getLibVersion = lambda: version
    host = LibvirtHost(uri, sysfs, opener=lambda _uri: conn)
    parent = host.discover().parent("pci_0000_87_00_0")
    uuid = str(uuidlib.uuid4())
    create = (
        host.sysfs.root
        / "class/mdev_bus/0000:87:00.0/mdev_supported_types/nvidia-35/create"
    )
    host.create_mdev(parent, "nvidia-35", uuid)
    assert bool(conn.calls("nodeDeviceCreateXML")) == through_libvirt
    assert (create.read_text() == uuid) != through_libvirt


@pytest.mark.parametrize("modelled", [True, False])
def test_an_mdev_on_a_parent_libvirt_does_not_list_is_made_in_sysfs(
    tmp_path, modelled
):
    """mtty's parent (devstack loads it) is registered in the kernel's
    ``class/mdev_bus`` but is no node device of libvirt's: libvirt cannot
    make an mdev on it whatever its version (modelled: libvirt 9.0, never
    asked), and the mdev is written to that parent's own ``create`` (its
    directory found from the registration, as it has no PCI address)."""
    description = helpers.load("mtty")
    uri, sysfs = helpers.hostdesc.materialize(description, tmp_path)
    if modelled:
        conn = logged_connection(uri, description, True, Path(sysfs))
        host = LibvirtHost(uri, sysfs, opener=lambda _uri: conn)
    else:  # libvirt's test driver: it makes no mdev at all
        host = LibvirtHost(uri, sysfs)
    [parent] = host.discover().parents
    assert (parent.name, parent.address) == ("mtty", None)
    uuid = str(uuidlib.uuid4())
    mdev = host.create_mdev(parent, "mtty-2", uuid)
    assert (mdev.uuid, mdev.parent) == (uuid, "mtty")
    create = Path(sysfs) / "class/mdev_bus/mtty/mdev_supported_types"
    assert (create / "mtty-2/create").read_text() == uuid
    if modelled:
        assert not conn.calls("nodeDeviceCreateXML")


def test_an_mdev_libvirt_makes_but_cannot_define_is_told_transient(tmp_path):
    """libvirt made the mdev and refused to define it (mdevctl could not
    write its definition): the mdev is used as it is, said not to be
    persistent (recreated at the next start after a reboot), and the
    operator is warned."""
    from vgpu_driver.sim.mdev_devices import libvirt_error

    host, conn = modelled_host(tmp_path)

    def refuse(xml, flags):
        raise libvirt_error(
            libvirt.VIR_ERR_OPERATION_FAILED, "mdevctl define failed"
        )

    conn.nodeDeviceDefineXML = refuse
    parent = host.discover().parent("pci_0000_87_00_0")
    mdev = host.create_mdev(parent, "nvidia-35", str(uuidlib.uuid4()))
    assert (mdev.persistent, mdev.autostart) == (False, False)
    assert mdev.uuid in {m.uuid for m in host.discover().mdevs}


@pytest.mark.parametrize(
    ("code", "via_sysfs"),
    [
        # a driver that cannot remove mdevs: the kernel's remove is used
        (libvirt.VIR_ERR_NO_SUPPORT, True),
        # libvirt (mdevctl) tried and failed: the host's answer, kept
        (libvirt.VIR_ERR_INTERNAL_ERROR, False),
        (libvirt.VIR_ERR_OPERATION_FAILED, False),
    ],
)
def test_an_mdev_libvirt_cannot_remove_goes_to_sysfs_only_if_unsupported(
    tmp_path, code, via_sysfs
):
    description = helpers.load("m10")
    uri, sysfs = helpers.hostdesc.materialize(description, tmp_path)
    host = LibvirtHost(
        uri, sysfs, opener=lambda u: _RefusingDestroy(libvirt.open(u), code)
    )
    inventory = host.discover()
    [free] = [
        m for m in inventory.mdevs if m.uuid not in inventory.mdev_users()
    ]
    remove = Path(sysfs) / "bus/mdev/devices" / free.uuid / "remove"
    if via_sysfs:
        host.remove_mdev(free)
        assert remove.read_text() == "1"
    else:
        with pytest.raises(DeviceOperationFailed, match="Unable to stop"):
            host.remove_mdev(free)
        assert remove.read_text() == ""
        assert free.uuid in {m.uuid for m in host.discover().mdevs}
