"""The scan of SR-IOV cards in sysfs: only the devices of NVIDIA's
driver are looked at, a steady scan reads one file per VF, and a VF's
type is read from its parent's directory and found again."""

from __future__ import annotations

import dataclasses

from tests import helpers
from vgpu_driver.sim import description as hostdesc


def test_the_sriov_scan_looks_only_at_the_devices_of_nvidia_s_driver(
    tmp_path, monkeypatch
):
    """NVIDIA SR-IOV cards are found from the devices bound to NVIDIA's
    driver, not by probing every PCI device of the host (a server lists
    hundreds: about 1.5 ms of CPU at a first scan for 300 of them, 0.1 ms
    at every later one). Whether a bound device is a PF is probed once;
    a PF's VFs are its virtfn links, read again when its VF count
    changes."""
    import os

    from vgpu_driver.host import sysfs as sysfs_module

    l40 = helpers.load("l40-sriov")
    [pf] = l40.pfs
    m10 = helpers.load("m10")  # mdev pGPUs, also bound to nvidia
    hostdesc.materialize(dataclasses.replace(m10, pfs=l40.pfs), tmp_path)
    devices = tmp_path / "sys/bus/pci/devices"
    others = [f"0000:00:{i >> 3:02x}.{i & 7}" for i in range(200)]
    for name in others:
        (devices / name / "nvidia").mkdir(parents=True)  # as if NVIDIA
    # an A100 on an older kernel: SR-IOV, but its VFs are mdev parents
    # (no nvidia/ directory); looked at once, then no more
    a100, a100_vfs = devices / "0000:81:00.0", ["0000:81:00.4", "0000:81:00.5"]
    a100.mkdir()
    (a100 / "sriov_numvfs").write_text("2\n")
    for index, vf in enumerate(a100_vfs):
        (devices / vf / "mdev_supported_types").mkdir(parents=True)
        (a100 / f"virtfn{index}").symlink_to(devices / vf)
    (tmp_path / "sys/bus/pci/drivers/nvidia" / a100.name).symlink_to(a100)
    touched: list[str] = []
    for name in ("listdir", "readlink", "open", "stat"):
        real = getattr(os, name)

        def spy(path, *args, real=real, **kwargs):
            touched.append(str(path))
            return real(path, *args, **kwargs)

        monkeypatch.setattr(os, name, spy)

    def looked_at(names):
        return {n for n in names if any(f"/{n}" in p for p in touched)}

    tree = sysfs_module.SysfsTree(tmp_path / "sys")
    [card] = tree.sriov_functions()
    assert [vf.address for vf in card.vfs] == list(pf.vf_addresses)
    assert looked_at(others) == set()
    m10_gpus = {p.address for p in m10.parents}
    assert looked_at(m10_gpus) == m10_gpus  # probed: not PFs

    touched.clear()
    vf = pf.vf_addresses[2]
    (devices / vf / "nvidia/current_vgpu_type").write_text("1150")
    [again] = tree.sriov_functions()
    assert {v.address: v.current_type for v in again.vfs}[vf] == 1150
    assert looked_at([*others, *m10_gpus, *a100_vfs]) == set()
    assert not [p for p in touched if "virtfn" in p]

    # VFs disabled: the PF's count changes, its links are read again
    (devices / pf.address / "sriov_numvfs").write_text("4\n")
    touched.clear()
    [fewer] = tree.sriov_functions()
    assert [v.address for v in fewer.vfs] == list(pf.vf_addresses[:4])
    assert len([p for p in touched if "virtfn" in p]) == 4

    tree.forget_probes()  # a driver may have been bound since
    touched.clear()
    tree.sriov_functions()
    assert looked_at(m10_gpus) == m10_gpus


