"""Discovery through libvirt's real test driver: cost, faults, CLI."""

from __future__ import annotations

import dataclasses
import json
import logging

import libvirt
import pytest

from tests import helpers
from vgpu_driver.cmd import main as cli
from vgpu_driver.conf import loader
from vgpu_driver.exception import (
    DeviceOperationFailed,
    HostOperationFailed,
    HostUnreachable,
)
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.model import check
from vgpu_driver.model.config import DeviceConfig, TypeConfig
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim import guest_xml


def test_steady_refresh_costs_one_call_per_parent_whatever_the_mdevs(
    tmp_path,
):
    description = hostdesc.parse(
        json.dumps(hostdesc.dense_raw(4, 200, 150)), "dense"
    )
    host = helpers.libvirt_host(description, tmp_path)
    first = host.discover()
    assert len(first.mdevs) == 200 and len(first.guests) == 150
    host.calls.clear()
    again = host.discover()
    assert again == first
    # one XML per parent: the parents listed are kept
    assert host.call_count == host.calls["XMLDesc"] == len(first.parents)
    assert host.calls["domain.XMLDesc"] == 0


def test_guests_are_rescanned_only_when_asked(tmp_path):
    host = helpers.libvirt_host(helpers.load("m10"), tmp_path)
    host.discover()
    host.calls.clear()
    host.discover(rescan_guests=True)
    assert host.calls["listAllDomains"] == 1
    assert host.calls["domain.XMLDesc"] == 2


def test_refresh_guest_rereads_one_domain_and_forgets_a_gone_one(tmp_path):
    host = helpers.libvirt_host(helpers.load("m10"), tmp_path)
    inventory = host.discover()
    guest = inventory.guests[0]
    host.forget_guest(guest.uuid)
    assert guest.uuid not in {g.uuid for g in host.discover().guests}
    host.calls.clear()
    host.refresh_guest(guest.uuid)
    # read through the domain object kept for it when it was forgotten
    assert host.calls == {"domain.XMLDesc": 1}
    assert guest in host.discover().guests
    host.refresh_guest("00000000-0000-0000-0000-000000000000")
    assert len(host.discover().guests) == len(inventory.guests)


class _VanishingDevice:
    """A listed device whose XML read fails as libvirt's would when the
    device disappears in between: with VIR_ERR_NO_NODE_DEVICE."""

    def __init__(self, conn, name):
        self._conn, self._name = conn, name

    def name(self):
        return self._name

    def XMLDesc(self, flags):
        return self._conn.nodeDeviceLookupByName(self._name).XMLDesc(flags)


class _BrokenDevice(_VanishingDevice):
    def XMLDesc(self, flags):
        return "<device><name>pci_0000_99_00_0</name><capability type='pci'>"


class _ConnWith:
    """The real test-driver connection, listing extra devices."""

    def __init__(self, conn, extra):
        self._conn, self._extra = conn, extra

    def listAllDevices(self, flags):
        return self._conn.listAllDevices(flags) + [
            cls(self._conn, name) for cls, name in self._extra
        ]

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_vanished_and_broken_devices_are_skipped(tmp_path, caplog):
    uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path)
    extra = [
        (_VanishingDevice, "pci_0000_aa_00_0"),
        (_BrokenDevice, "pci_0000_99_00_0"),
    ]
    host = LibvirtHost(
        uri, sysfs, opener=lambda u: _ConnWith(libvirt.open(u), extra)
    )
    inventory = host.discover()
    assert len(inventory.parents) == 4
    assert "pci_0000_99_00_0" in caplog.text  # warned, by name


def test_unreachable_uri_is_one_clear_error():
    host = LibvirtHost("test:///nonexistent/host.xml")
    with pytest.raises(HostUnreachable) as caught:
        host.discover()
    assert "test:///nonexistent/host.xml" in str(caught.value)
    assert "connection_uri" in str(caught.value)


def test_unreachable_uri_from_the_cli(write_conf, capsys):
    path = write_conf(
        "[libvirt]\nconnection_uri = test:///nonexistent/host.xml\n"
    )
    assert cli.main(["--config-file", path, "discover"]) == 1
    err = capsys.readouterr().err
    assert "test:///nonexistent/host.xml" in err and "Traceback" not in err


