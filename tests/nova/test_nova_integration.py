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

from tests import helpers  # noqa: E402
from vgpu_driver import conf as vconf  # noqa: E402
from vgpu_driver import exception as vgpu_exception  # noqa: E402
from vgpu_driver.nova.adapter import NovaAdapter  # noqa: E402
from vgpu_driver.sim import description as hostdesc  # noqa: E402

CONF = nova_conf.CONF
NODE = "compute7"
FREE_ON_86 = "386818c0-9f18-5b12-8c04-386dbef1b1ab"  # m10: no guest has it


@pytest.fixture
def nova(tmp_path):
    """Nova's CONF set as m10's nova.conf would set it, the host on the
    test driver, and an adapter with the caller's connection."""
    conf = config_fixture.Config(CONF)
    conf.setUp()
    conf.config(enabled_mdev_types=["nvidia-35", "nvidia-36"], group="devices")
    nova_conf.devices.register_dynamic_opts(CONF)
    conf.config(
        device_addresses=["0000:84:00.0", "0000:85:00.0"],
        group="mdev_nvidia-35",
    )
    conf.config(device_addresses=["0000:86:00.0"], group="mdev_nvidia-36")
    uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path)
    connection = libvirt.open(uri)
    vconf.register_opts(CONF)  # as the integration does, idempotent
    conf.config(state_path=str(tmp_path / "state"), group="devices")
    adapter = NovaAdapter(CONF, NODE, lambda: connection, sysfs_root=sysfs)
    tree = provider_tree.ProviderTree()
    root = str(uuid.uuid4())
    tree.new_root(NODE, root)
    yield adapter, tree, root
    connection.close()
    conf.cleanUp()


def children(tree, root):
    return {
        tree.data(u).name: tree.data(u)
        for u in tree.get_provider_uuids(root)
        if u != root
    }


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
    assert pgpu84.inventory["VGPU"]["total"] == 4
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


def test_a_live_migration_of_a_type_not_enabled_is_refused_as_nova_does(nova):
    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    with pytest.raises(nova_exception.MigrationPreCheckError) as caught:
        adapter.claim_for_live_migration(
            "i-1", {str(uuid.uuid4()): "nvidia-11"}, {}
        )
    assert "Source mdev types ['nvidia-11'] are not supported" in str(
        caught.value
    )
    # one of two types enabled here is not enough
    both = {str(uuid.uuid4()): "nvidia-11", str(uuid.uuid4()): "nvidia-36"}
    with pytest.raises(nova_exception.MigrationPreCheckError) as caught:
        adapter.claim_for_live_migration("i-1", both, {})
    assert "['nvidia-11', 'nvidia-36'] are not supported" in str(caught.value)


def _run(*args):
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    found = subprocess.run(
        [*args],
        capture_output=True,
        text=True,
        cwd="/tmp",
        env={**os.environ, "PATH": path},
        timeout=120,
    )
    return found.returncode, found.stdout + found.stderr


def test_stock_nova_loads_the_driver_by_its_compute_driver_name():
    """Nova's own loader, as the distribution's nova-compute calls it,
    finds ``vgpu_libvirt.LibvirtDriver`` under ``nova.virt`` (the module
    the wheel installs there) with nothing of this package imported or
    called first."""
    import sys

    code, out = _run(
        sys.executable,
        "-c",
        "import sys\n"
        "import nova.cmd.compute\n"  # Nova's own import order
        "from nova.virt import driver, fake\n"
        "assert not [m for m in sys.modules if m.startswith('vgpu_driver')]\n"
        "found = driver.load_compute_driver(\n"
        "    fake.FakeVirtAPI(), 'vgpu_libvirt.LibvirtDriver')\n"
        "print(type(found).__module__, type(found).__name__)\n",
    )
    assert code == 0, out
    assert "vgpu_driver.nova.driver LibvirtDriver" in out


