"""Two writers for one node with different configurations (a compute
service and a ``sync`` run with another file) must not fight silently:
each provider says which configuration wrote it, a tool that finds
another one's mark after its own refuses to write, and the service warns
naming both sources (#20, item 7)."""

from __future__ import annotations

import logging
import textwrap

import pytest

from tests.helpers import load, new_tree
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.exception import WriterConflict
from vgpu_driver.model.config import CONFIG_TRAIT_PREFIX
from vgpu_driver.sim.simulated import SimulatedHost

PARENT = "node1_pci_0000_84_00_0"  # m10: nvidia-35, 4; capped to 2


def _driver(make_conf, state, host, extra, **kwargs):
    conf = make_conf(textwrap.dedent(load("m10").config) + extra)
    conf.set_override("state_path", str(state), "devices")
    return VgpuDriver(conf, host, **kwargs)


def _marks(tree):
    return {
        t
        for t in tree.data(PARENT).traits
        if t.startswith(CONFIG_TRAIT_PREFIX)
    }


def test_a_tool_with_another_configuration_gives_way_and_the_service_warns(
    make_conf, tmp_path, caplog
):
    host = SimulatedHost(load("m10"))
    state = tmp_path / "state"
    service = _driver(make_conf, state, host, "")
    tool = _driver(
        make_conf,
        state,
        host,
        "[vgpu_nvidia-35]\nmax_instances = 2\n",
        yields=True,
    )
    tree = new_tree()
    service.update_provider_tree(tree, "node1")
    [service_mark] = _marks(tree)
    assert tree.data(PARENT).inventory["VGPU"]["total"] == 16
    # the tool's first pass: it cannot know it is a second writer yet
    tool.update_provider_tree(tree, "node1")
    [tool_mark] = _marks(tree)
    assert tool_mark != service_mark
    assert tree.data(PARENT).inventory["VGPU"]["total"] == 2
    # the service finds another configuration's mark where it wrote its
    # own: it warns, naming both, and writes on
    with caplog.at_level(logging.WARNING):
        service.update_provider_tree(tree, "node1")
    warned = [
        r.getMessage() for r in caplog.records if tool_mark in r.getMessage()
    ]
    assert len(warned) == 1 and service_mark in warned[0]
    assert service.settings.source in warned[0]
    assert tool.settings.source in warned[0]  # known from the shared record
    assert tree.data(PARENT).inventory["VGPU"]["total"] == 16
    # the tool finds the service's mark after its own: it writes nothing
    with pytest.raises(WriterConflict, match=service_mark):
        tool.update_provider_tree(tree, "node1")
    assert _marks(tree) == {service_mark}
    assert tree.data(PARENT).inventory["VGPU"]["total"] == 16


def test_one_writer_whose_configuration_changes_is_no_conflict(
    make_conf, tmp_path
):
    host = SimulatedHost(load("m10"))
    state = tmp_path / "state"
    tree = new_tree()
    first = _driver(make_conf, state, host, "", yields=True)
    first.update_provider_tree(tree, "node1")
    [old_mark] = _marks(tree)
    # restarted with another configuration: its own old mark is replaced
    again = _driver(
        make_conf,
        state,
        host,
        "[vgpu_nvidia-35]\nmax_instances = 2\n",
        yields=True,
    )
    again.update_provider_tree(tree, "node1")
    again.update_provider_tree(tree, "node1")
    [new_mark] = _marks(tree)
    assert new_mark != old_mark


def test_a_tool_without_a_class_keeps_the_service_s_provider_of_it(
    make_conf, tmp_path
):
    """The service offers nvidia-36 in CUSTOM_SMALL on 86, where a guest
    uses one. A tool run with a file that does not enable the type keeps
    that provider in its class, all reserved (it wrote VGPU over it,
    which Placement refuses while the guest's allocation is there). The
    service, restarted without the type, takes the provider away once
    the guest is gone."""
    host = SimulatedHost(load("m10"))
    state = tmp_path / "state"
    small = "[vgpu_nvidia-36]\nmdev_class = CUSTOM_SMALL\n"
    service = _driver(make_conf, state, host, small)
    tree = new_tree()
    service.update_provider_tree(tree, "node1")
    name = "node1_pci_0000_86_00_0"
    assert list(tree.data(name).inventory) == ["CUSTOM_SMALL"]
    conf = make_conf(
        "[devices]\nenabled_mdev_types = nvidia-35\n[vgpu_nvidia-35]\n"
        "device_addresses = 0000:84:00.0,0000:85:00.0\n"
    )
    conf.set_override("state_path", str(state), "devices")
    tool = VgpuDriver(conf, host, yields=True)
    tool.update_provider_tree(tree, "node1")
    kept = tree.data(name).inventory
    assert list(kept) == ["CUSTOM_SMALL"]
    assert kept["CUSTOM_SMALL"]["reserved"] == kept["CUSTOM_SMALL"]["total"]
    for guest in host.discover().guests:
        host.forget_guest(guest.uuid)
    restarted = VgpuDriver(conf, host)
    restarted.update_provider_tree(tree, "node1")
    assert not tree.exists(name)
