"""A parent's sysfs directory read for its mdevs (host/mdev_dirs.py):
what is new, made again under its uuid, or no longer running, against
the mdevs libvirt was last asked about."""

from __future__ import annotations

import uuid as uuidlib

from vgpu_driver.host.mdev_dirs import MdevDirs, Seen


def _parent(tmp_path):
    """A PCI device's directory as sysfs has it: its attribute files,
    ``mdev_supported_types``, and the mdevs running on it."""
    path = tmp_path / "0000:87:00.0"
    (path / "mdev_supported_types").mkdir(parents=True)
    for attribute in ("vendor", "device", "sriov_numvfs"):
        (path / attribute).write_text("0\n")
    return path


def test_only_the_entries_named_by_a_uuid_are_mdevs(tmp_path):
    path = _parent(tmp_path)
    mdev = str(uuidlib.uuid4())
    (path / mdev).mkdir()
    # as long as a uuid, not one: an attribute, not an mdev
    (path / ("x" * 36)).write_text("0\n")
    seen = MdevDirs().follow("pci_0000_87_00_0", path, (), frozenset())
    assert seen == Seen([], [mdev], [])


def test_an_mdev_gone_from_the_directory_no_longer_runs(tmp_path):
    path = _parent(tmp_path)
    kept, gone, stopped = (str(uuidlib.uuid4()) for _ in range(3))
    (path / kept).mkdir()
    dirs = MdevDirs()
    seen = dirs.follow("p", path, {kept, gone, stopped}, frozenset({stopped}))
    # a defined mdev that does not run is not in the directory either
    assert seen == Seen([], [], [gone])


def test_an_mdev_made_again_under_its_uuid_is_read_again(tmp_path):
    """Removed and made again between two follows (perhaps of another
    type): its directory is another, so its XML is read again; one that
    stayed is not."""
    path = _parent(tmp_path)
    again, stayed = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    (path / again).mkdir()
    (path / stayed).mkdir()
    dirs = MdevDirs()
    assert dirs.follow("p", path, (), frozenset()) == Seen(
        [], sorted([again, stayed]), []
    )
    # the old directory kept elsewhere: the new one cannot have its inode
    # (kernfs never gives a removed directory's inode to a new one)
    (path / again).rename(tmp_path / "removed")
    (path / again).mkdir()
    seen = dirs.follow("p", path, {again, stayed}, frozenset())
    assert seen == Seen([again], [again], [])


def test_a_stopped_mdev_that_started_is_read_again(tmp_path):
    path = _parent(tmp_path)
    started = str(uuidlib.uuid4())
    (path / started).mkdir()
    seen = MdevDirs().follow("p", path, {started}, frozenset({started}))
    assert seen == Seen([started], [started], [])


def test_a_directory_that_cannot_be_read_says_nothing(tmp_path):
    assert MdevDirs().follow("p", tmp_path / "gone", (), frozenset()) is None
    assert MdevDirs().follow("p", None, (), frozenset()) is None
