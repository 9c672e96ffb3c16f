"""The fixtures of the Nova integration's tests: Nova's CONF set as a
nova.conf would set it and an adapter on a libvirt test-driver host.
Nova is imported in each fixture: a test that uses one is skipped where
Nova cannot be imported (run them with tools/nova-functional)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests import helpers
from tests.nova.nova_host import NODE

REASON = "needs Nova with its dependencies: run tools/nova-functional"


@contextlib.contextmanager
def _adapter_on(
    tmp_path: Any, host: str, addresses: dict[str, list[str]]
) -> Iterator[tuple[Any, Any, str]]:
    """(adapter, Nova's provider tree, its root's uuid) on the shipped
    ``host``, Nova's CONF enabling each type of ``addresses`` on those
    devices; the connection closed and CONF restored after."""
    nova_conf = pytest.importorskip("nova.conf", reason=REASON)
    provider_tree = pytest.importorskip(
        "nova.compute.provider_tree", reason=REASON
    )
    import libvirt
    from oslo_config import fixture as config_fixture

    from vgpu_driver import conf as vconf
    from vgpu_driver.nova.adapter import NovaAdapter
    from vgpu_driver.sim import description as hostdesc

    CONF = nova_conf.CONF
    conf = config_fixture.Config(CONF)
    conf.setUp()
    conf.config(enabled_mdev_types=list(addresses), group="devices")
    nova_conf.devices.register_dynamic_opts(CONF)
    for type_id, devices in addresses.items():
        conf.config(device_addresses=devices, group=f"mdev_{type_id}")
    uri, sysfs = hostdesc.materialize(helpers.load(host), tmp_path)
    connection = libvirt.open(uri)
    vconf.register_opts(CONF)  # as the integration does, idempotent
    conf.config(state_path=str(tmp_path / "state"), group="devices")
    adapter = NovaAdapter(CONF, NODE, lambda: connection, sysfs_root=sysfs)
    tree = provider_tree.ProviderTree()
    root = str(uuid.uuid4())
    tree.new_root(NODE, root)
    try:
        yield adapter, tree, root
    finally:
        connection.close()
        conf.cleanUp()


@pytest.fixture
def nova(tmp_path):
    """Nova's CONF set as m10's nova.conf would set it, the host on the
    test driver, and an adapter with the caller's connection."""
    with _adapter_on(
        tmp_path,
        "m10",
        {
            "nvidia-35": ["0000:84:00.0", "0000:85:00.0"],
            "nvidia-36": ["0000:86:00.0"],
        },
    ) as found:
        yield found


@pytest.fixture
def sriov(tmp_path):
    """Nova's CONF and an adapter on the L40 host: an NVIDIA SR-IOV card
    whose VFs carry one vGPU each (one VF in use by a guest)."""
    yield from _sriov_driver(
        tmp_path, "l40-sriov", "nvidia-1150", "0000:41:00.0"
    )


@pytest.fixture
def mxgpu(tmp_path):
    """The same on the AMD MxGPU host: VFs given as they are."""
    yield from _sriov_driver(
        tmp_path, "amd-mxgpu", "vf-1002-692f", "0000:61:00.0"
    )


def _sriov_driver(tmp_path, host, type_id, address):
    """(the integration's Nova driver, its adapter, the tree reported
    once) on ``host`` with ``type_id`` enabled on ``address``."""
    with _adapter_on(tmp_path, host, {type_id: [address]}) as found:
        adapter, tree, _root = found
        adapter.update_provider_tree(tree, NODE)
        from nova.virt import fake

        from vgpu_driver.nova import driver as vgpu_nova

        driver = vgpu_nova.LibvirtDriver(fake.FakeVirtAPI(), False)
        driver._vgpu_adapter = adapter
        yield driver, adapter, tree
