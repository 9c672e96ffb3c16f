"""vgpu_driver.nova with Nova's real CONF and ProviderTree on a libvirt
test-driver host (run by tools/nova-functional, in a virtualenv with Nova
and its dependencies; skipped where Nova cannot be imported)."""

from __future__ import annotations

import uuid

import pytest

provider_tree = pytest.importorskip(
    "nova.compute.provider_tree",
    reason="needs Nova with its dependencies: run tools/nova-functional",
)
nova_conf = pytest.importorskip("nova.conf")

import libvirt  # noqa: E402
from nova import exception as nova_exception  # noqa: E402
from oslo_config import fixture as config_fixture  # noqa: E402

from tests import helpers, placement_helpers  # noqa: E402
from tests.nova.nova_host import (  # noqa: E402
    FREE_ON_86,
    NODE,
    children,
)
from vgpu_driver import conf as vconf  # noqa: E402
from vgpu_driver import exception as vgpu_exception  # noqa: E402
from vgpu_driver.nova.adapter import NovaAdapter  # noqa: E402
from vgpu_driver.sim import description as hostdesc  # noqa: E402

CONF = nova_conf.CONF


def test_nova_s_provider_tree_gets_one_child_per_pgpu(nova):
    adapter, tree, root = nova
    adapter.update_provider_tree(tree, NODE)
    found = children(tree, root)
    assert sorted(found) == [
        f"{NODE}_pci_0000_84_00_0",
        f"{NODE}_pci_0000_85_00_0",
        f"{NODE}_pci_0000_86_00_0",
    ]  # 87 has no enabled type: no provider
    pgpu84 = found[f"{NODE}_pci_0000_84_00_0"]
    assert pgpu84.inventory["VGPU"]["total"] == 16
    assert "OWNER_NOVA" in pgpu84.traits
    assert "CUSTOM_NVIDIA_35" in pgpu84.traits
    assert found[f"{NODE}_pci_0000_86_00_0"].inventory["VGPU"]["total"] == 16
    # Nova's _get_gpu_inventories shape, from the same pass
    assert adapter.gpu_inventories()["pci_0000_86_00_0"]["total"] == 16


def test_a_free_mdev_is_bound_from_nova_s_allocation_shape(nova):
    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    rp = tree.data(f"{NODE}_pci_0000_86_00_0").uuid
    instance = str(uuid.uuid4())
    mdevs = adapter.allocate(instance, {rp: {"resources": {"VGPU": 1}}})
    assert mdevs == [FREE_ON_86]
    # claimed for it until its guest is defined, and its type is known
    assert adapter.assigned(instance) == {FREE_ON_86: instance}
    assert adapter.mdev_types(mdevs) == {FREE_ON_86: "nvidia-36"}


def test_a_bind_nova_cannot_satisfy_is_a_reschedule(nova):
    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    with pytest.raises(nova_exception.ComputeResourcesUnavailable):
        adapter.allocate(
            str(uuid.uuid4()),
            {str(uuid.uuid4()): {"resources": {"VGPU": 1}}},
        )


def test_vgpu_on_the_compute_node_asks_nova_for_a_reshape(nova):
    adapter, tree, root = nova
    tree.update_inventory(
        NODE, {"VGPU": {"total": 2, "max_unit": 2}, "VCPU": {"total": 8}}
    )
    with pytest.raises(nova_exception.ReshapeNeeded):
        adapter.update_provider_tree(tree, NODE)
    guest = "9cfe7035-3a5d-5acd-a42e-254b7382cfa5"  # has 9d742dd5 on 84
    allocations = {
        guest: {"allocations": {root: {"resources": {"VGPU": 1, "VCPU": 2}}}}
    }
    adapter.update_provider_tree(tree, NODE, allocations=allocations)
    assert "VGPU" not in tree.data(NODE).inventory
    moved = allocations[guest]["allocations"]
    rp84 = tree.data(f"{NODE}_pci_0000_84_00_0").uuid
    assert moved == {
        root: {"resources": {"VCPU": 2}},
        rp84: {"resources": {"VGPU": 1}},
    }