def test_fat_fingered_address_is_reported():
    inventory = helpers.simulated_host("m10").discover()
    config = DeviceConfig(
        (
            TypeConfig(
                "nvidia-35",
                "VGPU",
                ("0000:84:00.0", "0000:48:00.0"),
                None,
                (),
                False,
                "mdev_nvidia-35",
            ),
        )
    )
    [problem] = check.unknown_addresses(config, inventory)
    assert "0000:48:00.0" in str(problem)
    assert "[mdev_nvidia-35] device_addresses" in str(problem)


def test_discover_cli_defaults_to_the_shipped_demo_host(capsys):
    assert cli.main(["discover", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {p["name"] for p in data["parents"]}
    assert "pci_0000_84_00_0" in names
    used = {
        (p["name"], t["id"]): t["used"]
        for p in data["parents"]
        for t in p["types"]
    }
    assert used[("pci_0000_86_00_0", "nvidia-36")] == 2
    [pf] = data["sriov"]
    assert len(pf["vfs"]) == 32
    users = [m["guest"] for m in data["mdevs"] if m["guest"]]
    assert {u["name"] for u in users} == {
        "instance-00000001",
        "instance-00000002",
    }
    assert data["problems"] == []


def test_discover_cli_table_on_a_named_host(capsys):
    rc = cli.main(["--host-description", "mtty", "discover"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "Dual port serial" in out and "instance-00000041" in out


def test_discover_cli_reports_a_wrong_address(tmp_path, write_conf, capsys):
    path = write_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35
        [mdev_nvidia-35]
        device_addresses = 0000:84:00.0,0000:48:00.0
        """
    )
    rc = cli.main(
        ["--config-file", path, "--host-description", "m10", "discover"]
    )
    out, err = capsys.readouterr()
    assert rc == 0
    # on stderr: the tables on stdout stay the tables
    assert "WARNING: [mdev_nvidia-35] device_addresses = 0000:48:00.0" in err
    assert "WARNING" not in out


def test_libvirt_host_writes_sysfs_where_libvirt_cannot_create(tmp_path):
    """libvirt's test driver cannot create mdevs: the adapter falls back
    to the kernel's sysfs interface, as on libvirt < 7.3."""
    host = helpers.libvirt_host(helpers.load("m10"), tmp_path)
    inventory = host.discover()
    parent = inventory.parent("pci_0000_87_00_0")
    uuid = "0b5f4c1e-9a55-4a0f-8d2b-6f1e2a3b4c5d"
    mdev = host.create_mdev(parent, "nvidia-35", uuid)
    create = (
        tmp_path
        / "sys/devices/pci0000:00/0000:87:00.0"
        / "mdev_supported_types/nvidia-35/create"
    )
    assert create.read_text() == uuid
    assert (mdev.uuid, mdev.parent) == (uuid, parent.name)
    # removal goes through libvirt (nodedev destroy) when libvirt has it
    existing = inventory.mdevs[0]
    host.calls.clear()
    host.remove_mdev(existing)
    assert host.calls["destroy"] == 1
    remove = tmp_path / "sys/bus/mdev/devices" / existing.uuid / "remove"
    assert remove.read_text() == ""


def test_libvirt_host_sets_a_vf_type_through_sysfs(tmp_path):
    host = helpers.libvirt_host(helpers.load("l40-sriov"), tmp_path)
    host.set_vf_type("0000:41:00.6", 1157)
    current = (
        tmp_path / "sys/bus/pci/devices/0000:41:00.6/nvidia/current_vgpu_type"
    )
    assert current.read_text() == "1157"
    with pytest.raises(DeviceOperationFailed, match=r"0000:99:00\.1"):
        host.set_vf_type("0000:99:00.1", 1157)


def test_domain_events_keep_guests_current(tmp_path):
    """A guest defined or undefined by someone else is noticed through
    libvirt's lifecycle events, without a rescan."""
    with helpers.libvirt_event_loop():
        host = helpers.libvirt_host(helpers.load("m10"), tmp_path)
        helpers.check_domain_events_keep_guests_current(host)


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
    (devices / vf / "nvidia/current_vgpu_type").write_text("1157")
    [again] = tree.sriov_functions()
    assert {v.address: v.current_type for v in again.vfs}[vf] == 1157
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


def test_a_steady_sriov_scan_reads_one_file_per_vf(tmp_path, monkeypatch):
    """At every scan each VF's current type (and each PF's VF count) is
    read (a type set by
    another process is seen at once); creatable types and PF attributes
    are read again only for a PF one of whose VFs changed type. Before,
    every scan read five files per VF: 8.9 ms of CPU at every periodic
    for 8 L40s with 32 VFs each."""
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
        [
            *(f"{vf}/nvidia/current_vgpu_type" for vf in vfs),
            *(f"{card.address}/sriov_numvfs" for card in (pf, other)),
        ]
    )
    assert len(again) == 2 and all(map(operator.is_, first, again))

    # another process sets a type on the second card, whose driver then
    # offers only that type on the VFs left
    vf = other.vf_addresses[3]
    (devices / vf / "nvidia/current_vgpu_type").write_text("1156\n")
    for sibling in other.vf_addresses:
        (devices / sibling / "nvidia/creatable_vgpu_types").write_text(
            "ID    : vGPU Name\n1156  : NVIDIA L40-2Q\n"
        )
    read.clear()
    changed = tree.sriov_functions()
    assert changed[0] is first[0]  # the first card: nothing read again
    # the creatable types of its VFs still free (the typed one holds its
    # vGPU: what it lists is not read)
    assert {p.split("/")[0] for p in read if "creatable" in p} == set(
        other.vf_addresses
    ) - {vf}
    [card] = [p for p in changed if p.address == other.address]
    assert {v.address: v.current_type for v in card.vfs}[vf] == 1156
    assert {t.id for v in card.vfs for t in v.creatable} == {1156}


def test_discover_table_spells_parents_as_the_config_and_shows_details(
    capsys,
):
    assert cli.main(["--host-description", "grid-k1", "discover"]) == 0
    out = capsys.readouterr().out
    # the address device_addresses takes, not libvirt's pci_0000_05_00_0
    assert "0000:05:00.0  GK107GL" in out and "pci_0000_05_00_0  " not in out
    assert "GRID K180Q  4096 MB, 4 heads, 2560x1600" in out


def test_discover_says_none_for_empty_sections(tmp_path, capsys):
    path = tmp_path / "empty.json"
    path.write_text('{"parents": []}')
    assert cli.main(["--host-description", str(path), "discover"]) == 0
    out = capsys.readouterr().out
    assert out.count("\nnone\n") == 3  # parents, GPUs, mdevs


def test_a_vf_address_in_device_addresses_names_the_gpu_to_list_instead(
    make_conf,
):
    """Nova's docs have operators list the VFs of an SR-IOV vGPU card;
    here the physical GPU is listed: the problem says which one."""
    conf = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-1157
        [mdev_nvidia-1157]
        device_addresses = 0000:41:00.5
        """
    )
    config = loader.load_device_config(conf)
    inventory = helpers.simulated_host("l40-sriov").discover()
    [problem] = check.unknown_addresses(config, inventory)
    assert problem.value == "0000:41:00.5"
    assert "VF of the SR-IOV GPU 0000:41:00.0" in problem.message
    assert "(0000:41:00.0)" in problem.message


def test_an_sriov_gpu_whose_vfs_are_not_enabled_says_how_to_enable_them(
    tmp_path, make_conf
):
    """NVIDIA's vGPU manager is installed but ``sriov_numvfs`` is still
    0: the GPU is discovered with no VF and its address in
    device_addresses gets the command that enables them, not 'no device
    with this address'."""
    from pathlib import Path

    host = helpers.libvirt_host(helpers.load("l40-sriov"), tmp_path)
    pf = Path(host.sysfs.root) / "bus/pci/devices/0000:41:00.0"
    (pf / "sriov_numvfs").write_text("0\n")  # as before sriov-manage -e
    for link in pf.glob("virtfn*"):
        link.unlink()
    inventory = host.discover()
    [found] = inventory.pfs
    assert found.address == "0000:41:00.0" and found.vfs == ()
    conf = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-1157
        [mdev_nvidia-1157]
        device_addresses = 0000:41:00.0
        """
    )
    problems = check.host_problems(loader.load_device_config(conf), inventory)
    [problem] = [p for p in problems if p.option == "device_addresses"]
    assert "sriov-manage -e 0000:41:00.0" in problem.message


def test_a_vf_s_type_is_read_from_its_parent_directory_and_found_again(
    tmp_path, monkeypatch
):
    """A steady scan reads each VF's type relative to the directory it
    sits in (opened once), not by walking bus/pci/devices and its link
    again; a VF no longer there (VFs disabled and enabled again,
    elsewhere) is read by its whole path, and found again."""
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
        relative.append(dir_fd is not None and found is not None)
        return found

    monkeypatch.setattr(sysfs_files, "read", counted)
    tree.sriov_functions()
    assert relative.count(True) == len(pf.vfs)
    # the VF moves: its link points elsewhere, its old directory is gone
    vf = pf.vfs[0].address
    link = tmp_path / "sys/bus/pci/devices" / vf
    old = link.resolve()
    moved = tmp_path / "sys/devices/elsewhere" / vf
    moved.parent.mkdir(parents=True)
    shutil.copytree(old, moved, symlinks=True)
    shutil.rmtree(old)
    (moved / "nvidia/current_vgpu_type").write_text("1157\n")
    link.unlink()
    link.symlink_to(moved)
    [now] = tree.sriov_functions()
    assert {v.address: v.current_type for v in now.vfs}[vf] == 1157
    assert len(now.vfs) == len(pf.vfs)
    relative.clear()
    tree.sriov_functions()  # found again: from its new directory
    assert relative.count(True) == len(pf.vfs)


def test_a_guest_read_before_any_scan_leaves_the_first_scan_whole(tmp_path):
    """A guest re-read (``refresh_guest``: a spawn's define, an event)
    before the adapter ever listed the guests is returned as read, and
    the first discovery then reads every guest (it is not taken as the
    only one there is)."""
    host = helpers.libvirt_host(helpers.load("m10"), tmp_path)
    everyone = {
        g.uuid for g in helpers.simulated_host("m10").discover().guests
    }
    first = sorted(everyone)[0]
    guest = host.refresh_guest(first)
    assert guest is not None and guest.uuid == first
    assert host.calls["listAllDomains"] == 0
    assert {g.uuid for g in host.discover().guests} == everyone
    assert len(everyone) > 1


def test_a_guest_undefined_while_the_guests_are_listed_is_passed_over(
    tmp_path,
):
    """Nova deletes an instance while every guest is being read: its
    domain, listed, is gone when its XML is asked (libvirt's no-domain
    error). It is passed over and the others are read; any other error
    of libvirt's fails the reading (naming libvirt's words), never taken
    as a guest gone."""
    description = helpers.load("m10")
    uri, sysfs = hostdesc.materialize(description, tmp_path)
    everyone = {
        g.uuid for g in helpers.simulated_host("m10").discover().guests
    }
    victim = sorted(everyone)[0]
    real = libvirt.open(uri)

    class Racing:
        def __getattr__(self, name):
            return getattr(real, name)

        def listAllDomains(self, flags=0):
            domains = real.listAllDomains(flags)
            gone = real.lookupByUUIDString(victim)
            if gone.isActive():
                gone.destroy()
            guest_xml.delete(gone)
            return domains

    host = LibvirtHost(uri, sysfs, opener=lambda _uri: Racing())
    assert {g.uuid for g in host.discover().guests} == everyone - {victim}

    class Failing(Racing):
        def listAllDomains(self, flags=0):
            domains = real.listAllDomains(flags)
            failing = domains[0]

            class Domain:
                def __getattr__(self, name):
                    return getattr(failing, name)

                def XMLDesc(self, flags=0):
                    raise _libvirt_error(libvirt.VIR_ERR_INTERNAL_ERROR)

            return [Domain(), *domains[1:]]

    host = LibvirtHost(uri, sysfs, opener=lambda _uri: Failing())
    with pytest.raises(HostOperationFailed, match="cannot be read"):
        host.discover()


def _libvirt_error(code):
    from vgpu_driver.sim.mdev_libvirt import _error

    return _error(code, "internal error: the domain cannot be read")


def test_the_service_warns_of_a_fat_fingered_address_once(
    make_conf, tmp_path, caplog
):
    """The first reading of the host logs what in the configuration it
    contradicts (each refresh does not)."""
    from tests.helpers import Node

    config = helpers.load("m10").config.replace(
        "device_addresses = 0000:84:00.0",
        "device_addresses = 0000:48:00.0,0000:84:00.0",
    )
    assert "0000:48:00.0" in config
    with caplog.at_level(logging.WARNING, logger="vgpu_driver.service"):
        n = Node(make_conf, tmp_path / "state", config=config)
        for _ in range(3):
            n.update()
            n.driver.discover(rescan_guests=True)
    told = [
        r.getMessage()
        for r in caplog.records
        if "0000:48:00.0" in r.getMessage()
    ]
    assert len(told) == 1 and told[0].startswith("Configuration: ")