def _nova_driver_over(nova):
    """The integration's Nova driver, its adapter the one on the test
    driver's host (its tree reported once), and the events Nova queues
    for itself."""
    from nova.virt import fake

    from vgpu_driver.nova import driver as vgpu_nova

    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    driver = vgpu_nova.LibvirtDriver(fake.FakeVirtAPI(), False)
    driver._vgpu_adapter = adapter
    queued = []
    driver._host._event_handler._queue_event = queued.append
    return adapter, driver, queued


def test_nova_s_lifecycle_callback_tells_the_library_of_a_hand_made_guest(
    nova,
):
    """The callback Nova's Host registers on each of its connections:
    a guest defined by hand (``virsh define``) takes its mdev off the free
    list, its undefine puts it back, and Nova still gets its own events;
    a transient guest (``virsh create``) the same through its STARTED and
    STOPPED events."""
    from nova.virt import event as virtevent

    adapter, driver, queued = _nova_driver_over(nova)
    callback = driver._host._event_lifecycle_callback  # what Nova registers
    conn = adapter.driver.host.connection()
    assert FREE_ON_86 in adapter.free_mdevs(None)
    domain = conn.defineXML(
        "<domain type='test'><name>by-hand</name>"
        "<uuid>77777777-0000-0000-0000-000000000002</uuid>"
        "<memory>65536</memory><os><type>hvm</type></os><devices>"
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>"
        f"<source><address uuid='{FREE_ON_86}'/></source></hostdev>"
        "</devices></domain>"
    )
    callback(conn, domain, libvirt.VIR_DOMAIN_EVENT_DEFINED, 0, driver._host)
    assert FREE_ON_86 not in adapter.free_mdevs(None)
    callback(conn, domain, libvirt.VIR_DOMAIN_EVENT_STARTED, 0, driver._host)
    assert [e.transition for e in queued] == [
        virtevent.EVENT_LIFECYCLE_STARTED
    ]
    domain.undefine()
    callback(conn, domain, libvirt.VIR_DOMAIN_EVENT_UNDEFINED, 0, driver._host)
    assert FREE_ON_86 in adapter.free_mdevs(None)
    # a transient guest (virsh create) is never defined: STARTED takes
    # its mdev off the free list, STOPPED (it is gone) puts it back
    transient = conn.createXML(
        "<domain type='test'><name>transient</name>"
        "<uuid>77777777-0000-0000-0000-000000000003</uuid>"
        "<memory>65536</memory><os><type>hvm</type></os><devices>"
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>"
        f"<source><address uuid='{FREE_ON_86}'/></source></hostdev>"
        "</devices></domain>",
        0,
    )
    callback(
        conn, transient, libvirt.VIR_DOMAIN_EVENT_STARTED, 0, driver._host
    )
    assert FREE_ON_86 not in adapter.free_mdevs(None)
    transient.destroy()
    callback(
        conn, transient, libvirt.VIR_DOMAIN_EVENT_STOPPED, 0, driver._host
    )
    assert FREE_ON_86 in adapter.free_mdevs(None)


def test_nova_s_connections_tell_the_library_of_devices_hot_plugged(nova):
    """On each connection Nova's Host makes: a device plugged into a
    running guest by hand (DEVICE_ADDED, which Nova does not register)
    takes its mdev off the free list, one unplugged (DEVICE_REMOVED,
    Nova's callback) puts it back, and Nova still gets its own event.
    The test driver cannot hot-plug: the guest is defined again with and
    without the mdev, and the registered callbacks are called as
    libvirt's event thread would."""
    from nova.virt.libvirt import event as libvirtevent

    adapter, driver, queued = _nova_driver_over(nova)
    conn = helpers.RecordingConnection(adapter.driver.host.connection())
    driver._host._connect = lambda uri, read_only: conn
    assert driver._host._get_new_connection() is conn
    assert FREE_ON_86 in adapter.free_mdevs(None)  # every guest read
    guest = (
        "<domain type='test'><name>hot-plugged</name>"
        "<uuid>77777777-0000-0000-0000-000000000004</uuid>"
        "<memory>65536</memory><os><type>hvm</type></os><devices>{}"
        "</devices></domain>"
    )
    domain = conn.defineXML(
        guest.format(
            "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>"
            f"<source><address uuid='{FREE_ON_86}'/></source></hostdev>"
        )
    )
    assert FREE_ON_86 in adapter.free_mdevs(None)  # no event yet
    conn.callbacks[libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_ADDED](
        conn, domain, "hostdev0", None
    )
    assert FREE_ON_86 not in adapter.free_mdevs(None)
    conn.defineXML(guest.format(""))
    conn.callbacks[libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED](
        conn, domain, "hostdev0", driver._host
    )
    assert FREE_ON_86 in adapter.free_mdevs(None)
    assert [type(e) for e in queued] == [libvirtevent.DeviceRemovedEvent]


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


