"""A VF's type is read again only where it may have changed: the kernel
told a write to its file (inotify), its directory is another one, its
driver's ``bind``/``unbind`` was written, or the kernel cannot tell (no
inotify: every VF at every scan, as before)."""

from __future__ import annotations

import os
import re
import shutil
import struct
from pathlib import Path

import pytest

from tests import helpers
from vgpu_driver.host import inotify, sysfs_files
from vgpu_driver.host import sysfs as sysfs_module
from vgpu_driver.sim import description as hostdesc


def _scan(tmp_path, monkeypatch):
    """An L40S host, scanned once; the VF type files read after that."""
    l40s = helpers.load("l40-sriov")
    hostdesc.materialize(l40s, tmp_path)
    [pf] = l40s.pfs
    tree = sysfs_module.SysfsTree(tmp_path / "sys")
    [card] = tree.sriov_functions()
    assert len(card.vfs) == len(pf.vf_addresses)
    read: list[str] = []
    real = sysfs_files.read

    def counted(path, dir_fd=None):
        if "current_vgpu_type" in str(path):
            read.append(str(path).split("/nvidia/")[0].rsplit("/", 1)[-1])
        return real(path, dir_fd)

    monkeypatch.setattr(sysfs_files, "read", counted)
    return tree, pf, tmp_path / "sys/bus/pci/devices", read


def _types(tree):
    [card] = tree.sriov_functions()
    return {vf.address: vf.current_type for vf in card.vfs}


def test_a_type_written_by_anyone_is_read_at_the_next_scan(
    tmp_path, monkeypatch
):
    tree, pf, devices, read = _scan(tmp_path, monkeypatch)
    assert _types(tree)[pf.vf_addresses[5]] == 0
    assert read == []  # steady: no VF's file read
    (devices / pf.vf_addresses[5] / "nvidia/current_vgpu_type").write_text(
        "1150\n"
    )
    assert _types(tree)[pf.vf_addresses[5]] == 1150
    assert read == [pf.vf_addresses[5]]
    read.clear()
    assert _types(tree)[pf.vf_addresses[5]] == 1150
    assert read == []


def test_a_steady_card_takes_no_step_per_vf(tmp_path, monkeypatch):
    """Nothing told, every VF watched, their directory as it was: the
    card's types are those of the last scan, with no step per VF (and
    no link of a VF walked again when one is read)."""
    from vgpu_driver.host.vf_types import VfTypes

    tree, pf, devices, read = _scan(tmp_path, monkeypatch)
    asked: list[str] = []
    real = VfTypes.current

    def current(self, devices, vf):
        asked.append(vf)
        return real(self, devices, vf)

    monkeypatch.setattr(VfTypes, "current", current)
    resolved: list[str] = []
    realpath = os.path.realpath
    monkeypatch.setattr(
        os.path, "realpath", lambda p: resolved.append(p) or realpath(p)
    )
    for _ in range(3):
        assert len(_types(tree)) == len(pf.vf_addresses)
    assert asked == []
    (devices / pf.vf_addresses[1] / "nvidia/current_vgpu_type").write_text(
        "1150\n"
    )
    assert _types(tree)[pf.vf_addresses[1]] == 1150
    assert sorted(asked) == sorted(pf.vf_addresses)  # that card, walked
    assert read == [pf.vf_addresses[1]] and resolved == []
    asked.clear()
    for _ in range(2):
        _types(tree)
    assert asked == []


def test_a_vf_made_again_is_read_though_nothing_was_written(
    tmp_path, monkeypatch
):
    """VFs disabled and enabled again between two scans: a new directory
    under the same name, and no write to the old file (its watch stays
    on the old one): its directory's inode says so."""
    tree, pf, devices, read = _scan(tmp_path, monkeypatch)
    vf = pf.vf_addresses[9]
    where = (devices / vf).resolve()
    os.rename(where, f"{where}.gone")  # the old file: kept, not written
    shutil.copytree(f"{where}.gone", where, symlinks=True)
    # a write to the new file, never watched: not told
    (where / "nvidia/current_vgpu_type").write_text("1150\n")
    assert _types(tree)[vf] == 1150
    assert vf in read