def test_nova_s_start_up_drops_bind_claims_of_instances_it_no_longer_has(
    nova, monkeypatch
):
    """A bind made just before nova-compute died, for an instance deleted
    while it was down: Nova's init_host (through the hook it calls) asks
    Nova which instances this host has, and the orphan claim is dropped;
    an incoming live migration's claim stays."""
    from nova import objects
    from nova.virt import fake

    from vgpu_driver.nova import driver as vgpu_nova

    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    rp = tree.data(f"{NODE}_pci_0000_86_00_0").uuid
    alloc = {rp: {"resources": {"VGPU": 1}}}
    kept, gone = str(uuid.uuid4()), str(uuid.uuid4())
    adapter.allocate(kept, alloc)
    adapter.allocate(gone, alloc)
    adapter.claim_for_live_migration("incoming", {"src": "nvidia-36"}, alloc)
    asked = []

    def get_uuids_by_host(context, host):
        asked.append(host)
        return [kept]

    monkeypatch.setattr(
        objects.InstanceList, "get_uuids_by_host", get_uuids_by_host
    )
    driver = vgpu_nova.LibvirtDriver(fake.FakeVirtAPI(), False)
    driver._vgpu_adapter = adapter
    driver._start_inactive_mediated_devices()  # as Nova's init_host does
    assert asked == [CONF.host]
    owners = {c["instance"] for c in adapter.driver.binder.claims().values()}
    assert owners == {kept, "incoming"}


def test_lost_claims_hold_a_spawn_in_flight_read_from_placement(
    nova, tmp_path
):
    """nova-compute starts and finds its claims record damaged: the
    adapter reads Placement through Nova's [placement] and holds the free
    mdevs of the pGPU where a consumer without a guest holds a vGPU."""
    from keystoneauth1 import loading as ks_loading

    from vgpu_driver.placement.client import client_from_conf
    from vgpu_driver.placement.server import EmbeddedPlacement
    from vgpu_driver.placement.sync import PlacementSync

    adapter, _tree, _root = nova
    with EmbeddedPlacement(tmp_path / "placement") as placement:
        options = ks_loading.get_auth_plugin_conf_options("admin_token")
        CONF.register_opts(options, group="placement")
        overrides = {
            "auth_type": "admin_token",
            "token": "admin",
            "endpoint": placement.url,
            "endpoint_override": placement.url,
        }
        for name, value in overrides.items():
            CONF.set_override(name, value, group="placement")
        try:
            client = client_from_conf(CONF)
            syncer = PlacementSync(client, NODE)
            tree = syncer.read_tree()
            adapter.update_provider_tree(tree, NODE)
            syncer.flush(tree)
            rp = tree.data(f"{NODE}_pci_0000_86_00_0").uuid
            spawning = str(uuid.uuid4())
            placement_helpers.allocate(client, spawning, rp)
            # claims intact: a start holds nothing, Placement not asked
            intact = adapter.init_host([])
            adapter.driver.state.path("claims").write_text("{ damaged")
            done = adapter.init_host([])
            free_when_held = adapter.free_mdevs(None)
        finally:
            for name in overrides:
                CONF.clear_override(name, group="placement")
    assert "held_in_flight" not in intact
    # lost again with Placement gone: nothing held, said as an empty list
    adapter.driver.state.path("claims").write_text("{ damaged")
    again = adapter.init_host([])
    assert again["records_moved_aside"] and again["held_in_flight"] == []
    assert done["records_moved_aside"]
    assert done["held_in_flight"] == [f"{spawning}: {FREE_ON_86}"]
    assert FREE_ON_86 not in free_when_held
    # (lost again with Placement gone: nothing holds it, as said)
    assert FREE_ON_86 in adapter.free_mdevs(None)


