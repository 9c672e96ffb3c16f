"""A service's first provider tree reads no guest when guests cannot
change it, and always comes out the same as with every guest read."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests import helpers
from tests.helpers import new_tree
from vgpu_driver.cmd.inventory import tree_report
from vgpu_driver.driver import VgpuDriver


def _driver(make_conf, tmp_path, name, extra=""):
    description = helpers.load(name)
    host = helpers.libvirt_host(description, tmp_path / "host")
    conf = make_conf(textwrap.dedent(description.config) + extra)
    conf.set_override("state_path", str(tmp_path / "state"), "devices")
    return VgpuDriver(conf, host), host


CAP = "[mdev_nvidia-35]\nmax_instances = 3\n"
# 86 has nvidia-36 mdevs, one in use, but now serves nvidia-35
MOVED = (
    "[vgpu_nvidia-35]\ndevice_addresses = 0000:84:00.0,0000:86:00.0\n"
    "[vgpu_nvidia-36]\ndevice_addresses = 0000:87:00.0\n"
)
# the same, 85 still served: nothing but the gone mdev says guests matter
MOVED_ALL_SERVED = (
    "[vgpu_nvidia-35]\n"
    "device_addresses = 0000:84:00.0,0000:85:00.0,0000:86:00.0\n"
    "[vgpu_nvidia-36]\ndevice_addresses = 0000:87:00.0\n"
)

# the RTX PRO 6000's card serves DC-48Q now; a guest's VF is a DC-4Q
CARD_MOVED = (
    "[devices]\nenabled_mdev_types = nvidia-1540\n[mdev_nvidia-1540]\n"
    "device_addresses = 0001:c8:00.0\n"
)


@pytest.mark.parametrize(
    ("name", "extra"),
    [(name, "") for name in helpers.ALL_HOSTS]
    + [("m10", CAP), ("m10", MOVED), ("rtx6000", CARD_MOVED)],
)
def test_the_first_tree_is_the_same_with_or_without_reading_guests(
    make_conf, tmp_path, name, extra
):
    lazy, _ = _driver(make_conf, tmp_path / "lazy", name, extra)
    eager, _ = _driver(make_conf, tmp_path / "eager", name, extra)
    eager.discover()  # every guest read first
    trees = []
    for driver in (lazy, eager):
        tree = new_tree()
        driver.update_provider_tree(tree, "node1")
        trees.append(tree_report(tree, "node1")["providers"])
    assert trees[0] == trees[1]


def test_a_host_whose_guests_cannot_matter_is_planned_without_them(
    make_conf, tmp_path
):
    driver, host = _driver(make_conf, tmp_path, "m10")
    driver.update_provider_tree(new_tree(), "node1")
    assert "listAllDomains" not in host.calls


@pytest.mark.parametrize(
    ("name", "extra"),
    [("m10", CAP), ("m10", MOVED), ("rtx6000", CARD_MOVED)],
)
def test_guests_are_read_when_they_can_change_the_tree(
    make_conf, tmp_path, name, extra
):
    driver, host = _driver(make_conf, tmp_path, name, extra)
    driver.update_provider_tree(new_tree(), "node1")
    assert host.calls["listAllDomains"] == 1


def test_reading_the_claims_reads_nothing_of_the_host(make_conf, tmp_path):
    """``claims()`` and ``vf_types`` are reads of the records: they never
    start a scan of libvirt (an operator's tool asking them on a dense
    host must not list every guest)."""
    from tests.helpers import load

    host = helpers.libvirt_host(load("m10"), tmp_path / "host")
    conf = make_conf(load("m10").config)
    conf.set_override("state_path", str(tmp_path / "state"), "devices")
    driver = VgpuDriver(conf, host)
    host.calls.clear()
    assert driver.binder.claims() == {}
    assert driver.binder.vf_types == {}
    assert host.call_count == 0


@pytest.mark.parametrize("moved", [MOVED, MOVED_ALL_SERVED])
def test_an_mdev_gone_that_a_guest_names_is_counted_at_the_first_pass(
    make_conf, tmp_path, moved
):
    """The service saw 86's nvidia-36 mdevs; the host rebooted and every
    mdev is gone (none defined persistently), while a guest, shut off,
    still names one of 86's; 86 now serves nvidia-35. A restarted
    service's first pass, over libvirt's adapter (which reads no guest
    until asked), keeps 86 reserved for that guest, as a pass that read
    every guest first does: no mdev left on the host says the guest
    matters, the record of the mdevs seen does. With 85 still served,
    no provider left without a parent says so either. (A tool's pass,
    ``vgpu-driver sync`` beside the service: the service's own start
    reads every guest in ``init_host``.)"""
    from vgpu_driver.host.libvirt_host import LibvirtHost
    from vgpu_driver.sim.mdev_libvirt import MdevConnection

    description = helpers.load("m10")
    uri, sysfs = helpers.hostdesc.materialize(description, tmp_path / "h")
    conn = MdevConnection(
        uri, description, persistent=False, sysfs=Path(sysfs)
    )

    def restarted(config):
        conf = make_conf(textwrap.dedent(description.config) + config)
        conf.set_override("state_path", str(tmp_path / "state"), "devices")
        host = LibvirtHost(uri, sysfs, connection=conn)
        return VgpuDriver(conf, host), host

    driver, host = restarted("")
    driver.init_host()  # the service's start: every guest read
    driver.update_provider_tree(new_tree(), "node1")
    for mdev in host.discover().mdevs:  # a reboot: none defined to stay
        conn.gone.add(mdev.name)
    trees = []
    for eager in (False, True):
        driver, host = restarted(moved)
        if eager:
            driver.discover()  # every guest read first
        assert not host.discover(guests=False).mdevs
        tree = new_tree()
        driver.update_provider_tree(tree, "node1")
        trees.append(tree_report(tree, "node1")["providers"])
    assert trees[0] == trees[1]
    [kept] = [p for p in trees[0] if p["name"] == "node1_pci_0000_86_00_0"]
    [(rc, inventory)] = kept["inventories"].items()
    assert rc == "VGPU"
    assert inventory["reserved"] == inventory["total"] == 1
