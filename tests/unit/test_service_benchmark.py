"""The service benchmark times a restart as a restarted service runs:
its own libvirt connection and the providers as Placement holds them
(its figures are read, not asserted: see test_benchmarks.py)."""

from __future__ import annotations

import libvirt
import pytest

from benchmarks import service as bench
from benchmarks.common import conf_for, dense
from vgpu_driver.sim import description as hostdesc


def _service(tmp_path):
    """The benchmark's service on a host of two pGPUs, 8 mdevs, 4 guests."""
    description = dense(2, 8, 4)
    uri, sysfs = hostdesc.materialize(description, tmp_path)
    return bench.Service(
        uri, sysfs, conf_for(description.config, tmp_path), tmp_path
    )


def test_a_started_service_watches_node_devices_as_a_restart_does(
    tmp_path, monkeypatch
):
    """The service benchmark's start is a restart's: the new service has
    a connection of its own, and its node-device events come (libvirt
    refuses a second callback of a kind on one connection, and a service
    without them reads every parent again at each refresh, its first
    after ``init_host`` included); its connection is closed after."""
    ours = _service(tmp_path)
    started = []

    class Kept(bench.LibvirtHost):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            started.append(self)

    monkeypatch.setattr(bench, "LibvirtHost", Kept)
    ours.start()
    ours.first_start()
    for host in started:
        conn = host.connection()
        assert conn is not ours.conn
        assert host.devices.events._watched is conn
        with pytest.raises(libvirt.libvirtError, match="invalid connection"):
            conn.isAlive()  # closed


def test_a_restart_finds_its_providers_as_placement_holds_them(
    tmp_path, monkeypatch
):
    """The service benchmark's restart is handed the providers the last
    run wrote (Nova reads them back from Placement before its first
    refresh), every inventory and trait as they were; a first start
    finds none but the compute node's."""
    ours = _service(tmp_path)
    found = []

    class Told(bench.VgpuDriver):
        def update_provider_tree(self, tree, nodename, allocations=None):
            found.append([tree.data(key) for key in tree.get_provider_uuids()])
            return super().update_provider_tree(tree, nodename, allocations)

    monkeypatch.setattr(bench, "VgpuDriver", Told)
    ours.start()
    ours.first_start()
    written = [ours.tree.data(key) for key in ours.tree.get_provider_uuids()]
    assert len(written) == 3  # the compute node and its two pGPUs
    assert found[0] == written
    assert [data.name for data in found[1]] == ["bench"]
