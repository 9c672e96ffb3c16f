"""What the sysfs side reads where libvirt says nothing: a device's
directory without libvirt's path, and a parent libvirt has no node
device for (the mtty sample driver's)."""

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