@pytest.fixture
def sriov(tmp_path):
    """Nova's CONF and an adapter on the L40 host: an NVIDIA SR-IOV card
    whose VFs carry one vGPU each (one VF in use by a guest)."""
    yield from _sriov_driver(
        tmp_path, "l40-sriov", "nvidia-1157", "0000:41:00.0"
    )


@pytest.fixture
def mxgpu(tmp_path):
    """The same on the AMD MxGPU host: VFs given as they are."""
    yield from _sriov_driver(
        tmp_path, "amd-mxgpu", "vf-1002-692f", "0000:61:00.0"
    )


def _sriov_driver(tmp_path, host, type_id, address):
    conf = config_fixture.Config(CONF)
    conf.setUp()
    conf.config(enabled_mdev_types=[type_id], group="devices")
    nova_conf.devices.register_dynamic_opts(CONF)
    conf.config(device_addresses=[address], group=f"mdev_{type_id}")
    uri, sysfs = hostdesc.materialize(helpers.load(host), tmp_path)
    connection = libvirt.open(uri)
    vconf.register_opts(CONF)
    conf.config(state_path=str(tmp_path / "state"), group="devices")
    adapter = NovaAdapter(CONF, NODE, lambda: connection, sysfs_root=sysfs)
    tree = provider_tree.ProviderTree()
    tree.new_root(NODE, str(uuid.uuid4()))
    adapter.update_provider_tree(tree, NODE)
    from nova.virt import fake

    from vgpu_driver.nova import driver as vgpu_nova

    driver = vgpu_nova.LibvirtDriver(fake.FakeVirtAPI(), False)
    driver._vgpu_adapter = adapter
    yield driver, adapter, tree
    connection.close()
    conf.cleanUp()


def test_an_sriov_vgpu_reaches_nova_s_guest_config_as_a_vf(sriov):
    from nova.virt.libvirt import config as vconfig

    driver, adapter, tree = sriov
    rp = tree.data(f"{NODE}_pci_0000_41_00_0").uuid
    instance = str(uuid.uuid4())
    [vf] = adapter.allocate(instance, {rp: {"resources": {"VGPU": 1}}})
    assert vf.startswith("0000:41:") and vf != "0000:41:00.4"  # in use
    guest = vconfig.LibvirtConfigGuest()
    driver._guest_add_mdevs(guest, [vf])  # as Nova's _get_guest_config
    [hostdev] = guest.devices
    assert isinstance(hostdev, vconfig.LibvirtConfigGuestHostdevPCI)
    xml = hostdev.to_xml()
    assert 'type="pci"' in xml or "type='pci'" in xml
    assert 'managed="no"' in xml or "managed='no'" in xml
    bus, function = vf.split(":")[1], vf.split(".")[1]
    assert f'bus="0x{bus}"' in xml and f'function="0x{function}"' in xml
    # a hard reboot, a rescue or a revert finds it again, and Nova's own
    # PCI devices are never taken for it
    assert driver._get_all_assigned_mediated_devices(
        type("I", (), {"uuid": instance})
    ) == {vf: instance}
    in_use = "cf2c2652-0777-5ada-aed9-f00b6c76566b"  # has 0000:41:00.4
    assert adapter.vfs_of(in_use) == ["0000:41:00.4"]