def test_a_steady_sriov_scan_reads_one_file_per_card(tmp_path, monkeypatch):
    """At every scan each PF's VF count is read, and a VF's current type
    only where the kernel says its file was written (a type set by
    another process is seen at once); creatable types and PF attributes
    are read again only for a PF one of whose VFs changed type. Before,
    every scan read five files per VF (8.9 ms of CPU at every periodic
    for 8 L40s with 32 VFs each), then one per VF (1.2 ms)."""
    import dataclasses
    import operator

    from vgpu_driver.host import sysfs as sysfs_module

    l40 = helpers.load("l40-sriov")
    [pf] = l40.pfs
    other = dataclasses.replace(
        pf,
        address="0000:42:00.0",
        vf_types={},
    )
    hostdesc.materialize(
        dataclasses.replace(l40, pfs=(pf, other), guests=()), tmp_path
    )
    devices = tmp_path / "sys/bus/pci/devices"
    read = []
    from vgpu_driver.host import sysfs_files

    real_read = sysfs_files.read

    def counted(path, dir_fd=None):
        # (a VF's type is read from its directory's parent, opened once)
        read.append(str(path).removeprefix(f"{devices}/"))
        return real_read(path, dir_fd)

    monkeypatch.setattr(sysfs_files, "read", counted)
    tree = sysfs_module.SysfsTree(tmp_path / "sys")
    first = tree.sriov_functions()
    vfs = [vf.address for p in first for vf in p.vfs]
    assert len(vfs) == pf.vf_count * 2

    read.clear()
    again = tree.sriov_functions()
    assert sorted(read) == sorted(
        f"{card.address}/sriov_numvfs" for card in (pf, other)
    )
    assert len(again) == 2 and all(map(operator.is_, first, again))

    # another process sets a type on the second card, whose driver then
    # offers only that type on the VFs left
    vf = other.vf_addresses[3]
    (devices / vf / "nvidia/current_vgpu_type").write_text("1148\n")
    for sibling in other.vf_addresses:
        (devices / sibling / "nvidia/creatable_vgpu_types").write_text(
            "ID    : vGPU Name\n1148  : NVIDIA L40S-2Q\n"
        )
    read.clear()
    changed = tree.sriov_functions()
    assert changed[0] is first[0]  # the first card: nothing read again
    # of the types, the one written alone
    assert [p for p in read if "current" in p] == [
        f"{vf}/nvidia/current_vgpu_type"
    ]
    # the creatable types of its VFs still free (the typed one holds its
    # vGPU: what it lists is not read)
    assert {p.split("/")[0] for p in read if "creatable" in p} == set(
        other.vf_addresses
    ) - {vf}
    [card] = [p for p in changed if p.address == other.address]
    assert {v.address: v.current_type for v in card.vfs}[vf] == 1148
    assert {t.id for v in card.vfs for t in v.creatable} == {1148}


def test_a_vf_s_type_is_read_from_its_parent_directory_and_found_again(
    tmp_path, monkeypatch
):
    """A VF's type is read relative to the directory it sits in (opened
    once), not by walking bus/pci/devices and its link again; a VF no
    longer there (VFs disabled and enabled again, elsewhere) is read by
    its whole path at once (its directory is not where it was), and
    found again: read from its new directory at the next scan, and no
    more after that."""
    import shutil

    from vgpu_driver.host import sysfs as sysfs_module
    from vgpu_driver.host import sysfs_files

    l40 = helpers.load("l40-sriov")
    hostdesc.materialize(l40, tmp_path)
    tree = sysfs_module.SysfsTree(tmp_path / "sys")
    [pf] = tree.sriov_functions()
    relative = []
    real_read = sysfs_files.read

    def counted(path, dir_fd=None):
        found = real_read(path, dir_fd)
        if "current_vgpu_type" in str(path):
            relative.append(dir_fd is not None and found is not None)
        return found

    monkeypatch.setattr(sysfs_files, "read", counted)
    tree.forget_probes()  # as at a full listing: every VF read again
    tree.sriov_functions()
    assert relative == [True] * len(pf.vfs)
    # the VF moves: its link points elsewhere, its old directory is gone
    vf = pf.vfs[0].address
    link = tmp_path / "sys/bus/pci/devices" / vf
    old = link.resolve()
    moved = tmp_path / "sys/devices/elsewhere" / vf
    moved.parent.mkdir(parents=True)
    shutil.copytree(old, moved, symlinks=True)
    shutil.rmtree(old)
    (moved / "nvidia/current_vgpu_type").write_text("1150\n")
    link.unlink()
    link.symlink_to(moved)
    relative.clear()
    [now] = tree.sriov_functions()
    assert {v.address: v.current_type for v in now.vfs}[vf] == 1150
    assert len(now.vfs) == len(pf.vfs)
    assert relative == [False, False]  # where it was, then its whole path
    relative.clear()
    tree.sriov_functions()  # found again: from its new directory
    assert relative == [True]
    relative.clear()
    tree.sriov_functions()
    assert relative == []