def test_a_driver_s_bind_or_unbind_written_reads_every_vf(
    tmp_path, monkeypatch
):
    """A VF moved to another driver (libvirt's ``managed`` hostdev
    writes ``unbind``) loses its ``nvidia`` directory: every VF is read
    again, and that one is no longer offered."""
    tree, pf, devices, read = _scan(tmp_path, monkeypatch)
    vf = pf.vf_addresses[3]
    shutil.rmtree(os.path.realpath(devices / vf / "nvidia"))
    driver = tmp_path / "sys/bus/pci/drivers/nvidia"
    (driver / "unbind").write_text(vf)
    read.clear()
    assert vf not in _types(tree)
    assert len(set(read)) == len(pf.vf_addresses)
    read.clear()
    _types(tree)
    assert set(read) == {vf}  # the one gone: not known, read every scan
    (driver / "bind").write_text(vf)
    read.clear()
    _types(tree)
    assert sorted(set(read)) == sorted(pf.vf_addresses)


def test_a_vf_no_longer_the_driver_s_is_read_though_nothing_was_told(
    tmp_path, monkeypatch
):
    """A service not running as root cannot watch ``bind``/``unbind``
    (write-only files): a VF the driver's directory no longer lists is
    read all the same (and its siblings are not)."""
    real = inotify.Written.watch
    monkeypatch.setattr(
        inotify.Written,
        "watch",
        lambda self, path, key: (
            False if key in ("bind", "unbind") else real(self, path, key)
        ),
    )
    tree, pf, _devices, read = _scan(tmp_path, monkeypatch)
    vf = pf.vf_addresses[6]
    (tmp_path / "sys/bus/pci/drivers/nvidia" / vf).unlink()
    _types(tree)
    assert set(read) == {vf}


def test_without_inotify_every_vf_is_read_at_every_scan(tmp_path, monkeypatch):
    monkeypatch.setattr(inotify, "_libc", lambda: None)
    tree, pf, _devices, read = _scan(tmp_path, monkeypatch)
    for _ in range(2):
        read.clear()
        assert len(_types(tree)) == len(pf.vf_addresses)
        assert sorted(read) == sorted(pf.vf_addresses)


def test_a_full_listing_reads_every_vf_again(tmp_path, monkeypatch):
    """(the net for a type the kernel would change with no write)"""
    tree, pf, _devices, read = _scan(tmp_path, monkeypatch)
    tree.forget_probes()
    _types(tree)
    assert sorted(read) == sorted(pf.vf_addresses)


def test_a_watch_the_kernel_refuses_is_read_at_every_scan(
    tmp_path, monkeypatch
):
    """The user's inotify watches spent (ENOSPC): those VFs are read at
    every scan, the others are not."""
    real = inotify.Written.watch
    refused = {"0000:41:00.6"}

    def watch(self, path, key):
        return False if key in refused else real(self, path, key)

    monkeypatch.setattr(inotify.Written, "watch", watch)
    tree, pf, _devices, read = _scan(tmp_path, monkeypatch)
    assert refused <= set(pf.vf_addresses)
    for _ in range(2):
        read.clear()
        _types(tree)
        assert read == sorted(refused)


def test_the_kernel_s_queue_overflowed_reads_every_file():
    written = inotify.Written()
    event = struct.pack("iIII", -1, inotify.IN_Q_OVERFLOW, 0, 0)
    found: set[str] = set()
    written._parse(event, found)
    assert written.take() is None  # every file may have changed
    assert written.take() == set()  # told again from then on
    written.close()