def test_an_amd_vf_reaches_nova_s_guest_config_managed_by_libvirt(mxgpu):
    """A VF given as it is: libvirt binds it to vfio-pci (managed)."""
    from nova.virt.libvirt import config as vconfig

    driver, adapter, tree = mxgpu
    rp = tree.data(f"{NODE}_pci_0000_61_00_0").uuid
    instance = str(uuid.uuid4())
    [vf] = adapter.allocate(instance, {rp: {"resources": {"VGPU": 1}}})
    assert vf == "0000:61:02.0"
    guest = vconfig.LibvirtConfigGuest()
    driver._guest_add_mdevs(guest, [vf])
    [hostdev] = guest.devices
    xml = hostdev.to_xml()
    assert 'managed="yes"' in xml or "managed='yes'" in xml
    assert driver._get_all_assigned_mediated_devices(
        type("I", (), {"uuid": instance})
    ) == {vf: instance}


def test_suspend_detaches_the_vf_and_resume_finds_it_again(sriov):
    from nova.virt.libvirt import config as vconfig

    driver, _adapter, _tree = sriov
    guest_config = vconfig.LibvirtConfigGuest()
    guest_config.virt_type, guest_config.memory, guest_config.vcpus = (
        "kvm",
        1024,
        1,
    )
    guest_config.name = "instance-00000051"
    guest_config.uuid = "cf2c2652-0777-5ada-aed9-f00b6c76566b"
    guest_config.os_type = "hvm"
    driver._guest_add_mdevs(guest_config, ["0000:41:00.4"])
    nova_pci = vconfig.LibvirtConfigGuestHostdevPCI()
    nova_pci.domain, nova_pci.bus, nova_pci.slot, nova_pci.function = (
        "0000",
        "81",
        "00",
        "1",
    )  # a NIC VF of Nova's [pci] passthrough
    guest_config.add_device(nova_pci)
    xml = guest_config.to_xml()

    class Guest:
        detached = []

        def get_all_devices(self, devtype=None):
            return [d for d in guest_config.devices if isinstance(d, devtype)]

        def detach_device(self, device, live=False):
            self.detached.append((device.bus, live))

    guest = Guest()
    driver._detach_mediated_devices(guest)
    assert guest.detached == [("41", True)]  # the vGPU VF, not Nova's NIC
    again = driver._get_mdevs_from_guest_config(xml)
    assert [(d.bus, d.function) for d in again] == [("0x41", "0x4")]


def test_live_migration_of_an_sriov_vgpu_is_refused_at_the_source(sriov):
    driver, _adapter, _tree = sriov
    instance = type("I", (), {"uuid": "cf2c2652-0777-5ada-aed9-f00b6c76566b"})
    with pytest.raises(nova_exception.MigrationPreCheckError) as caught:
        driver.check_can_live_migrate_source(None, instance, object())
    assert "0000:41:00.4" in str(caught.value)


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
            helpers.allocate(client, spawning, rp)
            # claims intact: a start holds nothing, Placement not asked
            intact = adapter.init_host([])
            adapter.driver.state.path("claims").write_text("{ damaged")
            done = adapter.init_host([])
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
    assert FREE_ON_86 not in adapter.free_mdevs(None)


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


def test_a_failing_destination_check_rolls_the_claims_back(nova, monkeypatch):
    """The library claims the destination's mdevs, then Nova's own
    destination checks refuse the migration: the claims go again."""
    from nova.objects import migrate_data as nova_migrate_data
    from nova.virt import fake
    from nova.virt.libvirt import driver as nova_driver

    from vgpu_driver.nova import driver as vgpu_nova

    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    driver = vgpu_nova.LibvirtDriver(fake.FakeVirtAPI(), False)
    driver._vgpu_adapter = adapter

    def refuse(*_args, **_kwargs):
        raise nova_exception.MigrationPreCheckError(reason="a NUMA check")

    monkeypatch.setattr(
        nova_driver.LibvirtDriver, "check_source_migrate_data_at_dest", refuse
    )
    source = {str(uuid.uuid4()): "nvidia-36"}
    data = nova_migrate_data.LibvirtLiveMigrateData(
        source_mdev_types=dict(source)
    )
    instance = type("Instance", (), {"uuid": str(uuid.uuid4())})()
    rp = tree.data(f"{NODE}_pci_0000_86_00_0").uuid
    with pytest.raises(nova_exception.MigrationPreCheckError):
        driver.check_source_migrate_data_at_dest(
            None, instance, data, None, None, {rp: {"resources": {"VGPU": 1}}}
        )
    assert adapter.driver.binder.claims() == {}
    assert dict(data.source_mdev_types) == source


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