def test_nova_s_own_pci_passthrough_devices_are_never_reported_as_mdevs(nova):
    """A guest with a PCI device Nova passed through (a NIC, not a VF of
    a vGPU card) has that device reported by Nova, not by the library."""
    from vgpu_driver.model.device import Guest

    adapter, _tree, _root = nova
    instance = str(uuid.uuid4())
    nic = "0000:3b:00.1"
    adapter.driver.discover()  # every guest read once
    adapter.driver.host.note_guest(
        Guest(instance, "instance-000000aa", (FREE_ON_86,), (nic,))
    )
    adapter.driver.discover()  # the view takes the guest in
    assert adapter.assigned(instance) == {FREE_ON_86: instance}
    assert nic not in adapter.assigned()
    assert adapter.vfs_of(instance) == []


def test_allocate_mdevs_outside_a_bind_keeps_nova_s_contract(nova):
    """Nova's ``_allocate_mdevs`` returns [] for allocations without a
    device class, whoever calls it; with device units and no instance
    being built it refuses rather than guess whose they are."""
    from nova.virt import fake

    from vgpu_driver.nova import driver as vgpu_nova

    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    driver = vgpu_nova.LibvirtDriver(fake.FakeVirtAPI(), False)
    driver._vgpu_adapter = adapter
    rp = tree.data(f"{NODE}_pci_0000_86_00_0").uuid
    assert driver._allocate_mdevs({rp: {"resources": {"VCPU": 2}}}) == []
    assert driver._allocate_mdevs({}) == []
    with pytest.raises(RuntimeError, match="outside spawn"):
        driver._allocate_mdevs({rp: {"resources": {"VGPU": 1}}})


def test_a_reshape_finding_device_units_off_the_old_providers_fails(nova):
    """Nova's own reshape sanity check: before the move, VGPU units are
    on the compute node's provider only; one elsewhere on the tree is a
    ReshapeFailed naming it, and nothing is moved."""
    adapter, tree, root = nova
    adapter.update_provider_tree(tree, NODE)
    rp84 = tree.data(f"{NODE}_pci_0000_84_00_0").uuid
    tree.update_inventory(
        NODE, {"VGPU": {"total": 2, "max_unit": 2}, "VCPU": {"total": 8}}
    )
    guest = "9cfe7035-3a5d-5acd-a42e-254b7382cfa5"
    allocations = {
        guest: {
            "allocations": {
                root: {"resources": {"VGPU": 1}},
                rp84: {"resources": {"VGPU": 1}},
            }
        }
    }
    before = {k: dict(v) for k, v in allocations[guest]["allocations"].items()}
    with pytest.raises(
        nova_exception.ReshapeFailed, match=rp84[:0] + "not one"
    ):
        adapter.update_provider_tree(tree, NODE, allocations=allocations)
    assert allocations[guest]["allocations"] == before
    assert "VGPU" in tree.data(NODE).inventory