def test_a_file_deleted_is_told_and_no_longer_watched(tmp_path):
    path = tmp_path / "value"
    path.write_text("0\n")
    written = inotify.Written()
    assert written.watch(str(path), "v")
    assert written.take() == set()
    path.write_text("1\n")
    assert written.take() == {"v"}
    path.unlink()
    assert written.take() == {"v"}
    assert not written.watching("v")
    assert not written.watch(str(path), "v")  # gone: the caller reads it
    written.close()


def _writable_attribute() -> Path | None:
    path = Path("/sys/kernel/mm/transparent_hugepage/defrag")
    if os.geteuid() != 0 or not os.access(path, os.W_OK):
        return None
    return path


@pytest.mark.skipif(
    _writable_attribute() is None,
    reason="needs root and a writable /sys (to write a value back)",
)
def test_the_real_kernel_tells_a_write_to_a_sysfs_attribute():
    """What the steady scan rests on, on this machine's kernel and its
    real /sys (not the simulated tree): a write to a sysfs attribute
    through write(2) is told. The value written is the one it has."""
    path = _writable_attribute()
    assert path is not None
    now = re.search(r"\[([^\]]+)\]", path.read_text())
    assert now is not None
    written = inotify.Written()
    assert written.watch(str(path), "defrag")
    assert written.take() == set()
    with open(path, "w") as handle:
        handle.write(now.group(1))
    assert written.take() == {"defrag"}
    written.close()


def test_a_vf_whose_directory_cannot_be_found_is_left_out(
    tmp_path, monkeypatch
):
    """Its link leads nowhere (VFs being disabled): not offered, and the
    scan goes on with the others."""
    tree, pf, devices, _read = _scan(tmp_path, monkeypatch)
    vf = pf.vf_addresses[4]
    os.rename((devices / vf).resolve(), tmp_path / vf)
    (devices / vf).unlink()
    (devices / vf).symlink_to(tmp_path / "sys/devices/nowhere" / vf)
    for _ in range(2):  # (the second looks for its directory again)
        types = _types(tree)
        assert vf not in types and len(types) == len(pf.vf_addresses) - 1


def test_watches_spent_are_told_to_the_operator_once(tmp_path, caplog):
    """The user's inotify watches ran out: one warning naming the sysctl
    to raise, and the file refused is left for the caller to read."""
    import ctypes
    import errno

    written = inotify.Written()
    real = written._libc

    class Spent:
        inotify_init1 = real.inotify_init1

        @staticmethod
        def inotify_add_watch(fd, path, mask):
            ctypes.set_errno(errno.ENOSPC)
            return -1

    written._libc = Spent()
    path = tmp_path / "value"
    path.write_text("0\n")
    with caplog.at_level("WARNING"):
        assert not written.watch(str(path), "a")
        assert not written.watch(str(path), "b")
    spent = [r for r in caplog.records if "max_user_watches" in r.message]
    assert len(spent) == 1
    assert not written.watching("a") and written.take() == set()
    written.close()


def test_a_watcher_let_go_closes_its_descriptor():
    """Many hosts made in one process (a test run, Nova's functional
    tests) do not spend the user's inotify instances (128 by default)."""
    import gc

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    gc.collect()  # (what earlier tests let go)
    before = descriptors()
    watchers = [inotify.Written() for _ in range(3)]
    for written in watchers:
        assert written.take() == set()
    assert descriptors() == before + 3
    del watchers, written
    gc.collect()
    assert descriptors() == before
    closed = inotify.Written()
    closed.take()
    closed.close()
    closed.close()  # (twice: nothing closed twice)
    assert descriptors() == before


def test_inotify_refused_is_tried_again_at_the_next_full_reading(
    monkeypatch,
):
    written = inotify.Written()
    real = written._libc

    class Refusing:
        @staticmethod
        def inotify_init1(flags):
            import ctypes
            import errno

            ctypes.set_errno(errno.EMFILE)
            return -1

    written._libc = Refusing()
    assert written.take() is None  # every file may have changed
    assert written.take() is None
    written._libc = real
    assert written.take() is None  # not tried again before a close
    written.close()  # (as a full reading does)
    assert written.take() == set()
    written.close()