def test_a_live_migration_from_another_vgpu_host_driver_is_refused(
    nova, monkeypatch
):
    """The destination compares the source node's host-driver trait in
    Placement with its own; a different driver is Nova's
    MigrationPreCheckError naming both, and missing data never blocks."""
    from nova.scheduler.client import report

    from vgpu_driver.nova import moves

    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    mine = "CUSTOM_VGPU_HOST_NVIDIA_570_124_03"
    assert adapter.host_driver_traits() == {mine}

    class Answer:
        def __init__(self, body):
            self.body = body

        def __bool__(self):
            return True

        def json(self):
            return self.body

    def placement(traits):
        answers = {
            "/resource_providers?name=src": {
                "resource_providers": [{"uuid": "root"}]
            },
            "/resource_providers?in_tree=root": {
                "resource_providers": [{"uuid": "root"}, {"uuid": "gpu"}]
            },
            "/resource_providers/root/traits": {"traits": ["COMPUTE_NODE"]},
            "/resource_providers/gpu/traits": {"traits": traits},
        }

        class Client:
            def get(self, url, version=None, global_request_id=None):
                return Answer(answers[url])

        monkeypatch.setattr(report, "report_client_singleton", Client)

    class Migration:
        source_node = "src"

    placement(["CUSTOM_NVIDIA_35", "CUSTOM_VGPU_HOST_NVIDIA_550_54_16"])
    source = moves.source_driver_traits(None, Migration())
    with pytest.raises(nova_exception.MigrationPreCheckError) as raised:
        adapter.check_driver_compatible("inst-1", source)
    assert "550_54_16" in str(raised.value) and "570_124_03" in str(
        raised.value
    )
    placement([mine])
    adapter.check_driver_compatible(
        "inst-1", moves.source_driver_traits(None, Migration())
    )

    # through Nova's own entry point: refused before anything is claimed
    from nova.objects import migrate_data as nova_migrate_data
    from nova.virt import fake

    from vgpu_driver.nova import driver as vgpu_nova

    placement(["CUSTOM_VGPU_HOST_NVIDIA_550_54_16"])
    driver = vgpu_nova.LibvirtDriver(fake.FakeVirtAPI(), False)
    driver._vgpu_adapter = adapter
    data = nova_migrate_data.LibvirtLiveMigrateData(
        source_mdev_types={str(uuid.uuid4()): "nvidia-36"}
    )
    instance = type("Instance", (), {"uuid": str(uuid.uuid4())})()
    rp = tree.data(f"{NODE}_pci_0000_86_00_0").uuid
    with pytest.raises(nova_exception.MigrationPreCheckError, match="550_54"):
        driver.check_source_migrate_data_at_dest(
            None,
            instance,
            data,
            Migration(),
            None,
            {rp: {"resources": {"VGPU": 1}}},
        )
    assert adapter.driver.binder.claims() == {}

    def broken():
        raise RuntimeError("placement down")

    monkeypatch.setattr(report, "report_client_singleton", broken)
    assert moves.source_driver_traits(None, Migration()) == set()
    adapter.check_driver_compatible("inst-1", set())


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


