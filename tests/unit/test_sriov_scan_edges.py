"""Edges of the NVIDIA SR-IOV scan: what a steady scan keeps open, a VF
whose type cannot be read, and the NUMA node sysfs gives a card."""

from __future__ import annotations

import os

import pytest

from tests import helpers
from vgpu_driver.host import sysfs as sysfs_module
from vgpu_driver.sim import description as hostdesc


def _card(tmp_path):
    l40s = helpers.load("l40-sriov")
    hostdesc.materialize(l40s, tmp_path)
    [pf] = l40s.pfs
    return pf, tmp_path / "sys/bus/pci/devices"


def test_steady_scans_open_and_resolve_nothing_again(tmp_path, monkeypatch):
    """A VF's type is read from its directory's parent, opened once and
    kept, and told by one inotify descriptor: later scans open no
    directory (a service scanning every minute would otherwise leak a
    descriptor per directory per scan) and walk no VF's link again."""
    pf, devices = _card(tmp_path)
    parents = {
        os.path.dirname(os.path.realpath(devices / vf))
        for vf in pf.vf_addresses
    }
    before = len(os.listdir("/proc/self/fd"))
    tree = sysfs_module.SysfsTree(tmp_path / "sys")
    tree.sriov_functions()
    # one descriptor per directory the VFs sit in, kept, and inotify's
    assert len(os.listdir("/proc/self/fd")) - before == len(parents) + 1
    opened: list[str] = []
    resolved: list[str] = []
    real_open, real_realpath = os.open, os.path.realpath

    def spy_open(path, *args, **kwargs):
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    def spy_realpath(path, *args, **kwargs):
        resolved.append(str(path))
        return real_realpath(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy_open)
    monkeypatch.setattr(os.path, "realpath", spy_realpath)
    descriptors = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        [card] = tree.sriov_functions()
        assert len(card.vfs) == 32
    assert resolved == []
    # the files read are opened (and closed); no directory is
    assert opened and not [p for p in opened if os.path.isdir(p)]
    assert len(os.listdir("/proc/self/fd")) == descriptors


def test_a_vf_whose_type_cannot_be_read_is_left_out(tmp_path):
    """A VF going away (VFs being disabled) whose type file is gone is
    not offered as a free VF of its card."""
    pf, devices = _card(tmp_path)
    tree = sysfs_module.SysfsTree(tmp_path / "sys")
    [card] = tree.sriov_functions()
    assert len(card.vfs) == 32
    going = pf.vf_addresses[7]
    (devices / going / "nvidia/current_vgpu_type").unlink()
    [card] = tree.sriov_functions()
    assert going not in {vf.address for vf in card.vfs}
    assert len(card.vfs) == 31


@pytest.mark.parametrize(
    ("written", "read"), [("-1", None), ("0", 0), ("1", 1), ("3", 3)]
)
def test_a_card_s_numa_node_as_sysfs_gives_it(tmp_path, written, read):
    """sysfs says -1 on a host without NUMA: no node, not node -1."""
    pf, devices = _card(tmp_path)
    (devices / pf.address / "numa_node").write_text(written + "\n")
    [card] = sysfs_module.SysfsTree(tmp_path / "sys").sriov_functions()
    assert card.numa_node == read