def test_nova_compute_itself_serves_the_metrics_when_asked(tmp_path):
    """[devices] metrics_listen: the adapter Nova's driver makes serves
    the device metrics over HTTP (a real scrape)."""
    import urllib.request

    conf = config_fixture.Config(CONF)
    conf.setUp()
    try:
        conf.config(enabled_mdev_types=["nvidia-36"], group="devices")
        nova_conf.devices.register_dynamic_opts(CONF)
        uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path)
        connection = libvirt.open(uri)
        vconf.register_opts(CONF)
        conf.config(state_path=str(tmp_path / "state"), group="devices")
        conf.config(metrics_listen="127.0.0.1:0", group="devices")
        adapter = NovaAdapter(CONF, NODE, lambda: connection, sysfs_root=sysfs)
        tree = provider_tree.ProviderTree()
        tree.new_root(NODE, str(uuid.uuid4()))
        adapter.update_provider_tree(tree, NODE)
        url = f"http://{adapter.driver.served_at}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        assert "vgpu_driver_provider_total{" in text
        assert "vgpu_driver_refresh_seconds_count 1.0" in text
        # no address: this host's loopback, not every interface
        conf.config(metrics_listen=":0", group="devices")
        local = NovaAdapter(CONF, NODE, lambda: connection, sysfs_root=sysfs)
        assert local.driver.served_at.startswith("127.0.0.1:")
        # an address without its port: nova-compute stops, told which
        # option and what to write
        conf.config(metrics_listen="127.0.0.1", group="devices")
        with pytest.raises(vgpu_exception.ConfigInvalid) as caught:
            NovaAdapter(CONF, NODE, lambda: connection, sysfs_root=sysfs)
        assert "metrics_listen" in str(caught.value)
        assert "ADDRESS:PORT" in str(caught.value)
        connection.close()
    finally:
        conf.cleanUp()


def test_with_no_vgpu_the_queries_answer_as_nova_s_do(tmp_path):
    """On a host with no mediated device and no type enabled, Nova's
    answers to its own callers: nothing assigned, nothing free, no type,
    no device for an allocation without a device class."""
    from nova.virt import fake

    from vgpu_driver.nova import driver as vgpu_nova

    conf = config_fixture.Config(CONF)
    conf.setUp()
    try:
        conf.config(enabled_mdev_types=[], group="devices")
        description = hostdesc.parse('{"parents": []}', "empty")
        uri, sysfs = hostdesc.materialize(description, tmp_path)
        connection = libvirt.open(uri)
        vconf.register_opts(CONF)
        conf.config(state_path=str(tmp_path / "state"), group="devices")
        adapter = NovaAdapter(CONF, NODE, lambda: connection, sysfs_root=sysfs)
        driver = vgpu_nova.LibvirtDriver(fake.FakeVirtAPI(), False)
        driver._vgpu_adapter = adapter
        assert driver._get_all_assigned_mediated_devices() == {}
        assert driver._get_existing_mdevs_not_assigned(None) == set()
        assert driver._get_mdev_types_from_uuids([]) == {}
        assert driver._allocate_mdevs({}) == []
        assert (
            driver._allocate_mdevs(
                {str(uuid.uuid4()): {"resources": {"VCPU": 2}}}
            )
            == []
        )
        assert driver._get_gpu_inventories() == {}
        connection.close()
    finally:
        conf.cleanUp()


def test_nova_beside_the_mdev_rows_sees_the_other_manager_s_mdev(
    tmp_path, monkeypatch
):
    """benchmarks.churn's mdev rows time Nova's periodic on the same
    modelled connection after each change: Nova's own driver lists the
    mdev another manager made, then not once it is gone."""
    from benchmarks import changes

    monkeypatch.setattr(changes, "RUNS", [2])
    found = changes.mdev_churn((1, 4, 4), tmp_path)
    listed = found["nova_listed"]
    assert len(found["nova"]) == len(listed) == 4
    made, gone = listed[0::2], listed[1::2]
    assert all(m == g + 1 for m, g in zip(made, gone, strict=True))


def test_nova_s_graceful_stop_writes_the_records_as_snapshots(nova):
    """nova-compute's stop calls the driver's ``cleanup_host``: the
    library's claims are written whole as a snapshot first (a release
    before the journals then reads them), then Nova's own cleanup runs;
    a failure of the first does not keep Nova's from running."""
    import json
    from pathlib import Path

    from nova.virt import fake

    from vgpu_driver.nova import driver as vgpu_nova

    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    rp = tree.data(f"{NODE}_pci_0000_86_00_0").uuid
    instance = str(uuid.uuid4())
    [mdev] = adapter.allocate(instance, {rp: {"resources": {"VGPU": 1}}})
    state = Path(adapter.driver.binder.ledger.record.state.directory)
    driver = vgpu_nova.LibvirtDriver(fake.FakeVirtAPI(), False)
    driver._vgpu_adapter = adapter
    cleaned = []
    driver._host.cleanup = lambda: cleaned.append("nova")
    driver.cleanup_host(NODE)
    assert cleaned == ["nova"]
    assert (state / "claims.journal").stat().st_size == 0
    claims = json.loads((state / "claims.json").read_text())["claims"]
    assert claims[mdev]["instance"] == instance

    def broken() -> list[str]:
        raise RuntimeError("records unreachable")

    adapter.cleanup_host = broken
    driver.cleanup_host(NODE)
    assert cleaned == ["nova", "nova"]
