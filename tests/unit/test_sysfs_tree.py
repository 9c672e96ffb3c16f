"""What the sysfs side reads where libvirt says nothing: a device's
directory without libvirt's path, and a parent libvirt has no node
device for (the mtty sample driver's); and how it reads: attributes
whole or not at all, a VF list read while VFs are being enabled not
kept."""

from __future__ import annotations

from pathlib import Path

from vgpu_driver.host.sysfs import SysfsTree


def test_a_device_is_found_by_libvirts_path_else_by_its_address(tmp_path):
    tree = SysfsTree(tmp_path)
    libvirt_path = "/sys/devices/pci0000:80/0000:80:01.0/0000:84:00.0"
    assert tree.resolve(libvirt_path, "0000:84:00.0") == (
        tmp_path / "devices/pci0000:80/0000:80:01.0/0000:84:00.0"
    )
    # libvirt gave no path (or one outside /sys): by the PCI address
    for given in (None, "", "/devices/0000:84:00.0"):
        assert tree.resolve(given, "0000:84:00.0") == (
            tmp_path / "bus/pci/devices/0000:84:00.0"
        )
    # neither: a directory that is not there (nothing read, nothing made)
    assert not tree.resolve(None, None).exists()


def _type(device: Path, type_id: str, **files: str) -> None:
    directory = device / "mdev_supported_types" / type_id
    directory.mkdir(parents=True)
    for name, text in files.items():
        (directory / name).write_text(text + "\n")


def test_a_type_sysfs_does_not_fully_describe_is_left_out(tmp_path):
    """mtty's parent, read from sysfs alone: a type without
    ``device_api`` or ``available_instances`` is skipped (with a
    warning), never reported with a hole in it."""
    device = tmp_path / "devices/virtual/mtty/mtty"
    _type(
        device,
        "mtty-1",
        name="Single port serial",
        device_api="vfio-pci",
        available_instances="24",
    )
    _type(device, "mtty-2", name="Dual port serial", available_instances="12")
    _type(device, "mtty-3", name="Quad", device_api="vfio-pci")
    parent = SysfsTree(tmp_path).read_parent(device, "mtty")
    assert parent is not None
    assert [(t.id, t.device_api, t.available) for t in parent.types] == [
        ("mtty-1", "vfio-pci", 24)
    ]
    assert parent.types[0].name == "Single port serial"
    # a device without mdev_supported_types is no parent
    assert SysfsTree(tmp_path).read_parent(tmp_path / "devices", "x") is None


def test_sysfs_attributes_are_read_whole_or_not_at_all(tmp_path):
    """sysfs values are read with raw descriptor reads: a value longer
    than one read comes back whole; a missing, unreadable or undecodable
    attribute is None, never a partial value or an exception."""
    from vgpu_driver.host import sysfs_files

    long_value = "GRID description line\n" * 4000  # many one-page reads
    (tmp_path / "description").write_text(long_value + "\n")
    (tmp_path / "one_page").write_text("x" * 4096)
    (tmp_path / "latin1").write_bytes(b"caf\xe9")
    (tmp_path / "a_directory").mkdir()
    (tmp_path / "available_instances").write_text("  12\n")

    assert sysfs_files.read(tmp_path / "description") == long_value.strip()
    assert sysfs_files.read(tmp_path / "one_page") == "x" * 4096
    assert sysfs_files.read(str(tmp_path / "available_instances")) == "12"
    assert sysfs_files.read_int(tmp_path / "available_instances") == 12
    for unreadable in ("missing", "latin1", "a_directory"):
        assert sysfs_files.read(tmp_path / unreadable) is None


def test_a_vf_list_read_while_vfs_are_being_enabled_is_not_kept(tmp_path):
    """``sriov_numvfs`` already says 32 while a ``virtfn`` link is not
    there yet: that listing is incomplete, so the next scan reads the
    links again (the count alone has not changed)."""
    from tests.helpers import load
    from vgpu_driver.host.sysfs import SysfsTree
    from vgpu_driver.sim.description import materialize

    _uri, root = materialize(load("l40-sriov"), tmp_path)
    pf_dir = root / "bus/pci/devices/0000:41:00.0"
    link = pf_dir / "virtfn5"
    target = link.readlink()
    link.unlink()  # the kernel has not made it yet
    tree = SysfsTree(root)
    [pf] = tree.sriov_functions()
    complete = len(pf.vfs) + 1
    link.symlink_to(target)
    [pf] = tree.sriov_functions()
    assert len(pf.vfs) == complete


def test_a_vf_type_is_written_only_to_a_pci_address(tmp_path):
    """The VF named must be a PCI address: a name that walks out of
    ``bus/pci/devices`` (here to a directory that has the same files)
    is refused before anything is read or written there."""
    import pytest

    from vgpu_driver.exception import DeviceOperationFailed

    elsewhere = tmp_path / "bus/elsewhere/nvidia"
    elsewhere.mkdir(parents=True)
    (elsewhere / "current_vgpu_type").write_text("0\n")
    (elsewhere / "creatable_vgpu_types").write_text(
        "ID    : vGPU Name\n1150  : NVIDIA L40S-4Q\n"
    )
    (tmp_path / "bus/pci/devices").mkdir(parents=True)
    with pytest.raises(DeviceOperationFailed, match="not a PCI address"):
        SysfsTree(tmp_path).set_vf_type("../../elsewhere", 1150)
    assert (elsewhere / "current_vgpu_type").read_text() == "0\n"


def test_an_mdevs_parent_is_named_by_its_sysfs_link(tmp_path):
    """``bus/mdev/devices/<uuid>`` links to the mdev's directory under
    its parent's: the parent is that directory's name; an mdev sysfs
    does not have has none (not the name of a directory on the way)."""
    made = "5b1c3f1e-8f0e-4a63-9d1b-1f0a8e6c2d11"
    parent = tmp_path / "devices/pci0000:80/0000:80:02.0/0000:84:00.0"
    (parent / made).mkdir(parents=True)
    links = tmp_path / "bus/mdev/devices"
    links.mkdir(parents=True)
    (links / made).symlink_to(parent / made)
    tree = SysfsTree(tmp_path)
    assert tree.mdev_parent_name(made) == "0000:84:00.0"
    assert (
        tree.mdev_parent_name("0c8e2d1a-3b4f-4e5a-8c6d-7e8f9a0b1c2d") is None
    )


def test_a_vf_type_is_read_from_its_file_alone(tmp_path):
    """A VF's type now, read from its ``current_vgpu_type``: None for a
    VF without one, and for a name that is not a PCI address (nothing
    read outside ``bus/pci/devices``)."""
    vf = tmp_path / "bus/pci/devices/0000:41:00.4/nvidia"
    vf.mkdir(parents=True)
    (vf / "current_vgpu_type").write_text("1150\n")
    elsewhere = tmp_path / "bus/elsewhere/nvidia"
    elsewhere.mkdir(parents=True)
    (elsewhere / "current_vgpu_type").write_text("7\n")
    tree = SysfsTree(tmp_path)
    assert tree.vf_type("0000:41:00.4") == 1150
    assert tree.vf_type("0000:41:00.5") is None
    assert tree.vf_type("../../elsewhere") is None