def _overridden():
    """(class, name) of every Nova driver method this package overrides."""
    from nova.virt.libvirt import driver as nova_driver

    from vgpu_driver.nova import driver as vgpu_nova

    found = []
    for klass in vgpu_nova.LibvirtDriver.__mro__:
        if not klass.__module__.startswith("vgpu_driver"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("__") or not callable(value):
                continue
            if hasattr(nova_driver.LibvirtDriver, name):
                found.append((klass, name))
    return found


def test_every_overridden_nova_method_accepts_nova_s_arguments():
    """A caller of Nova's driver (Nova's compute manager, Nova's own
    other methods) can call each override as it calls Nova's: every
    argument Nova's method takes, positional or keyword, binds."""
    import inspect

    from nova.virt.libvirt import driver as nova_driver

    overridden = _overridden()
    assert len(overridden) >= 20  # the integration's whole surface
    for klass, name in overridden:
        theirs = inspect.signature(getattr(nova_driver.LibvirtDriver, name))
        ours = inspect.signature(getattr(klass, name))
        positional, keywords = [], {}
        for param in theirs.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            if param.kind == param.KEYWORD_ONLY:
                keywords[param.name] = object()
            elif param.default is param.empty:
                positional.append(object())
        ours.bind(*positional, **keywords)  # raises TypeError if not
        optional = [
            p.name
            for p in theirs.parameters.values()
            if p.default is not p.empty
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        ours.bind(*positional, **{n: object() for n in optional})


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


def test_a_destination_nvml_says_cannot_migrate_refuses(nova, monkeypatch):
    """NVML's pGPU virtualization capabilities without the migration bit
    on every GPU: the destination refuses with Nova's exception; with
    the bit, it publishes CUSTOM_VGPU_LIVE_MIGRATION and takes it."""
    import dataclasses

    from vgpu_driver.model.nvml import NvmlGpu, NvmlReading

    adapter, _tree, _root = nova
    real = adapter.driver.discover

    def with_caps(caps):
        said = NvmlReading(
            "550.54.16", (NvmlGpu("0000:86:00.0", virtualization_caps=caps),)
        )
        monkeypatch.setattr(
            adapter.driver,
            "discover",
            lambda **kw: dataclasses.replace(real(**kw), nvml=said),
        )

    with_caps(0)
    with pytest.raises(nova_exception.MigrationPreCheckError) as raised:
        adapter.check_driver_compatible("inst-1", set())
    assert "cannot live-migrate" in str(raised.value)
    assert "CUSTOM_VGPU_LIVE_MIGRATION" not in adapter.host_driver_traits()
    with_caps(1)
    adapter.check_driver_compatible("inst-1", set())
    assert "CUSTOM_VGPU_LIVE_MIGRATION" in adapter.host_driver_traits()


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


def test_cleanup_releases_the_devices_unless_a_hard_reboot_keeps_them(
    nova, monkeypatch
):
    """Nova's ``cleanup`` ends an instance's stay on the host (delete,
    move, shelve): its devices are released then. A hard reboot destroys
    the guest and cleans up too, then defines it again: its devices stay
    claimed for it throughout, so no other instance takes them in
    between. (Nova's own ``cleanup`` and ``_hard_reboot``, which need the
    whole libvirt driver, are stood in for by what they call of ours.)"""
    from nova.virt.libvirt import driver as nova_libvirt

    from vgpu_driver.nova.driver import LibvirtDriver
    from vgpu_driver.sim import guest_xml
    from vgpu_driver.sim.specs import GuestSpec

    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    rp = tree.data(f"{NODE}_pci_0000_86_00_0").uuid
    instance = type("Instance", (), {"uuid": str(uuid.uuid4())})()
    allocations = {rp: {"resources": {"VGPU": 1}}}
    assert adapter.allocate(instance.uuid, allocations) == [FREE_ON_86]
    spec = GuestSpec(uuid=instance.uuid, name="i1", mdevs=[FREE_ON_86])
    connection = adapter.driver.host.connection()
    connection.defineXML(guest_xml.render_guest(spec))
    adapter.driver.guest_defined(instance.uuid)

    def devices():
        return adapter.driver.instance_devices().get(
            instance.uuid, {"in_use": [], "claimed": []}
        )

    assert devices() == {"in_use": [FREE_ON_86], "claimed": []}
    between = []

    def nova_hard_reboot(self, context, instance, *a, **kw):
        # destroyed and undefined, then cleaned up, as Nova's does
        guest_xml.delete(connection.lookupByUUIDString(instance.uuid))
        adapter.driver.guest_undefined(instance.uuid)
        self.cleanup(context, instance)
        between.append(devices())
        return self._allocate_mdevs(allocations)  # its XML made again

    monkeypatch.setattr(
        nova_libvirt.LibvirtDriver, "cleanup", lambda *a, **kw: None
    )
    monkeypatch.setattr(
        nova_libvirt.LibvirtDriver, "_hard_reboot", nova_hard_reboot
    )
    driver = object.__new__(LibvirtDriver)
    driver._vgpu_adapter = adapter
    assert driver._hard_reboot(None, instance) == [FREE_ON_86]
    # held throughout: claimed while no guest has it
    assert between == [{"in_use": [], "claimed": [FREE_ON_86]}]
    assert FREE_ON_86 not in adapter.free_mdevs(None, None)
    # deleted before its guest is defined again: released
    driver.cleanup(None, instance)
    assert devices() == {"in_use": [], "claimed": []}
    assert FREE_ON_86 in adapter.free_mdevs(None, None)


def test_a_live_migration_without_mdevs_gets_nova_s_own_answer(
    nova, monkeypatch
):
    """An instance with no mdev live-migrated to this host: Nova's own
    destination check runs alone and its migrate data goes back to
    Nova's compute manager as it made it (nothing claimed here)."""
    from nova.objects import migrate_data as nova_migrate_data
    from nova.virt.libvirt import driver as nova_libvirt

    from vgpu_driver.nova.driver import LibvirtDriver

    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    answered = nova_migrate_data.LibvirtLiveMigrateData()
    asked = []

    def nova_check(self, ctxt, instance, migrate_data, *rest):
        asked.append(migrate_data)
        return answered

    monkeypatch.setattr(
        nova_libvirt.LibvirtDriver,
        "check_source_migrate_data_at_dest",
        nova_check,
    )
    driver = object.__new__(LibvirtDriver)
    driver._vgpu_adapter = adapter
    instance = type("Instance", (), {"uuid": str(uuid.uuid4())})()
    for source in (None, {}):  # an older source says none; a newer, empty
        sent = nova_migrate_data.LibvirtLiveMigrateData()
        if source is not None:
            sent.source_mdev_types = source
        got = driver.check_source_migrate_data_at_dest(
            None, instance, sent, None, None, {}
        )
        assert got is answered and asked[-1] is sent
    assert instance.uuid not in adapter.driver.instance_devices()


def test_events_before_the_library_starts_go_to_nova_alone(nova):
    """libvirt's events reach Nova's callbacks before the library's
    adapter exists (its first scan reads every guest): Nova gets them,
    nothing is raised in libvirt's event thread. Once it exists, an
    event the library does not follow (a guest suspended) is Nova's
    alone."""
    from nova.virt import event as virtevent

    adapter, driver, queued = _nova_driver_over(nova)
    driver._vgpu_adapter = None  # not made yet
    conn = adapter.driver.host.connection()
    domain = conn.lookupByName("instance-00000021")
    callback = driver._host._event_lifecycle_callback
    callback(conn, domain, libvirt.VIR_DOMAIN_EVENT_STARTED, 0, driver._host)
    driver._vgpu_device_event(conn, domain, "hostdev0", None)
    assert [e.transition for e in queued] == [
        virtevent.EVENT_LIFECYCLE_STARTED
    ]
    told = []
    adapter.domain_event = lambda uuid, defined: told.append(uuid)
    driver._vgpu_adapter = adapter
    callback(conn, domain, libvirt.VIR_DOMAIN_EVENT_SUSPENDED, 0, driver._host)
    assert told == []
    callback(conn, domain, libvirt.VIR_DOMAIN_EVENT_STOPPED, 0, driver._host)
    assert told == [domain.UUIDString()]
